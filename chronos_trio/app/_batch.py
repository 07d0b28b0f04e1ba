"""Batches: many jobs enqueued as one, with live counts and a callback when
all are finished (``App.enqueue_batch``, see docs/workflows.md).

A batch is a workflow: one group that allows failures, of single steps,
and, when given, an ``on_complete`` step after it that gets a
:class:`BatchSummary`. So it has a workflow's guarantees (each member once
per success, deterministic IDs ``<batch>.0.<k>``, the callback ``<batch>.1``
made once however often the completing arrival is replayed), and its
counts are the group's arrival record (``FlowRole.group_status``): one store
read, whatever the batch's size.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ..records._attrs_methods import fields_eq, fields_hash, fields_repr
from ..records._errors import ResultTimeout, UnknownJob
from ..records._flow_outcomes import DELETED_ERROR, MemberOutcome
from ..records._producing import check_wait_timeout
from ..store._capabilities import Capability
from ..store._offers import require_capabilities
from ..store._roles import FlowRole
from ._handle import GroupEnd, HandleHost, JobHandle, Workflow

if TYPE_CHECKING:
    from ..records._flow_build import Chain, FlowStep


@attrs.frozen
class BatchStatus:
    """A batch's live counts: ``total`` members, ``succeeded`` and
    ``failed`` (for good) so far, ``pending`` = total - both, the IDs of the
    failed members in member order, and ``complete`` once none is pending.
    ``callback``: the ``on_complete`` job's state (``None``: none given, or
    not made yet)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    batch_id: str
    total: int
    succeeded: int
    failed: int
    pending: int
    failed_job_ids: tuple[str, ...] = ()
    callback: str | None = None

    @property
    def complete(self) -> bool:
        return self.pending == 0


def member_id(batch_id: str, index: int) -> str:
    """The job ID of a batch's member ``index``."""
    return f"{batch_id}.0.{index}"


def callback_id(batch_id: str) -> str:
    """The job ID of a batch's ``on_complete`` callback."""
    return f"{batch_id}.1"


def batch_flow(steps: Sequence[FlowStep], on_complete: FlowStep | None) -> Chain:
    """The workflow of a batch (TypeError for a member that is not a step
    with a payload of its own, or an ``on_complete`` that cannot take a
    :class:`BatchSummary`; ValueError when empty or past the group limit)."""
    from ..records._flow_build import Chain, FlowStep, Group, chain  # a workflow's builder

    if isinstance(steps, FlowStep) or not isinstance(steps, Sequence):
        raise TypeError("enqueue_batch takes a list of steps: [task.s(payload), ...]")
    for step in steps:
        if not isinstance(step, FlowStep):
            raise TypeError(
                f"a batch member is one step (task.s(payload)), not {type(step).__name__}: "
                "use enqueue_workflow for chains and groups"
            )
        if step.payload is None:
            raise TypeError(f"batch member {step.kind!r} needs a payload of its own: task.s(x)")
    if not steps:
        raise ValueError("a batch needs at least one member")
    # past the group limits, starting it is a ValueError (as any group's)
    group = Group(tuple(steps), None, True, summary=True)
    return Chain((group,)) if on_complete is None else chain(group, on_complete)


class Batch:
    """A started batch (``App.enqueue_batch``, or ``App.batch(batch_id)``
    for one started elsewhere): its ID, :meth:`status` (live counts),
    :meth:`wait` (until every member finished) and :meth:`result` (every
    member's :class:`MemberOutcome`, in member order)."""

    def __init__(
        self,
        app: HandleHost,
        batch_id: str,
        members: Sequence[JobHandle[Any]] | None = None,
    ) -> None:
        self.id = batch_id
        self.app = app
        self._members = None if members is None else {h.job_id: h for h in members}
        self._size = None if members is None else len(members)

    def __repr__(self) -> str:
        return f"Batch(id={self.id!r}, size={self._size!r})"

    async def size(self) -> int:
        """How many members the batch has (read from its first member when
        this handle did not start it). Raises UnknownJob for a batch not
        found (never started, or past its 24 h)."""
        if self._size is None:
            self._size = await batch_size(self.app.store, self.id)
        return self._size

    async def status(self) -> BatchStatus:
        """The live counts (see :func:`batch_status`)."""
        return await batch_status(self.app.store, self.id, await self.size())

    async def wait(self, timeout: float | None = None) -> BatchStatus:
        """The status once every member finished (looked at every few
        milliseconds at first, then every half second). Raises ResultTimeout
        when members are still pending after ``timeout`` seconds."""
        check_wait_timeout(timeout)
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        pause = 0.005
        while True:
            status = await self.status()
            if status.complete:
                return status
            left = deadline - trio.current_time()
            if left <= 0:
                raise ResultTimeout(
                    f"batch {self.id}: {status.pending} of {status.total} members still "
                    f"pending after {timeout:g}s",
                    self.id,
                )
            await trio.sleep(min(pause, left))
            pause = min(0.5, pause * 2)

    async def result(self, timeout: float | None = None) -> list[MemberOutcome]:
        """Every member's outcome in member order, once all finished (its
        result decoded by its task's result type, or its error; a member
        deleted before it ended: :data:`DELETED_ERROR`). Raises
        ResultTimeout as :meth:`wait`."""
        total = await self.size()
        group_id = f"{self.id}.0"
        status = await self.wait(timeout)  # then every outcome is in
        store = self.app.store
        gone = {j for j in status.failed_job_ids if await store.get_job(j) is None}
        ids = [member_id(self.id, k) for k in range(total)]
        members = tuple([await self._member(j) for j in ids if j not in gone])
        flow = Workflow(self.id, None, ends=GroupEnd(group_id, members, True), allowing=(group_id,))
        found: list[MemberOutcome] = await flow.result(timeout)
        outcomes = iter(found)
        return [
            MemberOutcome(False, None, DELETED_ERROR, j) if j in gone else next(outcomes)
            for j in ids
        ]

    async def _member(self, job_id: str) -> JobHandle[Any]:
        """A member's handle (the handle that started the batch has them)."""
        if self._members is not None:
            return self._members[job_id]
        job = await self.app.store.get_job(job_id)
        if job is None:
            raise UnknownJob(f"batch {self.id}: member {job_id} is gone")
        return JobHandle(job.id, False, 0.0, job.placement, job.queue, job.kind, self.app)


def _size_of(then: str | None) -> int | None:
    """A batch's size from a member's continuation (its group's ``n``)."""
    if not then:
        return None
    try:
        size = json.loads(then).get("n")
    except (ValueError, AttributeError):
        return None
    return size if isinstance(size, int) and size > 0 else None


async def batch_size(store: Any, batch_id: str) -> int:
    """How many members the batch ``batch_id`` has, read from its first
    member's continuation. Raises UnknownJob for a batch not found (never
    started, or past its 24 h), StoreError when the store cannot be reached."""
    first = await store.get_job(member_id(batch_id, 0))
    size = _size_of(first.then if first is not None else None)
    if size is None:
        raise UnknownJob(f"no batch with id {batch_id!r}")
    return size


async def batch_status(store: Any, batch_id: str, size: int | None = None) -> BatchStatus:
    """A batch's live counts: one read of its group's arrival record (and of
    its callback job). A member counts once its outcome is recorded (moments
    after it finished, by a worker's continuer). ``size``: read with
    :func:`batch_size` when not given. Raises UnknownJob for a batch not
    found, StoreError when the store cannot be reached, CapabilityError for
    a store without workflows."""
    require_capabilities(store, {Capability.FLOWS}, what="a batch's status")
    flows: FlowRole = store
    total = size if size is not None else await batch_size(store, batch_id)
    [group] = await flows.group_status([f"{batch_id}.0"])
    failed = len(group.failed)
    callback = await store.get_job(callback_id(batch_id))
    return BatchStatus(
        batch_id=batch_id,
        total=total,
        succeeded=group.arrived - failed,
        failed=failed,
        pending=max(0, total - group.arrived),
        failed_job_ids=tuple(member_id(batch_id, k) for k in group.failed),
        callback=None if callback is None else callback.state.value,
    )
