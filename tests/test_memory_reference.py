"""The MemoryStore as the typed reference model (issue 24): it judges none
of its records, every settle kind has its transition, and the damage
emulation tests need lives in test support (``DamageableMemoryStore``)."""

from __future__ import annotations

import pytest
import trio

from chronos_trio import JobState, MemoryStore, NewJob
from chronos_trio.store import DAMAGED_RECORD, NOTHING_SET_ASIDE, QueueWeight, SettleKind
from chronos_trio.store.memory._store import _SETTLE
from chronos_trio.testing import DamageableMemoryStore
from chronos_trio.testing.damage import Damage, damage_job


def test_every_settle_kind_has_its_transition() -> None:
    assert set(_SETTLE) == set(SettleKind)


async def test_damage_needs_a_damageable_store(autojump_clock: object) -> None:
    store = MemoryStore()
    await store.enqueue_many([NewJob(id="j1", queue="q", kind="k", payload=b"")])
    with pytest.raises(TypeError, match="DamageableMemoryStore"):
        await damage_job(store, "j1", queue="q", field="attempts", how=Damage.WRONG_TYPE)  # type: ignore[arg-type]
    leased = await store.lease([QueueWeight("q")], 10, worker_id="w", lease_duration=30)
    assert [j.job.id for j in leased.jobs] == ["j1"] and leased.aside is NOTHING_SET_ASIDE


async def test_a_damageable_store_sets_a_damaged_record_aside(autojump_clock: object) -> None:
    """The example of docs/testing.md."""
    store = DamageableMemoryStore()
    with trio.fail_after(10):
        await store.enqueue_many(
            [NewJob(id=i, queue="q", kind="k", payload=b"") for i in ("j1", "j2")]
        )
        await damage_job(store, "j1", queue="q", field="attempts", how=Damage.WRONG_TYPE)
        result = await store.lease([QueueWeight("q")], 10, worker_id="w", lease_duration=30)
        assert [job.id for job in result.aside.dead] == ["j1"]
        assert [lj.job.id for lj in result.jobs] == ["j2"]
        dead = await store.get_job("j1")
        assert dead is not None and dead.state is JobState.DEAD
        assert dead.last_error.startswith(DAMAGED_RECORD + "field 'attempts'")
