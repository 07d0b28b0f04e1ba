"""A workflow's stored record and what controlling it reports: the
definition a workflow is started with (its encoded tree, as
``records._workflow`` encodes it), its cancel mark, and the results of
aborting it and of looking at it. Pure values and functions, no I/O.

Every job of a workflow is named by its place in the tree
(``<workflow_id>.<path>``), so the record alone lists every job the flow
has or will ever have: cancelling and viewing need no index of jobs.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator
from typing import Any

import attrs

from ._jobs import JobState
from ._public import fixup_module_metadata


@attrs.frozen
class WorkflowRecord:
    """A started workflow, as the store keeps it (``WorkflowRole``):
    ``tree`` is its definition (JSON text, ``_flow_encoding.encode_tree``),
    ``created`` when it was first started and ``cancelled`` when it was
    cancelled (store clock; None: not cancelled), ``first_kind`` the kind of
    its first step."""

    id: str
    tree: str
    created: float
    first_kind: str
    cancelled: float | None = None


def workflow_of(then: str | None) -> str | None:
    """The workflow ID a job's continuation carries (``"wf"``), None when it
    has none (the last step, or one written by an older worker) or cannot
    be read. Never raises."""
    if not then:
        return None
    try:
        after = json.loads(then)
    except ValueError:
        return None
    wf = after.get("wf") if isinstance(after, dict) else None
    return wf if isinstance(wf, str) else None


@attrs.frozen
class StepRef:
    """A job of a workflow, as its record names it."""

    id: str
    queue: str
    kind: str


def decode_tree(tree: str) -> Any:
    """The record's tree as JSON values (ValueError naming the problem for a
    damaged one)."""
    try:
        return json.loads(tree)
    except ValueError as exc:
        raise ValueError(f"damaged workflow record: {exc}") from None


def tree_steps(node: Any) -> Iterator[StepRef]:
    """Every job of an encoded tree, depth first in its order. Node kinds
    this version does not know (a newer one's) are walked through as plain
    JSON: any ``{"job": {...}}`` inside them is a job."""
    if isinstance(node, dict):
        job = node.get("job")
        if isinstance(job, dict) and isinstance(job.get("id"), str):
            yield StepRef(job["id"], str(job.get("queue", "")), str(job.get("kind", "")))
            return
        for value in node.values():
            yield from tree_steps(value)
    elif isinstance(node, list):
        for item in node:
            yield from tree_steps(item)


class WorkflowState(enum.StrEnum):
    """Where a workflow stands as a whole."""

    RUNNING = "running"  # steps run, wait or are still to be made
    SUCCEEDED = "succeeded"  # every step succeeded
    FAILED = "failed"  # a step is dead: the flow stops there
    CANCELLED = "cancelled"  # cancelled (``Workflow.abort``)
    NOT_FOUND = "not_found"  # no record: never started, or its record expired


@attrs.frozen
class WorkflowAbortResult:
    """What aborting a workflow did (``Workflow.abort``): ``found`` False
    when the store holds no record of it (nothing changed); else the job IDs
    of its steps by what happened to them: ``aborted_running`` (leased:
    flagged, its handler is cancelled within a heartbeat), ``dropped``
    (waiting: aborted at once, never run), ``finished`` (already succeeded,
    dead or aborted: left as they are), ``not_created`` (not made yet: never
    will be). ``first`` False when it had been cancelled before (aborting
    again is harmless: it sweeps again)."""

    workflow_id: str
    found: bool
    first: bool = False
    aborted_running: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    finished: tuple[str, ...] = ()
    not_created: tuple[str, ...] = ()


@attrs.frozen
class StepView:
    """One job of a workflow as it stands: ``state`` None when it does not
    exist (not made yet, or gone). ``started`` is when its first known
    attempt's lease was granted (None: not known), ``finished`` when it
    ended, ``duration`` from when it was due (its run time, or when it was
    made) to when it finished (None while it has not)."""

    id: str
    kind: str
    queue: str
    state: JobState | None
    attempts: int = 0
    created: float | None = None
    started: float | None = None
    finished: float | None = None
    duration: float | None = None
    last_error: str = ""


@attrs.frozen
class FlowNode:
    """A node of a workflow's tree, for views: ``kind`` is ``"job"``
    (``step`` set), ``"chain"``, ``"group"``, ``"graph"`` (its steps in the
    order it was built) or the name of a node kind this version does not
    know (shown with its children as found)."""

    kind: str
    id: str = ""
    step: StepView | None = None
    children: tuple[FlowNode, ...] = ()


@attrs.frozen
class WorkflowView:
    """A workflow as it stands (``Workflow.status``): its overall state, its
    record's times and its steps as a tree (``root``; None when not found)."""

    workflow_id: str
    state: WorkflowState
    created: float | None = None
    cancelled: float | None = None
    root: FlowNode | None = None

    def steps(self) -> list[StepView]:
        """Every step, depth first."""
        out: list[StepView] = []
        stack = [self.root] if self.root is not None else []
        while stack:
            node = stack.pop()
            if node.step is not None:
                out.append(node.step)
            stack.extend(reversed(node.children))
        return out


def build_view(node: Any, steps: dict[str, StepView]) -> FlowNode:
    """The view tree of an encoded tree, each job's view taken from ``steps``
    (a job missing there: not made yet). Unknown node kinds keep their first
    key as their kind."""
    if isinstance(node, dict):
        job = node.get("job")
        if isinstance(job, dict) and isinstance(job.get("id"), str):
            view = steps.get(job["id"]) or StepView(
                job["id"], str(job.get("kind", "")), str(job.get("queue", "")), None
            )
            return FlowNode("job", job["id"], view)
        if isinstance(node.get("chain"), list):
            return FlowNode("chain", "", None, tuple(build_view(n, steps) for n in node["chain"]))
        if isinstance(node.get("group"), list):
            return FlowNode(
                "group",
                str(node.get("id", "")),
                None,
                tuple(build_view(n, steps) for n in node["group"]),
            )
        dag = node.get("dag")
        if isinstance(dag, dict) and isinstance(dag.get("steps"), list):
            # a graph: its steps in the order it was built (each names the
            # steps it runs after, in its job's view)
            return FlowNode(
                "graph",
                str(dag.get("id", "")),
                None,
                tuple(
                    build_view(step.get("node"), steps)
                    for step in dag["steps"]
                    if isinstance(step, dict)
                ),
            )
        kind = next(iter(node), "node")
        children = tuple(build_view(v, steps) for v in node.values() if isinstance(v, dict | list))
        return FlowNode(str(kind), str(node.get("id", "")), None, children)
    if isinstance(node, list):
        return FlowNode("list", "", None, tuple(build_view(n, steps) for n in node))
    return FlowNode(type(node).__name__, str(node))


def overall_state(record: WorkflowRecord, steps: list[StepView]) -> WorkflowState:
    """Cancelled when marked; failed when a step is dead (or aborted);
    succeeded when every step did; else running."""
    if record.cancelled is not None:
        return WorkflowState.CANCELLED
    states = [s.state for s in steps]
    if any(s in (JobState.DEAD, JobState.ABORTED) for s in states):
        return WorkflowState.FAILED
    if states and all(s is JobState.SUCCEEDED for s in states):
        return WorkflowState.SUCCEEDED
    return WorkflowState.RUNNING


# Public as ``chronos_trio.<name>``, loaded on first use (the package names
# them lazily): they report that module however they were first reached.
fixup_module_metadata(
    "chronos_trio",
    {
        "FlowNode": FlowNode,
        "StepView": StepView,
        "WorkflowAbortResult": WorkflowAbortResult,
        "WorkflowRecord": WorkflowRecord,
        "WorkflowState": WorkflowState,
        "WorkflowView": WorkflowView,
    },
)
