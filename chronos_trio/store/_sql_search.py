"""Searching jobs on the SQL stores (PostgreSQL and SQLite share it): one
bounded keyset scan that narrows in SQL, then the whole rows of its hits.

A call runs two statements in one read: the scan walks ``jobs`` by its
primary key (``id``, after the cursor's), filtered in SQL by everything a
column holds (queue, shown state, kind, the three time ranges) and stopped
at ``scan_limit`` rows, each row answering whether the text filters
(error, payload, worker) hold; then the hits' whole rows (with their
attempt history) are read and judged once more by ``store._search.matches``
(SQL's ``lower`` may fold more than ASCII letters; a worker's name may
appear in an error's text). So a call reads at most ``scan_limit`` rows of
the primary key's order (an index walk, never a sort of the table), and a
page costs O(rows scanned); no index is added for it, so writes pay
nothing. A column filter that holds for few rows makes the database walk
many rows per row it returns: that walk is inside one statement (the
database's own speed, no row sent back), bounded by the table.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ..records._jobs import Job, JobState
from ._search import (
    JobQuery,
    SearchPage,
    TimeRange,
    ascii_lower,
    bad_cursor,
    encode_cursor,
    matches,
)

#: Rows listed by reads (as ``_inspect.LISTED`` of both stores).
_LISTED = "NOT discarded AND (state <> 'succeeded' OR retained)"


@attrs.frozen
class Dialect:
    """How one SQL store spells what the scan needs."""

    #: The placeholder of a named parameter (``:name``, ``%(name)s``).
    param: Callable[[str], str]
    #: Whether ``haystack`` (an expression) contains parameter ``needle``: (haystack, needle).
    contains: Callable[[str, str], str]
    #: The same for the payload column (bytes) and a bytes parameter.
    payload_contains: Callable[[str], str]
    #: The error column lowered, and whether the needle is lowered in SQL too.
    lowered_error: str


def _range(d: Dialect, column: str, name: str, r: TimeRange, params: dict[str, Any]) -> list[str]:
    out = []
    if r.start is not None:
        params[f"{name}_from"] = float(r.start)
        out.append(f"{column} >= {d.param(name + '_from')}")
    if r.end is not None:
        params[f"{name}_to"] = float(r.end)
        out.append(f"{column} < {d.param(name + '_to')}")
    return out


def _state_term(d: Dialect, state: JobState) -> str:
    """Rows shown in ``state`` at the time of parameter ``now`` (a due
    scheduled or retry_wait job is shown ready), written on the ``state``
    column itself, so the database can use its partial indexes."""
    now = d.param("now")
    if state is JobState.READY:
        due = f"(state = 'scheduled' OR state = 'retry_wait') AND run_at <= {now}"
        return f"(state = 'ready' OR ({due}))"
    if state in (JobState.SCHEDULED, JobState.RETRY_WAIT):
        return f"(state = '{state.value}' AND run_at > {now})"
    return f"state = '{state.value}'"


def scan_statement(
    d: Dialect, query: JobQuery, after: str | None, scan_limit: int, now: float, limit: int
) -> tuple[str, dict[str, Any]]:
    """The scan: ``SELECT id, hit`` of at most ``scan_limit`` rows after
    ``after`` (an id), in id order, narrowed by the query's column filters
    (at most ``limit`` rows when there is no text filter: every row is a hit)."""
    p = d.param
    params: dict[str, Any] = {"now": now, "scan": scan_limit}
    where = [_LISTED]
    if after is not None:
        params["after"] = after
        where.append(f"id > {p('after')}")
    if query.queues:
        names = []
        for n, queue in enumerate(query.queues):
            params[f"q{n}"] = queue
            names.append(f"queue = {p(f'q{n}')}")
        where.append("(" + " OR ".join(names) + ")")
    if query.states:
        where.append("(" + " OR ".join(_state_term(d, s) for s in query.states) + ")")
    if query.kind:
        params["kind"] = query.kind
        where.append(f"kind = {p('kind')}")
    where += _range(d, "created_at", "created", query.created, params)
    where += _range(d, "finished_at", "finished", query.finished, params)
    where += _range(d, "run_at", "due", query.due, params)
    hits = []
    if query.error:
        params["error"] = ascii_lower(query.error)
        hits.append(d.contains(d.lowered_error, "error"))
    if query.payload:
        params["payload"] = query.payload.encode("utf-8", "surrogatepass")
        hits.append(d.payload_contains("payload"))
    if query.worker:
        params["worker"] = query.worker
        # encode_attempt writes the worker as a JSON string (ensure_ascii off)
        params["worker_json"] = json.dumps(query.worker, ensure_ascii=False)
        hits.append(
            f"(lease_owner = {p('worker')} OR "
            + d.contains("coalesce(attempt_history, '')", "worker_json")
            + ")"
        )
    hit = "(" + " AND ".join(hits) + ")" if hits else "(1 = 1)"
    if not hits:  # every row the scan returns is a hit: no more rows than a page
        params["scan"] = min(scan_limit, limit)
    text = (
        f"SELECT id, CASE WHEN {hit} THEN 1 ELSE 0 END FROM jobs"
        f" WHERE {' AND '.join(where)} ORDER BY id LIMIT {p('scan')}"
    )
    return text, params


def page_from_scan(
    scanned: Sequence[tuple[str, int]],
    jobs_of: Callable[[list[str]], list[Job]],
    query: JobQuery,
    limit: int,
    scan_limit: int,
) -> SearchPage:
    """The page of a scan's rows (``(id, hit)`` in id order): its first
    ``limit`` hits read whole by ``jobs_of`` (ids -> jobs, in any order)
    and judged by :func:`matches`, and the cursor after the last row used."""
    hit_ids: list[str] = []
    used = 0
    for job_id, hit in scanned:
        used += 1
        if hit:
            hit_ids.append(job_id)
            if len(hit_ids) >= limit:
                break
    by_id = {job.id: job for job in jobs_of(hit_ids)} if hit_ids else {}
    found = tuple(by_id[i] for i in hit_ids if i in by_id and matches(by_id[i], query))
    more = len(hit_ids) >= limit or len(scanned) >= scan_limit
    if not more:
        return SearchPage(found, None, used)
    cursor = encode_cursor([scanned[used - 1][0]])
    return SearchPage(found, cursor, used, partial=len(hit_ids) < limit)


def cursor_after(position: Any, cursor: str) -> str:
    """The id a SQL store's cursor goes on after; ``ValueError`` otherwise."""
    if not (isinstance(position, list) and len(position) == 1 and isinstance(position[0], str)):
        raise bad_cursor(cursor)
    return position[0]


__all__ = ["Dialect", "cursor_after", "page_from_scan", "scan_statement"]
