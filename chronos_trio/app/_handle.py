"""Job handles: what ``enqueue`` returns and ``app.job(job_id)`` makes, to
read a job's status and wait for its typed result."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import attrs
import trio

from ..records._attrs_methods import fields_eq, fields_hash, fields_repr
from ..records._errors import JobAborted, JobFailed, JobNotFound, ResultTimeout
from ..records._flow_outcomes import MemberOutcome
from ..records._jobs import EnqueueResult, JobOutcome
from ..records._notes import JobNotes, JobProgress
from ..records._producing import (
    WAIT_CHUNK,
    HandleFields,
    check_wait_timeout,
    handle_fields,
    not_found,
    result_of,
    timed_out,
)
from ..runtime._flow_cancel import CANCELLED_ERROR
from ..store._capabilities import Capability
from ..store._offers import require_capabilities
from ..store._roles import AbortResult, ResultRole, TopologyRole

if TYPE_CHECKING:
    from ..records._flow_control import WorkflowAbortResult, WorkflowView

R = TypeVar("R")


class HandleHost(Protocol):
    """What a handle reads through (the App): its store, and the result type
    of a kind (None: the kind stores no result, or is not registered here)."""

    @property
    def store(self) -> Any: ...

    def result_type_of(self, kind: str) -> tuple[bool, Any]: ...


# Not frozen: a frozen attrs class sets each field through object.__setattr__,
# four times the cost of this one's __init__, and a bulk enqueue makes a
# handle per job. Treat it as read-only.
@attrs.define  # equality: fields_eq below (eq=True would make attrs generate its own)
class JobHandle(HandleFields, Generic[R]):
    """One job, as its producer holds it: the fields of the
    :class:`~chronos_trio.EnqueueResult` it came from (``job_id``,
    ``created``, ``run_at``, ``placement``), its ``queue`` and ``kind``, and
    :meth:`status` / :meth:`result` to follow it. ``placement`` is where the
    store keeps the job, opaque (None on a handle made from a job ID);
    :attr:`queue_version` and :attr:`partition` read it for a store with
    topology.

    A handle is a plain value: make one for any job ID with
    ``app.job(job_id)`` in another process (it then finds the job's queue
    and partition itself). :meth:`status` and :meth:`result` need a store
    with results (:class:`~chronos_trio.store.ResultRole`; MemoryStore and
    RedisStore have it), :meth:`abort` one with admin and abort; on another
    they raise ``MissingCapability`` (a TypeError)."""

    __repr__ = fields_repr
    __eq__ = fields_eq

    host: HandleHost = attrs.field(eq=False, repr=False)

    @classmethod
    def of(cls, host: HandleHost, result: EnqueueResult, queue: str, kind: str) -> JobHandle[Any]:
        return cls(*handle_fields(result, queue, kind), host)

    @property
    def queue_version(self) -> int | None:
        """The topology version of the job's queue that holds it, for a store
        with topology (:meth:`TopologyRole.locate
        <chronos_trio.store.TopologyRole.locate>`); None when not known or
        the store has none. A topology detail, kept for compatibility."""
        where = self._where()
        return None if where is None else where[0]

    @property
    def partition(self) -> int | None:
        """The partition that holds the job, as :attr:`queue_version`."""
        where = self._where()
        return None if where is None else where[1]

    def _where(self) -> tuple[int, int] | None:
        store = self.host.store
        return store.locate(self.placement) if isinstance(store, TopologyRole) else None

    def _store(self) -> ResultRole:
        store = self.host.store
        require_capabilities(store, [Capability.RESULTS], what="following a job")
        return store  # type: ignore[no-any-return]

    async def status(self) -> JobOutcome:
        """Where the job stands now (state, attempts, last error, result bytes).

        Raises JobNotFound when no such job exists (never enqueued in that
        queue, or finished and no longer kept), StoreError when the store
        cannot be reached."""
        found = await self._store().outcome(self.ref)
        if found is None:
            raise self._not_found()
        return found

    async def result(self, timeout: float | None = None) -> R:
        """The job's result once it succeeded, decoded by its task's return
        annotation (None for a task that keeps no result). Waits at most
        ``timeout`` seconds (None: as long as it takes); the store wakes the
        waiter when the job finishes, nothing polls.

        Raises JobFailed (with ``last_error`` and ``attempts``) when the job
        is dead; JobAborted (the same) when it was aborted; ResultTimeout
        when it has not finished in time (it goes on: call again);
        ResultExpired when it succeeded but its result is no
        longer kept; JobNotFound when no such job exists (never enqueued, or
        finished and trimmed, or finished before this wait began with
        nothing keeping it: enqueue with ``keep_outcome=True`` to keep it);
        PayloadError when the stored result does not
        decode as the task's result type; StoreError when the store cannot be
        reached; ValueError for a negative or NaN timeout."""
        check_wait_timeout(timeout)
        store = self._store()
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        while True:
            left = deadline - trio.current_time()
            found = await store.wait_outcome(self.ref, timeout=max(0.0, min(left, WAIT_CHUNK)))
            if found is None:
                raise self._not_found()
            if found.finished:
                return self._decode(found)
            if trio.current_time() >= deadline:
                assert timeout is not None
                raise timed_out(self.job_id, timeout, found)

    async def abort(self, reason: str = "") -> AbortResult:
        """Abort the job, so that it never runs (again): one store call.

        Waiting (scheduled, ready, retry_wait): it is ``aborted`` at once
        (ABORTED), never leased. Running (leased): it is flagged (FLAGGED);
        the flag reaches its worker with the next batched lease renewal, the
        handler is cancelled within one heartbeat interval (``job.abort_requested``
        is True for its cleanup), and the job becomes ``aborted`` by its
        worker's fenced settle, or by recovery if that worker died. A
        handler that finished before the flag reached it keeps its outcome
        (succeeded, dead); a retry or release of a flagged job makes it
        aborted. Already finished (FINISHED) or unknown (NOT_FOUND):
        nothing changes. ``reason`` is kept in its ``last_error``
        ("aborted: <reason>"). Waiters on :meth:`result` get JobAborted.

        Raises StoreError when the store cannot be reached (aborting again
        is harmless), ``MissingCapability`` (a TypeError) when the store
        lacks admin or abort (see :class:`~chronos_trio.store.Capability`)."""
        store = self.host.store
        require_capabilities(store, [Capability.ADMIN, Capability.ABORT], what="aborting a job")
        result: AbortResult = await store.abort(self.job_id, queue=self.queue, reason=reason)
        return result

    async def progress(self) -> JobProgress | None:
        """The job's latest progress (``job.progress`` in its handler: the
        fraction, the message, the attempt that reported it and when the
        store wrote it), or None while none was reported. One store read;
        reports reach the store at most every ``notes_interval`` of the
        worker (0.5 s by default), and the last one before the job's
        outcome.

        Raises JobNotFound when no such job exists (as :meth:`status`),
        StoreError when the store cannot be reached, ``MissingCapability``
        (a TypeError) when the store keeps no notes."""
        return (await self.notes()).progress

    async def notes(self) -> JobNotes:
        """The job's notes: its latest progress and its log lines
        (``job.log`` in its handler, every attempt's, each with its attempt
        and time). Raises what :meth:`progress` raises."""
        store = self.host.store
        require_capabilities(store, [Capability.NOTES], what="reading a job's progress")
        found: JobNotes | None = await store.job_notes(self.ref)
        if found is None:
            raise self._not_found()
        return found

    def sibling(self, job_id: str) -> JobHandle[Any]:
        """A handle on another job of the same host (a workflow's steps);
        its queue is looked up."""
        return JobHandle(job_id, False, 0.0, None, None, "", self.host)

    def _decode(self, found: JobOutcome) -> R:
        return result_of(found, self.job_id, self.kind, self.host.result_type_of)  # type: ignore[no-any-return]

    def _not_found(self) -> JobNotFound:
        return not_found(self.job_id, self.queue)


@attrs.frozen
class GroupEnd:
    """How a flow that ends with a group ends: the group's ID, its members'
    ends (a member's last step's handle, or a group's), and whether it
    allows failures."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    group_id: str
    members: tuple[JobHandle[Any] | GroupEnd, ...]
    allow_failures: bool = False


@attrs.frozen
class Workflow:
    """A started workflow: its ID, ``final``, the handle of its last step
    (None when it ends with a group, or a graph of several sinks),
    ``waits_on``: each job ID and the job IDs whose success makes it
    appear, ``sinks``: when it ends with a graph of several sinks, the
    handles of their last steps (in the order they were added), and
    ``ends``: when it ends with a group, how (its members' ends)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    id: str
    final: JobHandle[Any] | None
    waits_on: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict, repr=False)
    sinks: tuple[JobHandle[Any], ...] = attrs.field(default=(), repr=False)
    #: What :meth:`abort` and :meth:`status` read through (the App).
    host: HandleHost | None = attrs.field(default=None, eq=False, repr=False)

    ends: GroupEnd | None = attrs.field(default=None, repr=False)
    #: the IDs of its groups that allow failures: a failure below one does
    #: not stop what follows the group
    allowing: tuple[str, ...] = attrs.field(default=(), repr=False)

    def _host_store(self) -> Any:
        host = self.host if self.host is not None else getattr(self.final, "host", None)
        if host is None:
            raise ValueError(f"workflow {self.id}: a handle made without its app")
        return host.store

    async def abort(self, reason: str = "") -> WorkflowAbortResult:
        """Cancel the whole workflow: its running steps are aborted (flagged:
        each handler is cancelled within one heartbeat and its job ends
        ``aborted``), its waiting ones are aborted at once (never run), and
        the steps not made yet never are: the store marks the workflow's
        record first, then every existing step is aborted, and the
        continuer checks the mark before and after it makes a flow's next
        steps (see ``runtime._flow_cancel``). Returns what happened to each
        step (:class:`~chronos_trio.WorkflowAbortResult`); ``found`` False,
        nothing changed, for a workflow the store has no record of
        (unknown, expired, or started by an older version). Aborting again
        is harmless (``first`` False). ``reason`` is kept in each aborted
        step's last error.

        Raises StoreError when the store cannot be reached (calling again is
        safe), ``MissingCapability`` (a TypeError) when the store lacks
        workflow control, admin or abort."""
        from ._workflow_control import abort_workflow  # loads the workflow records

        return await abort_workflow(self._host_store(), self.id, reason)

    async def status(self) -> WorkflowView:
        """The workflow as it stands (:class:`~chronos_trio.WorkflowView`):
        its overall state (running, succeeded, failed, cancelled;
        ``not_found`` without a record) and its steps as a tree, each with
        its state, attempts and times. Raises StoreError when the store
        cannot be reached, ``MissingCapability`` when it lacks workflow
        control or admin."""
        from ._workflow_control import workflow_view  # loads the workflow records

        return await workflow_view(self._host_store(), self.id)

    async def result(self, timeout: float | None = None) -> Any:
        """The last step's result once the whole flow ran (see
        :meth:`JobHandle.result`). The last step's job exists only once the
        steps before it succeeded: this waits for those (pushed by the store,
        as ``JobHandle.result`` waits, step by step back along the flow),
        then looks for it every few milliseconds until the continuer has
        made it. Raises what ``JobHandle.result`` raises (JobFailed for a
        step that failed: the flow stops there; ResultTimeout when it has
        not finished in time: it goes on), and ValueError for a flow whose
        end it cannot follow (a group with a member that ends in a graph of
        several sinks, or a Workflow made by hand). A flow that ends with a
        graph of several sinks gives their results as a list, in the order
        they were added.

        A flow that ends with a group gives its members' results in member
        order (a member that is a group: a list, recursively), once all are
        in; JobFailed for a member that failed. A group made with
        ``allow_failures=True`` gives a list of :class:`MemberOutcome`
        instead (``result`` decoded by the member's result type; a failed
        member: ``ok`` False and its error), and raises nothing for them."""
        final = self.final
        if final is None and not self.sinks and self.ends is None:
            raise ValueError(
                f"workflow {self.id} has no final step to wait on (it ends with a graph or "
                "group it cannot follow, or this handle came from app.workflow()): follow "
                "its steps with status()"
            )
        check_wait_timeout(timeout)
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        if self.ends is not None and final is None:
            try:
                return await self._gather(self.ends, deadline)
            except _Late:
                raise ResultTimeout(
                    f"workflow {self.id} did not finish within {timeout:g}s", self.ends.group_id
                ) from None
        ends = (final,) if final is not None else self.sinks
        waiting = ends[0]
        try:
            results = []
            for waiting in ends:
                results.append(await self._outcome(waiting, deadline))
        except _Late:
            raise ResultTimeout(
                f"workflow {self.id} did not finish within {timeout:g}s", waiting.job_id
            ) from None
        return results[0] if final is not None else results

    def _absorbed(self, failed_id: str, follower_id: str) -> bool:
        """Whether a group that allows failures takes ``failed_id``'s failure
        as an outcome before ``follower_id`` (which follows that group)."""
        return any(
            failed_id.startswith(g + ".") and not follower_id.startswith(g + ".")
            for g in self.allowing
        )

    async def _gather(self, end: GroupEnd, deadline: float) -> list[Any]:
        """The results of a group's members in member order (their runs go
        on in parallel: waiting for them one after another costs nothing)."""
        out: list[Any] = []
        for member in end.members:
            done_id = member.job_id if isinstance(member, JobHandle) else member.group_id
            try:
                if isinstance(member, GroupEnd):
                    value = await self._gather(member, deadline)
                else:
                    value = await self._outcome(member, deadline)
            except (JobFailed, JobAborted) as exc:
                if not end.allow_failures or not _ended_failed(exc):
                    raise
                out.append(MemberOutcome(False, None, exc.last_error, exc.job_id))
                continue
            out.append(MemberOutcome(True, value, None, done_id) if end.allow_failures else value)
        return out

    async def _outcome(self, handle: JobHandle[Any], deadline: float) -> Any:
        """``handle``'s result, waiting first for the jobs it waits on when it
        does not exist yet. _Late past the deadline."""
        pause = 0.002
        waited = False
        while True:
            left = deadline - trio.current_time()
            if left <= 0:
                raise _Late
            try:
                return await handle.result(timeout=None if left == math.inf else left)
            except ResultTimeout:
                raise _Late from None
            except JobNotFound:
                if not waited:
                    # not made yet: wait (pushed) for the jobs whose success makes it
                    for before in self.waits_on.get(handle.job_id, ()):
                        try:
                            await self._outcome(handle.sibling(before), deadline)
                        except (JobFailed, JobAborted) as exc:
                            if not _ended_failed(exc) or not self._absorbed(
                                exc.job_id, handle.job_id
                            ):
                                raise
                    waited = True
                    continue
            # its predecessors succeeded: the continuer makes it within moments
            await trio.sleep(min(pause, max(0.0, deadline - trio.current_time())))
            pause = min(0.1, pause * 2)


class _Late(Exception):
    """The workflow's deadline passed."""


def _ended_failed(exc: JobFailed | JobAborted) -> bool:
    """Whether a step's end ``exc`` is a failure in its flow: a dead step,
    or one aborted on its own (an abort of the whole flow, a cancel, is
    not: that flow stops there, see ``runtime._flow_cancel``)."""
    return isinstance(exc, JobFailed) or not exc.last_error.startswith(CANCELLED_ERROR)
