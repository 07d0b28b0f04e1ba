"""The in-flight table owns every move of a leased job: random interleavings
of its transitions never settle a job twice, never forget one, and every
illegal move raises (hypothesis' stateful testing drives the table)."""

from __future__ import annotations

import pytest
import trio
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from chronos_trio import Job, JobState, LeasedJob
from chronos_trio.runtime import Entry, IllegalTransition, InFlight, Stage
from chronos_trio.runtime._inflight import lease_deadline
from chronos_trio.store import SettleKind, Settlement

CAPACITY = 6
QUEUE = 3


def leased(n: int) -> LeasedJob:
    return LeasedJob(Job(f"j{n}", "q", "k", b"", 0.0, JobState.LEASED), f"t{n}", 0.0, 0.0)


class TableMachine(RuleBasedStateMachine):
    """A model of each job's stage next to the real table; every rule is one
    actor's move, applied when legal, and checked to raise when not."""

    def __init__(self) -> None:
        super().__init__()
        self.table = InFlight(CAPACITY, QUEUE, clock=lambda: 0.0)
        self.scope = trio.CancelScope()
        self.model: dict[str, Stage] = {}
        self.entries: dict[str, Entry] = {}
        self.settled: list[str] = []
        self.next_id = 0
        self.decided_order: list[str] = []
        self.run_queue: list[str] = []  # the model's run queue, FIFO

    # -- leaser ------------------------------------------------------------------
    @rule(count=st.integers(1, 3))
    def admit(self, count: int) -> None:
        batch = [leased(self.next_id + i) for i in range(count)]
        if count > self.table.free:
            with pytest.raises(IllegalTransition):
                self.table.admit(batch)
            return
        self.next_id += count
        for entry in self.table.admit(batch):
            self.entries[entry.token] = entry
            if self.table.draining:
                self.model[entry.token] = Stage.DECIDED
                self.decided_order.append(entry.token)
            else:
                self.model[entry.token] = Stage.LEASED

    @rule(data=st.data())
    def dispatch(self, data: st.DataObject) -> None:
        if not self.entries:
            return
        token = data.draw(st.sampled_from(sorted(self.entries)))
        entry = self.entries[token]
        stage = self.model.get(token)
        if stage is Stage.LEASED:
            queued = sum(1 for s in self.model.values() if s is Stage.QUEUED)
            ok = self.table.dispatch_nowait(entry)
            assert ok == (queued < QUEUE)
            if ok:
                self.model[token] = Stage.QUEUED
                self.run_queue.append(token)
        elif stage is Stage.DECIDED and self.table.draining:
            assert self.table.dispatch_nowait(entry)  # released meanwhile: skipped
        else:
            with pytest.raises(IllegalTransition):
                self.table.dispatch_nowait(entry)

    # -- executors ---------------------------------------------------------------
    @rule()
    def start_next(self) -> None:
        entry = self.table.start_next_nowait(self.scope)
        # The model: the first queued entry runs; lost ones (and all, while
        # draining) are decided on the way.
        while self.run_queue:
            first = self.run_queue.pop(0)
            if self.entries[first].lost or self.table.draining:
                self.model[first] = Stage.DECIDED
                self.decided_order.append(first)
                continue
            assert entry is not None and entry.token == first
            self.model[first] = Stage.RUNNING
            assert entry.cancel_scope is self.scope
            return
        assert entry is None

    @rule(data=st.data(), kind=st.sampled_from(list(SettleKind)))
    def decide(self, data: st.DataObject, kind: SettleKind) -> None:
        if not self.entries:
            return
        token = data.draw(st.sampled_from(sorted(self.entries)))
        entry = self.entries[token]
        outcome = Settlement(entry.leased.ref, kind)
        if self.model.get(token) is Stage.RUNNING:
            self.table.decide(entry, outcome)
            self.model[token] = Stage.DECIDED
            self.decided_order.append(token)
            assert entry.outcome == outcome and entry.cancel_scope is None
        else:
            with pytest.raises(IllegalTransition):
                self.table.decide(entry, outcome)

    @rule()
    def executors_crash(self) -> None:
        running = [t for t, s in self.model.items() if s is Stage.RUNNING]
        assert self.table.release_running() == len(running)
        for token in running:
            self.model[token] = Stage.DECIDED
            self.decided_order.append(token)
            entry = self.entries[token]
            if not entry.lost:
                assert entry.outcome is not None and entry.outcome.kind is SettleKind.RELEASE

    # -- heartbeater -------------------------------------------------------------
    @rule(data=st.data())
    def lose(self, data: st.DataObject) -> None:
        if not self.entries:
            return
        token = data.draw(st.sampled_from(sorted(self.entries)))
        entry = self.entries[token]
        stage = self.model.get(token)
        expect = stage is not None and stage is not Stage.SETTLING and not entry.lost
        assert self.table.mark_lost(entry) == expect
        if expect:
            assert entry.lost

    # -- completer ---------------------------------------------------------------
    @rule(limit=st.integers(1, 4))
    def claim_and_settle(self, limit: int) -> None:
        claimed = self.table.claim_decided(limit)
        unclaimed = [t for t in self.decided_order if self.model.get(t) is Stage.DECIDED]
        # (decided_order may list a token twice only if it was decided twice: never)
        assert [e.token for e in claimed] == unclaimed[:limit]
        for entry in claimed:
            self.model[entry.token] = Stage.SETTLING
        self.table.settled(claimed)
        for entry in claimed:
            assert entry.token not in self.settled, "settled twice"
            self.settled.append(entry.token)
            del self.model[entry.token]
        with pytest.raises(IllegalTransition):
            if claimed:
                self.table.settled(claimed)  # a second settle of the same batch
            else:
                raise IllegalTransition("nothing claimed")

    # -- shutdown ------------------------------------------------------------------
    @precondition(lambda self: not self.table.draining)
    @rule()
    def shutdown(self) -> None:
        unstarted = [t for t, s in self.model.items() if s in (Stage.LEASED, Stage.QUEUED)]
        assert self.table.release_unstarted() == len(unstarted)
        for token in unstarted:
            self.model[token] = Stage.DECIDED
            self.decided_order.append(token)
        self.run_queue.clear()
        assert self.table.queued == 0

    # -- invariants -----------------------------------------------------------------
    @invariant()
    def table_matches_model(self) -> None:
        assert len(self.table) == len(self.model)
        for token, stage in self.model.items():
            entry = self.table.get(token)
            assert entry is not None, f"{token} forgotten"
            assert entry.stage is stage, (token, entry.stage, stage)
        assert self.table.running == sum(1 for s in self.model.values() if s is Stage.RUNNING)
        assert self.table.queued == sum(1 for s in self.model.values() if s is Stage.QUEUED)
        assert self.table.free == CAPACITY - len(self.model)
        assert len(self.settled) == len(set(self.settled))

    def teardown(self) -> None:
        # Drain everything: every admitted job ends settled exactly once.
        self.table.release_unstarted()
        self.table.release_running()
        while batch := self.table.claim_decided(100):
            self.table.settled(batch)
            self.settled += [e.token for e in batch]
        assert len(self.table) == 0
        assert sorted(self.settled) == sorted(f"t{n}" for n in range(self.next_id))
        assert len(self.settled) == len(set(self.settled))


TableMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
test_in_flight_transitions = TableMachine.TestCase


def test_a_lost_entry_that_never_ran_is_decided_with_nothing_to_write() -> None:
    table = InFlight(4, 4, clock=lambda: 0.0)
    [entry] = table.admit([leased(1)])
    assert table.dispatch_nowait(entry)
    assert table.mark_lost(entry)
    assert table.start_next_nowait(trio.CancelScope()) is None
    assert entry.stage is Stage.DECIDED and entry.outcome is None
    [claimed] = table.claim_decided(10)
    assert claimed is entry


def test_losing_a_running_lease_cancels_its_scope_once() -> None:
    table = InFlight(4, 4, clock=lambda: 0.0)
    [entry] = table.admit([leased(1)])
    table.dispatch_nowait(entry)
    scope = trio.CancelScope()
    assert table.start_next_nowait(scope) is entry
    assert table.mark_lost(entry) and scope.cancel_called
    assert not table.mark_lost(entry)  # already lost


def test_leases_admitted_while_draining_go_straight_back() -> None:
    table = InFlight(4, 4, clock=lambda: 0.0)
    table.release_unstarted()
    [entry] = table.admit([leased(1)])
    assert entry.stage is Stage.DECIDED
    assert entry.outcome is not None and entry.outcome.kind is SettleKind.RELEASE
    assert table.dispatch_nowait(entry)  # the leaser's queueing is then a no-op
    assert table.queued == 0


def test_an_entry_past_its_lease_deadline_never_starts() -> None:
    now = [100.0]
    table = InFlight(4, 4, clock=lambda: now[0])
    [fresh, stale] = table.admit([leased(1), leased(2)], deadline=105.0)
    table.renewed(fresh, 120.0)
    for entry in (stale, fresh):
        assert table.dispatch_nowait(entry)
    now[0] = 110.0  # e.g. the process was paused: stale's lease may be gone
    assert table.overdue() == [stale]
    started = table.start_next_nowait(trio.CancelScope())
    assert started is fresh  # stale was skipped on the way
    assert stale.lost and stale.stage is Stage.DECIDED and stale.outcome is None
    assert table.overdue() == []


def test_a_running_handler_s_scope_carries_its_lease_deadline() -> None:
    """The executor's scope gets the lease's deadline when the entry starts,
    and each renewal moves it; a renewal that comes back after the deadline
    passed on the worker's clock changes nothing (the handler may have been
    cancelled for it already)."""
    now = [100.0]
    table = InFlight(4, 4, clock=lambda: now[0])
    [entry] = table.admit([leased(1)], deadline=105.0)
    table.dispatch_nowait(entry)
    scope = trio.CancelScope()
    assert table.start_next_nowait(scope) is entry
    assert scope.deadline == 105.0
    table.renewed(entry, 104.0)  # an older renewal's late reply: never earlier
    assert entry.deadline == scope.deadline == 105.0
    table.renewed(entry, 120.0)
    assert entry.deadline == scope.deadline == 120.0
    now[0] = 120.0
    table.renewed(entry, 130.0)
    assert entry.deadline == scope.deadline == 120.0
    assert table.overdue() == [entry]


def test_lease_deadlines_are_quantized_below_the_safety_margin() -> None:
    lease = 30.0
    for asked in (0.0, 12.34, 1e6 + 0.123):
        deadline = lease_deadline(asked, lease)
        assert asked + 0.94 * lease <= deadline <= asked + 0.95 * lease
    # leases asked a little apart share one deadline (the executor's scope
    # keeps it from one job to the next)
    assert lease_deadline(100.0, lease) == lease_deadline(100.05, lease)
