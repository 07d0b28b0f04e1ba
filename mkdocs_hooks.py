"""MkDocs hooks for the docs site (``mkdocs.yml``: ``hooks``).

The docstrings use Sphinx roles (``:class:`~chronos_trio.Metrics```), which
mkdocstrings' Markdown renders as the role's name followed by code. This turns
each into a cross-reference that mkdocs-autorefs resolves when the target is
in the API reference (and leaves as code when it is not): ``~`` shows only the
last dotted part, as Sphinx does.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:class|meth|func|attr|data|mod|exc|obj):<code>(~?)([\w.]+)(\(\))?</code>")


def _link(match: re.Match[str]) -> str:
    tilde, target, call = match.group(1), match.group(2), match.group(3) or ""
    shown = target.rsplit(".", 1)[-1] if tilde else target
    return f'<autoref identifier="{target}" optional><code>{shown}{call}</code></autoref>'


def on_page_content(html: str, **kwargs: Any) -> str:
    return _ROLE.sub(_link, html)
