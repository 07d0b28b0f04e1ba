"""Encoding between Python objects and what the Lua scripts store and return."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Sequence
from typing import Any

from ...records._attempts import decode_history
from ...records._control import decode_control
from ...records._jobs import Job, JobState, NewJob, require_field_order, with_history
from ...records._options import check_headers, decode_headers
from ...records._placement import Placement
from .._record_rules import parse_count as parse_count
from .._record_rules import parse_number as parse_number
from .._record_rules import (
    show_stored,
    stored_damage,
    stored_state,
)
from .._roles import NOTHING_SET_ASIDE, AsideEntry, QueueVersion, SetAside, VersionState

#: The record format this version writes (field ``v`` of every job hash) and
#: the newest it reads. Format 1: the fields of :data:`JOB_FIELDS`, times as
#: decimal epoch seconds, counts as decimal digits, ``state`` a JobState
#: value; a hash without ``v`` was written before formats were recorded and
#: is format 1. Format 2 adds payload chunks: a payload may be stored as its
#: first :data:`PAYLOAD_CHUNK` bytes in ``payload`` and the rest,
#: :data:`PAYLOAD_CHUNK` bytes a field, in ``p1`` .. ``p<n>``, with ``pn`` =
#: n (absent: the whole payload is in ``payload``). Enqueue chunks the
#: payload of a delayed job when it has more than :data:`PAYLOAD_CHUNK`
#: bytes and at most :data:`CHUNKED_PAYLOAD_MAX`: Redis keeps a hash whose
#: values all fit in 64 bytes (``hash-max-listpack-value``) as a compact
#: listpack instead of a hashtable, so a delayed job with a 100-byte payload
#: takes half the memory (a job due now stays a hashtable, cheaper for Redis
#: to build and read). The success settle of a job kept a while (for its
#: result, or retained) writes its record again the same way, without the
#: lease fields (absent reads as empty), when its values fit
#: (``lua/lib/succeed_record.lua``). Baked into every Lua script
#: when it is loaded (see ``_scripts``): a record with a greater ``v`` is
#: left exactly as it is by every script and reported, for a newer worker.
#: Raise it when a change to the job hash would make an older worker misread
#: a record, and say in docs/deployment.md ("Rolling upgrades") how to roll a fleet across it.
RECORD_FORMAT = 2

#: The size of a payload chunk (Redis's default ``hash-max-listpack-value``).
PAYLOAD_CHUNK = 64
#: The largest payload stored in chunks: beyond it the hash would pass
#: ``hash-max-listpack-entries`` (128 fields) anyway, so it is stored whole.
CHUNKED_PAYLOAD_MAX = 96 * PAYLOAD_CHUNK

#: Job hash fields, in the order every full read (HMGET) uses; the record
#: format field ``v`` follows them in admin reads (:data:`READ_FIELDS`).
JOB_FIELDS = (
    "kind",
    "payload",
    "run_at",
    "state",
    "attempts",
    "max_retries",
    "timeout",
    "lease_token",
    "lease_owner",
    "lease_expires_at",
    "last_error",
    "created_at",
    "finished_at",
)
#: ``uc``: when the job first went back unclaimed (``Job.unclaimed_since``;
#: see settle.lua): advisory, so a value that is not a number reads as None
#: and is never damage. Older versions ignore the field: it needs no new format.
READ_FIELDS = (*JOB_FIELDS, "v", "result", "result_until", "h", "x", "fc", "uc")
#: ``ah``: the attempts that ended without success (``Job.history``; see
#: lua/lib/add_attempt.lua and ``records._attempts``): advisory, a line that
#: does not read is skipped, never damage. Older versions ignore the field:
#: it needs no new format. Read only by ``get_job`` (appended to the fields
#: of :func:`record_fields` for :func:`job_from_fields`).
HISTORY_FIELD = b"ah"
_READ_FIELD_BYTES = tuple(name.encode() for name in READ_FIELDS)
_HISTORY_AT = len(READ_FIELDS)


def then_of(extras: bytes | None) -> str | None:
    """A job's workflow continuation from its extras (field ``x``: its unique
    spec, NUL, its continuation; see ``_enqueue.extras`` and
    lua/lib/unique_spec.lua), None when it has none."""
    if not extras:
        return None
    return extras.partition(b"\0")[2].decode("utf-8", "replace") or None


def text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else value


def ident(value: bytes | str) -> str:
    """A job ID or name from a reply, for reports: never raises (bytes that
    are not UTF-8 show as backslash escapes)."""
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value


def show(value: bytes | str) -> str:
    """A stored value for a message: ``b'...'``, printable ASCII as is,
    anything else escaped, cut after 40 bytes (the same text as ``show``
    in ``lua/lib/show.lua``, so both sides name values alike)."""
    return show_stored(value.encode() if isinstance(value, str) else value)


def opt_float(value: bytes | str | None) -> float | None:
    """A stored time, where '' (or an absent field) means None."""
    return float(value) if value not in (None, b"", "") else None  # type: ignore[arg-type, unused-ignore]


def format_problem(value: bytes | None) -> str:
    """Why a record's format field ``v`` cannot be read, or that it is
    newer than this version reads; "" for a format this version reads
    (absent: format 1)."""
    if value is None:
        return ""
    n = parse_count(value) if len(value) <= 9 else None
    if n is None or n < 1:
        return f"field 'v' holds {show(value)}, not a record format"
    if n > RECORD_FORMAT:
        return (
            f"record format {n} is newer than this version reads ({RECORD_FORMAT}); "
            "left for a newer worker"
        )
    return ""


#: The most continuation chunks (``pn``) a format-2 record holds.
MAX_CHUNKS = CHUNKED_PAYLOAD_MAX // PAYLOAD_CHUNK - 1


def join_payload(first: bytes | None, pn: bytes | None, field: Any) -> tuple[bytes | None, str]:
    """A stored payload from its ``payload`` field, its ``pn`` field and
    ``field(name)`` reading the others: the payload and ``""``, or None and
    what is wrong (the same texts as ``join_payload`` in ``lua/lib/join_payload.lua``).
    Never raises."""
    if pn is None:
        return first, ""
    n = parse_count(pn) if len(pn) <= 2 else None
    if n is None or not 1 <= n <= MAX_CHUNKS:
        return None, f"field 'pn' holds {show(pn)}, not a payload chunk count"
    if first is None:
        return None, "field 'payload' is missing"
    parts = [first]
    for k in range(1, n + 1):
        chunk = field(f"p{k}")
        if chunk is None:
            return None, f"field 'p{k}' is missing"
        parts.append(chunk)
    return b"".join(parts), ""


def record_fields(h: dict[bytes, bytes]) -> tuple[list[bytes | None], str]:
    """The values of :data:`READ_FIELDS` from a job hash read whole
    (``HGETALL``), the payload joined from its chunks, and what is wrong
    with the chunks (``""``: nothing; the payload is None then)."""
    f: list[bytes | None] = [h.get(name) for name in _READ_FIELD_BYTES]
    f[1], problem = join_payload(f[1], h.get(b"pn"), lambda name: h.get(name.encode()))
    return f, problem


def _decoded(value: bytes | None) -> str:
    """Stored text as a reader takes it: bytes that are not UTF-8 escaped."""
    return "" if not value else value.decode("utf-8", "backslashreplace")


def job_from_fields(
    job_id: str,
    queue: str,
    placement: Placement,
    f: Sequence[bytes | None],
    *,
    indexed_as: JobState | None = None,
    payload_problem: str = "",
) -> Job:
    """A Job from the values of :data:`JOB_FIELDS` (13) or :data:`READ_FIELDS`
    (with ``v``, ``result``, ``result_until``, ``h``, ``x``, ``fc`` and
    ``uc``), optionally followed by the attempt history (``ah``); absent
    fields are None. Total: never raises. The record is judged by the one
    judgement of every path (``store._record_rules``): each value that
    makes it unusable (missing, empty where a value is needed, of the wrong
    type, a newer record format) gets a default and is named in
    ``Job.damage``; a field not judged in the record's state is read as it
    is, or as its default when it cannot be. An unreadable state becomes
    ``indexed_as`` (the state of the index the job was found in) or,
    without one, DEAD. ``payload_problem``: why the payload's chunks could
    not be joined (see :func:`record_fields`), reported in place of its
    absence."""
    stored = dict(zip(READ_FIELDS, f, strict=False))
    problems = []
    fmt = format_problem(stored.get("v"))
    if fmt:
        problems.append(fmt)
    damage = stored_damage(stored, reading=True)
    if payload_problem:
        damage["payload"] = payload_problem
    problems += damage.values()
    raw_state = stored.get("state")
    state = stored_state(stored)
    if state is None:
        state = indexed_as or JobState.DEAD
    elif indexed_as is not None and state is not indexed_as:
        index = "retry" if indexed_as is JobState.RETRY_WAIT else indexed_as.value
        problems.append(
            f"field 'state' holds {show(raw_state or b'')}, but the job is in the {index} index"
        )

    def number(name: str, *, infinite: bool = False) -> float | None:
        value = stored.get(name)
        return None if not value else parse_number(value, infinite=infinite)

    def count(name: str) -> int:
        value = stored.get(name)
        return (parse_count(value) if value else None) or 0

    result_until = number("result_until")
    result = stored.get("result") if result_until is not None else None
    raw_headers, raw_control = stored.get("h"), stored.get("fc")
    headers = () if "headers" in damage or not raw_headers else decode_headers(raw_headers)
    control = (
        None if "control" in damage or not raw_control else decode_control(raw_control.decode())
    )
    then = then_of(stored.get("x"))
    job = Job(
        job_id, queue, _decoded(stored.get("kind")), stored.get("payload") or b"",
        number("run_at") or 0.0, state, count("attempts"), count("max_retries"),
        number("timeout", infinite=True) or 0.0, _decoded(stored.get("lease_token")),
        _decoded(stored.get("lease_owner")), number("lease_expires_at"), placement,
        _decoded(stored.get("last_error")), number("created_at") or 0.0, number("finished_at"),
        "; ".join(problems), result, result_until, headers, then, control,
        number("uc"),
    )  # fmt: skip
    return with_history(job, decode_history(f[_HISTORY_AT])) if len(f) > _HISTORY_AT else job


require_field_order(
    Job,
    (
        "id", "queue", "kind", "payload", "run_at", "state", "attempts", "max_retries",
        "timeout", "lease_token", "lease_owner", "lease_expires_at", "placement",
        "last_error", "created_at", "finished_at", "damage", "result",
        "result_until", "headers", "then", "control", "unclaimed_since", "history",
    ),
    "store.redis._codec.job_from_fields",
)  # fmt: skip


def newer_reason(v: bytes | str | int) -> str:
    return (
        f"record format {ident(v) if not isinstance(v, int) else v} is newer than this "
        f"version reads ({RECORD_FORMAT}); left for a newer worker"
    )


def decode_dead(flat: Sequence[Any], queue: str, placement: Placement) -> tuple[Job, ...]:
    """Jobs a script reports as it left them: per job its ID then the 13
    JOB_FIELDS (see ``lua/lib/job_fields.lua``). Total, like :func:`job_from_fields`."""
    return tuple(
        job_from_fields(ident(flat[k]), queue, placement, flat[k + 1 : k + 14])
        for k in range(0, len(flat), 14)
    )


def decode_aside(raw: Sequence[Any], queue: str, placement: Placement) -> SetAside:
    """What a script set aside: its ``{dead, quarantined, newer}`` reply part
    (see ``lua/README.md``). Total, like :func:`job_from_fields`."""
    dead_flat, quarantined_flat, newer_flat = raw
    if not (dead_flat or quarantined_flat or newer_flat):
        return NOTHING_SET_ASIDE
    dead = decode_dead(dead_flat, queue, placement)
    quarantined = tuple(
        AsideEntry(queue, ident(quarantined_flat[k]), ident(quarantined_flat[k + 1]))
        for k in range(0, len(quarantined_flat), 2)
    )
    newer = tuple(
        AsideEntry(queue, ident(newer_flat[k]), newer_reason(newer_flat[k + 1]))
        for k in range(0, len(newer_flat), 2)
    )
    return SetAside(dead, quarantined, newer)


# -- topology ------------------------------------------------------------------------
def encode_topology(versions: Sequence[QueueVersion]) -> str:
    """``version:partitions:a|d,...`` (the format topology_*.lua parse)."""
    return ",".join(
        f"{v.version}:{v.partitions}:{'a' if v.state is VersionState.ACTIVE else 'd'}"
        for v in versions
    )


_TOPOLOGY_ITEM = re.compile(r"([0-9]{1,9}):([0-9]{1,9}):([ad])")


def decode_topology(encoded: bytes | str) -> tuple[QueueVersion, ...]:
    """The versions of an encoding; ValueError naming the encoding when it is
    not one (an item that is not ``version:partitions:a|d`` with both >= 1,
    or more than one active version)."""
    out = []
    raw = encoded.decode("utf-8", "backslashreplace") if isinstance(encoded, bytes) else encoded
    for item in raw.split(","):
        m = _TOPOLOGY_ITEM.fullmatch(item)
        if m is None or int(m[1]) < 1 or int(m[2]) < 1:
            raise ValueError(f"damaged topology encoding {raw!r}")
        out.append(
            QueueVersion(
                int(m[1]),
                int(m[2]),
                VersionState.ACTIVE if m[3] == "a" else VersionState.DRAINING,
            )
        )
    if sum(v.state is VersionState.ACTIVE for v in out) > 1:
        raise ValueError(f"damaged topology encoding {raw!r}: more than one active version")
    return tuple(out)


# -- pending schedule triggers (JSON, never pickle) ----------------------------------------
def encode_new_job(job: NewJob) -> bytes:
    return json.dumps(
        {
            "id": job.id,
            "queue": job.queue,
            "kind": job.kind,
            "payload": base64.b64encode(job.payload).decode(),
            "run_at": job.run_at,
            "delay": job.delay,
            "max_retries": job.max_retries,
            "timeout": job.timeout,
            **({"headers": dict(job.headers)} if job.headers else {}),
        },
        separators=(",", ":"),
    ).encode()


def decode_new_job(data: bytes) -> NewJob:
    """The job of a pending trigger; ValueError (with what is wrong) when
    ``data`` is not one as :func:`encode_new_job` writes it."""
    try:
        d = json.loads(data)
        job = NewJob(
            id=d["id"],
            queue=d["queue"],
            kind=d["kind"],
            payload=base64.b64decode(d["payload"], validate=True),
            run_at=None if d["run_at"] is None else float(d["run_at"]),
            delay=float(d["delay"]),
            max_retries=int(d["max_retries"]),
            timeout=float(d["timeout"]),
            headers=check_headers(d.get("headers") or {}),
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(
            f"damaged pending trigger {show(data)}: {type(exc).__name__}: {exc}"
        ) from None
    if not all(isinstance(x, str) and x for x in (job.id, job.queue, job.kind)):
        raise ValueError(f"damaged pending trigger {show(data)}: id, queue and kind must be text")
    return job
