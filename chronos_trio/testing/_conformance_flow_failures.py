"""Conformance checks of workflow failure handling (``records._workflow``:
``on_failure``, groups that allow failures): the fenced dead settle, and a
recovery that dead-letters an expired lease, put a job whose continuation
holds failure handling (it starts with ``FAILURE_MARK``) in the outbox in
the same atomic step, once; a retry, a stale token's dead settle and a dead
job without failure handling never do. ``group_status`` counts a group's
arrivals and failed members (what a batch's live counts read). Registered in
:data:`~chronos_trio.testing.conformance.CHECKS` like the others when
``chronos_trio.testing`` is imported."""

from __future__ import annotations

import trio

from ..records._flow_outcomes import DELETED_ERROR, DISCARDED_PREFIX
from ..records._jobs import JobState
from ..records._workflow import FAILED_OUTCOME, FAILURE_MARK, Arrival
from ..store._capabilities import Capability
from ..store._roles import AbortResult, GroupStatus, SettleKind, Settlement
from .conformance import Fresh, check, found, job, lease, settle, stale

#: A continuation that holds failure handling (an on_failure in effect).
FAILING = FAILURE_MARK + '{"w":"wf","job":{"id":"wf.on_failure"}}}'


@check(Capability.ADMIN, Capability.FLOWS)
async def check_a_dead_settle_with_failure_handling_fills_the_outbox_once(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many(
        [
            job("fails", then=FAILING, max_retries=3),
            job("retries", then=FAILING, max_retries=3),
            job("plain-flow", then='{"seq":[]}'),
            job("plain"),
        ]
    )
    by_id = {lj.job.id: lj for lj in await lease(store)}
    stale_dead = Settlement(stale(by_id["fails"].ref), SettleKind.DEAD, error="stale")
    assert (await store.settle([stale_dead])).settled == (False,)
    assert await store.continuations(["q"], 10) == [], "a stale dead settle queues nothing"
    assert (
        await store.settle(
            [
                settle(by_id["fails"], SettleKind.DEAD, error="boom"),
                settle(by_id["retries"], SettleKind.RETRY, error="again", retry_delay=30),
                settle(by_id["plain-flow"], SettleKind.DEAD, error="no handling"),
                settle(by_id["plain"], SettleKind.DEAD, error="plain"),
            ]
        )
    ).settled == (True,) * 4
    [entry] = await store.continuations(["q"], 10)
    assert (entry.job_id, entry.then, entry.result, entry.failed) == (
        "fails", FAILING, None, True,
    ), entry  # fmt: skip
    assert (entry.kind, entry.error, entry.attempts) == ("k", "boom", 1), entry
    assert (await found(store, "fails")).state is JobState.DEAD
    # a second settle of the same lease is refused: still one entry
    again = settle(by_id["fails"], SettleKind.DEAD, error="boom")
    assert (await store.settle([again])).settled == (False,)
    assert [c.job_id for c in await store.continuations(["q"], 10)] == ["fails"]
    await store.finish_continuations([entry])
    assert await store.continuations(["q"], 10) == []


@check(Capability.ADMIN, Capability.FLOWS)
async def check_a_dead_recovery_with_failure_handling_fills_the_outbox(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many(
        [
            job("lost", then=FAILING, max_retries=0),
            job("lost-plain", then='{"seq":[]}', max_retries=0),
        ]
    )
    await lease(store, ttl=0.2)
    await trio.sleep(0.3)
    dead = (await store.recover_expired(["q"], 10)).dead
    assert sorted(j.id for j in dead) == ["lost", "lost-plain"]
    [entry] = await store.continuations(["q"], 10)
    assert (entry.job_id, entry.failed, entry.attempts) == ("lost", True, 1), entry
    assert "lease expired" in entry.error, entry


@check(Capability.ADMIN, Capability.FLOWS)
async def check_a_dead_entry_re_run_before_it_is_read_leaves_the_outbox(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("again", then=FAILING)])
    [leased] = await lease(store)
    assert (await store.settle([settle(leased, SettleKind.DEAD, error="boom")])).settled == (True,)
    assert await store.run_now("again")
    # re-run: its next end puts it back, so nothing is continued from this one
    assert await store.continuations(["q"], 10) == []


@check(Capability.ADMIN, Capability.FLOWS)
async def check_a_deleted_workflow_job_keeps_its_place_in_its_flow(fresh: Fresh) -> None:
    """Deleting (``delete_job``, ``purge_queue``) a job that never ended
    whose continuation holds failure handling puts it in the outbox as
    failed (``DELETED_ERROR``) in the same step; an end of a deleted job
    still in the outbox stays there, whole; a deleted job without failure
    handling, or one already continued, leaves nothing."""
    store = await fresh()
    await store.enqueue_many(
        [
            job("ran", then='{"seq":[]}'),
            job("failed", then=FAILING),
            job("waits", then=FAILING, delay=3600),
            job("plain-flow", then='{"seq":[]}', delay=3600),
        ]
    )
    by_id = {lj.job.id: lj for lj in await lease(store)}
    assert sorted(by_id) == ["failed", "ran"], by_id
    settled = await store.settle(
        [
            settle(by_id["ran"], SettleKind.SUCCEEDED, result=b"7", result_ttl=60),
            settle(by_id["failed"], SettleKind.DEAD, error="boom"),
        ]
    )
    assert settled.settled == (True, True)
    for job_id in ("ran", "failed", "waits", "plain-flow"):
        assert await store.delete_job(job_id), job_id
        assert await store.get_job(job_id) is None, f"{job_id} is deleted"
    await store.enqueue_many([job("purged", queue="p", then=FAILING, delay=3600)])
    assert (await store.purge_queue("p", limit=10)).count == 1
    entries = {c.job_id: c for c in await store.continuations(["q", "p"], 10)}
    assert sorted(entries) == ["failed", "purged", "ran", "waits"], entries
    ran, failed, waits, purged = (entries[k] for k in ("ran", "failed", "waits", "purged"))
    assert (ran.then, ran.result, ran.failed) == ('{"seq":[]}', b"7", False), ran
    assert (failed.failed, failed.error, failed.attempts) == (True, "boom", 1), failed
    for entry in (waits, purged):
        assert (entry.then, entry.failed, entry.kind) == (FAILING, True, "k"), entry
        assert (entry.error, entry.attempts) == (DELETED_ERROR, 0), entry
    assert purged.queue == "p"
    # read again until finished: the same entries
    again = await store.continuations(["q", "p"], 10)
    assert sorted(c.job_id for c in again) == sorted(entries)
    await store.finish_continuations(again)
    assert await store.continuations(["q", "p"], 10) == []
    # a deleted job whose end was continued already leaves nothing more
    await store.enqueue_many([job("done", then=FAILING)])
    [leased] = await lease(store)
    assert (await store.settle([settle(leased, SettleKind.DEAD, error="x")])).settled == (True,)
    await store.finish_continuations(await store.continuations(["q"], 10))
    assert await store.delete_job("done")
    assert await store.continuations(["q"], 10) == []


@check(Capability.ADMIN, Capability.ABORT, Capability.FLOWS)
async def check_an_aborted_or_discarded_workflow_job_ends_failed_in_its_flow(
    fresh: Fresh,
) -> None:
    """A workflow job whose continuation holds failure handling goes to the
    outbox as failed in the step that aborts it (waiting: ``abort``;
    running: its fenced settle, ABORTED or a retry an abort overrides; its
    lease expired: recovery), error the abort's, or that discards it (a
    DISCARD settle), error ``discarded: <its error>``; a stale token's
    settle, and a job without failure handling, queue nothing."""
    store = await fresh()
    await store.enqueue_many(
        [
            job("waits", then=FAILING, delay=3600),
            job("waits-plain", then='{"seq":[]}', delay=3600),
            job("runs", then=FAILING, max_retries=3),
            job("retried", then=FAILING, max_retries=3),
            job("tossed", then=FAILING),
            job("tossed-plain", then='{"seq":[]}'),
        ]
    )
    assert await store.abort("waits", reason="not needed") is AbortResult.ABORTED
    assert await store.abort("waits-plain") is AbortResult.ABORTED
    by_id = {lj.job.id: lj for lj in await lease(store)}
    for job_id in ("runs", "retried"):
        assert await store.abort(job_id, reason="stop") is AbortResult.FLAGGED
    stale_abort = Settlement(stale(by_id["runs"].ref), SettleKind.ABORTED, error="stale")
    assert (await store.settle([stale_abort])).settled == (False,)
    settled = await store.settle(
        [
            settle(by_id["runs"], SettleKind.ABORTED, error="aborted"),
            settle(by_id["retried"], SettleKind.RETRY, error="again", retry_delay=30),
            settle(by_id["tossed"], SettleKind.DISCARD, error="SkipRetry: no"),
            settle(by_id["tossed-plain"], SettleKind.DISCARD, error="no"),
        ]
    )
    assert settled.settled == (True,) * 4
    assert (await found(store, "runs")).state is JobState.ABORTED
    assert (await found(store, "retried")).state is JobState.ABORTED
    entries = {c.job_id: c for c in await store.continuations(["q"], 10)}
    assert sorted(entries) == ["retried", "runs", "tossed", "waits"], entries
    for job_id, error, attempts in (
        ("waits", "aborted: not needed", 0),
        ("runs", "aborted: stop", 1),
        ("retried", "aborted: stop", 1),
        ("tossed", DISCARDED_PREFIX + "SkipRetry: no", 1),
    ):
        entry = entries[job_id]
        assert (entry.then, entry.result, entry.failed, entry.kind) == (
            FAILING, None, True, "k",
        ), entry  # fmt: skip
        assert (entry.error, entry.attempts) == (error, attempts), entry
    # read again until finished: the same entries; then none
    again = await store.continuations(["q"], 10)
    assert sorted(c.job_id for c in again) == sorted(entries)
    await store.finish_continuations(again)
    assert await store.continuations(["q"], 10) == []
    # an abort asked, then the lease expired: recovery ends it failed too
    await store.enqueue_many([job("lost", then=FAILING, max_retries=3)])
    await lease(store, ttl=0.2)
    assert await store.abort("lost", reason="gone") is AbortResult.FLAGGED
    await trio.sleep(0.3)
    assert [j.id for j in (await store.recover_expired(["q"], 10)).aborted] == ["lost"]
    [entry] = await store.continuations(["q"], 10)
    assert (entry.job_id, entry.failed, entry.error) == ("lost", True, "aborted: gone"), entry


@check(Capability.ADMIN, Capability.ABORT, Capability.FLOWS)
async def check_a_trimmed_workflow_job_keeps_its_end_in_the_outbox(fresh: Fresh) -> None:
    """``trim`` of a finished workflow job (dead, aborted) whose end is still
    in the outbox (not continued yet) leaves that end readable: the
    continuer handles it all the same (the job may stay until then)."""
    store = await fresh()
    await store.enqueue_many(
        [job("failed", then=FAILING), job("aborted", then=FAILING, delay=3600)]
    )
    [leased] = await lease(store)
    assert (await store.settle([settle(leased, SettleKind.DEAD, error="boom")])).settled == (True,)
    assert await store.abort("aborted", reason="x") is AbortResult.ABORTED
    await store.trim(["q"], dead_max_age=None, dead_max_count=0, keep_succeeded=None)
    entries = {c.job_id: c for c in await store.continuations(["q"], 10)}
    assert sorted(entries) == ["aborted", "failed"], entries
    assert (entries["failed"].error, entries["aborted"].error) == ("boom", "aborted: x")
    await store.finish_continuations(list(entries.values()))
    assert await store.continuations(["q"], 10) == []
    # handled: the next trim takes what is left
    await store.trim(["q"], dead_max_age=None, dead_max_count=0, keep_succeeded=None)
    for job_id in ("failed", "aborted"):
        assert await store.get_job(job_id) is None, job_id


@check(Capability.FLOWS)
async def check_group_status_counts_arrivals_and_failures(fresh: Fresh) -> None:
    store = await fresh()
    failed = FAILED_OUTCOME + b',"result":null,"error":"boom","job_id":"b.1"}'
    ok = b'{"ok":true,"result":1,"error":null,"job_id":"b.0"}'
    assert await store.group_status(["b", "none"]) == [GroupStatus(), GroupStatus()]
    await store.group_arrive([Arrival("b", 1, 4, failed, None)], 60.0)
    await store.group_arrive([Arrival("b", 0, 4, ok, None), Arrival("b", 3, 4, None, None)], 60.0)
    # an arrival repeated changes nothing: member 1 stays failed
    await store.group_arrive([Arrival("b", 1, 4, ok, None), Arrival("c", 0, 1, failed, None)], 60)
    got = await store.group_status(["b", "c", "none"])
    assert got == [GroupStatus(3, (1,)), GroupStatus(1, (0,)), GroupStatus()], got
    assert await store.group_status([]) == []
    # a group past its ttl has none arrived
    await store.group_arrive([Arrival("short", 0, 2, failed, None)], 0.2)
    await trio.sleep(0.3)
    assert await store.group_status(["short"]) == [GroupStatus()]


@check(Capability.ADMIN, Capability.FLOWS, Capability.CHECK)
async def check_a_dead_job_waiting_in_the_outbox_is_no_finding(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("fails", then=FAILING), job("ok", then='{"seq":[]}')])
    by_id = {lj.job.id: lj for lj in await lease(store)}
    await store.settle(
        [
            settle(by_id["fails"], SettleKind.DEAD, error="boom"),
            settle(by_id["ok"], SettleKind.SUCCEEDED),
        ]
    )
    assert sorted(c.job_id for c in await store.continuations(["q"], 10)) == ["fails", "ok"]
    report = await store.check(repair=True)
    assert report.findings == () and report.ok, report.findings
    # the checker's repair took nothing out of the outbox
    assert sorted(c.job_id for c in await store.continuations(["q"], 10)) == ["fails", "ok"]
