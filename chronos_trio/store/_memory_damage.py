"""How the MemoryStore judges a record before it uses it (issue 11).

A MemoryStore record is a :class:`~chronos_trio.records.Job` held in a dict
under its job ID, and indexed (when pending) by heap entries of the queue it
was first stored in, its *home*. Nothing in Python stops code that reaches in
(a test, a debugger, a bug) from replacing a field with a value of another
type, ``None``, an absurd size, or from removing the record while its heap
entries remain. The store copies whole records from one state to the next, so
every operation judges a record with :func:`field_damage` before it writes,
and dead-letters one that fails (:func:`dead_lettered`) instead of raising or
handing it to a worker, as the Redis scripts do with a damaged hash.

The rules are the one judgement of every store and path
(:mod:`._record_rules`: each field's type, and the states in which it must
hold a value), read for Python values: a field not judged in the record's
state must still be of its Python type. Then what only this store has: the
``id`` and ``queue`` the record is stored under, its ``queue_version`` and
``partition`` (counts), its continuation (text or None) and result (bytes
or None).
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from ..records._jobs import Job, JobState
from ._record_rules import is_count, is_number, show_value, value_damage, value_sound
from ._roles import DAMAGED_RECORD

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


def field_damage(job: Job, job_id: str | None = None, home: str | None = None) -> dict[str, str]:
    """Every field of ``job`` that cannot be used, mapped to why (naming the
    field and value); empty for a sound record. ``job_id`` and ``home`` are
    the ID and queue the record is stored under (``id`` and ``queue`` must
    equal them); None checks only their type. Never raises."""
    if (
        type(job.id) is str
        and (job.id == job_id if job_id is not None else job.id != "")
        and type(job.queue) is str
        and (job.queue == home if home is not None else job.queue != "")
        and is_count(job.queue_version)
        and is_count(job.partition)
        and (job.then is None or type(job.then) is str)
        and (job.result is None or type(job.result) is bytes)
        and value_sound(job)
    ):
        return {}  # sound: what every operation meets, judged without a message
    out: dict[str, str] = {}

    def need(name: str, ok: bool, what: str) -> None:
        if not ok:
            out[name] = f"field {name!r} holds {show_value(getattr(job, name))}, not {what}"

    def text(name: str, expected: str | None) -> None:
        value = getattr(job, name)
        if expected is not None:
            need(name, type(value) is str and value == expected, f"{expected!r}")
        else:
            need(name, type(value) is str and value != "", "a non-empty text")

    text("id", job_id)
    text("queue", home)
    out.update(value_damage(job))
    for name in ("queue_version", "partition"):
        need(name, is_count(getattr(job, name)), "an integer >= 0")
    need("then", job.then is None or type(job.then) is str, "text or None")
    need("result", job.result is None or type(job.result) is bytes, "bytes or None")
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
