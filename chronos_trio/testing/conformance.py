"""The store conformance suite: one set of semantic checks for every backend.

Each check is a :class:`Check`: ``await check(factory)`` runs it, where
``factory`` is an async function taking no argument that returns a **fresh,
empty** store each time it is called (a new ``MemoryStore``; a
``RedisStore`` on a namespace of its own; a new SQLite file...). A check
makes the stores it needs through it (some make two, to see that stores are
independent) and closes them (``aclose``) when it ends, pass or fail. It
raises ``AssertionError`` on a violation, and on a factory store that is
not empty (checked with ``queues()`` when the store offers
:class:`~chronos_trio.store.AdminRole`).

Every check needs the store's core; each declares the capabilities it needs
beyond it (``check.needs``, see :class:`~chronos_trio.store.Capability`),
so a backend runs exactly the checks its capabilities imply (a store with
only the core runs the core checks) and skips the others:
``check.skip_reason(MyStore)`` says why a check does not apply, or None.

Checks use short real sleeps (fractions of a second), so they run as-is
against a networked store and instantly against a store on Trio's clock (the
``MemoryStore``) under ``autojump_clock``. A third-party backend runs the
suite with pytest (and pytest-trio), parametrized over :data:`CHECKS`::

    import pytest
    from chronos_trio.testing import CHECKS, Check

    from mybackend import SqliteStore

    @pytest.mark.parametrize("check", CHECKS, ids=str)
    async def test_sqlite_store_conforms(check: Check, tmp_path) -> None:
        if reason := check.skip_reason(SqliteStore):
            pytest.skip(reason)
        paths = (tmp_path / f"store{n}.db" for n in range(100))

        async def fresh() -> SqliteStore:
            return await SqliteStore.open(next(paths))

        await check(fresh)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import cast

import attrs
import trio

from ..records._control import JobControl
from ..records._errors import JobAborted
from ..records._jobs import Job, JobOutcome, JobRef, JobState, LeasedJob, LeaseRef, NewJob
from ..records._producing import result_of, unknown_kind
from ..records._unique import Unique
from ..records._workflow import Arrival
from ..store._capabilities import Capability
from ..store._offers import CAPABILITY_ROLES, capabilities_of, require_capabilities
from ..store._partitioning import partition_of
from ..store._roles import (
    AbortResult,
    AdminRole,
    LeaseResult,
    Problem,
    PromotionRole,
    QueueWeight,
    Repair,
    SettleKind,
    Settlement,
    Store,
    StoreRole,
    TopologyError,
    TriggerResult,
    VersionState,
    WorkerRole,
    require_roles,
)

#: What a backend hands a check: each call returns a fresh, empty store.
StoreFactory = Callable[[], Awaitable[StoreRole]]

#: What a check's body gets: the backend's factory, with each store it makes
#: checked for the core, the check's capabilities and emptiness, and closed
#: after the check. Typed as a full Store for the body's convenience: the
#: body uses only the core and the capabilities its check declares
#: (tests/test_store_roles.py runs every check on stores that offer nothing
#: more).
Fresh = Callable[[], Awaitable[Store]]

LEASE = 5.0  # long enough never to expire by accident in a check


@attrs.frozen
class Check:
    """One conformance check: ``await check(factory)`` runs ``body`` with
    stores made by ``factory`` (see the module docstring).

    ``needs`` are the capabilities the check uses beyond the core; a store
    made for it that lacks the core or one of them fails the check with a
    ``TypeError`` (ask :meth:`skip_reason` first to skip it instead).
    """

    body: Callable[[Fresh], Awaitable[None]]
    needs: frozenset[Capability] = frozenset()

    @property
    def roles(self) -> tuple[type, ...]:
        """The role classes the check uses: the core's (``WorkerRole``) and
        those of its role capabilities (``type``, not ``type[StoreRole]``:
        mypy refuses abstract classes there, and every role is one)."""
        return (WorkerRole, *(role for cap, role in CAPABILITY_ROLES.items() if cap in self.needs))

    @property
    def name(self) -> str:
        """The body's name without its ``check_`` prefix (a test ID)."""
        return self.body.__name__.removeprefix("check_")

    def __str__(self) -> str:
        return self.name

    def skip_reason(self, backend: object) -> str | None:
        """Why this check does not apply to ``backend`` (a store or a store
        class): the capabilities it needs that the backend does not have
        (or the core, for an object that is not a store). None when it
        applies."""
        cls = backend if isinstance(backend, type) else type(backend)
        if not issubclass(cls, WorkerRole):
            return f"{self.name} needs the core (WorkerRole), which {cls.__name__} does not offer"
        has = capabilities_of(cls)
        missing = sorted(cap.value for cap in self.needs if cap not in has)
        if not missing:
            return None
        return f"{self.name} needs {', '.join(missing)}, which {cls.__name__} does not offer"

    async def __call__(self, factory: StoreFactory) -> None:
        made: list[StoreRole] = []

        async def fresh() -> Store:
            store = await factory()
            made.append(store)
            what = f"the conformance check {self.name}"
            require_roles(store, WorkerRole, what=what)
            require_capabilities(store, self.needs, what=what)
            if isinstance(store, AdminRole):
                known = await store.queues()
                assert not known, f"the factory must make empty stores; this one has {known}"
            # The body uses only the roles just checked (see Fresh).
            return cast(Store, store)

        try:
            await self.body(fresh)
        finally:
            # Shielded: a check that failed by timing out still closes its stores.
            with trio.CancelScope(shield=True):
                for store in made:
                    await store.aclose()


#: Every check, in definition order.
CHECKS: list[Check] = []


def check(*needs: Capability) -> Callable[[Callable[[Fresh], Awaitable[None]]], Check]:
    """Register the decorated body in :data:`CHECKS` as a check needing the
    core and ``needs``."""

    def register(body: Callable[[Fresh], Awaitable[None]]) -> Check:
        made = Check(body, frozenset(needs))
        CHECKS.append(made)
        return made

    return register


def job(job_id: str, queue: str = "q", **kw: object) -> NewJob:
    return NewJob(id=job_id, queue=queue, kind="k", payload=b'{"n":1}', **kw)  # type: ignore[arg-type]


async def lease_result(
    store: Store, queue: str = "q", count: int = 100, ttl: float = LEASE
) -> LeaseResult:
    """All one lease of ``queue`` did (worker ``w1``)."""
    return await store.lease([QueueWeight(queue)], count, worker_id="w1", lease_duration=ttl)


async def lease(
    store: Store, queue: str = "q", count: int = 100, ttl: float = LEASE
) -> list[LeasedJob]:
    """The jobs one lease of ``queue`` leased (worker ``w1``)."""
    return list((await lease_result(store, queue, count, ttl)).jobs)


async def state_of(store: Store, job_id: str) -> JobState | None:
    found = await store.get_job(job_id)
    return None if found is None else found.state


async def found(store: Store, job_id: str) -> Job:
    """The job ``job_id`` as ``get_job`` reads it; fails when it is gone."""
    got = await store.get_job(job_id)
    assert got is not None, f"job {job_id!r} is gone"
    return got


async def lease_again(
    store: Store, job_id: str, *, queue: str = "q", ttl: float = LEASE
) -> LeasedJob:
    """``job_id``, the one job of ``queue`` that waits, leased again once it
    is due (promoted first on a store with a promoter; one without leases a
    due job as it is)."""
    promotes = Capability.PROMOTION in capabilities_of(store)
    with trio.fail_after(10):
        while True:
            if promotes:
                await store.promote_due([queue], 100)
            got = await lease(store, queue, ttl=ttl)
            assert [lj.job.id for lj in got] in ([], [job_id]), got
            if got:
                return got[0]
            await trio.sleep(0.02)


def settle(leased: LeasedJob, kind: SettleKind, **kw: object) -> Settlement:
    return Settlement(leased.ref, kind, **kw)  # type: ignore[arg-type]


def stale(ref: LeaseRef) -> LeaseRef:
    return LeaseRef(ref.job_id, ref.queue, ref.token + "-stale", ref.placement)


@check()
async def check_factory_makes_independent_stores(fresh: Fresh) -> None:
    a, b = await fresh(), await fresh()
    assert await lease(a) == [], "a store from the factory starts empty"
    await a.enqueue_many([job("x")])
    assert await lease(b) == [], "a store from the factory must not see another's jobs"
    [mine] = await b.enqueue_many([job("x")])
    assert mine.created, "a store from the factory must not see another's job IDs"
    [from_a] = await lease(a)
    [from_b] = await lease(b)
    assert from_a.job.id == from_b.job.id == "x"
    assert (await a.settle([settle(from_a, SettleKind.SUCCEEDED)])).settled == (True,)
    assert (await b.renew([from_b.ref], LEASE)).renewed == (True,), (
        "a settle in one store touched another's"
    )


@check(Capability.ADMIN)
async def check_enqueue_due_job_is_ready(fresh: Fresh) -> None:
    store = await fresh()
    [res] = await store.enqueue_many([job("a")])
    assert res.created and res.job_id == "a"
    got = await store.get_job("a")
    assert got is not None
    assert got.state is JobState.READY and got.attempts == 0 and got.payload == b'{"n":1}'
    assert got.kind == "k" and got.queue == "q" and got.created_at > 0
    [stats] = await store.stats(["q"])
    assert stats.counts[JobState.READY] == 1 and stats.total == 1
    assert "q" in await store.queues()


@check(Capability.PROMOTION, Capability.ADMIN)
async def check_delayed_job_promoted_when_due(fresh: Fresh) -> None:
    store = await fresh()
    [res] = await store.enqueue_many([job("a", delay=0.4)])
    assert await state_of(store, "a") is JobState.SCHEDULED
    now = await store.now()
    assert now < res.run_at <= now + 0.45
    early = await store.promote_due(["q"], 100)
    assert early.promoted == 0 and early.next_due_at is not None
    assert abs(early.next_due_at - res.run_at) < 1e-3
    assert await lease(store) == []
    await trio.sleep(0.5)
    due = await store.promote_due(["q"], 100)
    assert due.promoted == 1 and due.next_due_at is None
    assert await state_of(store, "a") is JobState.READY


@check(Capability.ADMIN)
async def check_run_at_in_past_is_ready(fresh: Fresh) -> None:
    store = await fresh()
    now = await store.now()
    await store.enqueue_many([job("past", run_at=now - 60), job("future", run_at=now + 600)])
    assert await state_of(store, "past") is JobState.READY
    assert await state_of(store, "future") is JobState.SCHEDULED


@check(Capability.ADMIN)
async def check_job_ids_are_idempotent(fresh: Fresh) -> None:
    store = await fresh()
    first = await store.enqueue_many([job("a"), job("a", delay=100)])
    assert [r.created for r in first] == [True, False]
    [again] = await store.enqueue_many([NewJob("a", "q", "other", b"changed")])
    assert not again.created
    got = await store.get_job("a")
    assert got is not None and got.kind == "k" and got.payload == b'{"n":1}'
    [leased] = await lease(store)
    assert not (await store.enqueue_many([job("a")]))[0].created
    assert (await store.settle([settle(leased, SettleKind.DEAD, error="x")])).settled == (True,)
    assert not (await store.enqueue_many([job("a")]))[0].created, "dead jobs still exist"
    assert await store.delete_job("a")
    assert (await store.enqueue_many([job("a")]))[0].created, "a deleted ID can be reused"


@check()
async def check_lease_order_follows_due_time(fresh: Fresh) -> None:
    store = await fresh()
    now = await store.now()
    await store.enqueue_many([job(f"j{i}", run_at=now - 10 + i * 0.01) for i in reversed(range(6))])
    order = [lj.job.id for lj in await lease(store, count=1)]
    order += [lj.job.id for lj in await lease(store, count=5)]
    assert order == [f"j{i}" for i in range(6)]


@check(Capability.PROMOTION)
async def check_batch_limits(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job(f"r{i}") for i in range(10)])
    await store.enqueue_many([job(f"s{i}", delay=0.2) for i in range(7)])
    assert len(await lease(store, count=3)) == 3
    assert len(await lease(store, count=0)) == 0
    await trio.sleep(0.3)
    assert (await store.promote_due(["q"], 4)).promoted == 4
    assert (await store.promote_due(["q"], 4)).promoted == 3
    assert len(await lease(store, count=50)) == 14
    assert await lease(store) == []


@check(Capability.ADMIN)
async def check_lease_marks_attempt_owner_and_expiry(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("a", max_retries=5, timeout=7.5)])
    before = await store.now()
    [leased] = await lease(store, ttl=2.0)
    assert leased.token and leased.job.id == "a"
    assert leased.job.attempts == 1 and leased.job.max_retries == 5
    assert leased.job.timeout == 7.5
    assert before + 1.5 < leased.expires_at <= before + 2.5
    # the lease's start, on the store's clock: its expiry less the duration
    assert before - 0.5 <= leased.leased_at <= await store.now()
    assert abs(leased.expires_at - leased.leased_at - 2.0) < 1e-6
    got = await store.get_job("a")
    assert got is not None and got.state is JobState.LEASED
    assert got.lease_owner == "w1" and got.lease_token == leased.token


@check()
async def check_tokens_are_unique(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job(f"j{i}") for i in range(5)])
    tokens = set()
    for _ in range(3):
        batch = await lease(store)
        tokens |= {lj.token for lj in batch}
        await store.settle([settle(lj, SettleKind.RELEASE) for lj in batch])
    assert len(tokens) == 15


@check(Capability.ADMIN)
async def check_stale_token_is_fenced(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("a")])
    [leased] = await lease(store)
    bad = stale(leased.ref)
    assert (await store.renew([bad], LEASE)).renewed == (False,)
    for kind in SettleKind:
        assert (await store.settle([Settlement(bad, kind, error="nope")])).settled == (False,)
    got = await store.get_job("a")
    assert got is not None and got.state is JobState.LEASED and got.last_error == ""
    assert (await store.settle([settle(leased, SettleKind.SUCCEEDED)])).settled == (True,)
    assert await store.get_job("a") is None
    assert (await store.settle([settle(leased, SettleKind.SUCCEEDED)])).settled == (False,)


@check(Capability.ADMIN)
async def check_settle_mixed_batch(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("ok"), job("retry"), job("dead"), job("rel")])
    leased = {lj.job.id: lj for lj in await lease(store)}
    results = await store.settle(
        [
            settle(leased["ok"], SettleKind.SUCCEEDED),
            settle(leased["retry"], SettleKind.RETRY, error="boom", retry_delay=0.3),
            settle(leased["dead"], SettleKind.DEAD, error="fatal"),
            settle(leased["rel"], SettleKind.RELEASE),
            Settlement(stale(leased["ok"].ref), SettleKind.SUCCEEDED),
        ]
    )
    assert results.settled == (True, True, True, True, False)
    assert await store.get_job("ok") is None
    retry = await store.get_job("retry")
    assert retry is not None and retry.state is JobState.RETRY_WAIT
    assert retry.last_error == "boom" and retry.attempts == 1 and not retry.lease_token
    dead = await store.get_job("dead")
    assert dead is not None and dead.state is JobState.DEAD and dead.last_error == "fatal"
    assert dead.finished_at is not None
    rel = await store.get_job("rel")
    assert rel is not None and rel.state is JobState.READY and rel.attempts == 0


@check(Capability.PROMOTION)
async def check_retry_waits_its_delay(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("a")])
    [leased] = await lease(store)
    await store.settle([settle(leased, SettleKind.RETRY, error="e1", retry_delay=0.4)])
    assert (await store.promote_due(["q"], 10)).promoted == 0
    assert await lease(store) == []
    await trio.sleep(0.5)
    assert (await store.promote_due(["q"], 10)).promoted == 1
    [again] = await lease(store)
    assert again.job.attempts == 2 and again.job.last_error == "e1"
    assert again.token != leased.token


async def _promote_if_promoting(store: Store, queue: str = "q") -> None:
    """What a worker's promoter would do on a store that promotes; nothing
    on one that judges due times in its lease (no PromotionRole)."""
    if isinstance(store, PromotionRole):
        await store.promote_due([queue], 100)


@check()
async def check_delayed_and_retried_jobs_are_leased_once_due(fresh: Fresh) -> None:
    """The core's side of delayed jobs, with a promoter or without: a job is
    not leased before its due time, and is after it (promoted first on a
    store that promotes); a retry waits its delay the same way."""
    store = await fresh()
    [res] = await store.enqueue_many([job("a", delay=0.4)])
    now = await store.now()
    assert now < res.run_at <= now + 0.45
    await _promote_if_promoting(store)
    assert await lease(store) == [], "a delayed job is not leased before its due time"
    await trio.sleep(0.5)
    await _promote_if_promoting(store)
    [first] = await lease(store)
    assert first.job.id == "a" and first.job.attempts == 1
    assert await store.settle([settle(first, SettleKind.RETRY, error="e1", retry_delay=0.4)])
    await _promote_if_promoting(store)
    assert await lease(store) == [], "a retry waits its delay"
    await trio.sleep(0.5)
    await _promote_if_promoting(store)
    [again] = await lease(store)
    assert again.job.attempts == 2 and again.job.last_error == "e1"


@check()
async def check_an_idle_waiter_gets_a_delayed_job_once_due(fresh: Fresh) -> None:
    """An idle worker gets a delayed job soon after its due time, not at its
    wait's timeout. On a store that judges due times in its lease (no
    PromotionRole) nothing else would wake it: ``wait_ready`` itself must
    return by the due time. On one that promotes, the promoter's role is
    played here by a promotion every 0.1 s."""
    store = await fresh()
    await store.enqueue_many([job("soon", delay=0.5)])
    promoting = isinstance(store, PromotionRole)
    started = trio.current_time()
    with trio.fail_after(10):
        while True:
            await _promote_if_promoting(store)
            if await lease(store):
                break
            await store.wait_ready(["q"], timeout=0.1 if promoting else 30)
    waited = trio.current_time() - started
    assert 0.4 <= waited < 2.0, f"waited {waited:.2f} s for a job due in 0.5 s"


@check(Capability.ADMIN)
async def check_succeeded_retained_then_trimmed(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("a")])
    [leased] = await lease(store)
    await store.settle([settle(leased, SettleKind.SUCCEEDED, retain_for=0.3)])
    got = await store.get_job("a")
    assert got is not None and got.state is JobState.SUCCEEDED and got.finished_at
    assert [j.id for j in await store.list_jobs("q", JobState.SUCCEEDED)] == ["a"]
    assert (await store.trim(["q"], dead_max_age=None, dead_max_count=None)).count == 0
    await trio.sleep(0.4)
    assert (await store.trim(["q"], dead_max_age=None, dead_max_count=None)).count == 1
    assert await store.get_job("a") is None


@check(Capability.ADMIN)
async def check_renew_extends_lease(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("a")])
    [leased] = await lease(store, ttl=0.4)
    await trio.sleep(0.25)
    assert (await store.renew([leased.ref], 0.4)).renewed == (True,)
    await trio.sleep(0.25)
    assert (await store.recover_expired(["q"], 10)).requeued == ()
    assert (await store.renew([leased.ref], 0.4)).renewed == (True,)
    got = await store.get_job("a")
    assert got is not None and got.state is JobState.LEASED


@check()
async def check_a_renewed_lease_outlives_its_first_expiry(fresh: Fresh) -> None:
    """The core alone (no admin read): a renewal keeps the job from
    recovery and from other leases past the lease's first expiry, and the
    holder can still settle it; a token never issued is not renewed."""
    store = await fresh()
    await store.enqueue_many([job("a")])
    [leased] = await lease(store, ttl=0.4)
    await trio.sleep(0.25)
    assert (await store.renew([leased.ref], 0.4)).renewed == (True,)
    assert (await store.renew([stale(leased.ref)], 0.4)).renewed == (False,)
    await trio.sleep(0.25)  # past the first expiry, within the renewed one
    assert (await store.recover_expired(["q"], 10)).requeued == (), "a renewed lease was recovered"
    assert await lease(store) == [], "a renewed lease's job was leased again"
    assert (await store.settle([settle(leased, SettleKind.SUCCEEDED)])).settled == (True,)


@check(Capability.ADMIN)
async def check_expired_lease_recovered_and_old_token_fenced(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("a")])
    [old] = await lease(store, ttl=0.2)
    await trio.sleep(0.3)
    assert (await store.renew([old.ref], LEASE)).renewed == (False,), (
        "an expired lease cannot be renewed"
    )
    rec = await store.recover_expired(["q"], 10)
    assert rec.requeued == ("a",) and rec.dead == ()
    [new] = await lease(store)
    assert new.token != old.token and new.job.attempts == 2
    assert (await store.settle([settle(old, SettleKind.SUCCEEDED)])).settled == (False,)
    assert (await store.settle([settle(old, SettleKind.DEAD, error="stale")])).settled == (False,)
    got = await store.get_job("a")
    assert got is not None and got.state is JobState.LEASED
    assert got.lease_token == new.token and got.last_error == ""
    assert (await store.settle([settle(new, SettleKind.SUCCEEDED)])).settled == (True,)


@check()
async def check_expired_settle_rejected_before_recovery(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("a")])
    [leased] = await lease(store, ttl=0.2)
    await trio.sleep(0.3)
    assert (await store.settle([settle(leased, SettleKind.SUCCEEDED)])).settled == (False,)
    assert (await store.recover_expired(["q"], 10)).requeued == ("a",)


@check(Capability.ADMIN)
async def check_recover_dead_letters_exhausted_jobs(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("poison", max_retries=0), job("fine", max_retries=1)])
    await lease(store, ttl=0.2)
    await trio.sleep(0.3)
    rec = await store.recover_expired(["q"], 10)
    assert rec.requeued == ("fine",)
    assert [j.id for j in rec.dead] == ["poison"]
    dead = await store.get_job("poison")
    assert dead is not None and dead.state is JobState.DEAD and "lease expired" in dead.last_error


@check()
async def check_recover_respects_limit(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job(f"j{i}") for i in range(5)])
    await lease(store, ttl=0.2)
    await trio.sleep(0.3)
    first = await store.recover_expired(["q"], 3)
    second = await store.recover_expired(["q"], 3)
    assert len(first.requeued) == 3 and len(second.requeued) == 2
    assert set(first.requeued) | set(second.requeued) == {f"j{i}" for i in range(5)}


@check()
async def check_weighted_lease_shares_and_fills(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job(f"h{i}", queue="high") for i in range(40)])
    await store.enqueue_many([job(f"l{i}", queue="low") for i in range(40)])
    queues = [QueueWeight("high", 3), QueueWeight("low", 1)]
    got = (await store.lease(queues, 20, worker_id="w", lease_duration=LEASE)).jobs
    by = {q: sum(1 for lj in got if lj.job.queue == q) for q in ("high", "low")}
    assert len(got) == 20 and by["high"] > by["low"] >= 1
    await store.enqueue_many([job("only", queue="low2")])
    queues = [QueueWeight("empty", 10), QueueWeight("low2", 1)]
    got = (await store.lease(queues, 5, worker_id="w", lease_duration=LEASE)).jobs
    assert [lj.job.id for lj in got] == ["only"], "an empty queue's share goes to others"


@check(Capability.ADMIN)
async def check_strict_lease_drains_higher_queues_first(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job(f"h{i}", queue="high") for i in range(3)])
    await store.enqueue_many([job(f"m{i}", queue="mid") for i in range(4)])
    await store.enqueue_many([job(f"l{i}", queue="low") for i in range(40)])
    # list order is priority; weights are ignored
    queues = [QueueWeight("high", 1), QueueWeight("mid", 1), QueueWeight("low", 1000)]

    async def strict(count: int) -> dict[str, int]:
        result = await store.lease(queues, count, worker_id="w", lease_duration=LEASE, strict=True)
        got = result.jobs
        by: dict[str, int] = {}
        for lj in got:
            by[lj.job.queue] = by.get(lj.job.queue, 0) + 1
        return by

    assert await strict(10) == {"high": 3, "mid": 4, "low": 3}
    await store.enqueue_many([job(f"hh{i}", queue="high") for i in range(12)])
    await store.enqueue_many([job(f"mm{i}", queue="mid") for i in range(2)])
    assert await strict(10) == {"high": 10}, "a lower queue waits while a higher one has work"
    assert await strict(10) == {"high": 2, "mid": 2, "low": 6}
    await store.enqueue_many([job(f"hhh{i}", queue="high") for i in range(5)])
    await store.set_paused("high", True)
    assert await strict(4) == {"low": 4}, "a paused queue does not hold the others back"
    await store.set_paused("high", False)
    # weighted mode keeps its no-starvation rule, however heavy the first queue
    heavy = [QueueWeight("high", 1000), QueueWeight("low", 1)]
    got = (await store.lease(heavy, 4, worker_id="w", lease_duration=LEASE)).jobs
    assert [lj.job.queue for lj in got].count("low") == 1 and len(got) == 4


@check(Capability.ADMIN)
async def check_paused_queue_is_not_leased(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("a", queue="p"), job("b", queue="q")])
    await store.set_paused("p", True)
    queues = [QueueWeight("p"), QueueWeight("q")]
    got = (await store.lease(queues, 10, worker_id="w", lease_duration=LEASE)).jobs
    assert [lj.job.id for lj in got] == ["b"]
    [stats] = await store.stats(["p"])
    assert stats.paused
    await store.set_paused("p", False)
    got = (await store.lease(queues, 10, worker_id="w", lease_duration=LEASE)).jobs
    assert [lj.job.id for lj in got] == ["a"]


@check(Capability.ADMIN)
async def check_a_queue_paused_before_its_first_job(fresh: Fresh) -> None:
    """A queue that never held a job can be paused (an operator readying
    it): it is registered, and its first jobs wait until it is resumed."""
    store = await fresh()
    await store.set_paused("new", True)
    assert "new" in await store.queues()
    [stats] = await store.stats(["new"])
    assert stats.paused and stats.total == 0
    await store.enqueue_many([job("a", queue="new")])
    queues = [QueueWeight("new")]
    assert (await store.lease(queues, 10, worker_id="w", lease_duration=LEASE)).jobs == ()
    await store.set_paused("never", False)  # resuming one is harmless too
    assert "never" in await store.queues()
    await store.set_paused("new", False)
    got = (await store.lease(queues, 10, worker_id="w", lease_duration=LEASE)).jobs
    assert [lj.job.id for lj in got] == ["a"]


@check(Capability.ADMIN)
async def check_inspector_operations(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job(f"s{i}", delay=100 + i) for i in range(5)])
    page1 = await store.list_jobs("q", JobState.SCHEDULED, offset=0, limit=2)
    page2 = await store.list_jobs("q", JobState.SCHEDULED, offset=2, limit=2)
    page3 = await store.list_jobs("q", JobState.SCHEDULED, offset=4, limit=2)
    assert [j.id for j in page1 + page2 + page3] == [f"s{i}" for i in range(5)]
    assert await store.run_now("s3")
    assert await state_of(store, "s3") is JobState.READY
    assert not await store.run_now("s3"), "a ready job is not 'run now' again"
    assert not await store.run_now("missing")
    assert await store.get_job("s0", queue="other") is None
    assert await store.delete_job("s4") and await store.get_job("s4") is None
    assert not await store.delete_job("s4")
    [leased] = await lease(store)
    assert not await store.delete_job("s3"), "a leased job cannot be deleted"
    await store.settle([settle(leased, SettleKind.DEAD, error="bad")])
    assert await store.run_now("s3")
    revived = await store.get_job("s3")
    assert revived is not None and revived.state is JobState.READY and revived.attempts == 0


@check(Capability.ADMIN)
async def check_requeue_dead(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job(f"d{i}") for i in range(4)])
    leased = await lease(store)
    await store.settle([settle(lj, SettleKind.DEAD, error="x") for lj in leased])
    assert (await store.requeue_dead("q", limit=3)).count == 3
    assert len(await store.list_jobs("q", JobState.DEAD)) == 1
    assert (await store.requeue_dead("q")).count == 1
    ready = await lease(store)
    assert len(ready) == 4 and all(lj.job.attempts == 1 for lj in ready)


@check(Capability.ADMIN)
async def check_trim_dead_by_count_and_age(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job(f"d{i}") for i in range(5)])
    for lj in sorted(await lease(store), key=lambda lj: lj.job.id):
        await store.settle([settle(lj, SettleKind.DEAD, error="x")])
        await trio.sleep(0.01)
    assert (await store.trim(["q"], dead_max_age=None, dead_max_count=3)).count == 2
    left = [j.id for j in await store.list_jobs("q", JobState.DEAD)]
    assert left == ["d2", "d3", "d4"], "the oldest dead jobs go first"
    await trio.sleep(0.2)
    assert (await store.trim(["q"], dead_max_age=0.1, dead_max_count=None)).count == 3


@check(Capability.ADMIN)
async def check_trim_keeps_the_latest_retained_successes(fresh: Fresh) -> None:
    store = await fresh()
    ids = ["long", "s0", "s1", "s2", "s3"]
    await store.enqueue_many([job(i) for i in [*ids, "res"]] + [job("o0", queue="o")])
    leased = {lj.job.id: lj for lj in await lease(store) + await lease(store, "o")}
    for job_id in [*ids, "o0"]:
        retain = 600.0 if job_id == "long" else 60.0
        await store.settle([settle(leased[job_id], SettleKind.SUCCEEDED, retain_for=retain)])
        await trio.sleep(0.01)
    # kept only for its result: not retained, so not counted or trimmed by the cap
    await store.settle([settle(leased["res"], SettleKind.SUCCEEDED, result=b"1", result_ttl=60)])

    async def retained(queue: str = "q") -> list[str]:
        listed = await store.list_jobs(queue, JobState.SUCCEEDED)
        return sorted(j.id for j in listed if j.id != "res")

    assert (await store.trim(["q", "o"], dead_max_age=None, dead_max_count=None)).count == 0
    assert await retained() == sorted(ids)
    trimmed = await store.trim(["q", "o"], dead_max_age=None, dead_max_count=None, keep_succeeded=2)
    assert trimmed.count == 3, "the cap is per queue: o keeps its one"
    assert await retained() == ["long", "s3"], "those whose retention ends first go first"
    assert await retained("o") == ["o0"]
    assert await store.get_job("s0") is None
    assert await store.get_job("res") is not None
    assert (
        await store.trim(["q"], dead_max_age=None, dead_max_count=None, keep_succeeded=0)
    ).count == 2
    assert await retained() == [] and await retained("o") == ["o0"]


@check(Capability.ADMIN, Capability.TOPOLOGY)
async def check_topology_versions_drain(fresh: Fresh) -> None:
    store = await fresh()
    topo = await store.topology("mig")
    assert topo.active.version == 1
    await store.enqueue_many([job(f"old{i}", queue="mig") for i in range(6)])
    topo = await store.promote_queue_version("mig", 2, 3)
    assert topo.active.version == 2 and topo.active.partitions == 3
    states = {v.version: v.state for v in topo.versions}
    assert states == {1: VersionState.DRAINING, 2: VersionState.ACTIVE}
    try:
        await store.promote_queue_version("mig", 2, 4)
    except TopologyError:
        pass
    else:
        raise AssertionError("promoting a version that is not newer must fail")
    new = await store.enqueue_many([job(f"new{i}", queue="mig") for i in range(6)])
    where = [store.locate(r.placement) for r in new]
    assert all(w is not None and w[0] == 2 and 0 <= w[1] < 3 for w in where), where
    for bad in (2, 99):
        try:
            await store.complete_draining_version("mig", bad)
        except TopologyError:
            pass
        else:
            raise AssertionError(f"completing version {bad} must fail")
    try:
        await store.complete_draining_version("mig", 1)
    except TopologyError:
        pass
    else:
        raise AssertionError("completing a non-empty draining version must fail")
    leased = await lease(store, queue="mig")
    versions = {(store.locate(lj.job.placement) or (0, 0))[0] for lj in leased}
    assert versions == {1, 2} and len(leased) == 12
    await store.settle([settle(lj, SettleKind.SUCCEEDED) for lj in leased])
    topo = await store.complete_draining_version("mig", 1)
    assert [v.version for v in topo.versions] == [2]
    [stats] = await store.stats(["mig"])
    assert stats.total == 0


@check()
async def check_wait_ready_wakes_on_enqueue(fresh: Fresh) -> None:
    store = await fresh()
    with trio.fail_after(2):
        await store.enqueue_many([job("now")])
        await store.wait_ready(["q"], timeout=30)  # a ready job is there: no wait
    await lease(store)
    woke_at: list[float] = []

    async def waiter() -> None:
        # As a leaser does: spurious returns are allowed, so wait until a
        # lease after the wake-up gets the new job.
        while True:
            await store.wait_ready(["q"], timeout=30)
            if await lease(store):
                break
        woke_at.append(trio.current_time())

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.sleep(0.2)
            assert not woke_at
            sent_at = trio.current_time()
            await store.enqueue_many([job("later")])
    assert woke_at and woke_at[0] - sent_at < 2.0


@check(Capability.PROMOTION)
async def check_wait_scheduled_sees_earlier_job(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("far", delay=100)])
    res = await store.promote_due(["q"], 10)
    assert res.next_due_at is not None
    with trio.fail_after(2):
        await store.wait_scheduled(["q"], earlier_than=None, timeout=30)
    woke: list[bool] = []

    async def waiter() -> None:
        await store.wait_scheduled(["q"], earlier_than=res.next_due_at, timeout=30)
        woke.append(True)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.sleep(0.2)
            assert not woke
            await store.enqueue_many([job("near", delay=5)])
    assert woke


async def _every_waiter_wakes(
    wait: Callable[[], Awaitable[None]], make_news: Callable[[], Awaitable[object]]
) -> None:
    """Three waiters blocked in ``wait`` (and a fourth cancelled mid-wait):
    ``make_news`` ends the wait of all three within 2 s. Spurious returns
    are allowed, so a waiter that returns before the news waits again."""
    sent: list[float] = []
    woke: list[float] = []

    async def waiter() -> None:
        while True:
            await wait()
            if sent:
                woke.append(trio.current_time())
                return

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            cancelled = trio.CancelScope()

            async def cancelled_waiter() -> None:
                with cancelled:
                    await wait()

            nursery.start_soon(cancelled_waiter)
            for _ in range(3):
                nursery.start_soon(waiter)
            await trio.sleep(0.2)
            cancelled.cancel()
            await trio.sleep(0.1)
            sent.append(trio.current_time())
            await make_news()
    assert len(woke) == 3 and max(woke) - sent[0] < 2.0, (sent, woke)


@check()
async def check_every_idle_waiter_wakes(fresh: Fresh) -> None:
    """A job made ready ends the wait of every waiter of its queue, not of
    one of them: a waiter that never takes its wake-up (a stopped process,
    a cut link) cannot keep it from the others, and neither can one
    cancelled mid-wait."""
    store = await fresh()
    await store.enqueue_many([job("warm")])
    await lease(store)  # the queue exists, nothing is ready

    async def wait() -> None:
        await store.wait_ready(["q"], timeout=30)

    await _every_waiter_wakes(wait, lambda: store.enqueue_many([job("one")]))


@check(Capability.PROMOTION)
async def check_every_promoter_wakes_for_an_earlier_job(fresh: Fresh) -> None:
    """A job scheduled before the promoters' horizon ends the wait of every
    one of them (see :func:`check_every_idle_waiter_wakes`)."""
    store = await fresh()
    await store.enqueue_many([job("far", delay=100)])
    res = await store.promote_due(["q"], 10)
    assert res.next_due_at is not None

    async def wait() -> None:
        await store.wait_scheduled(["q"], earlier_than=res.next_due_at, timeout=30)

    await _every_waiter_wakes(wait, lambda: store.enqueue_many([job("near", delay=5)]))


@check(Capability.LEADERSHIP)
async def check_leadership_epochs(fresh: Fresh) -> None:
    store = await fresh()
    a = await store.acquire_leadership("cron", "A", 0.3)
    assert a is not None and a.holder == "A" and a.epoch >= 1
    assert await store.acquire_leadership("cron", "B", 0.3) is None
    again = await store.acquire_leadership("cron", "A", 0.3)
    assert again is not None and again.epoch == a.epoch
    assert await store.renew_leadership("cron", "A", a.epoch, 0.3)
    assert not await store.renew_leadership("cron", "B", a.epoch, 0.3)
    current = await store.current_leader("cron")
    assert current is not None and current.holder == "A"
    await trio.sleep(0.4)
    assert await store.current_leader("cron") is None
    assert not await store.renew_leadership("cron", "A", a.epoch, 0.3)
    b = await store.acquire_leadership("cron", "B", 5)
    assert b is not None and b.epoch == a.epoch + 1
    assert not await store.resign_leadership("cron", "A", a.epoch)
    assert await store.resign_leadership("cron", "B", b.epoch)
    c = await store.acquire_leadership("cron", "A", 5)
    assert c is not None and c.epoch == b.epoch + 1


@check(Capability.ADMIN, Capability.LEADERSHIP)
async def check_triggers_fenced_by_epoch(fresh: Fresh) -> None:
    store = await fresh()
    # a lease long enough for four store calls on a loaded machine (0.2 s ran out
    # under a CI run before the duplicate's trigger was answered)
    old = await store.acquire_leadership("cron", "A", 1.0)
    assert old is not None
    t1 = job("sched:1000", queue="cron-q")
    assert await store.enqueue_trigger("cron", old.epoch, "s", 1000.0, t1) is TriggerResult.ENQUEUED
    assert await store.get_job("sched:1000") is not None
    dup = job("sched:1000b", queue="cron-q")
    result = await store.enqueue_trigger("cron", old.epoch, "s", 1000.0, dup)
    assert result is TriggerResult.ALREADY_FIRED
    assert await store.get_job("sched:1000b") is None
    await trio.sleep(1.1)
    new = await store.acquire_leadership("cron", "B", 5)
    assert new is not None and new.epoch > old.epoch
    t2 = job("sched:2000", queue="cron-q")
    assert (
        await store.enqueue_trigger("cron", old.epoch, "s", 2000.0, t2) is TriggerResult.STALE_EPOCH
    )
    assert await store.get_job("sched:2000") is None
    assert await store.enqueue_trigger("cron", new.epoch, "s", 2000.0, t2) is TriggerResult.ENQUEUED
    assert (await store.schedule_last_fired("cron"))["s"] == 2000.0


# -- the store checker -------------------------------------------------------------------
@check(Capability.ADMIN, Capability.CHECK)
async def check_checker_finds_nothing_in_a_sound_store(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job(n) for n in ("leased", "retry", "done", "dead")])
    leased = {lj.job.id: lj for lj in await lease(store)}
    assert set(leased) == {"leased", "retry", "done", "dead"}
    await store.enqueue_many([job("ready"), job("later", delay=3600), job("other", queue="q2")])
    await store.settle(
        [
            settle(leased["retry"], SettleKind.RETRY, error="e", retry_delay=3600),
            settle(leased["done"], SettleKind.SUCCEEDED, retain_for=3600),
            settle(leased["dead"], SettleKind.DEAD, error="fatal"),
        ]
    )
    before = {n: await store.get_job(n) for n in ("leased", "retry", "done", "dead", "ready")}
    for batch in (1, 500):  # one key per step walks the same as one step for all
        for repair in (False, True):
            report = await store.check(repair=repair, batch=batch)
            assert report.findings == () and report.ok, report.findings
            assert report.queues == ("q", "q2") and report.records == 7
            assert report.repair is repair
    assert {n: await store.get_job(n) for n in before} == before
    only = await store.check(["q2", "unknown"])
    assert only.queues == ("q2", "unknown") and only.records == 1 and only.ok
    for bad in ({"batch": 0}, {"lease_grace": -1.0}):
        try:
            await store.check(**bad)  # type: ignore[arg-type, unused-ignore]
        except ValueError:
            pass
        else:
            raise AssertionError(f"check({bad}) must raise ValueError")


@check(Capability.ADMIN, Capability.CHECK)
async def check_checker_recovers_a_lease_expired_past_the_grace(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("again"), job("last", max_retries=0)])
    first = await lease(store, ttl=0.1)
    assert {lj.job.id for lj in first} == {"again", "last"}
    await store.enqueue_many([job("fresh")])
    await trio.sleep(1.2)
    await lease(store, count=1, ttl=0.1)  # "fresh": expired, but within the grace
    report = await store.check(lease_grace=1.0)
    assert {(f.job_id, f.problem) for f in report.findings} == {
        ("again", Problem.EXPIRED_LEASE),
        ("last", Problem.EXPIRED_LEASE),
    }, report.findings
    assert not report.ok and all(f.repair is Repair.NONE for f in report.findings)
    assert await state_of(store, "again") is JobState.LEASED  # reporting changes nothing
    report = await store.check(repair=True, lease_grace=1.0)
    repairs = {f.job_id: f.repair for f in report.findings}
    assert repairs == {"again": Repair.RECOVERED, "last": Repair.DEAD_LETTERED}, report.findings
    assert report.ok
    again, last = await store.get_job("again"), await store.get_job("last")
    assert again is not None and again.state is JobState.READY and not again.lease_token
    assert last is not None and last.state is JobState.DEAD
    assert "retries exhausted" in last.last_error
    # "fresh" may be past the grace by now on a loaded machine; the two
    # repaired jobs must be gone from the report.
    late = {f.job_id for f in (await store.check(lease_grace=1.0)).findings}
    assert late <= {"fresh"}, late
    [leased] = await lease(store, count=1)
    assert leased.job.id == "again" and leased.job.attempts == 2


def ref_of(leased: LeasedJob) -> JobRef:
    j = leased.job
    return JobRef(j.id, j.queue, j.placement)


@check(Capability.ADMIN, Capability.RESULTS)
async def check_result_written_by_the_lease_holder_only(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("a"), job("b")])
    a, _ = sorted(await lease(store, ttl=0.2), key=lambda lj: lj.job.id)
    ref = ref_of(a)
    pending = await store.outcome(ref)
    assert pending is not None and pending.state is JobState.LEASED and not pending.finished
    assert pending.result is None
    # a's lease expires and is recovered; a stale success carries a result
    await trio.sleep(0.3)
    await store.recover_expired(["q"], 10)
    [again, _] = sorted(await lease(store), key=lambda lj: lj.job.id)
    stale_ok = Settlement(a.ref, SettleKind.SUCCEEDED, result=b"stale", result_ttl=60)
    assert (await store.settle([stale_ok])).settled == (False,)
    assert (await store.outcome(ref)).state is JobState.LEASED  # type: ignore[union-attr]
    fresh_ok = Settlement(again.ref, SettleKind.SUCCEEDED, result=b'{"n":42}', result_ttl=60)
    assert (await store.settle([fresh_ok])).settled == (True,)
    # a duplicate (or late) settle of the same run cannot overwrite it
    dup = Settlement(again.ref, SettleKind.SUCCEEDED, result=b"dup", result_ttl=60)
    assert (await store.settle([dup])).settled == (False,)
    done = await store.outcome(ref)
    assert done is not None and done.state is JobState.SUCCEEDED and done.finished
    assert done.result == b'{"n":42}' and not done.result_expired
    assert done.attempts == 2 and done.result_until is not None
    # the record keeps its due time (not its retention) and shows the result
    got = await store.get_job("a")
    assert got is not None and got.result == b'{"n":42}' and got.run_at <= got.finished_at  # type: ignore[operator]
    assert await store.outcome(JobRef("nope", "q")) is None
    assert await store.outcome(JobRef("a", "other-queue")) is None


@check(Capability.ADMIN, Capability.RESULTS)
async def check_result_expires_and_is_trimmed(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("r"), job("kept"), job("none")])
    leased = {lj.job.id: lj for lj in await lease(store)}
    await store.settle(
        [
            Settlement(leased["r"].ref, SettleKind.SUCCEEDED, result=b"1", result_ttl=0.3),
            Settlement(
                leased["kept"].ref, SettleKind.SUCCEEDED, retain_for=5, result=b"2", result_ttl=0.3
            ),
            Settlement(leased["none"].ref, SettleKind.SUCCEEDED),
        ]
    )
    assert await store.outcome(JobRef("none", "q")) is None  # nothing kept
    r = await store.outcome(JobRef("r", "q"))
    assert r is not None and r.result == b"1"
    await trio.sleep(0.4)
    # the record retained longer than its result: the result reads as expired
    kept = await store.outcome(JobRef("kept", "q"))
    assert kept is not None and kept.state is JobState.SUCCEEDED
    assert kept.result is None and kept.result_expired
    # kept only for its result: gone once it expired (trimmed, or expired by
    # itself: a store may keep such a record out of its indexes)
    await store.trim(["q"], dead_max_age=None, dead_max_count=None)
    assert await store.outcome(JobRef("r", "q")) is None
    assert await store.outcome(JobRef("kept", "q")) is not None


@check(Capability.ADMIN, Capability.RESULTS)
async def check_success_kept_for_its_result_is_not_listed(fresh: Fresh) -> None:
    """A success kept only for its result, or for its waiters, is readable
    but not retained: never listed or counted as succeeded, never counted
    by a trim; a retained one is (``WorkerRole.settle``, ``AdminRole``)."""
    store = await fresh()
    await store.enqueue_many([job("res"), job("kept"), job("waited")])
    leased = {lj.job.id: lj for lj in await lease(store)}
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(store.wait_outcome, JobRef("waited", "q"), timeout=5.0))
            await trio.sleep(0.2)  # the waiter is registered before the success
            await store.settle(
                [
                    settle(leased["res"], SettleKind.SUCCEEDED, result=b"1", result_ttl=1.5),
                    settle(leased["kept"], SettleKind.SUCCEEDED, retain_for=60),
                    settle(leased["waited"], SettleKind.SUCCEEDED),
                ]
            )
    got = await store.get_job("res")
    assert got is not None and got.state is JobState.SUCCEEDED and got.result == b"1"
    # kept for its waiter (if it registered in time: a networked store's may not)
    waited = await store.get_job("waited")
    assert waited is None or waited.state is JobState.SUCCEEDED
    listed = await store.list_jobs("q", JobState.SUCCEEDED)
    assert [j.id for j in listed] == ["kept"], "only the retained success is listed"
    [stats] = await store.stats(["q"])
    assert stats.counts[JobState.SUCCEEDED] == 1 and stats.total == 1
    assert sum(stats.by_partition.values()) == 1
    await trio.sleep(1.6)  # the result expired: its record goes, uncounted by a trim
    assert (await store.trim(["q"], dead_max_age=None, dead_max_count=None)).count == 0
    assert await store.outcome(JobRef("res", "q")) is None
    assert [j.id for j in await store.list_jobs("q", JobState.SUCCEEDED)] == ["kept"]


@check(Capability.RESULTS)
async def check_wait_outcome_wakes_on_finish(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("w"), job("d", max_retries=0), job("slow")])
    leased = {lj.job.id: lj for lj in await lease(store)}
    got: dict[str, object] = {}
    unknown_answered = trio.Event()

    async def wait(job_id: str, timeout: float) -> None:
        got[job_id] = await store.wait_outcome(JobRef(job_id, "q"), timeout=timeout)
        if job_id == "unknown":
            unknown_answered.set()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for name in ("w", "d"):
                for _ in range(3):  # several waiters on one job
                    nursery.start_soon(wait, name, 8.0)
            nursery.start_soon(wait, "slow", 0.3)
            nursery.start_soon(wait, "unknown", 5.0)
            await trio.sleep(0.2)
            await unknown_answered.wait()  # a loaded networked store may answer late
            assert "w" not in got and "d" not in got and got["unknown"] is None
            await store.settle(
                [
                    Settlement(leased["w"].ref, SettleKind.SUCCEEDED, result=b"ok", result_ttl=60),
                    Settlement(leased["d"].ref, SettleKind.DEAD, error="boom"),
                ]
            )
    w, d, slow = got["w"], got["d"], got["slow"]
    assert w is not None and w.state is JobState.SUCCEEDED and w.result == b"ok"  # type: ignore[attr-defined]
    assert d is not None and d.state is JobState.DEAD and d.last_error == "boom"  # type: ignore[attr-defined]
    # timed out: the outcome as it stands
    assert slow is not None and slow.state is JobState.LEASED  # type: ignore[attr-defined]


@check(Capability.ADMIN, Capability.RESULTS, Capability.UNIQUE)
async def check_discard_deletes_and_waiters_see_the_failure(fresh: Fresh) -> None:
    store = await fresh()
    [uniq] = await store.enqueue_many([unique_job("dk")])
    await store.enqueue_many([job("gone"), job("waited"), job("dead")])
    leased = {lj.job.id: lj for lj in await lease(store)}
    got: dict[str, object] = {}

    async def wait(job_id: str) -> None:
        got[job_id] = await store.wait_outcome(JobRef(job_id, "q"), timeout=8.0)

    # a first wait sets up the store's listener (a pub/sub connection, on
    # a thread for some backends): the real waiter below then registers at
    # once, well before the settle, even on a busy machine
    await store.wait_outcome(JobRef("absent", "q"), timeout=0.05)
    stale = attrs.evolve(leased["gone"].ref, token=leased["gone"].token + "-stale")
    assert (await store.settle([Settlement(stale, SettleKind.DISCARD, error="x")])).settled == (
        False,
    )
    assert await state_of(store, "gone") is JobState.LEASED, "a stale token changes nothing"
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait, "waited")
            await trio.sleep(0.2)
            applied = await store.settle(
                [
                    settle(leased["gone"], SettleKind.DISCARD, error="boom"),
                    settle(leased["waited"], SettleKind.DISCARD, error="boom"),
                    settle(leased[uniq.job_id], SettleKind.DISCARD, error="boom"),
                    settle(leased["dead"], SettleKind.DEAD, error="kept"),
                ]
            )
            assert applied.settled == (True,) * 4
    waited = got["waited"]
    assert waited is not None and waited.state is JobState.DEAD  # type: ignore[attr-defined]
    assert waited.last_error == "boom"  # type: ignore[attr-defined]
    assert (await store.settle([settle(leased["gone"], SettleKind.DISCARD)])).settled == (False,)
    assert await store.get_job("gone") is None
    assert await store.get_job(uniq.job_id) is None
    # a store may keep the waited-for record a while (dead, in no index)
    kept = await store.get_job("waited")
    assert kept is None or kept.state is JobState.DEAD
    assert [j.id for j in await store.list_jobs("q", JobState.DEAD)] == ["dead"]
    [stats] = await store.stats(["q"])
    assert stats.counts[JobState.DEAD] == 1
    assert not await store.run_now("waited"), "a discarded job cannot be run again"
    assert (await store.requeue_dead("q")).count == 1  # "dead" only
    assert (await store.enqueue_many([unique_job("dk", n=1)]))[0].created, "its lock is free"


@check(Capability.ADMIN)
async def check_headers_travel_with_the_job(fresh: Fresh) -> None:
    store = await fresh()
    headers = (("tenant", "acme"), ("trace", "00-ab-cd-01"), ("ünï", "çødé"))
    await store.enqueue_many([job("h", headers=headers), job("plain")])
    stored = await store.get_job("h")
    assert stored is not None and stored.headers == headers
    leased = {lj.job.id: lj.job for lj in await lease(store)}
    assert leased["h"].headers == headers and leased["plain"].headers == ()


# -- unique jobs ------------------------------------------------------------------------
def unique_job(key: str, job_id: str = "", **kw: object) -> NewJob:
    """A unique job under ``key``; with no ``job_id`` its ID is the store's
    to choose (``id_given`` False), as a producer's made-up ID is."""
    options: dict[str, object] = {"key": key}
    for name in ("ttl", "mode"):
        if name in kw:
            options[name] = kw.pop(name)
    return NewJob(
        id=job_id or f"auto-{key}-{kw.pop('n', 0)}",
        queue="q",
        kind="k",
        payload=kw.pop("payload", b'{"n":1}'),  # type: ignore[arg-type]
        unique=Unique(**options),  # type: ignore[arg-type]
        id_given=bool(job_id),
        **kw,  # type: ignore[arg-type]
    )


@check(Capability.ADMIN, Capability.UNIQUE)
async def check_unique_job_holds_its_key_while_pending(fresh: Fresh) -> None:
    store = await fresh()
    [first] = await store.enqueue_many([unique_job("k1")])
    assert first.created
    holder = first.job_id
    # scheduled, ready, leased, retry_wait: the key is held in every pending state
    [dup] = await store.enqueue_many([unique_job("k1", n=1, payload=b'{"n":2}')])
    assert not dup.created and dup.job_id == holder
    [other] = await store.enqueue_many([unique_job("k2")])
    assert other.created and other.job_id != holder, "another key is another job"
    [leased] = [lj for lj in await lease(store) if lj.job.id == holder]
    assert leased.job.payload == b'{"n":1}', "a duplicate changes nothing"
    assert not (await store.enqueue_many([unique_job("k1", n=2)]))[0].created
    # due later: a store without a promoter shows a due retry_wait job as ready
    retried = settle(leased, SettleKind.RETRY, error="again", retry_delay=60.0)
    assert (await store.settle([retried])).settled == (True,)
    assert await state_of(store, holder) is JobState.RETRY_WAIT
    [dup] = await store.enqueue_many([unique_job("k1", n=3)])
    assert not dup.created and dup.job_id == holder
    # a batch with two jobs of one key stores one
    both = await store.enqueue_many([unique_job("k3", n=1), unique_job("k3", n=2)])
    assert [r.created for r in both] == [True, False] and both[0].job_id == both[1].job_id


@check(Capability.ADMIN, Capability.UNIQUE)
async def check_unique_key_is_released_when_its_job_finishes(fresh: Fresh) -> None:
    store = await fresh()
    [ok, bad] = await store.enqueue_many([unique_job("ok"), unique_job("bad")])
    by_id = {lj.job.id: lj for lj in await lease(store)}
    assert (
        await store.settle(
            [
                settle(by_id[ok.job_id], SettleKind.SUCCEEDED),
                settle(by_id[bad.job_id], SettleKind.DEAD, error="boom"),
            ]
        )
    ).settled == (True, True)
    # succeeded or dead, the key is free: a new job takes it
    again = await store.enqueue_many([unique_job("ok", n=1), unique_job("bad", n=1)])
    assert [r.created for r in again] == [True, True]
    assert again[0].job_id != ok.job_id and again[1].job_id != bad.job_id
    # a deleted job frees its key too
    assert await store.delete_job(again[0].job_id)
    assert (await store.enqueue_many([unique_job("ok", n=2)]))[0].created


@check(Capability.UNIQUE)
async def check_unique_key_is_fenced_by_the_lease(fresh: Fresh) -> None:
    store = await fresh()
    [first] = await store.enqueue_many([unique_job("k")])
    [old] = await lease(store, ttl=0.2)
    await trio.sleep(0.3)
    assert (await store.recover_expired(["q"], 10)).requeued == (first.job_id,)
    [new] = await lease(store)
    # the stale worker's late success neither settles nor frees the key
    assert (await store.settle([settle(old, SettleKind.SUCCEEDED)])).settled == (False,)
    [dup] = await store.enqueue_many([unique_job("k", n=1)])
    assert not dup.created and dup.job_id == first.job_id
    assert (await store.settle([settle(new, SettleKind.SUCCEEDED)])).settled == (True,)
    assert (await store.enqueue_many([unique_job("k", n=2)]))[0].created
    # a job dead by recovery (no retry left) frees its key
    [gone] = await store.enqueue_many([unique_job("r", max_retries=0)])
    [held] = [lj for lj in await lease(store, ttl=0.2) if lj.job.id == gone.job_id]
    await trio.sleep(0.3)
    assert [j.id for j in (await store.recover_expired(["q"], 10)).dead] == [held.job.id]
    assert (await store.enqueue_many([unique_job("r", n=1)]))[0].created


@check(Capability.UNIQUE)
async def check_unique_throttle_keeps_the_key_after_a_run(fresh: Fresh) -> None:
    store = await fresh()
    [first] = await store.enqueue_many([unique_job("t", ttl=0.5, mode="throttle")])
    [leased] = await lease(store)
    assert (await store.settle([settle(leased, SettleKind.SUCCEEDED)])).settled == (True,)
    [dup] = await store.enqueue_many([unique_job("t", n=1, ttl=0.5, mode="throttle")])
    assert not dup.created and dup.job_id == first.job_id, "taken for ttl after the run"
    await trio.sleep(0.6)
    [later] = await store.enqueue_many([unique_job("t", n=2, ttl=0.5, mode="throttle")])
    assert later.created and later.job_id != first.job_id


@check(Capability.PROMOTION, Capability.ADMIN, Capability.UNIQUE)
async def check_unique_debounce_replaces_the_waiting_job(fresh: Fresh) -> None:
    store = await fresh()
    [first] = await store.enqueue_many([unique_job("d", mode="debounce", delay=30.0)])
    [again] = await store.enqueue_many(
        [unique_job("d", n=1, mode="debounce", payload=b'{"n":2}', delay=0.2)]
    )
    assert not again.created and again.job_id == first.job_id
    assert again.run_at < first.run_at, "the new due time replaces the old one"
    got = await store.get_job(first.job_id)
    assert got is not None and got.payload == b'{"n":2}' and got.state is JobState.SCHEDULED
    await trio.sleep(0.3)
    assert (await store.promote_due(["q"], 10)).promoted == 1
    [leased] = await lease(store)
    assert leased.job.id == first.job_id and leased.job.payload == b'{"n":2}'
    # while it runs, a new job is stored and takes the key
    [behind] = await store.enqueue_many([unique_job("d", n=2, mode="debounce", delay=30.0)])
    assert behind.created and behind.job_id != first.job_id
    assert (await store.settle([settle(leased, SettleKind.SUCCEEDED)])).settled == (True,)
    [replaced] = await store.enqueue_many(
        [unique_job("d", n=3, mode="debounce", payload=b'{"n":3}')]
    )
    assert not replaced.created and replaced.job_id == behind.job_id
    assert await state_of(store, behind.job_id) is JobState.READY


@check(Capability.UNIQUE)
async def check_unique_ttl_lapses_and_renew_keeps_a_running_job_s_key(fresh: Fresh) -> None:
    store = await fresh()
    [waits] = await store.enqueue_many([unique_job("w", ttl=0.3, delay=30.0)])
    await trio.sleep(0.4)
    [taken] = await store.enqueue_many([unique_job("w", n=1, ttl=0.3, delay=30.0)])
    assert taken.created and taken.job_id != waits.job_id, "the lock lapsed after its ttl"
    [runs] = await store.enqueue_many([unique_job("r", ttl=0.3)])
    [leased] = [lj for lj in await lease(store, ttl=1.0) if lj.job.id == runs.job_id]
    await trio.sleep(0.2)
    assert (await store.renew([leased.ref], 1.0)).renewed == (True,)
    await trio.sleep(0.4)  # past the ttl, within the renewed lease
    [dup] = await store.enqueue_many([unique_job("r", n=1, ttl=0.3)])
    assert not dup.created and dup.job_id == runs.job_id, "renewal keeps the key"


@check(Capability.ADMIN, Capability.TOPOLOGY, Capability.UNIQUE)
async def check_unique_jobs_live_in_their_key_s_partition(fresh: Fresh) -> None:
    store = await fresh()
    partitions = (await store.topology("q")).active.partitions
    results = await store.enqueue_many([unique_job(f"key-{i}") for i in range(24)])
    for i, r in enumerate(results):
        where = store.locate(r.placement)
        assert r.created and where is not None
        assert where[1] == partition_of(f"key-{i}", partitions)
        assert partition_of(r.job_id, partitions) == where[1]
        got = await store.get_job(r.job_id)
        assert got is not None and got.placement == r.placement
    if partitions > 1:
        # a given ID that routes elsewhere is refused, and nothing is stored
        given = next(
            f"id-{n}" for n in range(100)
            if partition_of(f"id-{n}", partitions) != partition_of("mine", partitions)
        )  # fmt: skip
        try:
            await store.enqueue_many([job("plain-1"), unique_job("mine", job_id=given)])
        except ValueError as exc:
            assert "leave job_id unset" in str(exc)
        else:
            raise AssertionError("a unique job's ID that routes elsewhere must be refused")
        assert await store.get_job("plain-1") is None and await store.get_job(given) is None


# -- workflow continuations ---------------------------------------------------------------
@check(Capability.ADMIN, Capability.FLOWS)
async def check_continuations_come_from_the_fenced_success_only(fresh: Fresh) -> None:
    store = await fresh()
    flows = [job(name, then=f'{{"for":"{name}"}}') for name in ("ok", "retry", "dead", "back")]
    await store.enqueue_many([*flows, job("plain")])
    by_id = {lj.job.id: lj for lj in await lease(store)}
    bad = stale(by_id["ok"].ref)
    assert (await store.settle([Settlement(bad, SettleKind.SUCCEEDED)])).settled == (False,)
    assert await store.continuations(["q"], 10) == [], "a stale success queues nothing"
    assert (
        await store.settle(
            [
                settle(by_id["ok"], SettleKind.SUCCEEDED, result=b"42", result_ttl=60),
                settle(by_id["retry"], SettleKind.RETRY, error="again", retry_delay=30),
                settle(by_id["dead"], SettleKind.DEAD, error="boom"),
                settle(by_id["back"], SettleKind.RELEASE),
                settle(by_id["plain"], SettleKind.SUCCEEDED),
            ]
        )
    ).settled == (True,) * 5
    [entry] = await store.continuations(["q"], 10)
    assert (entry.job_id, entry.queue, entry.then, entry.result) == (
        "ok",
        "q",
        '{"for":"ok"}',
        b"42",
    )
    assert await store.continuations(["other"], 10) == []
    # the workflow job's record stays (its continuation's IDs stay taken)
    kept = await store.get_job("ok")
    assert kept is not None and kept.state is JobState.SUCCEEDED
    # an entry stays until it is finished, then it is gone
    assert [c.job_id for c in await store.continuations(["q"], 10)] == ["ok"]
    await store.finish_continuations([entry])
    await store.finish_continuations([entry])  # twice is fine
    assert await store.continuations(["q"], 10) == []


@check(Capability.FLOWS)
async def check_a_group_completes_once_with_results_in_member_order(fresh: Fresh) -> None:
    store = await fresh()

    def arrive(*args: tuple[str, int, int, bytes | None]) -> list[Arrival]:
        return [Arrival(g, i, n, r, None) for g, i, n, r in args]

    assert await store.group_arrive(arrive(("g1", 2, 3, b'"c"')), 60.0) == [None]
    again = await store.group_arrive(arrive(("g1", 2, 3, b'"x"'), ("g1", 0, 3, None)), 60.0)
    assert again == [None, None], "an arrival repeated changes nothing"
    done = [None, b'"b"', b'"c"']
    # the completing arrival, and every one after it (in the same call too)
    got = await store.group_arrive(
        arrive(("g1", 1, 3, b'"b"'), ("g1", 1, 3, b'"b"'), ("g2", 0, 1, b"1")), 60.0
    )
    assert got == [done, done, [b"1"]], "complete from then on; groups are apart"
    assert await store.group_arrive([], 60.0) == []


@check(Capability.FLOWS)
async def check_next_continuations_finish_the_handled_then_read(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job(name, then=f'{{"for":"{name}"}}') for name in ("a", "b")])
    leased = await lease(store)
    settled = await store.settle([settle(lj, SettleKind.SUCCEEDED) for lj in leased])
    assert settled.settled == (True, True)
    first = await store.next_continuations(["q"], 1, finished=[])
    assert len(first) == 1, "at most limit entries"
    rest = await store.next_continuations(["q"], 10, finished=first)
    assert [c.job_id for c in rest] == sorted({"a", "b"} - {first[0].job_id})
    assert await store.next_continuations(["q"], 10, finished=rest) == [], "handled: gone"
    assert await store.next_continuations(["q"], 10, finished=rest) == [], "twice is fine"
    assert await store.continuations(["q"], 10) == []


@check(Capability.FLOWS)
async def check_a_settle_wakes_the_continuation_waiter(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("w", then='{"for":"w"}')])
    [leased] = await lease(store)
    woke = trio.Event()

    async def wait() -> None:
        await store.wait_continuations(30.0)
        woke.set()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.sleep(0.05)
            assert not woke.is_set()
            assert (await store.settle([settle(leased, SettleKind.SUCCEEDED)])).settled == (True,)
            await woke.wait()
    assert [c.job_id for c in await store.continuations(["q"], 10)] == ["w"]


# -- abort ----------------------------------------------------------------------------
async def _aborted_state(store: Store, job_id: str, last_error: str = "aborted") -> Job:
    """The job, checked to be aborted as an abort leaves it."""
    got = await store.get_job(job_id)
    assert got is not None and got.state is JobState.ABORTED, got
    assert got.last_error == last_error and got.finished_at is not None, got
    assert not got.lease_token and not got.lease_owner and got.lease_expires_at is None, got
    return got


def _raises_aborted(found: JobOutcome | None, job_id: str) -> None:
    """A waiter reading ``found`` gets JobAborted (as ``handle.result()`` does)."""
    assert found is not None and found.finished and found.state is JobState.ABORTED, found
    try:
        result_of(found, job_id, "k", unknown_kind)
    except JobAborted as exc:
        assert exc.job_id == job_id and exc.last_error == found.last_error
    else:
        raise AssertionError(f"the outcome of aborted job {job_id} must raise JobAborted")


@check(
    Capability.PROMOTION,
    Capability.ADMIN,
    Capability.RESULTS,
    Capability.UNIQUE,
    Capability.ABORT,
)
async def check_abort_of_a_waiting_job_is_at_once_and_for_good(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("retry")])
    [leased] = await lease(store)
    await store.settle([settle(leased, SettleKind.RETRY, error="boom", retry_delay=0.3)])
    await store.enqueue_many([job("sched", delay=0.3), job("ready")])
    [owned] = await store.enqueue_many([unique_job("key", delay=0.3)])
    waited: list[JobOutcome | None] = []

    async def wait() -> None:
        waited.append(await store.wait_outcome(JobRef("ready", "q"), timeout=10))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.sleep(0.05)  # the waiter is registered and blocked
            assert not waited
            assert await store.abort("ready", reason="not needed") is AbortResult.ABORTED
            assert await store.abort("sched", queue="q") is AbortResult.ABORTED
            assert await store.abort("retry") is AbortResult.ABORTED
            assert await store.abort(owned.job_id) is AbortResult.ABORTED
    _raises_aborted(waited[0], "ready")
    assert waited[0] is not None and waited[0].last_error == "aborted: not needed"
    await _aborted_state(store, "ready", "aborted: not needed")
    await _aborted_state(store, "sched")
    retry = await _aborted_state(store, "retry")
    assert retry.attempts == 1, "an abort keeps the attempts made"
    _raises_aborted(await store.outcome(JobRef("sched", "q")), "sched")
    # never leased, whatever time passes
    await trio.sleep(0.4)
    assert (await store.promote_due(["q"], 10)).promoted == 0
    assert await lease(store) == []
    # the unique key is free again
    [again] = await store.enqueue_many([unique_job("key", n=1)])
    assert again.created and again.job_id != owned.job_id
    # aborted for good: not again, not run now, not requeued with the dead
    assert await store.abort("sched") is AbortResult.FINISHED
    assert not await store.run_now("sched")
    assert (await store.requeue_dead("q")).count == 0
    assert await state_of(store, "sched") is JobState.ABORTED
    [stats] = await store.stats(["q"])
    assert stats.counts[JobState.ABORTED] == 4 and stats.counts[JobState.DEAD] == 0, stats
    assert stats.counts[JobState.READY] == 1 and stats.total == 5, stats
    listed = await store.list_jobs("q", JobState.ABORTED)
    assert sorted(j.id for j in listed) == sorted(["sched", "ready", "retry", owned.job_id])
    assert all(j.state is JobState.ABORTED and not j.damage for j in listed), listed
    assert await store.list_jobs("q", JobState.DEAD) == []


@check(Capability.ADMIN, Capability.RESULTS, Capability.ABORT)
async def check_abort_of_a_leased_job_is_flagged_and_settled_fenced(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job(n) for n in ("run", "other", "retry", "rel", "done")])
    by_id = {lj.job.id: lj for lj in await lease(store)}
    run = by_id["run"]
    assert await store.abort("run", reason="stop") is AbortResult.FLAGGED
    flagged = await store.get_job("run")
    assert flagged is not None and flagged.state is JobState.LEASED, "it stays leased"
    assert flagged.lease_token == run.token
    # every renewal reports the flag, in its own reply
    for _ in range(2):
        renewed = await store.renew([by_id["other"].ref, run.ref], LEASE)
        assert renewed.renewed == (True, True) and renewed.aborted == {1}, renewed
    assert await store.abort("run") is AbortResult.FLAGGED, "asking again is harmless"
    waited: list[JobOutcome | None] = []

    async def wait() -> None:
        waited.append(await store.wait_outcome(ref_of(run), timeout=10))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.sleep(0.05)
            # fenced: a stale token changes nothing
            stale_abort = Settlement(stale(run.ref), SettleKind.ABORTED)
            assert (await store.settle([stale_abort])).settled == (False,)
            assert await state_of(store, "run") is JobState.LEASED
            applied = await store.settle([settle(run, SettleKind.ABORTED)])
            assert applied.settled == (True,) and applied.aborted == {0}, applied
    await _aborted_state(store, "run", "aborted: stop")
    _raises_aborted(waited[0], "run")
    assert (await store.settle([settle(run, SettleKind.ABORTED)])).settled == (False,), (
        "settled once"
    )
    assert (await store.renew([run.ref], LEASE)).renewed == (False,)
    # a retry or a release of a flagged lease makes it aborted (not run again);
    # an outcome that finished it stands
    for name in ("retry", "rel", "done"):
        assert await store.abort(name) is AbortResult.FLAGGED
    applied = await store.settle(
        [
            settle(by_id["retry"], SettleKind.RETRY, error="boom", retry_delay=0),
            settle(by_id["rel"], SettleKind.RELEASE),
            settle(by_id["done"], SettleKind.DEAD, error="fatal"),
        ]
    )
    assert applied.settled == (True, True, True) and applied.aborted == {0, 1}, applied
    await _aborted_state(store, "retry")
    await _aborted_state(store, "rel")
    done = await store.get_job("done")
    assert done is not None and done.state is JobState.DEAD and done.last_error == "fatal"
    # the unflagged lease was never told anything
    other = await store.renew([by_id["other"].ref], LEASE)
    assert other.renewed == (True,) and other.aborted == frozenset()
    assert await state_of(store, "other") is JobState.LEASED


@check(Capability.ADMIN, Capability.ABORT)
async def check_recovery_aborts_an_expired_flagged_lease(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("gone"), job("back")])
    leased = {lj.job.id: lj for lj in await lease(store, ttl=0.2)}
    assert await store.abort("gone", reason="worker died") is AbortResult.FLAGGED
    await trio.sleep(0.3)
    rec = await store.recover_expired(["q"], 10)
    assert rec.requeued == ("back",) and rec.dead == (), rec
    assert [j.id for j in rec.aborted] == ["gone"], rec
    assert rec.aborted[0].state is JobState.ABORTED
    assert rec.aborted[0].last_error == "aborted: worker died"
    await _aborted_state(store, "gone", "aborted: worker died")
    assert (await store.settle([settle(leased["gone"], SettleKind.ABORTED)])).settled == (False,)
    [again] = await lease(store)
    assert again.job.id == "back", "only the job nobody aborted runs again"


@check(Capability.ADMIN, Capability.ABORT)
async def check_abort_of_a_finished_or_unknown_job_changes_nothing(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("ok"), job("dead")])
    by_id = {lj.job.id: lj for lj in await lease(store)}
    await store.settle(
        [
            settle(by_id["ok"], SettleKind.SUCCEEDED, retain_for=60),
            settle(by_id["dead"], SettleKind.DEAD, error="fatal"),
        ]
    )
    before = {n: await store.get_job(n) for n in ("ok", "dead")}
    assert await store.abort("ok") is AbortResult.FINISHED
    assert await store.abort("dead", reason="late") is AbortResult.FINISHED
    assert await store.abort("missing") is AbortResult.NOT_FOUND
    assert await store.abort("ok", queue="other") is AbortResult.NOT_FOUND
    assert {n: await store.get_job(n) for n in ("ok", "dead")} == before
    assert await store.get_job("missing") is None


@check(Capability.ADMIN, Capability.CHECK, Capability.ABORT)
async def check_aborted_jobs_are_kept_and_trimmed_as_dead_ones(fresh: Fresh) -> None:
    store = await fresh()
    # the oldest finished jobs are aborted, the newer ones dead
    await store.enqueue_many([job(f"a{i}", delay=60) for i in range(3)])
    for i in range(3):
        assert await store.abort(f"a{i}") is AbortResult.ABORTED
        await trio.sleep(0.01)
    await store.enqueue_many([job(f"d{i}") for i in range(3)])
    for lj in sorted(await lease(store), key=lambda lj: lj.job.id):
        await store.settle([settle(lj, SettleKind.DEAD, error="x")])
        await trio.sleep(0.01)
    [stats] = await store.stats(["q"])
    assert stats.counts[JobState.ABORTED] == 3 and stats.counts[JobState.DEAD] == 3, stats
    assert stats.total == 6 and sum(stats.by_partition.values()) == 6, stats
    report = await store.check()
    assert report.findings == () and report.records == 6, "an aborted job is where it belongs"
    pages = [await store.list_jobs("q", JobState.DEAD, offset=o, limit=2) for o in (0, 2)]
    assert [j.id for page in pages for j in page] == ["d0", "d1", "d2"]
    aborted = await store.list_jobs("q", JobState.ABORTED, offset=1, limit=5)
    assert [j.id for j in aborted] == ["a1", "a2"]
    # requeueing the dead passes the aborted ones by (oldest dead first)
    assert (await store.requeue_dead("q", limit=2)).count == 2
    assert [j.id for j in await store.list_jobs("q", JobState.DEAD)] == ["d2"]
    assert (await store.requeue_dead("q")).count == 1
    assert [j.id for j in await store.list_jobs("q", JobState.ABORTED)] == ["a0", "a1", "a2"]
    # trimmed with the dead: by count (the oldest first), and by age
    assert (await store.trim(["q"], dead_max_age=None, dead_max_count=1)).count == 2
    assert [j.id for j in await store.list_jobs("q", JobState.ABORTED)] == ["a2"]
    await trio.sleep(0.2)
    assert (await store.trim(["q"], dead_max_age=0.1, dead_max_count=None)).count == 1
    assert await store.get_job("a2") is None
    [stats] = await store.stats(["q"])
    assert stats.counts[JobState.ABORTED] == 0 and stats.counts[JobState.READY] == 3, stats


@check(Capability.ADMIN, Capability.CONCURRENCY_LIMITS, Capability.ABORT)
async def check_an_aborted_holder_gives_its_concurrency_slot_back(fresh: Fresh) -> None:
    store = await fresh()
    capped = JobControl(caps=(("db", 1),))
    jobs = [job(f"c{n}", control=capped, id_given=False) for n in range(3)]
    ids = [r.job_id for r in await store.enqueue_many(jobs)]
    [holder] = await lease(store)
    assert await lease(store) == [], "the one slot is held"
    waiting = [i for i in ids if i != holder.job.id]
    assert await store.abort(waiting[0]) is AbortResult.ABORTED, "a waiting job holds no slot"
    assert await lease(store) == []
    assert await store.abort(holder.job.id) is AbortResult.FLAGGED
    assert (await store.settle([settle(holder, SettleKind.ABORTED)])).settled == (True,)
    [after] = await lease(store)
    assert after.job.id == waiting[1], "the aborted holder's slot is free at once"


@check(Capability.ADMIN, Capability.CHECK, Capability.ABORT)
async def check_checker_takes_back_an_expired_flagged_lease_as_aborted(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("gone")])
    await lease(store, ttl=0.1)
    assert await store.abort("gone", reason="late") is AbortResult.FLAGGED
    await trio.sleep(0.5)
    report = await store.check(repair=True, lease_grace=0.3)
    [found] = report.findings
    assert found.problem is Problem.EXPIRED_LEASE and found.repair is Repair.RECOVERED, found
    assert "aborted" in found.repair_detail, found
    await _aborted_state(store, "gone", "aborted: late")
    assert (await store.check()).findings == ()
    assert await lease(store) == [], "taken back as recovery would: aborted, not ready"
