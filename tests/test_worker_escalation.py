"""A worker that cannot go on: an actor that crash-loops (a bug in a store
call it makes: not a ``StoreError``, which actors ride out) fails the worker
with ``ActorFailed``, whether it crash-loops while the worker starts or
later, and an outer cancellation while the worker starts is honoured; each
time after a clean shutdown, in bounded time.

The start-up cases guard against hangs in shielded cancel scopes, which no
cancel scope of the test could end: a plain ``trio.fail_after`` would hang
the suite rather than fail. So each runs in a Trio run of its own (memory
store, autojump clock) in a worker thread, abandoned if it does not end
within :data:`LIMIT` real seconds (see :func:`run_apart`)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import pytest
import trio
import trio.testing

from chronos_trio import ActorFailed, App, JobState, MemoryStore
from tests._backends import Backend
from tests._support import Recorder, Work, wait_for

#: Real seconds a start-up case may take (it takes milliseconds).
LIMIT = 20.0

#: The recoverer runs on every store and calls this as soon as it starts.
CRASHING_OP = "recover_expired"

#: Two restarts within 10 s, then the worker fails: the third crash does it.
INTENSITY: dict[str, Any] = {"restart_intensity": 2, "restart_period": 10.0}


async def _bug(*args: Any, **kwargs: Any) -> NoReturn:
    raise AttributeError(f"a bug in {CRASHING_OP}")


async def _never(*args: Any, **kwargs: Any) -> NoReturn:
    await trio.sleep_forever()


def _crash_loops(actor: str) -> pytest.RaisesGroup[ActorFailed]:
    """What ``open_worker`` raises: ``ActorFailed`` in its nursery's group,
    caused by the actor's last crash."""
    failed = pytest.RaisesExc(
        ActorFailed,
        match=f"actor '{actor}' crashed 3 times within 10s",
        check=lambda exc: isinstance(exc.__cause__, AttributeError),
    )
    return pytest.RaisesGroup(failed)


async def run_apart(scenario: Callable[[], Awaitable[None]]) -> None:
    """Run ``scenario`` in a Trio run of its own under the autojump clock,
    in a worker thread; fail if it has not ended after :data:`LIMIT` real
    seconds (the thread, stuck, is left behind)."""
    clock = trio.testing.MockClock(autojump_threshold=0)
    with trio.fail_after(LIMIT):
        await trio.to_thread.run_sync(
            functools.partial(trio.run, scenario, clock=clock), abandon_on_cancel=True
        )


def _app(store: MemoryStore) -> App:
    app = App(store)

    @app.task("noop")
    async def noop(args: bytes) -> None: ...

    return app


async def test_crash_loop_at_start_up_fails_open_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The recoverer crash-loops at once: ``open_worker`` raises
    ``ActorFailed`` from its ``__aenter__``, after stopping the actors
    already started (the registrar, stopped cleanly, left the registry)."""

    async def scenario() -> None:
        store = MemoryStore()
        monkeypatch.setattr(store, CRASHING_OP, _bug)
        with _crash_loops("recoverer"), trio.fail_after(60):
            async with _app(store).open_worker(**INTENSITY):
                pytest.fail("the worker started")
        assert await store.workers() == []

    await run_apart(scenario)


async def test_outer_cancellation_while_start_up_waits_on_the_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The registrar's first beat (before it reports itself started) never
    returns: an outer cancellation still ends the start-up on time, and
    stops what had started."""

    async def scenario() -> None:
        store = MemoryStore()
        monkeypatch.setattr(store, "beat_worker", _never)
        with trio.fail_after(60), trio.move_on_after(5) as outer:
            async with _app(store).open_worker():
                pytest.fail("the worker started")
        assert outer.cancelled_caught
        assert trio.current_time() == 5.0

    await run_apart(scenario)


#: Scheduler passes an outer cancellation is swept over: more than a start-up takes.
SWEEP = 120


async def test_outer_cancellation_at_any_point_of_start_up_is_honoured() -> None:
    """Cancelled after 0, 1, 2, ... scheduler passes (past the end of the
    start-up), the worker always leaves at once, having stopped cleanly
    what it had started: also when the cancellation comes just as a group
    of actors reports itself started (Trio does not hand over a task that
    reports started under a cancelled ``start()``)."""

    async def once(passes: int) -> bool:
        store = MemoryStore()
        started = False
        async with trio.open_nursery() as nursery:

            async def cancel_later() -> None:
                for _ in range(passes):
                    await trio.lowlevel.checkpoint()
                nursery.cancel_scope.cancel()

            nursery.start_soon(cancel_later)
            async with _app(store).open_worker():
                started = True
                await trio.sleep_forever()
        assert trio.current_time() == 0.0, f"cancelled after {passes} passes: left at once"
        assert await store.workers() == [], f"cancelled after {passes} passes"
        return started

    async def scenario() -> None:
        outcomes = [await once(passes) for passes in range(SWEEP)]
        # The sweep covers start-up from its first pass to past its end.
        assert not outcomes[0]
        assert outcomes[-1]

    await run_apart(scenario)


async def test_crash_loop_after_start_up_fails_the_worker_out_of_its_block(
    backend: Backend, clock: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recoverer crash-loops once the worker runs jobs: ``ActorFailed``
    comes out of the ``async with`` block, and the dying worker handed its
    leases straight back."""
    rec = Recorder(backend.store())
    await rec.work.enqueue_many([Work(i, sleep=100) for i in range(3)])
    options = backend.timing(shutdown_grace=2.0, poll_interval=0.5, recover_interval=0.5)
    options.update(INTENSITY)
    with _crash_loops("recoverer"), trio.fail_after(30):
        async with rec.app.open_worker(**options):
            await wait_for(lambda: rec.running == 3)
            monkeypatch.setattr(rec.store, CRASHING_OP, _bug)
            await trio.sleep(60)
    assert rec.running == 0
    assert await rec.states() == {JobState.READY: 3}
