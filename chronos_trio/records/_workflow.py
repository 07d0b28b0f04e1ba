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
import itertools
import json
from collections.abc import Sequence
from typing import Any

import attrs

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
    a payload of its own."""

    links: tuple[Node, ...]


@attrs.frozen
class Group:
    """Members run in parallel; what follows gets their results, in member
    order, as a list."""

    members: tuple[Node, ...]


Node = FlowStep | Chain | Group


def chain(*links: Node) -> Chain:
    """A chain of steps, chains or groups (ValueError when empty; TypeError
    when a link cannot take its predecessor's result)."""
    if not links:
        raise ValueError("a chain needs at least one link")
    flat: list[Node] = []
    for link in links:
        flat.extend(link.links if isinstance(link, Chain) else (link,))
    for before, after in itertools.pairwise(flat):
        _check_feeds(before, after)
    return Chain(tuple(flat))


def group(*members: Node) -> Group:
    """A group of steps, chains or groups (ValueError when empty or over
    :data:`MAX_GROUP_MEMBERS` members)."""
    if not members:
        raise ValueError("a group needs at least one member")
    _check_group_size(len(members))
    return Group(tuple(members))


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
    return list


def _first_steps(node: Node) -> list[FlowStep]:
    if isinstance(node, FlowStep):
        return [node]
    if isinstance(node, Chain):
        return _first_steps(node.links[0])
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
def _encode_node(node: Node, path: str) -> dict[str, Any]:
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
    if isinstance(node, Chain):
        return {"chain": [_encode_node(n, f"{path}.{k}") for k, n in enumerate(node.links)]}
    return {
        "group": [_encode_node(n, f"{path}.{k}") for k, n in enumerate(node.members)],
        "id": path,
    }


def _size(node: Node, depth: int = 0) -> int:
    if depth > MAX_DEPTH:
        raise ValueError(f"a workflow nests at most {MAX_DEPTH} deep")
    if isinstance(node, FlowStep):
        return 1
    if isinstance(node, Group):
        _check_group_size(len(node.members))  # a Group built without group()
    parts = node.links if isinstance(node, Chain) else node.members
    return sum(_size(n, depth + 1) for n in parts)


@attrs.frozen
class Arrival:
    """A group member's result, to record: when all ``size`` are in,
    :func:`after_group` says what follows."""

    group_id: str
    index: int
    size: int
    result: bytes | None
    after: Any  # the group's own continuation (decoded JSON)


@attrs.frozen
class Steps:
    """What one continuation asks for: jobs to enqueue, group arrivals to record."""

    jobs: tuple[NewJob, ...] = ()
    arrivals: tuple[Arrival, ...] = ()


def start(node: Node, workflow_id: str, headers: Headers = ()) -> Steps:
    """The first jobs of a workflow (ValueError past the limits). Every job
    of the flow, first or later, carries ``headers`` (the producer's, made
    once when it starts): each continuation holds them once per level of
    nesting, not once per job."""
    if _size(node) > MAX_JOBS:
        raise ValueError(f"a workflow has at most {MAX_JOBS} jobs")
    return _run(_encode_node(node, workflow_id), None, None, headers)


def first_kind(node: Node) -> str:
    """The kind of the workflow's first step (depth first): the kind its
    producer hooks are called with."""
    return _first_steps(node)[0].kind


def final_job_id(node: Node, workflow_id: str) -> str | None:
    """The ID of the workflow's last job, when it ends with one step."""
    path, n = workflow_id, node
    while isinstance(n, Chain):
        path, n = f"{path}.{len(n.links) - 1}", n.links[-1]
    return path if isinstance(n, FlowStep) else None


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
    lasts: tuple[str, ...] = ()
    for k, member in enumerate(node.members):
        lasts += _preds(member, f"{path}.{k}", before, out)
    return lasts


def advance(then: str, result: bytes | None) -> Steps:
    """What a job's continuation ``then`` asks for now that it succeeded with
    ``result`` (ValueError naming the problem for a damaged continuation)."""
    try:
        after = json.loads(then)
    except ValueError as exc:
        raise ValueError(f"damaged workflow continuation: {exc}") from None
    return _apply(after, result)


def after_group(arrival: Arrival, results: Sequence[bytes | None]) -> Steps:
    """What follows a complete group: its continuation on the members' results
    as a JSON list (a member that kept no result is null)."""
    joined = b"[" + b",".join(r if r is not None else b"null" for r in results) + b"]"
    return _apply(arrival.after, joined)


def _apply(after: Any, result: bytes | None) -> Steps:
    if after is None:
        return Steps()
    if not isinstance(after, dict):
        raise ValueError(f"damaged workflow continuation: {after!r}")
    if "seq" in after:
        rest = after["seq"]
        node = rest[0] if len(rest) == 1 else {"chain": rest}
        return _run(node, result, after.get("after"), _headers_of(after))
    if "grp" in after:
        return Steps(
            arrivals=(
                Arrival(after["grp"], int(after["i"]), int(after["n"]), result, after.get("after")),
            )
        )
    raise ValueError(f"damaged workflow continuation: {after!r}")


def _headers_of(after: dict[str, Any]) -> Headers:
    """The headers a continuation carries (``"h"``; none: no headers)."""
    given = after.get("h")
    if given is None:
        return ()
    try:
        return check_headers(given)
    except ValueError as exc:
        raise ValueError(f"damaged workflow continuation: headers: {exc}") from None


def _run(node: dict[str, Any], value: bytes | None, after: Any, headers: Headers) -> Steps:
    """The jobs that start ``node`` on ``value``, then ``after``, each with
    ``headers``; every continuation made here carries them on (``"h"``)."""
    carried = {"h": dict(headers)} if headers else {}
    if "job" in node:
        j = node["job"]
        then = json.dumps(after, separators=(",", ":")) if after is not None else None
        if then is not None and len(then) > MAX_CONTINUATION_BYTES:
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
        links = node["chain"]
        rest = {"seq": links[1:], "after": after, **carried} if len(links) > 1 else after
        return _run(links[0], value, rest, headers)
    members = node["group"]
    jobs: list[NewJob] = []
    for k, member in enumerate(members):
        member_after = {"grp": node["id"], "i": k, "n": len(members), "after": after, **carried}
        part = _run(member, value, member_after, headers)
        jobs.extend(part.jobs)
    return Steps(jobs=tuple(jobs))


# -- inspection ------------------------------------------------------------------------
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
    return f"group {node['id']} of {len(node['group'])}"


def _describe(after: Any, parts: list[str]) -> None:
    while after is not None:
        if "seq" in after:
            parts.extend(_describe_node(n) for n in after["seq"])
        else:
            parts.append(f"member {after['i']} of group {after['grp']} ({after['n']} in all)")
        after = after.get("after")
