"""Templates and the formatting they use.

One Jinja2 environment with autoescaping on for every template, and
StrictUndefined (a misspelt name fails the test suite, not the page).
No template marks data ``|safe``: a payload, an error or a queue name is
always text, whatever it holds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2

from ..app._inspector import duration_text as duration
from ..app._inspector import payload_view, result_view
from ..app._inspector import relative_text as relative
from ..records._control import JobControl
from ..records._jobs import Job
from ..records._unique import unique_key_of_slot
from ..runtime._schedule import zoned_time
from ._charts import seconds_text
from ._time import iso as iso
from ._time import when

HERE = Path(__file__).resolve().parent


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


def payload_text(job: Job) -> str:
    return pretty_json(payload_view(job))


def result_text(job: Job) -> str | None:
    return None if job.result is None else pretty_json(result_view(job))


def control_rows(control: JobControl | None, now: float) -> list[tuple[str, str]]:
    """A job's priority, expiry and limits as (what, value) rows."""
    if control is None:
        return []
    rows = []
    if control.priority:
        rows.append(("priority", str(control.priority)))
    if control.expires_at is not None:
        rows.append(("expires", f"{iso(control.expires_at)} ({relative(control.expires_at, now)})"))
    rows += [
        ("rate limit", f"{count}/{per:g}s burst {burst}, key {key}")
        for key, count, per, burst in control.rates
    ]
    for key, limit in control.caps:
        unique = unique_key_of_slot(key)
        if unique is None:
            rows.append(("concurrency limit", f"{limit}, key {key}"))
        else:
            rows.append(("runs", f"one at a time, unique key {unique}"))
    return rows


def shorten(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending in an ellipsis
    when cut: how a page or an error echoes what a request carried."""
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "\u2026"


def link(base: str, path: str, **params: object) -> str:
    """``base + path`` with ``params`` (those not None) as the query string."""
    query = urlencode({k: str(v) for k, v in params.items() if v is not None})
    return f"{base}{path}" + (f"?{query}" if query else "")


def environment(app_templates: Path | None = None) -> jinja2.Environment:
    """The templates' environment; ``app_templates``: an app's own folder
    (``_extensions``), found under the ``app/`` prefix only."""
    loader: jinja2.BaseLoader = jinja2.FileSystemLoader(HERE / "templates")
    if app_templates is not None:
        loader = jinja2.ChoiceLoader(
            [loader, jinja2.PrefixLoader({"app": jinja2.FileSystemLoader(app_templates)})]
        )
    env = jinja2.Environment(
        loader=loader,
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.update(iso=iso, relative=relative, duration=duration, zoned=zoned_time)
    # the time tags (absolute UTC beside relative) and the charts' figures
    env.globals.update(when=when, seconds=seconds_text)
    return env


def static_files() -> dict[str, tuple[bytes, str]]:
    """name -> (content, media type) of the files under ``static/``."""
    types = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
    return {
        p.name: (p.read_bytes(), types[p.suffix])
        for p in sorted((HERE / "static").iterdir())
        if p.suffix in types
    }


__all__ = [
    "control_rows",
    "duration",
    "environment",
    "iso",
    "link",
    "payload_text",
    "relative",
    "result_text",
    "shorten",
    "static_files",
]
