"""How the MemoryStore judges a record before it uses it (issue 11).

A MemoryStore record is a :class:`~chronos_trio.records.Job` held in a dict
under its job ID, and indexed (when pending) by heap entries of the queue it
was first stored in, its *home*. Nothing in Python stops code that reaches in
(a test, a debugger, a bug) from replacing a field with a value of another
type, ``None``, an absurd size, or from removing the record while its heap
entries remain. The store copies whole records from one state to the next, so
every operation needs every field: it judges a record with
:func:`field_damage` before it writes, and dead-letters one that fails
(:func:`dead_lettered`) instead of raising or handing it to a worker, as the
Redis scripts do with a damaged hash.

The rules are the Redis record rules carried over to Python values: text is a
``str`` (``kind``, ``id`` and ``queue`` non-empty), the payload ``bytes``,
times and the timeout finite numbers (``inf`` is allowed, as a timeout of
"never"; a number too large for a float is not a number), counts ``int`` from
0 to 10**15 (the Redis store's 15 digits), the state a :class:`JobState`, and
``id``/``queue`` those the record is stored under.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from ..records._control import PRIORITY_MAX, PRIORITY_MIN, JobControl
from ..records._jobs import Job, JobState
from ._roles import DAMAGED_RECORD

#: Counts above this are damage (the Redis store reads at most 15 digits).
COUNT_LIMIT = 10**15
#: Shown values are cut after this many characters (a 1 MB value in a message
#: would be a 1 MB message).
_SHOW_CUT = 40

#: What a damaged field is shown as (admin reads): the field's default, or
#: this for the fields without one.
_SHOWN_DEFAULTS: dict[str, Any] = {
    "id": "",
    "queue": "",
    "kind": "",
    "payload": b"",
    "run_at": 0.0,
    "state": JobState.DEAD,
}


_FINISHED = (JobState.DEAD, JobState.SUCCEEDED, JobState.ABORTED)


def show(value: object) -> str:
    """``repr(value)``, cut after 40 characters with the full length noted."""
    try:
        text = repr(value)
    except Exception:  # a value whose repr fails is still shown, never raised
        text = f"<{type(value).__name__}>"
    if len(text) <= _SHOW_CUT:
        return text
    size = len(value) if isinstance(value, str | bytes) else len(text)
    return f"{text[:_SHOW_CUT]}... ({size} long)"


def is_number(value: object) -> bool:
    """A float, or an int small enough to be one; NaN is not a number."""
    if type(value) is float:
        return value == value
    return type(value) is int and -(2**1023) < value < 2**1023  # type: ignore[operator]


def is_count(value: object) -> bool:
    return type(value) is int and 0 <= value < COUNT_LIMIT  # type: ignore[operator]


def field_damage(job: Job, job_id: str | None = None, home: str | None = None) -> dict[str, str]:
    """Every field of ``job`` that cannot be used, mapped to why (naming the
    field and value); empty for a sound record. ``job_id`` and ``home`` are
    the ID and queue the record is stored under (``id`` and ``queue`` must
    equal them); None checks only their type. Never raises."""
    out: dict[str, str] = {}

    def need(name: str, ok: bool, what: str) -> None:
        if not ok:
            out[name] = f"field {name!r} holds {show(getattr(job, name))}, not {what}"

    def text(name: str, expected: str | None) -> None:
        value = getattr(job, name)
        if expected is not None:
            need(name, type(value) is str and value == expected, f"{expected!r}")
        else:
            need(name, type(value) is str and value != "", "a non-empty text")

    text("id", job_id)
    text("queue", home)
    state = job.state if isinstance(job.state, JobState) else None
    need("state", state is not None, "a job state")
    need("kind", type(job.kind) is str and job.kind != "", "a task kind")
    need("payload", type(job.payload) is bytes, "bytes")
    for name in ("run_at", "created_at"):
        need(name, is_number(getattr(job, name)) and math.isfinite(getattr(job, name)), "a number")
    need("timeout", is_number(job.timeout), "a number")
    if "timeout" not in out:
        need("timeout", job.timeout > 0, "a number > 0")
    for name in ("attempts", "max_retries", "queue_version", "partition"):
        need(name, is_count(getattr(job, name)), "an integer >= 0")
    need("last_error", type(job.last_error) is str, "text")
    leased = state is JobState.LEASED
    token = job.lease_token
    need(
        "lease_token",
        type(token) is str and (token != "" or not leased),
        "a lease token" if leased else "text",
    )
    need("lease_owner", type(job.lease_owner) is str, "text")
    expiry = job.lease_expires_at
    need(
        "lease_expires_at",
        (is_number(expiry) and math.isfinite(expiry)) or (expiry is None and not leased),  # type: ignore[arg-type]
        "a number" if leased else "a number or None",
    )
    control = job.control
    need(
        "control",
        control is None
        or (
            isinstance(control, JobControl)
            and type(control.priority) is int
            and PRIORITY_MIN <= control.priority <= PRIORITY_MAX
        ),
        "flow control (a JobControl) or None",
    )
    finished = state in _FINISHED
    done = job.finished_at
    need(
        "finished_at",
        (is_number(done) and math.isfinite(done)) or (done is None and not finished),  # type: ignore[arg-type]
        "a number" if finished else "a number or None",
    )
    return out


def set_aside_already(job: Job) -> bool:
    """True for a record this store (or the checker) already dead-lettered as
    damaged: state dead, ``last_error`` starting with DAMAGED_RECORD. It keeps
    its other damaged fields (as a Redis hash does), for an operator to see."""
    return (
        job.state is JobState.DEAD
        and type(job.last_error) is str
        and job.last_error.startswith(DAMAGED_RECORD)
    )


def record_damage(job: Job, job_id: str | None = None, home: str | None = None) -> list[str]:
    """What makes a record unusable, one message per field; empty for a sound
    one, and for one already dead-lettered as damaged whose id, queue and
    finished time are sound (what trimming and listing it need)."""
    damage = field_damage(job, job_id, home)
    if set_aside_already(job):
        return [damage[name] for name in ("id", "queue", "finished_at") if name in damage]
    return list(damage.values())


def shown(job: Job, job_id: str, home: str) -> Job:
    """The record as admin reads return it: each damaged field replaced by
    its default and named in ``damage`` (the record itself is unchanged), so
    a caller can sort, compare and print it; the record as is when sound."""
    damage = field_damage(job, job_id, home)
    since = job.unclaimed_since
    if since is not None and not (is_number(since) and math.isfinite(since)):
        # advisory, never damage (see _memory_unclaimed): read as none, as Redis does
        job = attrs.evolve(job, unclaimed_since=None)
    if not damage:
        return job
    defaults = {f.name: f.default for f in attrs.fields(Job) if f.default is not attrs.NOTHING}
    fixed: dict[str, Any] = {n: _SHOWN_DEFAULTS.get(n, defaults.get(n)) for n in damage}
    fixed.update(id=job_id, queue=home, damage="; ".join(damage.values()))
    if "finished_at" in damage and fixed.get("state", job.state) in _FINISHED:
        fixed["finished_at"] = 0.0
    return attrs.evolve(job, **fixed)


def dead_lettered(job: Job, job_id: str, home: str, reason: str, now: float) -> Job:
    """The record dead-lettered as damaged: state dead, ``last_error``
    DAMAGED_RECORD + ``reason``, finished now, the lease cleared, and the ID
    and queue it is stored under (so it stays listed and trimmed with its
    queue); its other fields are kept as they are, for an operator to see."""
    return attrs.evolve(
        job,
        id=job_id,
        queue=home,
        state=JobState.DEAD,
        last_error=DAMAGED_RECORD + reason,
        finished_at=now,
        lease_token="",
        lease_owner="",
        lease_expires_at=None,
        damage="",
    )
