"""A MemoryStore whose records can be damaged, for tests of what a store does
with a record it cannot use.

The :class:`~chronos_trio.MemoryStore` is the typed reference model of the
store contract: its records are written only by its own transitions, so it
judges none. A Redis hash can hold anything, so the RedisStore judges every
record it reads and sets aside (dead-letters, ``last_error`` "damaged record:
<field and value>", reported in the operation's ``aside``) one it cannot use.
To test that behaviour on virtual time, :class:`DamageableMemoryStore` plugs
the one judgement of a record (``store/_record_rules.py``, read for Python
values) into the MemoryStore's judgement seam (``MemoryStore._damage`` and
``MemoryStore._shown``), and judges, where the RedisStore's scripts do, the
records a test replaced a field of behind the store's back
(:func:`chronos_trio.testing.damage.damage_job`)::

    store = DamageableMemoryStore()
    await store.enqueue_many([NewJob(id="j1", queue="q", kind="k", payload=b"")])
    await damage_job(store, "j1", queue="q", field="attempts", how=Damage.WRONG_TYPE)
    result = await store.lease([QueueWeight("q")], 10, worker_id="w", lease_duration=30)
    assert [j.id for j in result.aside.dead] == ["j1"]

What it judges, beyond the rules of :mod:`chronos_trio.store._record_rules`
(each field's type, and the states in which it must hold a value; a field not
judged in the record's state must still be of its Python type): the ``id``
and ``queue`` the record is stored under, its ``placement`` (the store's
``(version, partition)``, both counts), its continuation (text or None) and result (bytes or
None), and that a record met at the top of a heap is in one of that heap's
states. A record already dead-lettered as damaged is judged only by what
trimming and listing it need (its id, queue and finished time), as on Redis.

Where it judges: every record the MemoryStore meets at the top of a heap
(promote, lease, recovery), the one ``run_now`` and ``abort`` act on, the
dead ones ``requeue_dead`` moves, the store checker's records (all in the
MemoryStore's seam); and, before the operation, the records ``renew`` and
``settle`` hold (their token matches) and the finished records ``trim``
visits. Reads show a damaged record with defaults in its damaged fields,
named in ``Job.damage``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import attrs
import trio

from ..records._control import JobControl
from ..records._jobs import Job, JobState, LeaseRef
from ..store._record_rules import is_count, is_number, show_value, value_damage, value_sound
from ..store._roles import (
    DAMAGED_RECORD,
    CountResult,
    RenewResult,
    SetAside,
    Settlement,
    SettleResult,
)
from ..store._topology_placement import topology_placement
from ..store.memory._store import MemoryStore, _Aside, _Index, _Record

__all__ = ["DamageableMemoryStore", "field_damage", "record_damage", "shown"]

#: What a damaged field is shown as (reads): the field's default, or this for
#: the fields without one.
_SHOWN_DEFAULTS: dict[str, Any] = {
    "id": "",
    "queue": "",
    "kind": "",
    "payload": b"",
    "run_at": 0.0,
    "state": JobState.DEAD,
    # version 1, partition 0: where a queue's first jobs live
    "placement": topology_placement(1, 0),
}
_FINISHED = (JobState.DEAD, JobState.SUCCEEDED, JobState.ABORTED)
#: States whose records have a heap entry.
_INDEXED = (JobState.SCHEDULED, JobState.READY, JobState.LEASED, JobState.RETRY_WAIT)


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
        and _placement_sound(job.placement)
        and (job.then is None or type(job.then) is str)
        and (job.result is None or type(job.result) is bytes)
        and value_sound(job)
    ):
        return {}
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
    need("placement", _placement_sound(job.placement), "a (version, partition) of integers >= 0")
    need("then", job.then is None or type(job.then) is str, "text or None")
    need("result", job.result is None or type(job.result) is bytes, "bytes or None")
    return out


def _placement_sound(placement: object) -> bool:
    """Whether ``placement`` is one the MemoryStore makes (a version and a
    partition, both counts)."""
    return type(placement) is tuple and len(placement) == 2 and all(map(is_count, placement))


def _set_aside_already(job: Job) -> bool:
    """A record already dead-lettered as damaged: state dead, ``last_error``
    starting with DAMAGED_RECORD. It keeps its other damaged fields (as a
    Redis hash does), for an operator to see."""
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
    if _set_aside_already(job):
        return [damage[name] for name in ("id", "queue", "finished_at") if name in damage]
    return list(damage.values())


def shown(job: Job, job_id: str, home: str) -> Job:
    """The record as reads return it: each damaged field replaced by its
    default and named in ``damage`` (the record itself is unchanged), so a
    caller can sort, compare and print it; the record as is when sound. An
    unreadable ``unclaimed_since`` (advisory, never damage) reads as none."""
    damage = field_damage(job, job_id, home)
    if _unreadable_stamp(job):
        job = attrs.evolve(job, unclaimed_since=None)
    if not damage:
        return job
    defaults = {
        f.name: f.default for f in attrs.fields(Job) if f.init and f.default is not attrs.NOTHING
    }
    fixed: dict[str, Any] = {n: _SHOWN_DEFAULTS.get(n, defaults.get(n)) for n in damage}
    fixed.update(id=job_id, queue=home, damage="; ".join(damage.values()))
    if "finished_at" in damage and fixed.get("state", job.state) in _FINISHED:
        fixed["finished_at"] = 0.0
    return attrs.evolve(job, **fixed)


def _unreadable_stamp(job: Job) -> bool:
    since = job.unclaimed_since
    return since is not None and not (is_number(since) and math.isfinite(since))


class DamageableMemoryStore(MemoryStore):
    """A :class:`~chronos_trio.MemoryStore` that judges its records as the
    RedisStore judges its hashes (see the module docstring), so a test can
    damage one (:func:`~chronos_trio.testing.damage.damage_job`) and see it
    set aside. Otherwise exactly a MemoryStore; for tests only."""

    # -- the MemoryStore's judgement seam ----------------------------------------------
    def _damage(self, job_id: str, rec: _Record, index: _Index | None) -> str:
        job = rec.job
        problems = record_damage(job, job_id, rec.home)
        if not problems and index is not None and job.state not in index.states:
            problems = [
                f"field 'state' holds {job.state!r}, but the job is in the {index.name} index"
            ]
        return "; ".join(problems)

    def _shown(self, job_id: str, rec: _Record) -> Job:
        return shown(rec.job, job_id, rec.home)

    def _put(self, job: Job) -> None:
        """A record requeued as it is after it was dead-lettered as damaged
        may hold a damaged ``control``: it is indexed by its due time alone
        (the next lease sets it aside again)."""
        control = job.control
        if control is None or isinstance(control, JobControl):
            super()._put(job)
            return
        super()._put(attrs.evolve(job, control=None))
        self._records[job.id].job = job  # the same version: its heap entry stays current

    # -- what it judges before the MemoryStore's operation -----------------------------
    # Judged, then the operation's own step, which nothing can cancel: a record
    # set aside is always reported.
    async def renew(self, leases: Sequence[LeaseRef], lease_duration: float) -> RenewResult:
        aside = self._judge_held(leases)
        with trio.CancelScope(shield=True):
            result = await super().renew(leases, lease_duration)
        return attrs.evolve(result, aside=aside + result.aside)

    async def settle(self, settlements: Sequence[Settlement]) -> SettleResult:
        aside = self._judge_held([s.lease for s in settlements])
        with trio.CancelScope(shield=True):
            result = await super().settle(settlements)
        return attrs.evolve(result, aside=aside + result.aside)

    async def trim(
        self,
        queues: Sequence[str],
        *,
        dead_max_age: float | None,
        dead_max_count: int | None,
        keep_succeeded: int | None = None,
    ) -> CountResult:
        aside = _Aside()
        wanted = set(queues)
        for job_id, rec in list(self._records.items()):
            if rec.home in wanted and not _indexed(rec.job.state):
                self._set_aside(job_id, rec, aside)
        with trio.CancelScope(shield=True):
            result = await super().trim(
                queues,
                dead_max_age=dead_max_age,
                dead_max_count=dead_max_count,
                keep_succeeded=keep_succeeded,
            )
        return attrs.evolve(result, aside=aside.report() + result.aside)

    def _judge_held(self, leases: Sequence[LeaseRef]) -> SetAside:
        """Judge the records ``leases`` hold (their token matches; records not
        held are not the caller's, damaged or not), so the fenced operation
        then finds those set aside not held. An unreadable ``unclaimed_since``
        is advisory, never damage: it is read as none (as settle.lua reads
        field ``uc``)."""
        aside = _Aside()
        for ref in leases:
            rec = self._records.get(ref.job_id)
            if rec is None or not ref.token or rec.job.lease_token != ref.token:
                continue
            if not self._set_aside(ref.job_id, rec, aside) and _unreadable_stamp(rec.job):
                rec.job = attrs.evolve(rec.job, unclaimed_since=None)
        return aside.report()


def _indexed(state: object) -> bool:
    """True for a state whose records have a heap entry (False for a damaged
    one: ``"ready"`` equals ``JobState.READY`` but is not one)."""
    return isinstance(state, JobState) and state in _INDEXED
