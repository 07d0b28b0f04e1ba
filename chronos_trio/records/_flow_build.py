"""Workflows as data, the part that builds them: the step, chain, group and
graph records (:class:`FlowStep`, :class:`Chain`, :class:`Group`,
:class:`Dag`), :func:`chain` and :func:`group` with their checks, and
:func:`start`, the first jobs of a workflow (see docs/workflows.md). Pure
functions, no I/O.

Only what starts a workflow imports it (``App.enqueue_workflow``,
``Task.s``, the public names, on first use): a worker that only runs a
workflow's steps reads their continuations with ``records._workflow``, which
holds none of these classes, so a worker that starts none never loads them.
"""

from __future__ import annotations

import base64
import heapq
import itertools
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from ._attrs_methods import fields_eq, fields_hash, fields_repr
from ._flow_outcomes import BatchSummary, MemberOutcome, StepFailure
from ._workflow import (
    MAX_DEPTH,
    MAX_GROUP_MEMBERS,
    MAX_JOBS,
    ON_FAILURE,
    Headers,
    Steps,
    _run,
)


@attrs.frozen
class FlowStep:
    """One job of a workflow: a task's kind and defaults, and its payload
    (encoded; None: its predecessor's result)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    kind: str
    queue: str
    payload: bytes | None
    max_retries: int
    timeout: float
    delay: float = 0.0
    #: Checked when the workflow is built: the task's payload type and
    #: result type (None: it keeps no result).
    payload_type: Any = attrs.field(default=Any, eq=False, repr=False)
    result_type: Any = attrs.field(default=None, eq=False, repr=False)


@attrs.frozen
class Chain:
    """Links run in order; each gets its predecessor's result unless it has
    a payload of its own. ``on_failure``: a step called once with a
    :class:`StepFailure` when a step of the chain fails for good."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    links: tuple[Node, ...]
    on_failure: FlowStep | None = None


@attrs.frozen
class Group:
    """Members run in parallel; what follows gets their results, in member
    order, as a list (``allow_failures``: a list of :class:`MemberOutcome`,
    a member that failed for good counting as arrived). ``on_failure``: a
    step called once with a :class:`StepFailure` when a member fails for
    good."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    members: tuple[Node, ...]
    on_failure: FlowStep | None = None
    allow_failures: bool = False
    #: a batch's group (``App.enqueue_batch``; with allow_failures): what
    #: follows gets a :class:`BatchSummary` instead of the outcomes
    summary: bool = False


@attrs.frozen
class DagStep:
    """One named step of a graph: its node, and the names of the steps whose
    results it waits for (none: a root, started with the graph)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    name: str
    node: Node
    after: tuple[str, ...]


@attrs.frozen
class Dag:
    """A workflow graph, checked (built by ``records._graph.Graph.freeze``):
    steps in the order they were added, each after the steps it names.
    Its result is its one sink's (a step nothing comes after), or, with
    several sinks, their results as a list in the order they were added."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    steps: tuple[DagStep, ...]


Node = FlowStep | Chain | Group | Dag


@runtime_checkable
class Buildable(Protocol):
    """A workflow part that is built before it runs (``records._graph.Graph``):
    ``freeze`` checks it and returns its fixed form (ValueError, TypeError)."""

    def freeze(self) -> Dag: ...


def as_node(part: Node | Buildable) -> Node:
    """``part`` as a node: a graph is frozen (checked) here. TypeError for
    what is not a workflow part."""
    if isinstance(part, FlowStep | Chain | Group | Dag):
        return part
    if isinstance(part, Buildable):
        return part.freeze()
    raise TypeError(
        f"a workflow part is a step (task.s(...)), a chain, a group or a graph, got {part!r}"
    )


def chain(*links: Node | Buildable, on_failure: FlowStep | None = None) -> Chain:
    """A chain of steps, chains, groups or graphs (ValueError when empty;
    TypeError when a link cannot take its predecessor's result). ``on_failure``: a
    step (``task.s()``, its task taking a :class:`StepFailure`) called once
    when a step of the chain fails for good, unless an ``on_failure``
    nearer that step takes it (TypeError when it cannot take one)."""
    if not links:
        raise ValueError("a chain needs at least one link")
    check_on_failure(on_failure)
    flat: list[Node] = []
    for part in links:
        link = as_node(part)
        # a chain with a callback of its own stays a link: its scope is kept
        inline = isinstance(link, Chain) and link.on_failure is None
        flat.extend(link.links if isinstance(link, Chain) and inline else (link,))
    for before, after in itertools.pairwise(flat):
        _check_feeds(before, after)
    return Chain(tuple(flat), on_failure)


def group(
    *members: Node | Buildable, on_failure: FlowStep | None = None, allow_failures: bool = False
) -> Group:
    """A group of steps, chains, groups or graphs (ValueError when empty or
    over :data:`MAX_GROUP_MEMBERS` members). ``allow_failures``: a member that
    fails for good counts as arrived, and what follows gets a list of
    :class:`MemberOutcome` (its first steps must take one: TypeError
    otherwise); a member's failure is then an outcome, not a failure, so
    ``on_failure`` does not go with it (ValueError). ``on_failure``: as
    :func:`chain`'s, for a step of any member."""
    if not members:
        raise ValueError("a group needs at least one member")
    _check_group_size(len(members))
    if not isinstance(allow_failures, bool):
        raise TypeError(f"allow_failures takes True or False, not {allow_failures!r}")
    if allow_failures and on_failure is not None:
        raise ValueError(
            "a group with allow_failures=True hands its failures on as MemberOutcome "
            "records: give on_failure to the chain or workflow around it, or drop one"
        )
    check_on_failure(on_failure)
    return Group(tuple(as_node(m) for m in members), on_failure, allow_failures)


def check_on_failure(callback: FlowStep | None) -> None:
    """TypeError unless ``callback`` is None or one step (``task.s()``,
    without a payload) whose task takes a :class:`StepFailure`."""
    if callback is None:
        return
    if not isinstance(callback, FlowStep):
        raise TypeError(
            f"on_failure takes one step (task.s()), not {type(callback).__name__}: "
            "a callback that needs more can enqueue a workflow of its own"
        )
    if callback.payload is not None:
        raise TypeError(
            f"on_failure={callback.kind!r} is given a payload: it is called with the "
            "StepFailure, so give it none (task.s())"
        )
    want = callback.payload_type
    if (
        want is Any
        or want is StepFailure
        or (isinstance(want, type) and issubclass(StepFailure, want))
    ):
        return
    raise TypeError(
        f"on_failure={callback.kind!r} takes a {_name(want)} payload, but a failure "
        "callback is called with a chronos_trio.StepFailure: make its payload type StepFailure"
    )


def _check_group_size(size: int) -> None:
    if size > MAX_GROUP_MEMBERS:
        raise ValueError(
            f"a group has at most {MAX_GROUP_MEMBERS} members, got {size}: "
            "split the work into groups of groups, or chain batches"
        )


def _result_of(node: Node) -> Any:
    """What ``node`` hands on: a step's result type, a group's list."""
    if isinstance(node, FlowStep):
        return node.result_type
    if isinstance(node, Chain):
        return _result_of(node.links[-1])
    if isinstance(node, Dag):
        sinks = dag_sinks(node)
        return _result_of(sinks[0].node) if len(sinks) == 1 else list
    if node.summary:
        return BatchSummary
    return list[MemberOutcome] if node.allow_failures else list


def _first_steps(node: Node) -> list[FlowStep]:
    """The steps that get ``node``'s input (depth first)."""
    if isinstance(node, FlowStep):
        return [node]
    if isinstance(node, Chain):
        return _first_steps(node.links[0])
    if isinstance(node, Dag):
        return [s for step in node.steps if not step.after for s in _first_steps(step.node)]
    return [s for m in node.members for s in _first_steps(m)]


def _check_feeds(before: Node, after: Node) -> None:
    """TypeError when a step that takes its predecessor's result cannot."""
    produced = _result_of(before)
    for step in _first_steps(after):
        if step.payload is not None:
            continue
        if produced is None:
            raise TypeError(
                f"{step.kind!r} takes its predecessor's result, but the step before it "
                "keeps none (its handler returns nothing): give it a payload"
            )
        want = step.payload_type
        # == as well as is: list[int] builds a new alias object each time
        if want is Any or want is produced or want == produced:
            continue
        origin = getattr(want, "__origin__", want)
        if produced is list and origin in (list, Sequence, tuple):
            continue
        # a bare type takes any of its subclasses' results, generic or not
        # (a step taking ``list`` or ``list[Any]`` is fed a ``list[int]``)
        made = getattr(produced, "__origin__", produced)
        bare = all(a is Any for a in getattr(want, "__args__", None) or ())
        if isinstance(made, type) and isinstance(origin, type) and issubclass(made, origin):
            same_args = getattr(want, "__args__", None) == getattr(produced, "__args__", None)
            if bare or made is produced or same_args:
                continue
        raise TypeError(
            f"{step.kind!r} takes a {_name(want)} payload, but the step before it "
            f"hands on a {_name(produced)}"
        )


def _name(t: Any) -> str:
    if getattr(t, "__args__", None):  # list[str], not the bare list it wraps
        return str(t)
    return getattr(t, "__qualname__", None) or str(t)


# -- continuations ------------------------------------------------------------------------
def _encode_node(node: Node, path: str, workflow_id: str = "") -> dict[str, Any]:
    if isinstance(node, FlowStep):
        return {
            "job": {
                "id": path,
                "kind": node.kind,
                "queue": node.queue,
                "p": None if node.payload is None else base64.b64encode(node.payload).decode(),
                "mr": node.max_retries,
                "to": node.timeout,
                "d": node.delay,
            }
        }
    if isinstance(node, Dag):
        return {"dag": _encode_dag(node, path, workflow_id)}
    out: dict[str, Any]
    if isinstance(node, Chain):
        out = {
            "chain": [_encode_node(n, f"{path}.{k}", workflow_id) for k, n in enumerate(node.links)]
        }
    else:
        out = {
            "group": [
                _encode_node(n, f"{path}.{k}", workflow_id) for k, n in enumerate(node.members)
            ],
            "id": path,
        }
        if node.allow_failures:
            out["af"] = 1
        if node.summary:
            out["sm"] = 1
    if node.on_failure is not None:
        out["of"] = _encode_on_failure(node.on_failure, path, workflow_id)
    return out


def _encode_on_failure(callback: FlowStep, scope: str, workflow_id: str) -> dict[str, Any]:
    """A failure callback as continuations carry it: the workflow's ID and
    the callback's job, whose ID is its scope's path + ``.on_failure``."""
    return {"w": workflow_id, "job": _encode_node(callback, f"{scope}.{ON_FAILURE}")["job"]}


def _size(node: Node, depth: int = 0) -> int:
    if depth > MAX_DEPTH:
        raise ValueError(f"a workflow nests at most {MAX_DEPTH} deep")
    if isinstance(node, FlowStep):
        return 1
    if isinstance(node, Dag):
        if not node.steps:
            raise ValueError("a graph needs at least one step")
        dag_order(node)  # a Dag made without Graph.freeze: names known, no cycle
        return sum(_size(s.node, depth + 1) for s in node.steps)
    if isinstance(node, Group):
        _check_group_size(len(node.members))  # a Group built without group()
    parts = node.links if isinstance(node, Chain) else node.members
    return sum(_size(n, depth + 1) for n in parts)


def start(
    node: Node, workflow_id: str, headers: Headers = (), on_failure: FlowStep | None = None
) -> Steps:
    """The first jobs of a workflow (ValueError past the limits; TypeError
    for a graph's root that starts it without a payload). Every job
    of the flow, first or later, carries ``headers`` (the producer's, made
    once when it starts): each continuation holds them once per level of
    nesting, not once per job. ``on_failure``: the workflow's failure
    callback (a chain's or group's nearer a failed step wins); TypeError
    when it cannot take a :class:`StepFailure`."""
    check_on_failure(on_failure)
    if _size(node) > MAX_JOBS:
        raise ValueError(f"a workflow has at most {MAX_JOBS} jobs")
    _check_graph_inputs(node)
    fail = None if on_failure is None else _encode_on_failure(on_failure, workflow_id, workflow_id)
    steps = _run(
        _encode_node(node, workflow_id, workflow_id), None, None, headers, workflow_id, fail
    )
    return attrs.evolve(steps, workflow=workflow_id)


def first_kind(node: Node) -> str:
    """The kind of the workflow's first step (depth first): the kind its
    producer hooks are called with."""
    return _first_steps(node)[0].kind


def final_job_id(node: Node, workflow_id: str) -> str | None:
    """The ID of the workflow's last job, when it ends with one step."""
    found = final_step(node, workflow_id)
    return found[0] if found is not None else None


def final_step(node: Node, path: str) -> tuple[str, FlowStep] | None:
    """The ID and step of the last job of ``node`` at ``path``, when it ends
    with one step (a chain's last link, a graph's one sink)."""
    while True:
        if isinstance(node, FlowStep):
            return path, node
        if isinstance(node, Chain):
            path, node = f"{path}.{len(node.links) - 1}", node.links[-1]
            continue
        if isinstance(node, Dag):
            sinks = dag_sinks(node)
            if len(sinks) == 1:
                path, node = f"{path}.{sinks[0].name}", sinks[0].node
                continue
        return None


def final_steps(node: Node, path: str) -> list[tuple[str, FlowStep]] | None:
    """The last jobs of a flow that ends in a graph of several sinks, each
    ending with one step (their results, in order, are the flow's result);
    None otherwise."""
    while isinstance(node, Chain):
        path, node = f"{path}.{len(node.links) - 1}", node.links[-1]
    if not isinstance(node, Dag):
        return None
    sinks = dag_sinks(node)
    if len(sinks) < 2:
        return None
    found = [final_step(s.node, f"{path}.{s.name}") for s in sinks]
    return None if None in found else [f for f in found if f is not None]


def predecessors(node: Node, workflow_id: str) -> dict[str, tuple[str, ...]]:
    """Each job ID of a workflow and the job IDs whose success makes it
    appear (the last jobs of the link before it; none for a first job)."""
    out: dict[str, tuple[str, ...]] = {}
    _preds(node, workflow_id, (), out)
    return out


def _preds(
    node: Node, path: str, before: tuple[str, ...], out: dict[str, tuple[str, ...]]
) -> tuple[str, ...]:
    """Fill ``out`` for ``node`` at ``path`` after ``before``; returns its last jobs."""
    if isinstance(node, FlowStep):
        out[path] = before
        return (path,)
    if isinstance(node, Chain):
        for k, link in enumerate(node.links):
            before = _preds(link, f"{path}.{k}", before, out)
        return before
    if isinstance(node, Dag):
        ends: dict[str, tuple[str, ...]] = {}
        for step in dag_order(node):
            given = tuple(j for name in step.after for j in ends[name]) if step.after else before
            ends[step.name] = _preds(step.node, f"{path}.{step.name}", given, out)
        return tuple(j for s in dag_sinks(node) for j in ends[s.name])
    lasts: tuple[str, ...] = ()
    for k, member in enumerate(node.members):
        lasts += _preds(member, f"{path}.{k}", before, out)
    return lasts


def dag_sinks(dag: Dag) -> list[DagStep]:
    """The steps of ``dag`` that no step comes after, in the order added."""
    needed = {name for s in dag.steps for name in s.after}
    return [s for s in dag.steps if s.name not in needed]


def dag_order(dag: Dag) -> list[DagStep]:
    """``dag``'s steps, each after the steps it comes after (the order added
    where that leaves a choice). ValueError when they cannot be ordered (a
    name twice, a step after an unknown name, or a cycle: ``Graph.freeze``
    names them)."""
    index = {s.name: k for k, s in enumerate(dag.steps)}
    if len(index) < len(dag.steps):
        raise ValueError("a graph names two steps alike")
    waiting = [len(set(s.after)) for s in dag.steps]
    dependents: list[list[int]] = [[] for _ in dag.steps]
    for k, s in enumerate(dag.steps):
        for name in set(s.after):
            if name not in index:
                raise ValueError(
                    f"graph step {s.name!r} comes after {name!r}, which it does not have"
                )
            dependents[index[name]].append(k)
    ready = [k for k, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    order: list[DagStep] = []
    while ready:
        k = heapq.heappop(ready)
        order.append(dag.steps[k])
        for d in dependents[k]:
            waiting[d] -= 1
            if waiting[d] == 0:
                heapq.heappush(ready, d)
    if len(order) < len(dag.steps):
        raise ValueError("a graph has a cycle")
    return order


def _check_graph_inputs(node: Node) -> None:
    """TypeError when a graph's root starts the workflow without a payload
    (there is no predecessor's result for it to take)."""
    if isinstance(node, Chain):
        _check_graph_inputs(node.links[0])
    elif isinstance(node, Group):
        for member in node.members:
            _check_graph_inputs(member)
    elif isinstance(node, Dag):
        for step in node.steps:
            if step.after:
                continue
            for first in _first_steps(step.node):
                if first.payload is None:
                    raise TypeError(
                        f"graph step {step.name!r} ({first.kind!r}) starts the workflow, so "
                        "there is no result before it to take: give it a payload"
                    )


def _encode_dag(dag: Dag, path: str, workflow_id: str = "") -> dict[str, Any]:
    return {
        "id": path,
        "steps": [
            {
                "name": s.name,
                "after": list(s.after),
                "node": _encode_node(s.node, f"{path}.{s.name}", workflow_id),
            }
            for s in dag.steps
        ],
    }
