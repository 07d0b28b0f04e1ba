"""What a workflow's start makes, made once per flow (issue 29: the
producer's side of chain throughput).

A producer that starts the same flow object many times (``flow =
chain(...)`` once, ``enqueue_workflow(flow)`` in a loop) made the same
first jobs, continuations and record tree every time, only the workflow ID
differing. Flows are immutable (frozen attrs classes of tuples, bytes and
numbers), and a start is a pure function of the flow, the workflow ID, the
producer's headers and the failure callback, in which the ID only appears
as text: every job ID is ``<id>.<path>``, and every continuation and the
tree hold it in JSON strings (``"<id>.<path>"``, ``"wf": "<id>"``).

:class:`FlowStarts` keeps, per flow object (by identity, the object held so
its identity stays its own), a :class:`_Template`: the start made with two
different stand-in IDs, each text split at its stand-in. The two splits
must be equal, which proves that the ID appears exactly there (a stand-in
that also occurred in a kind, a queue or a step name would split that text
too, and differently from the other): a start with any ID is then the
parts joined with it. Only IDs that JSON writes as they are (printable
ASCII without ``"`` or ``\\``) take this path, and only starts without
headers; a flow is templated the second time it is started (a one-off flow
costs a lookup); the continuation size limit, which depends on the ID's
length, is checked again. Everything else, and anything that raises, goes
through ``_flow_build.start`` and ``encode_tree`` as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs

from . import _flow_json as flow_json
from ._attrs_methods import fields_eq, fields_hash, fields_repr
from ._flow_build import FlowStep, Node, predecessors, start
from ._flow_encoding import encode_tree
from ._flow_keep import record_keep
from ._jobs import NewJob
from ._workflow import MAX_CONTINUATION_BYTES, WORKFLOW_KEEP, Headers, Steps


@attrs.frozen
class WorkflowStart:
    """What a workflow's first jobs are started with, beside them: its ID,
    its record's encoded tree and the kind of its first step (what
    ``WorkflowRole.start_workflow`` saves before or with the jobs)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    workflow_id: str
    tree: str
    first_kind: str
    #: How long its record is saved for (``records._flow_keep.record_keep``).
    keep: float = WORKFLOW_KEEP


#: Stand-in workflow IDs (any two distinct plain IDs would do: see the module doc).
_STAND_INS = ("Wq7ZxStandIn1", "Kd3VnStandIn2")
#: Flows remembered per FlowStarts (the oldest forgotten past it).
MAX_FLOWS = 64


def _plain(workflow_id: str) -> bool:
    """Whether JSON writes ``workflow_id`` as it is (json and orjson alike)."""
    return (
        workflow_id.isascii()
        and workflow_id.isprintable()
        and '"' not in workflow_id
        and "\\" not in workflow_id
    )


Parts = tuple[str, ...]


@attrs.frozen(hash=False)
class _Template:
    """A flow's start for any plain ID: per first job its ID's and
    continuation's parts (None: no continuation) and its other fields;
    the tree's parts; the IDs of its groups that allow failures (compared,
    never hashed)."""

    __repr__ = fields_repr
    __eq__ = fields_eq

    jobs: tuple[tuple[Parts, Parts | None, dict[str, Any]], ...]
    tree: Parts
    allowing: tuple[Parts, ...]
    keep: float


def _split(text: str, stand_in: str) -> Parts:
    return tuple(text.split(stand_in))


def _blank(job: NewJob) -> dict[str, Any]:
    """``job``'s fields but its ID and continuation."""
    fields = attrs.asdict(job, recurse=False)
    del fields["id"], fields["then"]
    return fields


def _made(
    node: Node,
    on_failure: FlowStep | None,
    allowing: Callable[[Node, str], list[str]],
    stand_in: str,
) -> _Template:
    steps = start(node, stand_in, (), on_failure)
    return _Template(
        tuple(
            (
                _split(j.id, stand_in),
                None if j.then is None else _split(j.then, stand_in),
                _blank(j),
            )
            for j in steps.jobs
        ),
        _split(encode_tree(node, stand_in), stand_in),
        tuple(_split(g, stand_in) for g in allowing(node, stand_in)),
        record_keep(node, on_failure),
    )


def _template(
    node: Node, on_failure: FlowStep | None, allowing: Callable[[Node, str], list[str]]
) -> _Template | None:
    """The template of ``node``; None when its start raises or the two
    stand-ins do not split it alike."""
    try:
        one, two = (_made(node, on_failure, allowing, s) for s in _STAND_INS)
    except (ValueError, TypeError):
        return None  # the uncached path raises it for the caller
    return one if one == two else None


@attrs.define
class _Entry:
    __repr__ = fields_repr
    __eq__ = fields_eq

    node: Node
    on_failure: FlowStep | None
    template: _Template | None = None
    seen: int = 1


@attrs.frozen
class Start:
    """A workflow's start: its first jobs (``_workflow.start``), its record's
    tree (``encode_tree``) and the IDs of its groups that allow failures."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    steps: Steps
    tree: str
    allowing: tuple[str, ...]
    #: How long its record is saved for (``records._flow_keep.record_keep``).
    keep: float = WORKFLOW_KEEP


class FlowStarts:
    """Starts of workflows, each flow object's templated on its second start
    (see the module doc); ``allowing(node, workflow_id)`` lists a flow's
    groups that allow failures. Used from one thread (the App's)."""

    def __init__(self, allowing: Callable[[Node, str], list[str]]) -> None:
        self._allowing = allowing
        self._flows: dict[int, _Entry] = {}

    def start(
        self,
        node: Node,
        workflow_id: str,
        headers: Headers = (),
        on_failure: FlowStep | None = None,
    ) -> Start:
        """The start of ``node`` as ``workflow_id`` with ``headers``: equal
        to the uncached one in every case. Raises what ``_workflow.start``
        raises."""
        if headers or not _plain(workflow_id):
            return self.uncached(node, workflow_id, headers, on_failure)
        flows = self._flows
        entry = flows.get(id(node))
        if entry is None or entry.node is not node or entry.on_failure is not on_failure:
            if len(flows) >= MAX_FLOWS:
                del flows[next(iter(flows))]
            flows[id(node)] = _Entry(node, on_failure)
            return self.uncached(node, workflow_id, headers, on_failure)
        if entry.template is None:
            if entry.seen > 1:  # not templated: it raises, or a stand-in met its text
                return self.uncached(node, workflow_id, headers, on_failure)
            entry.seen += 1
            entry.template = _template(node, on_failure, self._allowing)
            if entry.template is None:
                return self.uncached(node, workflow_id, headers, on_failure)
        return _fill(entry.template, workflow_id) or self.uncached(
            node, workflow_id, headers, on_failure
        )

    def uncached(
        self, node: Node, workflow_id: str, headers: Headers, on_failure: FlowStep | None
    ) -> Start:
        """The start made afresh (what :meth:`start` must equal)."""
        steps = start(node, workflow_id, headers, on_failure)
        return Start(
            steps,
            encode_tree(node, workflow_id),
            tuple(self._allowing(node, workflow_id)),
            record_keep(node, on_failure),
        )


def _fill(template: _Template, workflow_id: str) -> Start | None:
    """``template`` with ``workflow_id``; None when a continuation is then
    over the limit (the uncached start raises)."""
    jobs = []
    join = workflow_id.join
    for id_parts, then_parts, fields in template.jobs:
        then = None
        if then_parts is not None:
            then = join(then_parts)
            if flow_json.size(then) > MAX_CONTINUATION_BYTES:
                return None
        jobs.append(NewJob(id=join(id_parts), then=then, **fields))
    return Start(
        Steps(jobs=tuple(jobs), workflow=workflow_id),
        join(template.tree),
        tuple(join(g) for g in template.allowing),
        template.keep,
    )


class LazyPredecessors(Mapping[str, tuple[str, ...]]):
    """``_workflow.predecessors(node, workflow_id)``, made on first use (a
    ``Workflow.result`` that finds a step not made yet), not at the start."""

    __slots__ = ("_made", "_node", "_workflow_id")

    def __init__(self, node: Node, workflow_id: str) -> None:
        self._node = node
        self._workflow_id = workflow_id
        self._made: dict[str, tuple[str, ...]] | None = None

    def _map(self) -> dict[str, tuple[str, ...]]:
        made = self._made
        if made is None:
            made = self._made = predecessors(self._node, self._workflow_id)
        return made

    def __getitem__(self, key: str) -> tuple[str, ...]:
        return self._map()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._map())

    def __len__(self) -> int:
        return len(self._map())

    def __repr__(self) -> str:
        return repr(self._map())

    def __eq__(self, other: Any) -> bool:
        return bool(self._map() == other)

    __hash__ = None  # type: ignore[assignment]
