"""The pipe protocol between a worker and the child processes its isolated
handlers run in: frames of a 4-byte big-endian length and a JSON object.

Only JSON crosses: a job's payload and a handler's result go as the bytes
the task's codec made (base64 in the frame), never a pickle; the child
finds the handler by importing the app's module and looking the kind up.

Parent to child: ``{"op": "start", "modules": [...], "app": [module, attr],
"kinds": [...]}`` once, then ``{"op": "run", ...}`` per job (see
:func:`run_request`). Child to parent: ``{"op": "ready", "pid": n}`` or
``{"op": "broken", "error": text}`` after the start, then one reply per
run: ``{"op": "done", "result": b64 | None}`` or ``{"op": "failed", "how":
HOW, "error": text, "delay": seconds | None}``. Before its reply a run may
send notes, ``{"op": "note", "progress": [fraction, message] | None,
"lines": [text, ...]}`` (the handler's ``job.progress``/``job.log``; see
:func:`parse_note`).
"""

from __future__ import annotations

import base64
import json
import math
import struct
from typing import Any, Literal, get_args

import attrs

from ..records._attrs_methods import fields_eq, fields_hash, fields_repr
from ..records._jobs import Job
from ..records._notes import check_fraction, check_message, cut_line
from ..records._public import fixup_module_metadata

#: How a failed run ended, as the child classified it (the executor settles
#: each as it would the same exception in this process).
How = Literal["error", "skip", "retry", "rate_limited", "never_retry", "dead"]

_HEADER = struct.Struct(">I")
#: Largest frame either side accepts (a payload or result over the app's
#: size limit never gets this far; this bounds a broken peer).
MAX_FRAME = 64 * 1024 * 1024


class WireError(Exception):
    """A frame that is not one (bad length, not a JSON object)."""


def frame(message: dict[str, Any]) -> bytes:
    """``message`` as one frame."""
    body = json.dumps(message, separators=(",", ":")).encode()
    return _HEADER.pack(len(body)) + body


def frame_length(header: bytes) -> int:
    """The body length a 4-byte header announces; WireError past MAX_FRAME."""
    (length,) = _HEADER.unpack(header)
    if length > MAX_FRAME:
        raise WireError(f"frame of {length} bytes, over the {MAX_FRAME}-byte limit")
    return int(length)


def parse(body: bytes) -> dict[str, Any]:
    """A frame's body as a JSON object; WireError for anything else."""
    try:
        message = json.loads(body)
    except ValueError as exc:
        raise WireError(f"frame is not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise WireError(f"frame is not a JSON object: {message!r:.80}")
    return message


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def run_request(job: Job, worker_id: str) -> dict[str, Any]:
    """The ``run`` message for ``job``: what its handler gets in the child
    (payload bytes, and the context's fields). ``timeout`` None: no limit."""
    timeout = job.timeout if job.timeout != float("inf") else None
    return {
        "op": "run",
        "id": job.id,
        "kind": job.kind,
        "queue": job.queue,
        "attempt": job.attempts,
        "headers": [list(pair) for pair in job.headers],
        "worker_id": worker_id,
        "timeout": timeout,
        "payload": b64(job.payload),
    }


@attrs.frozen
class ChildReply:
    """A child's answer to one ``run``: ``result`` (the encoded return
    value, None when nothing is kept) when ``ok``; else ``how`` it failed,
    the ``error`` text to keep on the job and the ``delay`` it asked for
    (``Retry``, ``RateLimited``)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    ok: bool
    result: bytes | None = None
    how: How = "error"
    error: str = ""
    delay: float | None = None


_HOWS = frozenset(get_args(How))


def parse_reply(message: dict[str, Any]) -> ChildReply:
    """A ``done`` or ``failed`` message as a :class:`ChildReply`; WireError for
    anything else (a child that answers that is broken)."""
    op = message.get("op")
    try:
        if op == "done":
            return ChildReply(True, result=unb64(message["result"]))
        if op == "failed":
            how, error, delay = message["how"], message["error"], message["delay"]
            if how in _HOWS and isinstance(error, str):
                return ChildReply(False, how=how, error=error, delay=_delay(delay))
    except (KeyError, TypeError, ValueError):
        pass
    raise WireError(f"not a reply to a run: {message!r:.200}")


@attrs.frozen
class ChildNote:
    """What a ``note`` message carries: the latest ``progress`` (fraction,
    message) if any, and log ``lines``, checked as a worker's JobContext
    checks them."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    progress: tuple[float, str] | None
    lines: tuple[str, ...]


def parse_note(message: dict[str, Any]) -> ChildNote | None:
    """A ``note`` message as a :class:`ChildNote`; None for any other op.
    WireError for a note that does not check (a broken child)."""
    if message.get("op") != "note":
        return None
    try:
        raw, lines = message["progress"], message["lines"]
        progress = None
        if raw is not None:
            fraction, text = raw
            progress = (check_fraction(fraction), check_message(text))
        if not isinstance(lines, list):
            raise TypeError("lines is not a list")
        return ChildNote(progress, tuple(cut_line(line) for line in lines))
    except (KeyError, TypeError, ValueError) as exc:
        raise WireError(f"not a note: {exc}") from None


def _delay(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < math.inf:
        return float(value)
    raise ValueError(value)


# Public as ``chronos_trio.runtime.<name>``, loaded on first use (the package
# names them lazily): they report that module however they were first reached.
fixup_module_metadata("chronos_trio.runtime", {"ChildNote": ChildNote, "ChildReply": ChildReply})
