"""Chain links' settles two at a time (issue 29, chain throughput): while
the settle in flight hands links over (``Successor.lease_to``), the
completer may send a second, and a batch of enough such links claimed with
nothing in flight goes as two, so the worker runs one half's successors
while the store settles the other (``actors.completer``: ``_Lanes``,
``_parts``). Plain jobs' settles stay one at a time; a store that does not
``leases_in_settle`` never gets two. Memory (virtual clock), Redis, and
the SQL stores (one at a time there)."""

from __future__ import annotations

from typing import Any

import attrs
import trio

from chronos_trio import chain
from chronos_trio.actors import completer
from chronos_trio.records._errors import StoreError
from tests._backends import Backend
from tests.test_chain_settle import chain_app


def _takes(store: Any) -> bool:
    return bool(getattr(type(store), "leases_in_settle", False))


class _Spy:
    """Wraps a store's ``settle``: counts the calls in flight at once (the
    highest seen), how many links each asked to be handed over, and fails
    the first ``fail`` calls that ask for hand-overs before they reach the
    store (nothing applied: the completer must send them again)."""

    def __init__(self, store: Any, fail: int = 0, unasked: bool = False) -> None:
        self.settle = store.settle
        self.in_flight = 0
        self.most = 0
        self.twos = 0  # times two were in flight
        self.handing: list[int] = []
        self.fail = fail
        self.unasked = unasked
        store.settle = self

    async def __call__(self, settlements: Any) -> Any:
        hands = sum(1 for s in settlements if s.successor is not None and s.successor.lease_to)
        if self.unasked:  # a store that takes the ask and hands nothing over
            settlements = [_unasked(s) for s in settlements]
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        self.twos += self.in_flight == 2
        try:
            # a store call always reaches a checkpoint before its reply:
            # the completer may send another meanwhile
            await trio.lowlevel.checkpoint()
            if hands and self.fail:
                self.fail -= 1
                raise StoreError("settle failed before it reached the store (test)")
            result = await self.settle(settlements)
        finally:
            self.in_flight -= 1
        self.handing.append(hands)
        return result


def _unasked(s: Any) -> Any:
    if s.successor is None or not s.successor.lease_to:
        return s
    return attrs.evolve(s, successor=attrs.evolve(s.successor, lease_to="", lease_duration=0.0))


async def _chains(backend: Backend, store: Any, n: int) -> None:
    """``n`` 10-link chains enqueued before one worker starts (its first
    lease takes all their first links: a batch of ``n`` to hand over);
    each link ran once and each chain ended with 10."""
    app, runs = chain_app(store)
    inc = app.tasks["inc"]
    flow = chain(inc.s(0), *(inc.s() for _ in range(9)))
    started = [await app.enqueue_workflow(flow, workflow_id=f"c{k}") for k in range(n)]
    async with app.open_worker(**backend.timing(poll_interval=0.5)):
        with trio.fail_after(backend.pick(memory=60, redis=30)):
            assert [await s.result(timeout=30) for s in started] == [10] * n
    assert len(runs) == 10 * n and set(runs.values()) == {1}, "each link once"


async def test_chain_links_settle_two_at_a_time(backend: Backend, clock: object) -> None:
    store = backend.store()
    spy = _Spy(store)
    await _chains(backend, store, 40)
    if not _takes(store):
        assert spy.most == 1, "a store that does not hand links over gets one settle at a time"
        return
    # 40 links claimed at once, nothing in flight: two settles of 20
    assert spy.most == 2
    assert max(spy.handing) <= 40 - completer.HALF_AT_LEAST
    assert sum(spy.handing) == 40 * 9, "every link but the last of each chain handed over"


async def test_plain_jobs_settle_one_at_a_time(backend: Backend, clock: object) -> None:
    store = backend.store()
    spy = _Spy(store)
    app, runs = chain_app(store)
    await app.tasks["inc"].enqueue_many(list(range(300)))
    async with app.open_worker(**backend.timing(poll_interval=0.5)):
        with trio.fail_after(backend.pick(memory=60, redis=30)):
            while sum(runs.values()) < 300:
                await trio.sleep(0.05)
    assert spy.most == 1 and set(runs.values()) == {1}


async def test_a_failed_settle_of_two_in_flight_is_sent_again(
    backend: Backend, clock: object
) -> None:
    """Either of two settles in flight may fail (the store unreachable):
    it is sent again after the completer's backoff, the other one's links
    go on meanwhile, and no link is lost or run twice."""
    store = backend.store()
    spy = _Spy(store, fail=3)
    await _chains(backend, store, 40)
    if _takes(store):
        assert spy.fail == 0, "three hand-over settles failed and were sent again"
        assert spy.most == 2


async def test_a_store_that_hands_nothing_over_gets_one_settle_at_a_time(
    backend: Backend, clock: object
) -> None:
    """The worker asks, the store stores the successors ready (as a Redis
    Cluster does): after the first batch's two halves say so, its settles
    go one at a time; the leaser runs the successors."""
    store = backend.store()
    spy = _Spy(store, unasked=True)
    await _chains(backend, store, 40)
    assert spy.twos <= 1, "two in flight at most once: the first batch's halves"


def test_a_second_settle_goes_out_only_beside_one_that_hands_over() -> None:
    lanes = completer._Lanes()
    assert lanes._room() and lanes.idle
    lanes.sent(False)
    assert not lanes._room(), "beside a settle that hands nothing over: wait for it"
    lanes.returned(False)
    lanes.sent(True)
    assert lanes._room()
    lanes.sent(True)
    assert not lanes._room(), f"at most {completer.SETTLES_IN_FLIGHT}"
    lanes.returned(True)
    lanes.sent(False)
    assert not lanes._room()
    lanes.returned(False)
    lanes.returned(True)
    assert lanes.idle
