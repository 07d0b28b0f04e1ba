"""Conformance checks of a chain link's successor handed over by its settle
(``Successor.lease_to``, for a store that ``leases_in_settle``): stored
already leased to the settling worker in the same fenced step, a lease like
any other from then on (renewed, fenced by its token, taken back by
recovery once it expires: a worker killed right after the settle's reply
loses nothing), and never leased when the settle does not create it.
Registered in :data:`~chronos_trio.testing.conformance.CHECKS` like the
others when ``chronos_trio.testing`` is imported; a store without the
capability passes them as they are (it ignores ``lease_to``)."""

from __future__ import annotations

import trio

from ..records._jobs import JobState, LeasedJob
from ..store._capabilities import Capability
from ..store._results import Successor
from ..store._roles import SettleKind, Settlement, Store
from .conformance import Fresh, check, job, lease, settle, stale

#: The link's continuation: one more link follows (a store reads only that
#: it carries one; what follows is the worker's ``Successor``).
_THEN = '{"seq":[{"job":{"id":"c.1","kind":"k","queue":"q"}}],"after":null}'
#: The successor's: a flow's last step (nothing follows it).
_LAST = '{"wf":"c"}'


async def _handed_over(store: Store, leased: tuple[tuple[int, LeasedJob], ...]) -> bool:
    """Whether the settle handed ``c.1`` over: a store may not (without the
    capability, or where it takes the outbox path: a Redis Cluster); then
    nothing is leased, and the successor, if made, waits ready."""
    if leased:
        assert getattr(type(store), "leases_in_settle", False), "leased without the capability"
        return True
    made = await store.get_job("c.1")
    assert made is None or made.state is JobState.READY, "not handed over: not leased"
    return False


async def _first(store: Store, job_id: str = "c.0") -> LeasedJob:
    await store.enqueue_many([job(job_id, then=_THEN)])
    [first] = await lease(store)
    return first


def _success(
    first: LeasedJob, successor_id: str = "c.1", ttl: float = 5.0, workflow: str | None = None
) -> Settlement:
    nxt = Successor(job(successor_id, then=_LAST), workflow, "w1", ttl)
    return settle(first, SettleKind.SUCCEEDED, successor=nxt)


@check(Capability.ADMIN, Capability.FLOWS)
async def check_a_handed_over_successor_is_a_lease_of_the_settling_worker(fresh: Fresh) -> None:
    store = await fresh()
    first = await _first(store)
    sent = _success(first)
    # a stale token settles nothing, and makes nothing
    refused = await store.settle([Settlement(stale(first.ref), SettleKind.SUCCEEDED,
                                             successor=sent.successor)])  # fmt: skip
    assert refused.settled == (False,) and refused.leased == ()
    assert await store.get_job("c.1") is None
    result = await store.settle([sent])
    assert result.settled == (True,)
    if not await _handed_over(store, result.leased):
        return
    assert result.continued == {0}
    [(index, handed)] = result.leased
    assert index == 0
    made = handed.job
    assert (made.id, made.kind, made.payload, made.then) == ("c.1", "k", b'{"n":1}', _LAST)
    assert made.state is JobState.LEASED and made.attempts == 1
    assert made.lease_owner == "w1" and made.lease_token == handed.token
    assert handed.token and handed.token != first.token
    assert handed.expires_at - handed.leased_at == 5.0
    stored = await store.get_job("c.1")
    assert stored is not None and stored.state is JobState.LEASED
    assert (stored.lease_token, stored.lease_owner, stored.attempts) == (handed.token, "w1", 1)
    assert stored.placement == made.placement
    assert await lease(store) == [], "a handed-over successor is never ready for another worker"
    assert (await store.renew([handed.ref], 5.0)).renewed == (True,)
    again = await store.settle([sent])
    assert again.settled == (False,) and again.leased == (), "the settle is fenced off"
    done = await store.settle([settle(handed, SettleKind.SUCCEEDED)])
    assert done.settled == (True,)
    got = await store.get_job("c.1")
    assert got is not None and got.state is JobState.SUCCEEDED


@check(Capability.ADMIN, Capability.FLOWS)
async def check_a_handed_over_successor_of_a_dead_worker_is_recovered(fresh: Fresh) -> None:
    """The worker dies after the settle's reply (kill -9): its lease of the
    successor expires, recovery takes it back, another worker runs it; the
    dead worker's token is fenced off."""
    store = await fresh()
    first = await _first(store)
    result = await store.settle([_success(first, ttl=0.2)])
    assert result.settled == (True,)
    if not await _handed_over(store, result.leased):
        return
    [(_, handed)] = result.leased
    await trio.sleep(0.3)
    assert (await store.renew([handed.ref], 5.0)).renewed == (False,)
    rec = await store.recover_expired(["q"], 10)
    assert rec.requeued == ("c.1",) and rec.dead == ()
    [new] = await lease(store)
    assert new.job.id == "c.1" and new.job.attempts == 2 and new.token != handed.token
    assert new.job.then == _LAST and new.job.payload == b'{"n":1}'
    assert (await store.settle([settle(handed, SettleKind.SUCCEEDED)])).settled == (False,)
    assert (await store.settle([settle(new, SettleKind.SUCCEEDED)])).settled == (True,)


@check(Capability.ADMIN, Capability.FLOWS)
async def check_a_successor_not_made_by_the_settle_is_not_leased(fresh: Fresh) -> None:
    """A job of the successor's ID exists already: it is left alone (not
    leased, not changed), and the settle hands nothing over."""
    store = await fresh()
    first = await _first(store)
    await store.enqueue_many([job("c.1")])
    result = await store.settle([_success(first)])
    assert result.settled == (True,) and result.leased == ()
    there = await store.get_job("c.1")
    assert there is not None and there.state is JobState.READY and there.then is None
    [leased] = await lease(store)
    assert leased.job.id == "c.1" and leased.job.attempts == 1


@check(Capability.ADMIN, Capability.FLOWS, Capability.WORKFLOW_CONTROL)
async def check_a_cancelled_workflow_s_successor_is_not_leased(fresh: Fresh) -> None:
    store = await fresh()
    await store.save_workflow("c", '{"chain":[]}', "k", 60.0)
    first = await _first(store)
    assert await store.cancel_workflow("c") is not None
    result = await store.settle([_success(first, workflow="c")])
    assert result.settled == (True,) and result.leased == () and not result.continued
    assert await store.get_job("c.1") is None


@check(Capability.ADMIN, Capability.FLOWS)
async def check_a_handed_over_successor_keeps_its_headers(fresh: Fresh) -> None:
    store = await fresh()
    first = await _first(store)
    headers = (("trace", "t-1"), ("tenant", "é"))
    nxt = Successor(job("c.1", then=_LAST, headers=headers), None, "w1", 5.0)
    result = await store.settle([settle(first, SettleKind.SUCCEEDED, successor=nxt)])
    assert result.settled == (True,)
    if not await _handed_over(store, result.leased):
        return
    [(_, handed)] = result.leased
    stored = await store.get_job("c.1")
    assert stored is not None and dict(stored.headers) == dict(headers)
    assert handed.job.headers == stored.headers, "the headers a lease of it would read"
    assert stored.then == _LAST
    assert stored.state is JobState.LEASED and stored.lease_token == handed.token
