"""How ``workflow ID`` prints a workflow (its steps as a tree) and what
``workflow ID --abort`` did, as text and as JSON."""

from __future__ import annotations

from typing import Any

from ..records._flow_control import FlowNode, StepView, WorkflowAbortResult, WorkflowView
from ._output import first_line, iso


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def _step_line(step: StepView) -> str:
    state = step.state.value if step.state is not None else "not made yet"
    parts = [f"{step.kind} {step.id}: {state}"]
    if step.state is not None:
        parts.append(f"attempts {step.attempts}")
    if step.started is not None:
        parts.append(f"started {iso(step.started)}")
    if step.finished is not None:
        parts.append(f"finished {iso(step.finished)} ({_seconds(step.duration)})")
    if step.last_error:
        parts.append(f"error: {first_line(step.last_error)}")
    return ", ".join(parts)


def _lines(node: FlowNode, depth: int, out: list[str]) -> None:
    pad = "  " * depth
    if node.step is not None:
        out.append(f"{pad}- {_step_line(node.step)}")
        return
    label = node.kind if not node.id else f"{node.kind} {node.id}"
    out.append(f"{pad}{label} ({len(node.children)}):")
    for child in node.children:
        _lines(child, depth + 1, out)


def workflow_text(view: WorkflowView) -> str:
    """The flow's state and times, then its steps as an indented tree
    (node kinds this version does not know are shown by name)."""
    head = f"workflow {view.workflow_id}: {view.state.value}"
    if view.root is None:
        return head + " (no record of it: never started, expired, or started by an older version)"
    lines = [head, f"started {iso(view.created)}"]
    if view.cancelled is not None:
        lines.append(f"cancelled {iso(view.cancelled)}")
    _lines(view.root, 0, lines)
    return "\n".join(lines)


def _step_json(step: StepView) -> dict[str, Any]:
    return {
        "id": step.id,
        "kind": step.kind,
        "queue": step.queue,
        "state": None if step.state is None else step.state.value,
        "attempts": step.attempts,
        "created": iso(step.created),
        "started": iso(step.started),
        "finished": iso(step.finished),
        "duration": step.duration,
        "last_error": step.last_error,
    }


def _node_json(node: FlowNode) -> dict[str, Any]:
    if node.step is not None:
        return {"type": "job", **_step_json(node.step)}
    return {"type": node.kind, "id": node.id, "children": [_node_json(c) for c in node.children]}


def workflow_json(view: WorkflowView) -> dict[str, Any]:
    return {
        "workflow": view.workflow_id,
        "state": view.state.value,
        "created": iso(view.created),
        "cancelled": iso(view.cancelled),
        "tree": None if view.root is None else _node_json(view.root),
    }


def abort_json(result: WorkflowAbortResult) -> dict[str, Any]:
    return {
        "workflow": result.workflow_id,
        "found": result.found,
        "first": result.first,
        "aborted_running": list(result.aborted_running),
        "dropped": list(result.dropped),
        "finished": list(result.finished),
        "not_created": list(result.not_created),
    }


def abort_text(result: WorkflowAbortResult) -> str:
    if not result.found:
        return f"workflow {result.workflow_id}: no record of it, nothing aborted"
    again = "" if result.first else " (it was cancelled before: swept again)"
    return (
        f"workflow {result.workflow_id} cancelled{again}: "
        f"{len(result.aborted_running)} running step(s) asked to stop "
        f"(within one heartbeat), {len(result.dropped)} waiting step(s) aborted, "
        f"{len(result.finished)} already finished, "
        f"{len(result.not_created)} not made yet (never will be)"
    )
