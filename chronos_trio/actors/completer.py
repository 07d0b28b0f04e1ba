"""completer: writes decided outcomes to the store in batches, then frees
their in-flight slots and publishes what the store confirmed.

Settlement is fenced by each lease's token, so a lease lost meanwhile is
reported and changes nothing. While the store is unreachable the batch is
kept and retried with backoff; nothing is dropped. Nothing here awaits user
code: hooks and other subscribers run in the notifier.

One settle is in flight at a time, but for chain links handed over
(``Successor.lease_to``): their successors come back in the reply and run
here, so a chain's next link cannot start before its predecessor's settle
returns, and links in flight together would move in lockstep (the worker
idle while the store settles them, the store idle while the worker runs
the next ones). So while the settle in flight asks for hand-overs a second
may go out (:data:`SETTLES_IN_FLIGHT`), and a batch of at least
2 * :data:`HALF_AT_LEAST` links to hand over, claimed with nothing in
flight, goes as two settles at once: the worker runs the first half's
successors while the store settles the second, and each half's next
batch goes out while the other's settle is in flight. Each settle is
atomic and fenced as ever; two in flight hold different leases. A store
that takes the asks but hands nothing over (a Redis Cluster) gets its
settles one at a time again from the first reply that says so.
"""

from __future__ import annotations

import logging
from collections.abc import Container, Iterable

import attrs
import trio

from ..records._jobs import JobState, LeasedJob, NewJob
from ..records._log import log_event, log_job_event
from ..records._workflow import chain_successor
from ..runtime._backoff import Backoff
from ..runtime._events import JobAbortApplied, JobReleased, JobRetried, JobSucceeded, LeaseLost
from ..runtime._inflight import Entry, Stage
from ..runtime._state import Runtime, log
from ..store import SettleKind, Settlement, Successor


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    backoff = Backoff(log, "completer")
    table = rt.table
    task_status.started()
    # A previous incarnation died holding these: settle them again (a second
    # settle of an applied outcome is fenced off harmlessly).
    orphans = table.in_stage(Stage.SETTLING)
    if orphans:
        await _settle(rt, orphans, backoff)
    limit = rt.config.batch_size
    lanes = _Lanes()
    async with trio.open_nursery() as nursery:
        while True:
            await lanes.wait_room()
            await table.wait_decided()
            # One scheduling round lets executors that finished in the same
            # tick add their outcomes, so a burst costs one store call, not
            # one each.
            await trio.lowlevel.checkpoint()
            batch = table.claim_decided(limit)
            to_store, outcomes = _prepared(rt, batch)
            hands = _hand_overs(outcomes)
            if not hands or not lanes.store_hands_over:
                # nothing to hand over, or a store that hands nothing over
                # (see _Lanes): sent here, the next claim after it
                handed = await _send(rt, batch, to_store, outcomes, backoff)
                if hands:
                    lanes.store_hands_over = handed > 0
                continue
            for part in _parts(batch, to_store, outcomes, hands, lanes.idle):
                lanes.sent(part.hands_over)
                nursery.start_soon(_send_part, rt, part, backoff, lanes)


class _Part:
    """A settle call's share of a claimed batch: its entries, those with
    an outcome to store, their settlements, and whether any of them asks
    for its successor leased (``Successor.lease_to``)."""

    __slots__ = ("batch", "hands_over", "outcomes", "to_store")

    def __init__(
        self, batch: list[Entry], to_store: list[Entry], outcomes: list[Settlement]
    ) -> None:
        self.batch = batch
        self.to_store = to_store
        self.outcomes = outcomes
        self.hands_over = _hand_overs(outcomes) > 0


class _Lanes:
    """The completer's settle calls in flight: at most one, or
    :data:`SETTLES_IN_FLIGHT` while those in flight hand links over."""

    __slots__ = ("_changed", "_handing", "in_flight", "store_hands_over")

    def __init__(self) -> None:
        self.in_flight = 0
        self._handing = 0  # of them, those that ask for hand-overs
        self._changed = trio.Event()
        #: Whether the last settle that asked for hand-overs got any: a
        #: store that leases in settle only on one node (Redis: not on a
        #: Cluster) takes the ask and hands nothing over; then the asks
        #: count for nothing here (one settle at a time, none split) until
        #: a settle hands some over again.
        self.store_hands_over = True

    @property
    def idle(self) -> bool:
        return self.in_flight == 0

    def _room(self) -> bool:
        n = self.in_flight
        return n == 0 or (n < SETTLES_IN_FLIGHT and self._handing == n)

    async def wait_room(self) -> None:
        while not self._room():
            self._changed = trio.Event()
            await self._changed.wait()

    def sent(self, hands_over: bool) -> None:
        self.in_flight += 1
        self._handing += hands_over

    def returned(self, hands_over: bool, handed: int = 0) -> None:
        self.in_flight -= 1
        self._handing -= hands_over
        if hands_over:
            self.store_hands_over = handed > 0
        self._changed.set()


#: Settle calls in flight at once while they hand chain links over (see
#: the module's docstring); otherwise one.
SETTLES_IN_FLIGHT = 2
#: A batch claimed with no settle in flight goes as two settles (of half
#: its entries each) when it holds at least twice this many links to hand
#: over.
HALF_AT_LEAST = 8


def _hand_overs(outcomes: list[Settlement]) -> int:
    """How many of ``outcomes`` ask for their successor leased to this
    worker (``Successor.lease_to``)."""
    return sum(1 for o in outcomes if o.successor is not None and o.successor.lease_to)


def _parts(
    batch: list[Entry],
    to_store: list[Entry],
    outcomes: list[Settlement],
    hands: int,
    idle: bool,
) -> list[_Part]:
    """The settle calls ``batch`` goes as, ``hands`` of its ``outcomes``
    asking for hand-over: one, or two halves (by entries) when ``idle``
    (nothing in flight) and ``hands`` is at least 2 * :data:`HALF_AT_LEAST`."""
    if not idle or hands < 2 * HALF_AT_LEAST or len(to_store) != len(batch):
        return [_Part(batch, to_store, outcomes)]
    half = len(batch) // 2
    return [
        _Part(batch[:half], to_store[:half], outcomes[:half]),
        _Part(batch[half:], to_store[half:], outcomes[half:]),
    ]


async def _send_part(rt: Runtime, part: _Part, backoff: Backoff, lanes: _Lanes) -> None:
    handed = 0
    try:
        handed = await _send(rt, part.batch, part.to_store, part.outcomes, backoff)
    finally:
        lanes.returned(part.hands_over, handed)


def _prepared(rt: Runtime, batch: list[Entry]) -> tuple[list[Entry], list[Settlement]]:
    """The entries of ``batch`` with an outcome to store, and the
    settlements sent for them (a chain link's with its successor)."""
    to_store = [e for e in batch if e.outcome is not None]
    if not to_store:
        return to_store, []
    # a success of a job without a continuation goes as it is (no call
    # per job on the hot path)
    continues = getattr(type(rt.store), "continues_in_settle", False)
    taker = _taker_of(rt) if continues else None
    outcomes: list[Settlement] = [
        e.outcome  # type: ignore[misc]
        if e.outcome.kind is _SUCCEEDED and e.leased.job.then is None  # type: ignore[union-attr]
        else _stamped(e, continues, taker)
        for e in to_store
    ]
    return to_store, outcomes


async def _settle(rt: Runtime, batch: list[Entry], backoff: Backoff) -> None:
    to_store, outcomes = _prepared(rt, batch)
    await _send(rt, batch, to_store, outcomes, backoff)


async def _send(
    rt: Runtime,
    batch: list[Entry],
    to_store: list[Entry],
    outcomes: list[Settlement],
    backoff: Backoff,
) -> int:
    """Settle ``outcomes`` (of ``to_store``, within ``batch``), free the
    batch's slots and run what the store handed over; returns how many."""
    handed: tuple[tuple[int, LeasedJob], ...] = ()
    asked_at = 0.0
    if to_store:
        asked_at = trio.current_time()
        result = await backoff.call(rt.store.settle, outcomes)
        handed = result.leased
        aside = rt.report_aside(result.aside)
        # A refusal because the store set the record aside (damaged, or of a
        # newer format) is not a lost lease: it was reported just above.
        aside_ids = (
            {job.id for job in aside.dead} | {e.job_id for e in aside.newer} if aside else set()
        )
        debug = log.isEnabledFor(logging.DEBUG)
        # Settlements the store applied as aborted: ABORTED ones, and a retry or
        # release of a job an abort was asked for (the abort wins in the store).
        aborted = result.aborted
        # UNCLAIMED settlements the store dead-lettered (past their grace)
        unclaimed_dead = result.unclaimed_dead
        for i, (entry, ok) in enumerate(zip(to_store, result.settled, strict=True)):
            if not ok and entry.leased.job.id in aside_ids:
                continue
            _account(rt, entry, ok, debug, i in aborted, i in unclaimed_dead)
    rt.table.settled(batch)
    if handed:
        runs = [to_store[i].handovers + 1 for i, _ in handed]
        await _take_over(rt, [leased for _, leased in handed], asked_at, runs)
    return len(handed)


async def _take_over(
    rt: Runtime, batch: list[LeasedJob], asked_at: float, runs: list[int]
) -> list[Entry]:
    """Run the successors the settle stored leased to this worker as the
    leaser runs its leases: they enter the table in the slots their
    predecessors just gave back (no checkpoint since: nobody took them),
    each with its chain's run of links taken over (``runs``), then the run
    queue. A worker that began to stop meanwhile releases them at once
    (``InFlight.admit``): the completer settles that, and they wait ready
    for the next worker. Returns their entries."""
    entries = rt.admit(batch, asked_at)
    for entry, run in zip(entries, runs, strict=True):
        entry.handovers = run
    await rt.dispatch(entries)
    return entries


def _taker_of(rt: Runtime) -> _Taker | None:
    """Who asks the store for the successors of this batch's chain links
    leased (``Successor.lease_to``), or None: a store that
    ``leases_in_settle``, a worker that is not stopping (its table not
    draining: a lease taken then would go straight back) and does not
    count its leases (``max_jobs``: it leases no more than it runs)."""
    if not getattr(type(rt.store), "leases_in_settle", False):
        return None
    cfg = rt.config
    if rt.table.draining or cfg.max_jobs is not None:
        return None
    return _Taker(cfg.worker_id, cfg.lease_duration, cfg.queue_names, rt.registry.tasks)


class _Taker:
    """Whether this worker takes a chain link's successor over from the
    settle (``Successor.lease_to``): it has a handler for its kind and
    consumes its queue (a worker never leases a queue it was not given,
    and sends back a kind it cannot run)."""

    __slots__ = ("duration", "queues", "tasks", "worker_id")

    def __init__(
        self, worker_id: str, duration: float, queues: Iterable[str], tasks: Container[str]
    ) -> None:
        self.worker_id = worker_id
        self.duration = float(duration)
        self.queues = frozenset(queues)
        self.tasks = tasks

    def takes(self, job: NewJob) -> bool:
        return job.kind in self.tasks and job.queue in self.queues


_SUCCEEDED = SettleKind.SUCCEEDED

#: How many links of a chain in a row one worker takes over from its own
#: settles (``Successor.lease_to``): the next one is stored ready, behind
#: the jobs already waiting in its queue, so a long chain does not keep
#: its worker's slot from them (a handed-over link jumps the queue).
HANDOVER_RUN = 32


def _stamped(entry: Entry, continues: bool = False, taker: _Taker | None = None) -> Settlement:
    """The entry's outcome as the store is sent it: one that does not
    succeed carries its lease's start, for the job's attempt history (a
    success goes as it is: its attempt is derived from the record). The
    success of a chain link, to a store that ``continues_in_settle``,
    carries the link's successor (:func:`_successor`), asked leased to
    this worker when ``taker`` takes it."""
    outcome = entry.outcome
    assert outcome is not None
    if outcome.kind is _SUCCEEDED:
        if not continues:
            return outcome
        if taker is not None and entry.handovers >= HANDOVER_RUN:
            taker = None  # its chain waits its turn in the queue once
        return _successor(entry.leased.job.then, outcome, taker)
    return attrs.evolve(outcome, started=entry.leased.leased_at)


def _successor(then: str | None, outcome: Settlement, taker: _Taker | None = None) -> Settlement:
    """``outcome`` (a success) with its job's successor, when the job is a
    chain link whose next step is one ordinary job due now
    (``records._workflow.chain_successor``, on the result the settle keeps:
    what the continuer would read): the store may enqueue it in the settle
    itself, leased to this worker when ``taker`` takes it (its kind and
    queue). Anything else (a group member, a graph join, a damaged
    continuation) goes as it is, to the outbox path."""
    if then is None:
        return outcome
    kept = outcome.result if outcome.result is not None and outcome.result_ttl > 0 else None
    steps = chain_successor(then, kept, outcome.lease.job_id)
    if steps is None:
        return outcome
    job = steps.jobs[0]
    if taker is not None and taker.takes(job):
        successor = Successor(job, steps.workflow, taker.worker_id, taker.duration)
    else:
        successor = Successor(job, steps.workflow)
    return _with_successor(outcome, successor)


def _with_successor(outcome: Settlement, successor: Successor) -> Settlement:
    """``outcome`` with ``successor``: ``attrs.evolve``'s result, made by the
    constructor (every chain link pays for it; evolve costs about twice as
    much). tests/test_chain_links.py checks it names every field."""
    return Settlement(
        outcome.lease, outcome.kind, outcome.error, outcome.retry_delay, outcome.retain_for,
        outcome.result, outcome.result_ttl, outcome.unclaimed_grace, outcome.started, successor,
    )  # fmt: skip


def _account(
    rt: Runtime,
    entry: Entry,
    ok: bool,
    debug: bool,
    aborted: bool = False,
    unclaimed_dead: bool = False,
) -> None:
    job = entry.leased.job
    outcome = entry.outcome
    assert outcome is not None
    kind = outcome.kind
    events = rt.events
    if not ok:
        rt.counters.lost += 1
        log_event(
            log,
            logging.WARNING,
            "outcome rejected: lease no longer held",
            outcome=kind,
            job=job.id,
            kind=job.kind,
        )
        events.publish(LeaseLost(job))
        return
    duration = _duration(entry)
    tally = rt.aggregates
    if aborted or kind is SettleKind.ABORTED:
        rt.counters.aborted += 1
        log_job_event(
            log,
            logging.INFO,
            "aborted",
            job,
            called_off=kind,
        )
        if events.wants(JobAbortApplied):
            events.publish(
                JobAbortApplied(job, False, duration, _started(entry), entry.leased.leased_at)
            )
    elif kind is SettleKind.SUCCEEDED:
        rt.counters.succeeded += 1
        if tally is not None:
            tally.succeeded(job.queue, job.kind, duration)
        if debug:
            log_job_event(
                log,
                logging.DEBUG,
                "succeeded",
                job,
            )
        if events.wants(JobSucceeded):
            events.publish(
                JobSucceeded(job, duration or 0.0, _started(entry), entry.leased.leased_at)
            )
    elif kind is SettleKind.RETRY or kind is SettleKind.DEFER:
        rt.counters.retried += 1
        if tally is not None:
            tally.retried(job.queue, job.kind, duration)
        log_event(
            log,
            logging.INFO,
            "retry" if kind is SettleKind.RETRY else "deferred (attempt not counted)",
            job=job.id,
            kind=job.kind,
            queue=job.queue,
            attempt=job.attempts,
            delay=round(outcome.retry_delay, 3),
            error=outcome.error.splitlines()[0] if outcome.error else "",
        )
        if events.wants(JobRetried):
            events.publish(
                JobRetried(
                    job,
                    duration or 0.0,
                    outcome.error,
                    outcome.retry_delay,
                    _started(entry),
                    entry.leased.leased_at,
                )
            )
    elif kind is SettleKind.UNCLAIMED and not unclaimed_dead:
        rt.counters.unclaimed += 1  # sent back for a worker with its handler (warned then)
    elif kind is SettleKind.DEAD or kind is SettleKind.DISCARD or unclaimed_dead:
        if kind is SettleKind.DISCARD:
            rt.counters.discarded += 1
        # The job as the store now holds it (or, discarded, as it ended),
        # without another round trip.
        dead = attrs.evolve(
            job, state=JobState.DEAD, last_error=outcome.error, lease_token="", lease_owner=""
        )
        if unclaimed_dead:  # it never ran: its attempt was given back
            dead = attrs.evolve(dead, attempts=max(0, job.attempts - 1))
        rt.report_dead(
            dead,
            recovered=False,
            duration=duration,
            started_at=_started(entry),
            leased_at=entry.leased.leased_at,
        )
    else:
        rt.counters.released += 1
        if events.wants(JobReleased):
            events.publish(JobReleased(job))


def _started(entry: Entry) -> float | None:
    """When the entry's handler started, on the store's clock: the lease's
    start (as the store reported it) plus the Trio time from the lease's
    admission to the start (computed only for a subscriber)."""
    if entry.started_at is None or entry.admitted_at is None:
        return None
    return entry.leased.leased_at + (entry.started_at - entry.admitted_at)


def _duration(entry: Entry) -> float | None:
    if entry.started_at is None or entry.decided_at is None:
        return None
    return entry.decided_at - entry.started_at
