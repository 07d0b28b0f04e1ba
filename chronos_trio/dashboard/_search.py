"""The dashboard's search page and bulk actions.

``GET /search``: a form (queue, state, kind, error and payload text,
worker, created/finished/due times) whose filters are the URL's
parameters (``app._search_params``), so a search can be linked; one page
of results per request, and "Next page" with the store's cursor (a page
that stopped at the store's scan bound says so and offers "Keep
searching"). Unless the dashboard is read-only, each row has a checkbox
and the page offers the bulk actions (requeue, run now, delete, abort) on
the selected rows or on every job matching the search.

``GET /search/confirm``: the one confirmation page, stating how many jobs
the action applies to (every match is counted, up to a bound of records
read: past it the page says "at least N"). Its form POSTs to
``/search/bulk``.

``POST /search/bulk`` (read-only: 403; then the Origin and CSRF checks of
``_actions``): selected rows are acted on in this request (a page holds
at most 500); "every job matching" runs one step of at most
:data:`STEP` jobs per request (``app._bulk``), and while more are left it
answers a progress page whose form carries the step's cursor and the
counts so far and is submitted again by dashboard.js (or by the operator's
click, without script): a large set never holds one request or the store
for long, and closing the page stops it between two steps. The last step
redirects to the search with a one-time message of what was done.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from urllib.parse import urlencode

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..app._bulk import BulkAction, BulkResult, count_matching, source_states
from ..app._search_params import PARAMS, TEXT_FILTERS, TIME_FILTERS, describe, query_from_params
from ..records._jobs import Job, JobState
from ..store import JobQuery
from ..store._search import SCAN_LIMIT
from ._actions import Actions
from ._render import shorten
from ._security import mount_path
from ._views import MAX_PAGE, Views, optional, parse_int

#: Jobs one step of a bulk action on every match acts on.
STEP = 200
#: Records counted at most for a confirmation ("at least N" past it): about
#: a second on Redis (see docs/BENCHMARKS.md).
COUNT_BOUND = 100_000
#: The most rows one bulk action on selected rows takes.
MAX_SELECTED = MAX_PAGE

#: The bulk actions, with their button labels, and whether they are dangerous.
BULK_LABELS: dict[BulkAction, tuple[str, bool]] = {
    BulkAction.REQUEUE: ("Requeue", False),
    BulkAction.RUN_NOW: ("Run now", False),
    BulkAction.ABORT: ("Abort", True),
    BulkAction.DELETE: ("Delete", True),
}


def _values(request: Request, name: str) -> list[str]:
    values = request.query_params.getlist(name)
    for value in values:
        optional({name: value}, name)  # a value longer than any is a 400
    return values


def _action(text: str) -> BulkAction:
    try:
        return BulkAction.parse(text)
    except ValueError as exc:
        raise HTTPException(400, shorten(str(exc), 200)) from None


def _ref(text: str) -> tuple[str, str]:
    """A row's checkbox value (a JSON ``[queue, id]``) as (queue, id)."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not (
        isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) and v for v in value)
    ):
        raise HTTPException(400, f"a selected row must be [queue, id], got {shorten(text, 60)!r}")
    return value[0], value[1]


def row_value(job: Job) -> str:
    return json.dumps([job.queue, job.id], ensure_ascii=False)


def last_worker(job: Job) -> str:
    """Who holds the job, or ran its last attempt that ended without success."""
    if job.lease_owner:
        return job.lease_owner
    workers = [a.worker for a in job.history if a.worker]
    return workers[-1] if workers else ""


class SearchPages:
    """``/search``, ``/search/confirm`` and ``/search/bulk`` over ``views``."""

    def __init__(self, views: Views, actions: Actions) -> None:
        self.views = views
        self.actions = actions

    async def _query(self, get: Callable[[str], Sequence[str]]) -> JobQuery:
        now = await self.views.inspector.now()
        try:
            return query_from_params(get, now)
        except ValueError as exc:
            raise HTTPException(400, shorten(str(exc), 300)) from None

    def _refuse_read_only(self) -> None:
        if self.views.options.read_only:
            raise HTTPException(403, "this dashboard is read-only")

    # -- the search page -------------------------------------------------------------
    async def search(self, request: Request) -> Response:
        query = await self._query(lambda name: _values(request, name))
        params = request.query_params
        cursor = optional(params, "cursor") or None
        limit = self.views.options.page_size
        if params.get("limit"):
            limit = min(parse_int(params["limit"], "limit", minimum=1), MAX_PAGE)
        insp = self.views.inspector
        page = await insp.search(query, cursor=cursor, limit=limit)
        kept = [(k, v) for k, v in params.multi_items() if k in PARAMS and v.strip()]
        paged = [*kept, ("limit", str(limit))] if params.get("limit") else kept
        base = mount_path(request.scope)
        next_url = None
        if page.cursor is not None:
            next_url = f"{base}/search?" + urlencode([*paged, ("cursor", page.cursor)])
        return await self.views.render(
            request,
            "search.html",
            query=query,
            page=page,
            params=kept,
            values={name: params.get(name, "") for name in PARAMS},
            chosen_queues=set(query.queues),
            chosen_states={s.value for s in query.states},
            queue_names=await insp.queue_names(),
            text_filters=TEXT_FILTERS,
            time_filters=TIME_FILTERS,
            first_url=f"{base}/search?" + urlencode(paged) if cursor else None,
            next_url=next_url,
            described=describe(query),
            row_value=row_value,
            last_worker=last_worker,
            bulk=[] if self.views.options.read_only else list(BULK_LABELS.items()),
            nav_at="search",
        )

    # -- the confirmation page -------------------------------------------------------
    async def confirm(self, request: Request) -> Response:
        self._refuse_read_only()
        params = request.query_params
        action = _action(optional(params, "action"))
        selected = [_ref(v) for v in _values(request, "job")]
        every = params.get("scope") == "all"
        query = await self._query(lambda name: _values(request, name))
        kept = [(k, v) for k, v in params.multi_items() if k in PARAMS and v.strip()]
        if not every and not selected:
            raise HTTPException(400, "select some rows, or choose every job matching the search")
        if len(selected) > MAX_SELECTED:
            raise HTTPException(400, f"at most {MAX_SELECTED} selected rows per action")
        exact = True
        if every:
            for name in query.queues:
                await self.views.inspector.check_queue(name)
            count, exact = await count_matching(
                self.views.inspector.store, action, query, max_scanned=COUNT_BOUND
            )
        else:
            count = len(dict.fromkeys(selected))
        label, danger = BULK_LABELS[action]
        base = mount_path(request.scope)
        return await self.views.render(
            request,
            "search_confirm.html",
            action=action,
            label=label,
            danger=danger,
            every=every,
            count=count,
            exact=exact,
            jobs=json.dumps([list(r) for r in dict.fromkeys(selected)], ensure_ascii=False),
            shown=list(dict.fromkeys(selected))[:20],
            described=describe(query),
            applies=", ".join(s.value for s in JobState if s in source_states(action)),
            params=kept,
            back=f"{base}/search?" + urlencode(kept),
            nav_at="search",
        )

    # -- the bulk POST -----------------------------------------------------------------
    async def bulk(self, request: Request) -> Response:
        self._refuse_read_only()
        form = await self.actions.checked_form(request)
        action = _action(form.get("action", ""))
        reason = form.get("reason", "").strip()[:500]
        insp = self.views.inspector
        base = mount_path(request.scope)
        kept = [(k, form[k]) for k in PARAMS if form.get(k, "").strip()]
        back = f"{base}/search?" + urlencode(kept)
        label = BULK_LABELS[action][0]
        if form.get("scope") != "all":
            refs = _pairs(form.get("jobs", ""))
            if not refs or len(refs) > MAX_SELECTED:
                raise HTTPException(400, f"select between 1 and {MAX_SELECTED} rows")
            result = await insp.bulk(action, refs, reason=reason)
            return self._done(request, back, label, result)
        query = await self._query(lambda name: [form[name]] if name in form else [])
        so_far = BulkResult(*(_count(form, n) for n in ("done", "skipped", "missing", "flagged")))
        cursor = form.get("cursor") or None
        progress = await insp.bulk_matching(
            action, query, cursor=cursor, batch=STEP, scan_limit=SCAN_LIMIT, reason=reason
        )
        total = so_far + progress.result
        if progress.finished:
            return self._done(request, back, label, total)
        return await self.views.render(
            request,
            "search_progress.html",
            action=action,
            label=label,
            total=total,
            stated=_count(form, "stated"),
            cursor=progress.cursor,
            reason=reason,
            params=kept,
            described=describe(query),
            back=back,
            nav_at="search",
        )

    def _done(self, request: Request, back: str, label: str, result: BulkResult) -> Response:
        text = (
            f"{label}: {result.done} done, {result.skipped} skipped "
            f"(not in a state it applies to, or changed meanwhile), {result.missing} gone"
        )
        if result.flagged:
            text += f"; {result.flagged} leased: flagged, their workers abort them"
        response = RedirectResponse(back, 303)
        self.views.flash_cookie(request, response, text)
        return response


def _pairs(text: str) -> list[tuple[str, str]]:
    """The confirmation form's selected rows: a JSON list of [queue, id]."""
    try:
        value = json.loads(text or "[]")
    except ValueError:
        value = None
    if not isinstance(value, list):
        raise HTTPException(400, "the selected rows do not read")
    return [_ref(json.dumps(v)) for v in value]


def _count(form: dict[str, str], name: str) -> int:
    text = form.get(name, "").strip()
    return parse_int(text, name, minimum=0) if text else 0


__all__ = ["SearchPages", "last_worker", "row_value"]
