"""Composition of a Lua script from the pieces it names.

A script (``lua/<name>.lua``) names each shared piece it uses on a line of
its own, ``--@include <piece>``; a piece (``lua/lib/<piece>.lua``, or one
made in Python, see ``_scripts``) may name pieces in the same way. The
composed source is every piece the script reaches, each once, a piece after
all the pieces it names (depth first, in the order named), then the
script's own text. Directive lines are dropped; everything else, comments
included, is kept as written. A directive is also a Lua comment, so a file
stays valid Lua on its own.

Nothing here reads files: :func:`compose` takes a function that returns a
piece's text by name, so the rules are tested without the package's files.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["CompositionError", "compose", "includes", "resolve"]

#: A directive line: ``--@include name`` (letters, digits, ``_``).
_DIRECTIVE = re.compile(rb"^--@include[ \t]+([A-Za-z0-9_]+)[ \t]*\r?$")
#: Any line that starts with this looks like a directive: one that is not
#: well formed is an error rather than a comment nobody notices.
_LOOKS_LIKE = b"--@"


class CompositionError(ValueError):
    """A script names a piece that does not exist, pieces include each
    other in a cycle, or a directive line is malformed. The message names
    the script and the piece."""


def includes(text: bytes, *, where: str = "?") -> tuple[list[str], bytes]:
    """The pieces ``text`` names, in order, and ``text`` without its
    directive lines.

    Raises CompositionError for a line that starts with ``--@`` but is not
    ``--@include <name>`` (``where`` names the file in the message).
    """
    if _LOOKS_LIKE not in text:
        return [], text
    names: list[str] = []
    kept: list[bytes] = []
    for line in text.splitlines(keepends=True):
        if line.startswith(_LOOKS_LIKE):
            m = _DIRECTIVE.match(line.rstrip(b"\n"))
            if m is None:
                raise CompositionError(
                    f"{where}: malformed directive {line.strip().decode(errors='replace')!r} "
                    "(expected '--@include <piece>')"
                )
            names.append(m.group(1).decode())
        else:
            kept.append(line)
    return names, b"".join(kept)


def resolve(
    script: str, text: bytes, piece: Callable[[str], bytes | None]
) -> tuple[list[tuple[str, bytes]], bytes]:
    """The pieces script ``script`` (its own ``text``) reaches, each once
    and after the pieces it names, as (name, text without directives), and
    its own text without directives.

    ``piece(name)`` returns a piece's text, or None when there is no such
    piece. Raises CompositionError naming ``script`` and the piece for an
    unknown piece (and which file named it), for pieces that include each
    other in a cycle (the cycle spelled out), and for a malformed directive.
    """
    order: list[tuple[str, bytes]] = []
    done: set[str] = set()
    path: list[str] = []  # the pieces being resolved, outermost first

    def visit(name: str, named_by: str) -> None:
        if name in done:
            return
        if name in path:
            cycle = " -> ".join([*path[path.index(name) :], name])
            raise CompositionError(f"Lua script {script!r}: pieces include each other: {cycle}")
        raw = piece(name)
        if raw is None:
            raise CompositionError(
                f"Lua script {script!r}: unknown piece {name!r} (named by {named_by!r})"
            )
        path.append(name)
        names, body = includes(raw, where=f"Lua script {script!r}, piece {name!r}")
        for sub in names:
            visit(sub, name)
        path.pop()
        done.add(name)
        order.append((name, body if body.endswith(b"\n") else body + b"\n"))

    names, own = includes(text, where=f"Lua script {script!r}")
    for name in names:
        visit(name, script)
    return order, own


def compose(script: str, text: bytes, piece: Callable[[str], bytes | None]) -> bytes:
    """The source of script ``script``: the pieces of :func:`resolve` in
    order, then the script's own text. Raises CompositionError as
    :func:`resolve` does."""
    order, own = resolve(script, text, piece)
    return b"".join(body for _, body in order) + own
