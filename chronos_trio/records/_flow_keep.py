"""How long a workflow's record is kept (see docs/workflows.md, "How long
a workflow is kept"): while its flow runs, and :data:`WORKFLOW_KEEP` after.

A record is saved with :func:`record_keep` (WORKFLOW_KEEP plus the longest
sum of its steps' delays along any path of the flow: a flow that waits two
days keeps its record two days more), and kept alive as its steps advance
(``WorkflowRole.keep_workflows``, called by the continuer and, for a chain
link its predecessor's settle stored, by that settle: see
``runtime._flow_keep``). Pure functions, no I/O.
"""

from __future__ import annotations

from ._flow_build import Chain, Dag, FlowStep, Node, dag_order
from ._workflow import WORKFLOW_KEEP


def flow_delay(node: Node) -> float:
    """The longest sum of step delays along any path of ``node`` (seconds):
    how long its steps may wait on purpose, one after another. A failure
    callback's delay counts as a step after the flow's."""
    if isinstance(node, FlowStep):
        return max(0.0, node.delay)
    if isinstance(node, Dag):
        ends: dict[str, float] = {}
        for step in dag_order(node):
            before = max((ends[name] for name in step.after), default=0.0)
            ends[step.name] = before + flow_delay(step.node)
        return max(ends.values(), default=0.0)
    callback = 0.0 if node.on_failure is None else max(0.0, node.on_failure.delay)
    if isinstance(node, Chain):
        return sum(flow_delay(link) for link in node.links) + callback
    return max((flow_delay(member) for member in node.members), default=0.0) + callback


def record_keep(node: Node, on_failure: FlowStep | None = None) -> float:
    """How long the record of a workflow of ``node`` (with the workflow's
    ``on_failure``) is saved for: :data:`WORKFLOW_KEEP` plus
    :func:`flow_delay`."""
    callback = 0.0 if on_failure is None else max(0.0, on_failure.delay)
    return WORKFLOW_KEEP + flow_delay(node) + callback
