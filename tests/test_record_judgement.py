"""One judgement of a record, shared by every path (issue 23, item 9).

On main a job whose ``run_at`` held garbage was leased and run, while the
store checker called it damaged and ``--repair`` dead-lettered it; a job
with ``timeout=math.inf`` was stored, judged sound by the store and the
checker, then dead-lettered by the executor. Now every path decides by
``store/_record_rules.py``.

For every field of a record and every kind of garbage the damage helpers
make (``chronos_trio.testing.damage``; on Redis also ``h`` and ``fc``), a
job is damaged in one state and the store checker's verdict (damaged,
newer format, gone, or usable) is compared with what the store's own
operations then do with it: for a ready job, the lease; for a leased job
whose lease expired, recovery and then the lease; for a leased job, a
retry settle, recovery once its lease is over, promotion and the lease.
Damaged must mean dead-lettered as damaged, usable must mean run.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from chronos_trio import App, Job, JobContext, JobState, MemoryStore, NewJob
from chronos_trio.store import (
    DAMAGED_RECORD,
    CheckReport,
    Problem,
    QueueWeight,
    SetAside,
    SettleKind,
    Settlement,
    Store,
)
from chronos_trio.store.redis import RedisStore
from chronos_trio.store.redis.keys import KeySpace
from chronos_trio.testing import DamageableMemoryStore
from chronos_trio.testing.damage import (
    RECORD,
    Damage,
    RedisClient,
    damage_job,
    fields_of,
    kinds_of,
    redis_client,
)
from tests._backends import Backend

#: Raw garbage for the Redis fields the damage helpers leave alone.
REDIS_EXTRA = {
    "h": (b"{", b"[1]", b'{"a": 1}'),
    "fc": (b"zz", b"c/"),
    "result_until": (b"soon",),
    # numbers as Lua's tonumber or Python's float() would read them, but the
    # one judgement does not (the lease decodes these fields inline)
    "run_at": (b"1_0", b"0x10", b"inf", b"nan"),
    "max_retries": (b"1_0", b"0x1", b"-1", b"1.0"),
    "timeout": (b"1_0", b"0x10", b"nan", b"-1"),
    "created_at": (b"1_0", b"nan"),
}


@attrs.frozen
class Case:
    job_id: str
    field: str
    how: str
    value: bytes | None = None  # raw garbage (REDIS_EXTRA)


def cases(store: Store) -> list[Case]:
    out = [
        Case(f"j-{field}-{how}", field, how)
        for field in fields_of(store)
        for how in kinds_of(store, field)
        # a record removed from a MemoryStore is gone, nothing to judge
        if not (isinstance(store, MemoryStore) and field == RECORD)
    ]
    if isinstance(store, RedisStore):
        out += [
            Case(f"j-{field}-raw{n}", field, "raw", value)
            for field, values in REDIS_EXTRA.items()
            for n, value in enumerate(values)
        ]
    return out


@attrs.define
class Stores:
    """A store of each kind a case runs on, with a raw client on Redis."""

    store: Store
    client: RedisClient | None
    #: A lease that ends within the test, and how long to wait for it.
    short: float


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def judge_clock(kind: str) -> trio.abc.Clock | None:
    return trio.testing.MockClock(autojump_threshold=0) if kind == "memory" else None


_namespaces = iter(range(10**6))


@pytest.fixture
async def stores(request: pytest.FixtureRequest, kind: str) -> AsyncIterator[Stores]:
    if kind == "memory":
        yield Stores(DamageableMemoryStore(), None, 10.0)
        return
    url = request.getfixturevalue("redis_url")
    store = RedisStore.from_url(url, namespace=f"judge{next(_namespaces)}", default_partitions=4)
    client = redis_client(url)
    try:
        yield Stores(store, client, 1.0)
    finally:
        await store.aclose()
        client.close()


def new(job_id: str) -> NewJob:
    return NewJob(id=job_id, queue="q", kind="k", payload=b'{"n": 1}')


async def damage(s: Stores, case: Case) -> None:
    store = s.store
    assert isinstance(store, MemoryStore | RedisStore)
    if case.how != "raw":
        await damage_job(store, case.job_id, queue="q", field=case.field, how=Damage(case.how),
                         client=s.client)  # fmt: skip
        return
    assert isinstance(store, RedisStore) and s.client is not None
    job = await store.get_job(case.job_id)
    assert job is not None
    key = KeySpace(store.namespace).placed("q", job.placement)
    s.client.hset(key.job(case.job_id), case.field, case.value or b"")


def check_verdicts(report: CheckReport) -> dict[str, str]:
    verdict = {
        Problem.DAMAGED: "damaged",
        Problem.NEWER_FORMAT: "newer",
        Problem.NO_RECORD: "gone",
        Problem.QUARANTINED: "gone",
    }
    out: dict[str, str] = {}
    for f in report.findings:
        if f.problem in verdict:
            out[f.job_id] = verdict[f.problem]
    return out


class Run:
    """The store's own operations on the damaged jobs: what they set aside,
    and which jobs the last lease handed out."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.aside: list[SetAside] = []
        self.leased: set[str] = set()

    async def call(self, fn: Any, *args: Any, **kw: Any) -> Any:
        result = await fn(*args, **kw)
        self.aside.append(result.aside)
        return result

    async def lease(self, ttl: float = 600.0) -> list[Any]:
        got = await self.call(
            self.store.lease, [QueueWeight("q")], 1000, worker_id="w", lease_duration=ttl
        )
        return list(got.jobs)

    async def verdicts(self, job_ids: list[str]) -> dict[str, str]:
        newer = {e.job_id for a in self.aside for e in a.newer}
        gone = {e.job_id for a in self.aside for e in a.quarantined}
        out = {}
        for job_id in job_ids:
            job = await self.store.get_job(job_id, queue="q")
            if job_id in newer:
                out[job_id] = "newer"
            elif job_id in gone:
                out[job_id] = "gone"
            elif (
                job is not None
                and job.state is JobState.DEAD
                and job.last_error.startswith(DAMAGED_RECORD)
            ):
                out[job_id] = "damaged"
            elif job_id in self.leased:
                out[job_id] = "usable"
            else:
                out[job_id] = f"left {job.state if job else None}"
        return out


def agree(checked: dict[str, str], done: dict[str, str], all_cases: list[Case]) -> None:
    wrong = [
        f"{c.field} {c.how}: check says {checked.get(c.job_id, 'usable')}, "
        f"the store's operations {done[c.job_id]}"
        for c in all_cases
        if checked.get(c.job_id, "usable") != done[c.job_id]
    ]
    assert not wrong, "\n".join(wrong)


async def test_a_ready_job_is_leased_exactly_when_the_checker_calls_it_usable(
    kind: str, judge_clock: object, stores: Stores
) -> None:
    store = stores.store
    all_cases = cases(store)
    with trio.fail_after(120):
        await store.enqueue_many([new(c.job_id) for c in all_cases])
        for c in all_cases:
            await damage(stores, c)
        checked = check_verdicts(await store.check(lease_grace=3600.0))
        run = Run(store)
        run.leased = {lj.job.id for lj in await run.lease()}
        agree(checked, await run.verdicts([c.job_id for c in all_cases]), all_cases)
    assert checked["j-run_at-wrong_type"] == "damaged", "the issue's case"


async def test_an_expired_lease_is_recovered_and_run_exactly_when_the_checker_calls_it_usable(
    kind: str, judge_clock: object, stores: Stores
) -> None:
    store = stores.store
    all_cases = cases(store)
    with trio.fail_after(120):
        await store.enqueue_many([new(c.job_id) for c in all_cases])
        run = Run(store)
        assert len(await run.lease(ttl=stores.short)) == len(all_cases)
        for c in all_cases:
            await damage(stores, c)
        await trio.sleep(stores.short)  # every lease is over
        checked = check_verdicts(await store.check(lease_grace=3600.0))
        await run.call(store.recover_expired, ["q"], 1000)
        run.leased = {lj.job.id for lj in await run.lease()}
        agree(checked, await run.verdicts([c.job_id for c in all_cases]), all_cases)


async def test_a_leased_job_settled_for_a_retry_runs_again_exactly_when_the_checker_calls_it_usable(
    kind: str, judge_clock: object, stores: Stores
) -> None:
    store = stores.store
    all_cases = cases(store)
    with trio.fail_after(120):
        await store.enqueue_many([new(c.job_id) for c in all_cases])
        run = Run(store)
        held = await run.lease(ttl=stores.short * 3)
        assert len(held) == len(all_cases)
        for c in all_cases:
            await damage(stores, c)
        checked = check_verdicts(await store.check(lease_grace=3600.0))
        retry = [Settlement(lj.ref, SettleKind.RETRY, error="again") for lj in held]
        await run.call(store.settle, retry)
        await trio.sleep(stores.short * 3)  # leases the settle did not take are over
        await run.call(store.recover_expired, ["q"], 1000)
        await run.call(store.promote_due, ["q"], 1000)
        run.leased = {lj.job.id for lj in await run.lease()}
        agree(checked, await run.verdicts([c.job_id for c in all_cases]), all_cases)


@attrs.frozen
class Work:
    n: int


async def test_a_record_without_a_timeout_runs(backend: Backend, clock: object) -> None:
    """A stored ``timeout`` of infinity (a record another producer wrote:
    producers of this version refuse it, see docs/bad-input.md) is sound to
    every store and the checker, so the worker runs it, with no timeout; on
    main the executor called it damaged and dead-lettered the job."""
    store = backend.store()
    app = App(store)
    ran: list[int] = []

    @app.task("forever")
    async def forever(payload: Work, job: JobContext) -> None:
        ran.append(payload.n)

    with pytest.raises(ValueError, match="timeout"):
        forever.new_job(Work(0), timeout=math.inf)
    new = attrs.evolve(forever.new_job(Work(1)), timeout=math.inf)
    async with app.open_worker(**backend.timing(poll_interval=0.5)) as worker:
        with trio.fail_after(backend.pick(memory=60, redis=10)):
            await store.enqueue_many([new])
            while not ran:
                await trio.sleep(0.05)
            await worker.wait_idle()
        assert worker.statistics().dead == 0
    assert ran == [1]
    assert (await store.check()).findings == ()


#: Values of every shape a field may meet in a damaged memory record.
_ODD_VALUES: tuple[Any, ...] = (
    None, "", "x", b"", b"x", 0, 1, -1, 2**1023, 10**15, 0.0, 1.5, -1.5, math.inf, -math.inf,
    math.nan, True, JobState.READY, (), (("a", "b"),), (("", "b"),), [], {},
)  # fmt: skip


@pytest.mark.parametrize("state", [*JobState, "garbage"])
def test_the_compiled_check_of_a_sound_record_agrees_with_each_rule(state: Any) -> None:
    """``value_sound`` (each state's compiled check, run on every record a
    memory store operation meets) says sound exactly when no rule finds a
    problem, for every field and every shape of value."""
    from chronos_trio.store._record_rules import RULES, value_problem, value_sound

    sound = Job(
        id="j", queue="q", kind="k", payload=b"p", run_at=1.0, state=JobState.LEASED,
        lease_token="t", lease_expires_at=2.0, created_at=1.0, finished_at=2.0,
    )  # fmt: skip
    base = attrs.evolve(sound, state=state)
    judged = state if isinstance(state, JobState) else None
    for rule in RULES:
        for value in _ODD_VALUES:
            job = attrs.evolve(base, **{rule.name: value})
            problems = [
                value_problem(r, getattr(job, r.name), required=r.required and r.judged(judged))
                for r in RULES
            ]
            expected = all(p is None for p in problems)
            assert value_sound(job) is expected, (rule.name, value, state, problems)
