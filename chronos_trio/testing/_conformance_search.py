"""Conformance checks of job search (:class:`~chronos_trio.store.SearchRole`):
every filter, paging by cursor, the scan bound and its "keep searching"
cursor, and bad arguments. Registered in
:data:`~chronos_trio.testing.conformance.CHECKS` like the others when
``chronos_trio.testing`` is imported."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

from ..records._jobs import JobState, NewJob
from ..store._capabilities import Capability
from ..store._roles import SettleKind, Store
from ..store._search import JobQuery, SearchPage, TimeRange
from .conformance import Fresh, check, lease, settle


@contextlib.contextmanager
def _raises(kind: type[Exception], match: str) -> Iterator[None]:
    try:
        yield
    except kind as exc:
        assert re.search(match, str(exc)), f"{exc!r} does not say {match!r}"
    else:
        raise AssertionError(f"no {kind.__name__} raised")


def _job(job_id: str, queue: str, kind: str, payload: bytes, **kw: object) -> NewJob:
    return NewJob(id=job_id, queue=queue, kind=kind, payload=payload, **kw)  # type: ignore[arg-type]


async def _all(
    store: Store, query: JobQuery, *, limit: int = 3, scan_limit: int = 10_000
) -> list[str]:
    """Every id the search finds, following cursors (bounded), sorted."""
    ids: list[str] = []
    cursor = None
    for _ in range(200):
        page: SearchPage = await store.search_jobs(
            query, cursor=cursor, limit=limit, scan_limit=scan_limit
        )
        assert len(page.jobs) <= limit
        assert page.scanned <= scan_limit, "a call reads at most scan_limit records"
        ids += [j.id for j in page.jobs]
        if page.cursor is None:
            assert page.complete and not page.partial
            return sorted(ids)
        cursor = page.cursor
    raise AssertionError("the search never completed")


@check(Capability.SEARCH, Capability.ADMIN, Capability.HISTORY)
async def check_search_filters_and_pages(fresh: Fresh) -> None:
    store = await fresh()
    now = await store.now()
    await store.enqueue_many(
        [
            _job("a1", "mail", "email.send", b'{"to": "ann@example.com"}'),
            _job("a2", "mail", "email.send", b'{"to": "bob@example.com"}'),
            _job("a3", "mail", "email.digest", b'{"to": "ann@example.com"}'),
            _job("b1", "bill", "invoice.make", b'{"customer": 42}', delay=3600),
            _job("b2", "bill", "invoice.make", b'{"customer": 7}', max_retries=0),
            _job("b3", "bill", "invoice.make", b'{"customer": 42}', max_retries=0),
        ]
    )
    # b2 dies with an error, by worker w1; b3 is leased by w1 now
    leased = {lj.job.id: lj for lj in await lease(store, "bill", 1)}
    assert set(leased) <= {"b2", "b3"}
    first = next(iter(leased.values()))
    await store.settle([settle(first, SettleKind.DEAD, error="Timeout talking to SMTP")])
    dead_id = first.job.id
    running = {lj.job.id: lj for lj in await lease(store, "bill", 1)}
    running_id = next(iter(running))
    assert {dead_id, running_id} == {"b2", "b3"}

    everything = ["a1", "a2", "a3", "b1", "b2", "b3"]
    assert await _all(store, JobQuery()) == everything, "the empty query finds every job"
    assert await _all(store, JobQuery(queues=("mail",))) == ["a1", "a2", "a3"]
    assert await _all(store, JobQuery(queues=("mail", "bill"), kind="email.send")) == ["a1", "a2"]
    assert await _all(store, JobQuery(states=(JobState.SCHEDULED,))) == ["b1"]
    assert await _all(store, JobQuery(states=("dead",))) == [dead_id]
    assert await _all(store, JobQuery(states=("leased", "dead"))) == sorted([dead_id, running_id])
    assert await _all(store, JobQuery(kind="invoice.make", states=("ready",))) == []
    assert await _all(store, JobQuery(error="timeout TALKING")) == [dead_id], "ASCII case folds"
    assert await _all(store, JobQuery(error="nothing like it")) == []
    assert await _all(store, JobQuery(payload='"customer": 42')) == ["b1", "b3"]
    assert await _all(store, JobQuery(payload="ANN@")) == [], "payload text is case-sensitive"
    assert await _all(store, JobQuery(payload="ann@", kind="email.digest")) == ["a3"]
    # the worker: the lease holder now, or who ran an attempt that failed
    assert await _all(store, JobQuery(worker="w1")) == sorted([dead_id, running_id])
    assert await _all(store, JobQuery(worker="w2")) == []
    # time ranges: start included, end not; an unset time is outside a bounded range
    later = await store.now() + 1
    assert await _all(store, JobQuery(created=TimeRange(now - 60, later))) == everything
    assert await _all(store, JobQuery(created=TimeRange(later, None))) == []
    assert await _all(store, JobQuery(finished=TimeRange(now - 60, None))) == [dead_id]
    assert await _all(store, JobQuery(due=TimeRange(now + 600, None))) == ["b1"]
    assert await _all(store, JobQuery(due=TimeRange(None, now + 600), queues=("bill",))) == sorted(
        [dead_id, running_id]
    )
    # every page size and a tiny scan bound find the same jobs
    for limit, scan in ((1, 10_000), (2, 1), (5, 2), (1000, 3)):
        assert await _all(store, JobQuery(), limit=limit, scan_limit=scan) == everything, (
            limit,
            scan,
        )
    # a page holds what it found in full; the scan bound says "partial"
    page = await store.search_jobs(JobQuery(payload="nowhere"), scan_limit=2)
    assert page.jobs == () and page.cursor is not None and page.partial and page.scanned == 2
    page = await store.search_jobs(JobQuery(kind="email.send"), limit=50)
    assert sorted(j.id for j in page.jobs) == ["a1", "a2"] and page.complete
    found = {j.id: j for j in page.jobs}
    assert found["a1"].payload == b'{"to": "ann@example.com"}' and found["a1"].queue == "mail"
    dead = (await store.search_jobs(JobQuery(states=("dead",)))).jobs[0]
    assert dead.last_error == "Timeout talking to SMTP" and dead.finished_at is not None
    assert [a.worker for a in dead.history] == ["w1"], "found with its history"
    # an unknown queue finds nothing, and is not an error
    assert await _all(store, JobQuery(queues=("nope",))) == []


@check(Capability.SEARCH)
async def check_search_refuses_bad_arguments(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([_job("x", "q", "k", b"{}")])
    for kw in ({"limit": 0}, {"limit": 1001}, {"scan_limit": 0}):
        with _raises(ValueError, match="must be"):
            await store.search_jobs(JobQuery(), **kw)  # type: ignore[arg-type]
    for cursor in ("not a cursor!", "WzFd", ""):
        with _raises(ValueError, match="search again without a cursor"):
            await store.search_jobs(JobQuery(), cursor=cursor)
    with _raises(ValueError, match="unknown job state"):
        JobQuery(states=("bogus",))
    with _raises(ValueError, match="before it starts"):
        TimeRange(10, 5)
    with _raises(TypeError, match="must be text"):
        JobQuery(kind=3)  # type: ignore[arg-type]
    assert [j.id for j in (await store.search_jobs(JobQuery())).jobs] == ["x"]
