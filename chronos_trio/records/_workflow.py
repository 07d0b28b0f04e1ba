"""Workflows as data: chains, groups and the continuation each job carries
(see docs/workflows.md). Pure functions, no I/O: what to enqueue when a
workflow starts, and what a finished job's continuation asks for.

A job of a workflow carries its continuation (``NewJob.then``, JSON text):
what to do with its result when it succeeds. The store keeps it with the
job and, in the fenced success settle, puts the job in its outbox; the
worker's continuer then calls :func:`advance` and enqueues what it returns
(under deterministic IDs, so doing it twice changes nothing).
"""

from __future__ import annotations

import base64
import heapq
import itertools
import json
import re
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from . import _flow_json as flow_json
from ._attrs_methods import fields_eq, fields_hash, fields_repr
from ._flow_outcomes import BatchSummary, MemberOutcome, StepFailure
from ._jobs import NewJob
from ._options import check_headers

#: How long a finished workflow job's record is kept (s): the continuer's
#: deterministic IDs make a repeated step a no-op while the jobs it made exist.
WORKFLOW_KEEP = 24 * 3600.0
#: Limits of one workflow.
MAX_DEPTH = 16
#: Members of one group, at most: a group's completion reads all their
#: results in one step, and its callback's payload is their list.
MAX_GROUP_MEMBERS = 1000
MAX_JOBS = 10_000
MAX_CONTINUATION_BYTES = 64 * 1024

#: How a continuation that holds failure handling starts (key ``"f"`` first:
#: the innermost ``on_failure`` in effect, or null inside a group that allows
#: failures). The stores' dead settle puts such a job in the outbox too, and
#: looks no further than this prefix (a record-format constant, like the
#: continuation's place in the record).
FAILURE_MARK = '{"f":'
#: How a failed member's outcome starts, as a group that allows failures
#: records it (``_outcome_json``): the stores count failed members by it.
FAILED_OUTCOME = b'{"ok":false'
#: A continuation that asks for nothing (:func:`nothing_follows`): a flow's
#: last step's (its workflow's ID, after the flow's headers if it has any)
#: and a failure callback's (none). settle.lua's ``nothing_follows``
#: (lua/lib/nothing_follows.lua) matches the same texts with Lua patterns.
_NOTHING_FOLLOWS = re.compile(r'\{\}|\{(?:"h":\{[^{}]*\},)?"wf":"[^"\\]*"\}')
#: The suffix of a failure callback's job ID (``<scope path>.on_failure``).
ON_FAILURE = "on_failure"

#: A job's headers, as ``NewJob.headers`` holds them.
Headers = tuple[tuple[str, str], ...]


class _FromPrevious:
    def __repr__(self) -> str:
        return "FROM_PREVIOUS"


#: A link's payload when it takes its predecessor's result (a sentinel, so
#: that None stays a payload of its own).
FROM_PREVIOUS: Any = _FromPrevious()


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


@attrs.frozen
class Arrival:
    """A group member's result, to record: when all ``size`` are in,
    :func:`after_group` says what follows."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    group_id: str
    index: int
    size: int
    result: bytes | None
    after: Any  # the group's own continuation (decoded JSON)
    #: The workflow's ID, when the continuation carries it (``"wf"``; a
    #: continuation written by an older worker does not): what the
    #: continuer checks for a cancel before it records the arrival.
    workflow: str | None = None


@attrs.frozen
class Steps:
    """What one continuation asks for: jobs to enqueue, group arrivals to record."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    jobs: tuple[NewJob, ...] = ()
    arrivals: tuple[Arrival, ...] = ()
    #: The workflow ``jobs`` belong to, when known (see :attr:`Arrival.workflow`).
    workflow: str | None = None


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


def advance(then: str, result: bytes | None, job_id: str = "") -> Steps:
    """What a job's continuation ``then`` asks for now that job ``job_id``
    succeeded with ``result`` (ValueError naming the problem for a damaged
    continuation)."""
    return _apply(_load(then), result, job_id)


def chain_successor(then: str, result: bytes | None, job_id: str = "") -> Steps | None:
    """The one job that follows job ``job_id`` of a chain, when its
    success makes exactly one ordinary job due now: a continuation whose
    next step is a chain's next link (``"seq"``, not a group member, a
    graph step or a batch), that job without a delay, a unique key or
    flow control (limits, priority, expiry). None in every other case
    (then the outbox path handles it, as ever), a damaged continuation
    included (the continuer reports it). Never raises.

    What the settle of such a job may enqueue in its own step
    (``Settlement.successor``): the very job :func:`advance` makes, under
    its deterministic ID."""
    try:
        made = _MADE.pop(then, None)
        if made is not None:
            _made_chars[0] -= len(then)
        elif '"seq":' not in then:
            return None  # no chain link (a flow's last step, a group member, ...)
        after = made if made is not None else _load(then)
        if not isinstance(after, dict) or "seq" not in after:
            return None
        steps = _next_link(after, result, then if made is not None else None)
        if steps is None:
            steps = _apply(after, result, job_id)
    except (ValueError, TypeError, KeyError, IndexError):
        return None
    if len(steps.jobs) != 1 or steps.arrivals:
        return None
    job = steps.jobs[0]
    if job.delay > 0 or job.run_at is not None or job.unique is not None or job.control:
        return None
    return steps


#: The continuations :func:`_next_link` wrote lately, by their text, decoded
#: (its own output, so the text is exactly ``flow_json.dumps`` of it): a
#: link whose success this worker settles reads its continuation from here
#: instead of decoding it (its predecessor's settle, here, wrote it). Each is
#: taken once; past :data:`_MADE_MOST` entries or :data:`_MADE_CHARS`
#: characters of text they are all dropped (a miss only costs the decode).
#: Never mutated: every walk builds new dicts.
_MADE: dict[str, dict[str, Any]] = {}
_MADE_MOST = 8192
_MADE_CHARS = 4 << 20
#: Continuations longer than this (characters) are not kept in :data:`_MADE`.
_MADE_LONGEST = 8192
#: The characters of the texts in :data:`_MADE` (about: threads may race it).
_made_chars = [0]
_SEQ_OPEN = '{"seq":['


def _next_link(
    after: dict[str, Any], result: bytes | None, text: str | None = None
) -> Steps | None:
    """What :func:`_apply` makes of a chain link's continuation ``after``
    (``"seq"``, decoded) in the common case, worked out directly (a chain's
    every link pays for it): its next link is one step, more links follow
    it or it is the flow's last step (nothing after the chain), and no
    failure handling is in effect. None in every other case, which the
    general walk decides. ``text``: ``after``'s text when it is exactly
    ``flow_json.dumps(after)`` (one this function wrote): the next
    continuation is then cut from it rather than encoded. Raises as
    :func:`_apply` does (a damaged continuation; one over
    :data:`MAX_CONTINUATION_BYTES`)."""
    rest = after["seq"]
    if type(rest) is not list or not rest or after.get("fl") is not None:
        return None
    first = rest[0]
    if type(first) is not dict or "job" not in first:
        return None
    outer = after.get("after")
    if len(rest) == 1:
        return None if outer is not None else _last_link(after, first["job"], result)
    if outer is not None and _allows_failures(outer):
        return None
    headers = _headers_of(after)
    wf = _workflow_of(after)
    # the continuation _run writes for the link: the links after it, then
    # what follows the chain, the headers and the workflow (the same keys,
    # in the same order)
    nxt: dict[str, Any] = {"seq": rest[1:], "after": outer}
    if headers:
        nxt["h"] = dict(headers)
    if wf is not None:
        nxt["wf"] = wf
    then = None
    if text is not None and text.isascii():
        # text is '{"seq":[' + the first link's JSON + ',' + the rest, which
        # is the next continuation's text after its '{"seq":[' (compact JSON
        # of the same values; ASCII: the fallback encoder writes it alike)
        first_text = flow_json.orjson_text(first)
        cut = len(_SEQ_OPEN) + len(first_text or "") + 1
        if (
            first_text is not None
            and text.startswith(_SEQ_OPEN)
            and text.startswith(first_text, len(_SEQ_OPEN))
            and text[cut - 1 : cut] == ","
        ):
            then = _SEQ_OPEN + text[cut:]
    if then is None:
        then = _encoded(nxt)
    job = _link_job(first["job"], result, headers, then)
    if len(then) <= _MADE_LONGEST:
        if len(_MADE) >= _MADE_MOST or _made_chars[0] + len(then) > _MADE_CHARS:
            _MADE.clear()
            _made_chars[0] = 0
        _MADE[then] = nxt
        _made_chars[0] += len(then)
    return Steps(jobs=(job,), workflow=wf)


def _last_link(after: dict[str, Any], j: dict[str, Any], result: bytes | None) -> Steps:
    """:func:`_next_link` when the next link is the chain's last and nothing
    follows the chain: that job, its continuation only the flow's headers
    and workflow (``{"wf":ID}``, what :func:`_run` writes for a flow's last
    step; none without a workflow), as :func:`_apply` makes it."""
    headers = _headers_of(after)
    wf = _workflow_of(after)
    then = None
    if wf is not None:
        then = _encoded({"h": dict(headers), "wf": wf} if headers else {"wf": wf})
    return Steps(jobs=(_link_job(j, result, headers, then),), workflow=wf)


def _encoded(after: dict[str, Any]) -> str:
    """The text of continuation ``after`` as :func:`_run` writes it;
    ValueError when it is over :data:`MAX_CONTINUATION_BYTES`."""
    then = flow_json.dumps(after)
    if flow_json.size(then) > MAX_CONTINUATION_BYTES:
        raise ValueError(f"a workflow step's continuation is over {MAX_CONTINUATION_BYTES} bytes")
    return then


def _link_job(
    j: dict[str, Any], result: bytes | None, headers: Headers, then: str | None
) -> NewJob:
    """The job of a chain's next link ``j`` (a step's ``"job"``) on its
    predecessor's ``result``, as :func:`_run` makes it."""
    p = j["p"]
    return NewJob(
        id=j["id"], queue=j["queue"], kind=j["kind"],
        payload=base64.b64decode(p) if p is not None else (result or b"null"),
        delay=j["d"], max_retries=j["mr"], timeout=j["to"], headers=headers, then=then,
    )  # fmt: skip


def _load(then: str) -> Any:
    try:
        return flow_json.loads(then)
    except ValueError as exc:
        raise ValueError(f"damaged workflow continuation: {exc}") from None


def nothing_follows(then: str | None) -> bool:
    """Whether a job's continuation ``then`` asks for nothing when the job
    succeeds (what :func:`advance` makes of it is empty): the last step of
    a flow (``{"wf": ID}``, after the flow's headers if it has any: its
    record is kept as every step's is, :data:`WORKFLOW_KEEP`) or a failure
    callback (``{}``). The stores' success settle writes no outbox entry for
    it: the continuer would have nothing to do. Exact texts only (as
    :func:`_run` writes them): any other, even one that means the same,
    reads False and keeps the outbox path. Never raises."""
    return then is not None and _NOTHING_FOLLOWS.fullmatch(then) is not None


def holds_failure_handling(then: str | None) -> bool:
    """Whether a job's continuation asks for its failure to be handled (an
    ``on_failure`` in effect, or a group that allows failures around it):
    the stores' dead settle reads only this prefix (:data:`FAILURE_MARK`)."""
    return then is not None and then.startswith(FAILURE_MARK)


def failed(then: str, job_id: str, kind: str, error: str, attempts: int) -> Steps:
    """What a job's continuation ``then`` asks for now that job ``job_id``
    (of task ``kind``) failed for good after ``attempts`` with ``error``:
    the innermost ``on_failure`` callback in effect (its deterministic ID
    makes a second failure in its scope, or a replay, a no-op), and the
    failed arrival of the member in the nearest group that allows failures.
    Nothing for a continuation without failure handling. ValueError for a
    damaged continuation."""
    after = _load(then)
    if not isinstance(after, dict):
        raise ValueError(f"damaged workflow continuation: {after!r}")
    jobs: tuple[NewJob, ...] = ()
    spec = after.get("f")
    if spec is not None:
        payload = StepFailure(spec["w"], job_id, kind, error, attempts)
        value = json.dumps(attrs.asdict(payload), separators=(",", ":")).encode()
        # kept as a workflow job (an empty continuation): its ID stays taken
        jobs = _run({"job": spec["job"]}, value, {}, _headers_of(after)).jobs
    frame: Any = after
    while isinstance(frame, dict):
        if "grp" in frame and frame.get("af"):
            outcome = _outcome_json(MemberOutcome(False, None, error, job_id))
            arrival = _arrival(frame, outcome)
            return Steps(jobs=jobs, arrivals=(arrival,), workflow=_workflow_of(after))
        frame = frame.get("after")
    return Steps(jobs=jobs, workflow=_workflow_of(after))


def _outcome_json(outcome: MemberOutcome, raw: bytes | None = None) -> bytes:
    """A member's outcome as an allow-failures group records it (``raw``:
    its result, JSON text, placed as is)."""
    return (
        b'{"ok":' + (b"true" if outcome.ok else b"false")
        + b',"result":' + (raw if raw is not None else b"null")
        + b',"error":' + json.dumps(outcome.error).encode()
        + b',"job_id":' + json.dumps(outcome.job_id).encode() + b"}"
    )  # fmt: skip


def _arrival(frame: dict[str, Any], result: bytes | None) -> Arrival:
    return Arrival(
        frame["grp"],
        int(frame["i"]),
        int(frame["n"]),
        result,
        frame.get("after"),
        _workflow_of(frame),
    )


def after_group(arrival: Arrival, results: Sequence[bytes | None]) -> Steps:
    """What follows a complete group: its continuation on the members' results
    as a JSON list (a member that kept no result is null)."""
    joined = b"[" + b",".join(r if r is not None else b"null" for r in results) + b"]"
    return _apply(arrival.after, joined, arrival.group_id)


def _apply(after: Any, result: bytes | None, job_id: str = "") -> Steps:
    if after is None:
        return Steps()
    if not isinstance(after, dict):
        raise ValueError(f"damaged workflow continuation: {after!r}")
    if "seq" in after:
        rest = after["seq"]
        node = rest[0] if len(rest) == 1 else {"chain": rest}
        wf = _workflow_of(after)
        steps = _run(node, result, after.get("after"), _headers_of(after), wf, after.get("fl"))
        return steps if wf is None else attrs.evolve(steps, workflow=wf)
    if "grp" in after:
        if after.get("af"):
            # a member of a group that allows failures arrives as its outcome
            result = _outcome_json(MemberOutcome(True, None, None, job_id), result or b"null")
        return Steps(arrivals=(_arrival(after, result),))
    if "dag" in after:
        try:
            steps = _apply_dag(after, result, job_id)
            wf = _workflow_of(after)
            return steps if wf is None or steps.workflow else attrs.evolve(steps, workflow=wf)
        except (KeyError, TypeError, IndexError) as exc:
            raise ValueError(f"damaged workflow continuation: graph: {exc!r}") from None
    if "sum" in after:
        summary = _summary(str(after["sum"]), result)
        return _apply(after.get("after"), summary, job_id)
    if after.keys() <= {"f", "h", "wf"}:
        return Steps()  # a flow's last step (kept, nothing follows), or a callback
    raise ValueError(f"damaged workflow continuation: {after!r}")


def _workflow_of(after: dict[str, Any]) -> str | None:
    """The workflow ID a continuation carries (``"wf"``; None: none, as in
    one an older worker wrote, or not a string)."""
    wf = after.get("wf")
    return wf if isinstance(wf, str) else None


def _batch_id(group_id: str) -> str:
    """A batch's ID from its group's (``<batch id>.0``)."""
    return group_id.removesuffix(".0")


def _summary(batch_id: str, joined: bytes | None) -> bytes:
    """A batch's :class:`BatchSummary` (JSON) from its members' outcomes
    (the JSON list a complete group hands on)."""
    try:
        outcomes = json.loads(joined or b"[]")
        failed = [o["job_id"] for o in outcomes if not o["ok"]]
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"damaged batch outcomes: {exc}") from None
    total = len(outcomes)
    summary = BatchSummary(batch_id, total, total - len(failed), len(failed), failed)
    return json.dumps(attrs.asdict(summary), separators=(",", ":")).encode()


def _headers_of(after: dict[str, Any]) -> Headers:
    """The headers a continuation carries (``"h"``; none: no headers)."""
    given = after.get("h")
    if given is None:
        return ()
    try:
        return check_headers(given)
    except ValueError as exc:
        raise ValueError(f"damaged workflow continuation: headers: {exc}") from None


def _allows_failures(after: Any) -> bool:
    """Whether a group that allows failures encloses the continuation ``after``."""
    while isinstance(after, dict):
        if after.get("af"):
            return True
        after = after.get("after")
    return False


def _run(
    node: dict[str, Any],
    value: bytes | None,
    after: Any,
    headers: Headers,
    workflow: str | None = None,
    fail: dict[str, Any] | None = None,
) -> Steps:
    """The jobs that start ``node`` on ``value``, then ``after``, each with
    ``headers``; every continuation made here carries them on (``"h"``),
    and the workflow's ID when known (``"wf"``, for the cancel check).
    ``fail``: the innermost failure callback in effect (None: none)."""
    carried: dict[str, Any] = {"h": dict(headers)} if headers else {}
    if workflow is not None:
        carried["wf"] = workflow
    if "job" in node:
        j = node["job"]
        if fail is not None or _allows_failures(after):
            # failure handling first: the stores' dead settle reads the prefix
            after = {"f": fail, **(after or {}), **carried}
        elif after is None and workflow is not None:
            # the flow's last step: an empty continuation, so that its record
            # is kept as every step's is (WORKFLOW_KEEP): a replayed entry of
            # the step before it (a continuer that died before finishing it)
            # finds its ID taken instead of running it again
            after = carried
        then = flow_json.dumps(after) if after is not None else None
        if then is not None and flow_json.size(then) > MAX_CONTINUATION_BYTES:
            raise ValueError(
                f"a workflow step's continuation is over {MAX_CONTINUATION_BYTES} bytes"
            )
        payload = base64.b64decode(j["p"]) if j["p"] is not None else (value or b"null")
        job = NewJob(
            id=j["id"], queue=j["queue"], kind=j["kind"], payload=payload, delay=j["d"],
            max_retries=j["mr"], timeout=j["to"], headers=headers, then=then,
        )  # fmt: skip
        return Steps(jobs=(job,))
    if "chain" in node:
        fail = node.get("of", fail)
        links = node["chain"]
        rest = after
        if len(links) > 1:
            rest = {"seq": links[1:], "after": after, **carried}
            if fail is not None:
                rest["fl"] = fail
        return _run(links[0], value, rest, headers, workflow, fail)
    if "dag" in node:
        return _run_dag(node["dag"], value, after, headers, workflow, fail)
    members = node["group"]
    # a failure inside a group that allows them is the member's outcome
    fail = node.get("of", None if node.get("af") else fail)
    if node.get("sm"):
        # a batch: what follows gets the summary of the members' outcomes
        # (its callback, the flow's last step, is kept as every last step is)
        after = {"sum": _batch_id(node["id"]), "after": after}
    jobs: list[NewJob] = []
    for k, member in enumerate(members):
        member_after = {"grp": node["id"], "i": k, "n": len(members), "after": after, **carried}
        if node.get("af"):
            member_after["af"] = 1
        part = _run(member, value, member_after, headers, workflow, fail)
        jobs.extend(part.jobs)
    return Steps(jobs=tuple(jobs))


# -- inspection ------------------------------------------------------------------------
def batch_of(then: str | None) -> str | None:
    """The ID of the batch a job is a member of, from its continuation
    (``App.enqueue_batch``); None for any other job. Never raises."""
    if not then or '"sum"' not in then:
        return None
    try:
        after = json.loads(then)
        if "grp" not in after or not after.get("af"):
            return None
        batch = after["after"]["sum"]
    except (ValueError, KeyError, TypeError):
        return None
    return batch if isinstance(batch, str) else None


def describe(then: str | None) -> str:
    """What follows a workflow job, for people: ``-`` for none, else the steps
    that wait behind it (their kinds and IDs) and the groups it belongs to.
    Never raises (a damaged continuation says so)."""
    if not then:
        return "-"
    try:
        after = json.loads(then)
        parts: list[str] = []
        _describe(after, parts)
    except (ValueError, KeyError, TypeError, IndexError):
        return "a damaged workflow continuation (nothing follows it)"
    return " -> ".join(parts) if parts else "nothing (the last step)"


def _describe_node(node: dict[str, Any]) -> str:
    if "job" in node:
        return f"{node['job']['kind']} ({node['job']['id']})"
    if "chain" in node:
        return " -> ".join(_describe_node(n) for n in node["chain"])
    if "dag" in node:
        return f"graph {node['dag']['id']} of {len(node['dag']['steps'])} steps"
    return f"group {node['id']} of {len(node['group'])}"


def _describe(after: Any, parts: list[str]) -> None:
    spec = after.get("f") if isinstance(after, dict) else None
    while after is not None:
        if "seq" in after:
            parts.extend(_describe_node(n) for n in after["seq"])
        elif "dag" in after:
            part = _describe_dag(after)
            if part:
                parts.append(part)
        elif "grp" in after:
            allows = ", failures allowed" if after.get("af") else ""
            parts.append(
                f"member {after['i']} of group {after['grp']} ({after['n']} in all{allows})"
            )
        after = after.get("after")
    if spec is not None:
        parts.append(f"on failure: {_describe_node({'job': spec['job']})}")


# -- graphs ------------------------------------------------------------------------------
# A graph's jobs carry the part of the graph that can still run after them
# (``{"dag": {"id", "steps", "sinks"}}``: every step after the job's step, directly or
# not, with its name, the names it comes after and its node; the job's own step without
# its node; the sinks' names when several join for what follows the graph) and their
# step (``"done"``). When that step succeeds, what follows it is read off that part:
# each step that comes after it alone is run on its result; each step that comes after
# several waits at a join, a group of its own (``<step id>:join``, the finished step's
# place in its ``after`` the index), whose completion runs it (``"run"``) on their
# results in ``after`` order. A sink hands its result to what follows the graph
# (through ``<graph id>:sinks`` when there are several). The steps below are carried
# once each, not a fan-out copied into each continuation: a chain of diamonds would
# double its continuations at every level.
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


def _dag_then(
    dag: dict[str, Any],
    name: str,
    after: Any,
    headers: Headers,
    *,
    key: str = "done",
    workflow: str | None = None,
    fail: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The continuation of graph step ``name`` (``key="done"``), or of the
    join before it (``key="run"``): the graph, the step, what follows the
    graph, the flow's headers and its workflow ID (when known)."""
    then: dict[str, Any] = {"dag": dag, key: name}
    if after is not None:
        then["after"] = after
    if fail is not None:
        then["fl"] = fail  # the failure callback in effect for the graph's steps
    if headers:
        then["h"] = dict(headers)
    if workflow is not None:
        then["wf"] = workflow
    return then


def _dag_part(
    dag: dict[str, Any], name: str, dependents: dict[str, list[str]], *, keep: bool
) -> dict[str, Any]:
    """What a continuation at graph step ``name`` carries of ``dag``: the
    steps after it, directly or not (what can still run from there), and
    the step itself, its node only when ``keep`` (a join's step, still to
    run); the sinks' names when ``dag`` has them."""
    below = {name}
    todo = [name]
    while todo:
        for after in dependents.get(todo.pop(), ()):
            if after not in below:
                below.add(after)
                todo.append(after)
    steps = [
        s if s["name"] != name or keep else {"name": name, "after": s["after"]}
        for s in dag["steps"]
        if s["name"] in below
    ]
    part = {"id": dag["id"], "steps": steps}
    if "sinks" in dag:
        part["sinks"] = dag["sinks"]
    return part


def _dependents(steps: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each step name and the names of the steps right after it."""
    out: dict[str, list[str]] = {}
    for s in steps:
        for name in s["after"]:
            out.setdefault(name, []).append(s["name"])
    return out


def _run_dag(
    dag: dict[str, Any],
    value: bytes | None,
    after: Any,
    headers: Headers,
    workflow: str | None = None,
    fail: dict[str, Any] | None = None,
) -> Steps:
    """The jobs that start a graph on ``value``: its roots (a root without a
    payload of its own takes ``value``). Each root's continuation carries
    the rest of the graph, so the roots' are the largest of the graph's."""
    dependents = _dependents(dag["steps"])
    sinks = [s["name"] for s in dag["steps"] if s["name"] not in dependents]
    if len(sinks) > 1 and after is not None:  # they join for what follows the graph
        dag = {**dag, "sinks": sinks}
    jobs: list[NewJob] = []
    for s in dag["steps"]:
        if not s["after"]:
            part = _dag_part(dag, s["name"], dependents, keep=False)
            then = _dag_then(part, s["name"], after, headers, workflow=workflow, fail=fail)
            jobs.extend(_run(s["node"], value, then, headers, workflow, fail).jobs)
    return Steps(jobs=tuple(jobs))


def _apply_dag(then: dict[str, Any], result: bytes | None, job_id: str = "") -> Steps:
    """What follows a graph step that succeeded with ``result`` (``"done"``),
    or a join that completed on its inputs' list (``"run"``)."""
    dag, after, headers = then["dag"], then.get("after"), _headers_of(then)
    wf = _workflow_of(then)
    fail = then.get("fl")
    steps: list[dict[str, Any]] = dag["steps"]
    dependents = _dependents(steps)
    if "run" in then:
        name = then["run"]
        step = next((s for s in steps if s["name"] == name), None)
        if step is None:
            raise KeyError(f"no step {name!r}")
        part = _dag_part(dag, name, dependents, keep=False)
        return _run(
            step["node"],
            result,
            _dag_then(part, name, after, headers, workflow=wf, fail=fail),
            headers,
            wf,
            fail,
        )
    done = then["done"]
    if not any(s["name"] == done for s in steps):
        raise KeyError(f"no step {done!r}")
    jobs: list[NewJob] = []
    arrivals: list[Arrival] = []
    nexts = dependents.get(done, [])
    for s in steps:
        if s["name"] not in nexts:
            continue
        deps, name = s["after"], s["name"]
        if len(deps) == 1:
            part = _dag_part(dag, name, dependents, keep=False)
            then_of = _dag_then(part, name, after, headers, workflow=wf, fail=fail)
            jobs.extend(_run(s["node"], result, then_of, headers, wf, fail).jobs)
        else:
            part = _dag_part(dag, name, dependents, keep=True)
            run = _dag_then(part, name, after, headers, key="run", workflow=wf, fail=fail)
            join = f"{dag['id']}.{name}:join"
            arrivals.append(Arrival(join, deps.index(done), len(deps), result, run, wf))
    if nexts or after is None:
        return Steps(jobs=tuple(jobs), arrivals=tuple(arrivals))
    # a sink: what follows the graph gets its result (or all the sinks', joined)
    sinks: list[str] = dag.get("sinks", [done])
    if len(sinks) == 1:
        return _apply(after, result, job_id)
    arrival = Arrival(f"{dag['id']}:sinks", sinks.index(done), len(sinks), result, after, wf)
    return Steps(arrivals=(arrival,))


def _describe_dag(then: dict[str, Any]) -> str:
    """What comes next in a graph after the step ``then`` carries (empty for a sink)."""
    dag, steps = then["dag"], then["dag"]["steps"]
    if "run" in then:
        step = next(s for s in steps if s["name"] == then["run"])  # none: damaged
        return f"{_describe_node(step['node'])} (graph {dag['id']}: its inputs are in)"
    done = then["done"]
    nexts: list[str] = []
    for s in steps:
        deps = s["after"]
        if done not in deps:
            continue
        if len(deps) == 1:
            nexts.append(_describe_node(s["node"]))
        else:
            nexts.append(
                f"{_describe_node(s['node'])} once its {len(deps)} inputs are in "
                f"(this is input {deps.index(done)})"
            )
    if not nexts:
        return ""
    return f"graph {dag['id']} after {done}: " + "; ".join(nexts)
