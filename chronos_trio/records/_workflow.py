"""Workflows as data, the part that runs them: the continuation each job
carries (see docs/workflows.md), the limits and record-format constants the
stores read. Pure functions, no I/O: what a finished job's continuation asks
for. What builds a workflow (its step, chain, group and graph classes,
:func:`~._flow_build.chain`, :func:`~._flow_build.start`) is
``records._flow_build``, loaded only where one is started.

A job of a workflow carries its continuation (``NewJob.then``, JSON text):
what to do with its result when it succeeds. The store keeps it with the
job and, in the fenced success settle, puts the job in its outbox; the
worker's continuer then calls :func:`advance` and enqueues what it returns
(under deterministic IDs, so doing it twice changes nothing).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Sequence
from typing import Any

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
