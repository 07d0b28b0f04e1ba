"""The dashboard's pages (GET only: none of them changes anything).

Each page is one or a few :class:`~chronos_trio.Inspector` calls rendered by a
template. What a page may offer to do is shown only when the dashboard is not
read-only; the actions themselves live in ``_actions``.
"""

from __future__ import annotations

import base64
import collections
from collections.abc import Mapping
from typing import Any

import attrs
from markupsafe import Markup
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ..app._app import App
from ..app._batch import callback_id
from ..app._coverage import unserved
from ..app._inspector import RUN_NOW_STATES, Inspector, next_run_at
from ..app._workflow_control import record_lists, workflow_of_job, workflow_view
from ..records._attempts import HISTORY_LIMIT
from ..records._flow_control import WorkflowState
from ..records._history import attempt_history
from ..records._jobs import FINISHED_STATES, Job, JobState
from ..records._producing import MAX_JOB_ID_LENGTH
from ..records._workflow import batch_of, describe
from ..store import Capability, VersionState, capabilities_of
from ..store._capabilities import MissingCapability
from ._chart_views import chart_context
from ._extensions import ExtensionRequest, Extensions, Shown, panels
from ._render import control_rows, environment, link, payload_text, result_text, shorten
from ._security import SECURE_KEY, SESSION_KEY, Session, Signer, mount_path
from ._story import Position, first_step_id, position, timeline

FLASH_COOKIE = "chronos_dashboard_flash"
#: Job states in the order the pages show them.
STATES = tuple(JobState)
MAX_PAGE = 500
#: The longest value a parameter may have: no job ID is longer (enqueue
#: refuses them), and a queue name or a number this long is no mistake to
#: look up but a request to refuse before it reaches the store.
MAX_PARAM = {"id": MAX_JOB_ID_LENGTH}
MAX_OTHER_PARAM = 1000
#: The page's live tables (``data-live``) are fetched again at most this
#: often (seconds; the counts come every ``refresh`` on the event stream).
LIVE_TABLES_EVERY = 2.0
#: The header the page's script sends when it reads the page again for its
#: live tables (what is outside them, such as an app's panels, is skipped).
LIVE_HEADER = "x-chronos-live"


@attrs.frozen
class Options:
    """What the factory was told (see :func:`dashboard_app`)."""

    read_only: bool = False
    page_size: int = 50
    refresh: float = 2.0
    allowed_origins: tuple[str, ...] = ()
    title: str = "chronos_trio"


def with_record(flow: Position | None, job_id: str, workflow_id: str | None) -> Position | None:
    """``flow`` corrected by the workflow ID the store knows for the job (its
    continuation's ``"wf"``, or the record that lists it; None: not known):
    that ID is certain, where the one read off the IDs may be inferred, and
    a last step is known even when its flow's first step is gone."""
    if workflow_id is None:
        return flow
    path = job_id[len(workflow_id) + 1 :]
    if flow is None:
        return Position(workflow_id, path, (), (), last=True)
    return attrs.evolve(flow, workflow_id=workflow_id, path=path, inferred=False)


def job_actions(job: Job) -> list[str]:
    """The actions the job's state allows (names of ``_actions.ACTIONS``)."""
    out = []
    if job.state is JobState.DEAD and not job.damage:
        out.append("requeue")
    elif job.state in RUN_NOW_STATES and not job.damage:
        out.append("run-now")
    if job.state not in FINISHED_STATES:
        out.append("abort")
    if job.state is not JobState.LEASED:
        out.append("delete")
    return out


def parse_int(text: str, name: str, *, minimum: int) -> int:
    """``text`` as an int of at least ``minimum``; HTTP 400 naming ``name`` if not."""
    try:
        value = int(text) if len(text) <= 20 else None
    except ValueError:
        value = None
    if value is None:
        raise HTTPException(400, f"{name} must be an integer, got {shorten(text, 40)!r}")
    if value < minimum:
        raise HTTPException(400, f"{name} must be >= {minimum}, got {value}")
    return value


def int_param(request: Request, name: str, default: int, *, minimum: int = 0) -> int:
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    return parse_int(text, name, minimum=minimum)


def optional(params: Mapping[str, str], name: str) -> str:
    """Parameter ``name`` ("" when absent); HTTP 400 when it is longer than
    any such value can be (:data:`MAX_PARAM`), before anything looks it up."""
    value = params.get(name, "")
    limit = MAX_PARAM.get(name, MAX_OTHER_PARAM)
    if len(value) > limit:
        raise HTTPException(
            400, f"parameter {name!r} is too long ({len(value)} characters; at most {limit})"
        )
    return value


def required(params: Mapping[str, str], name: str) -> str:
    """Parameter ``name``; HTTP 400 when it is missing, empty or too long."""
    value = optional(params, name)
    if not value:
        raise HTTPException(400, f"missing parameter {name!r}")
    return value


class Views:
    """The pages over ``inspector``, rendered with the dashboard's templates."""

    def __init__(
        self,
        inspector: Inspector,
        options: Options,
        signer: Signer,
        extensions: Extensions | None = None,
    ) -> None:
        self.inspector = inspector
        self.options = options
        self.signer = signer
        self.extensions = extensions
        self.env = environment(None if extensions is None else extensions.templates)

    # -- rendering ----------------------------------------------------------------
    def session(self, request: Request) -> Session:
        session = request.scope.get(SESSION_KEY)
        if not isinstance(session, Session):  # the guard always sets it
            raise RuntimeError("the dashboard's views run only behind its guard")
        return session

    def flash_cookie(self, request: Request, response: Response, text: str) -> None:
        """Show ``text`` once, on the next page (a signed cookie: no page
        shows text an outside link put in its URL)."""
        value = base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")
        response.set_cookie(
            FLASH_COOKIE,
            self.signer.sign("flash", value),
            path=mount_path(request.scope) or "/",
            httponly=True,
            samesite="strict",
            secure=bool(request.scope.get(SECURE_KEY)),
        )

    def _take_flash(self, request: Request) -> str | None:
        raw = request.cookies.get(FLASH_COOKIE)
        value = self.signer.unsign("flash", raw) if raw else None
        if value is None:
            return None
        try:
            return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode()
        except ValueError:
            return None

    def fragment(self, request: Request, shown: Shown) -> Shown:
        """``shown`` with its app template (if any) rendered, autoescaped,
        with the template's context and what every page knows (``base``,
        ``url``, ``csrf``, ``read_only``)."""
        if shown.template is None or shown.error is not None:
            return shown
        base = mount_path(request.scope)
        html = self.env.get_template(shown.template).render(
            {
                **shown.context,
                "base": base,
                "url": lambda path, **params: link(base, path, **params),
                "csrf": self.session(request).csrf,
                "read_only": self.options.read_only,
            }
        )
        return attrs.evolve(shown, html=Markup(html))

    async def panels(self, request: Request, place: str) -> list[Shown]:
        """The app's panels of ``place`` (see ``_extensions``), rendered."""
        if self.extensions is None or not self.extensions.panels:
            return []
        if request.headers.get(LIVE_HEADER):  # a live re-read: panels are not live regions
            return []
        params = {k: optional(request.query_params, k) for k in request.query_params}
        ext = ExtensionRequest(self.inspector, params, request.url.path, self.options.read_only)
        return [self.fragment(request, s) for s in await panels(self.extensions, place, ext)]

    async def render(
        self, request: Request, template: str, *, status: int = 200, **context: Any
    ) -> HTMLResponse:
        base = mount_path(request.scope)
        flash = self._take_flash(request)
        try:
            now = await self.inspector.now()
        except Exception:  # an error page must render even when the store is down
            now = 0.0
        html = self.env.get_template(template).render(
            base=base,
            url=lambda path, **params: link(base, path, **params),
            title=self.options.title,
            read_only=self.options.read_only,
            csrf=self.session(request).csrf,
            signed_in=self.session(request).signed_in,
            flash=flash,
            now=now,
            states=STATES,
            ext_pages=[] if self.extensions is None else self.extensions.pages,
            # the live tables re-read at most this often (ms): a page render each
            live_every=int(max(self.options.refresh, LIVE_TABLES_EVERY) * 1000),
            **context,
        )
        response = HTMLResponse(html, status_code=status)
        if flash is not None:
            response.delete_cookie(
                FLASH_COOKIE,
                path=base or "/",
                httponly=True,
                samesite="strict",
                secure=bool(request.scope.get(SECURE_KEY)),
            )
        return response

    # -- pages --------------------------------------------------------------------
    async def queues(self, request: Request) -> Response:
        infos = await self.inspector.queues()
        gaps = await unserved(self.inspector.store, infos)
        return await self.render(
            request,
            "queues.html",
            queues=infos,
            unserved=gaps,
            panels=await self.panels(request, "queues"),
            nav_at="queues",
            **await chart_context(request, self, None),
        )

    async def queue(self, request: Request) -> Response:
        name = required(request.query_params, "name")
        info = await self.inspector.queue(name)
        limits = await self.inspector.limits(name)
        draining = [v.version for v in info.versions if v.state is VersionState.DRAINING]
        active = [v for v in info.versions if v.state is VersionState.ACTIVE]
        return await self.render(
            request,
            "queue.html",
            q=info,
            limits=limits,
            dead=info.counts.get(JobState.DEAD, 0),
            draining=draining,
            active_partitions=active[0].partitions if active else 1,
            panels=await self.panels(request, "queue"),
            nav_at="queues",
            **await chart_context(request, self, name),
        )

    async def jobs(self, request: Request) -> Response:
        params = request.query_params
        queue = required(params, "queue")
        state = JobState.parse(required(params, "state"))
        offset = int_param(request, "offset", 0)
        limit = min(int_param(request, "limit", self.options.page_size, minimum=1), MAX_PAGE)
        page = await self.inspector.jobs(queue, state, offset=offset, limit=limit)
        return await self.render(
            request,
            "jobs.html",
            page=page,
            time_label=_time_label(state),
            time_of=_time_of(state),
            prev_offset=max(0, offset - limit) if offset > 0 else None,
            nav_at="queues",
        )

    async def job(self, request: Request) -> Response:
        params = request.query_params
        job_id = optional(params, "id").strip()
        if not job_id:
            raise HTTPException(400, "give a job ID to look up")
        job = await self.inspector.job(job_id, queue=optional(params, "queue") or None)
        notes = await self.inspector.notes(job)
        attempts = attempt_history(job)
        first = first_step_id(job)
        first_exists = first is not None and await self.inspector.store.get_job(first) is not None
        return await self.render(
            request,
            "job.html",
            job=job,
            notes=notes,
            story=timeline(job, attempts, notes),
            flow=await self._position(job, first_exists),
            where=self.inspector.locate(job.placement),
            payload=payload_text(job),
            result=result_text(job),
            then=describe(job.then),
            batch=batch_of(job.then),
            control=control_rows(job.control, await self.inspector.now()),
            next_run=next_run_at(job),
            attempts=attempts,
            history_limit=HISTORY_LIMIT,
            actions=[] if self.options.read_only else job_actions(job),
            nav_at="queues",
        )

    async def _position(self, job: Job, first_exists: bool) -> Position | None:
        """The job's place in its workflow: read off its continuation and
        IDs (``_story.position``), corrected by the store's workflow record
        where it has one (its ID is then certain, and a dotted ID the
        record does not list is no step of that workflow)."""
        store = self.inspector.store
        flow = position(job, first_step_exists=first_exists)
        known = await workflow_of_job(store, job.id, job.then)
        if known is None and flow is not None and flow.last and flow.workflow_id:
            if await record_lists(store, flow.workflow_id, job.id) is False:
                return None
        return with_record(flow, job.id, known)

    async def workflow(self, request: Request) -> Response:
        """A workflow's steps as nested boxes (chains across, groups down),
        with states and timings; 404 when the store has no record of it."""
        workflow_id = request.path_params["wid"]
        if len(workflow_id) > MAX_JOB_ID_LENGTH:
            raise HTTPException(400, "no workflow ID is that long")
        try:
            view = await workflow_view(self.inspector.store, workflow_id)
        except MissingCapability:
            raise HTTPException(404, "this store keeps no workflow records") from None
        if view.root is None:
            raise HTTPException(404, f"no workflow {shorten(workflow_id, 80)!r} (no record of it)")
        steps = view.steps()
        counts = collections.Counter(s.state.value if s.state else "not made yet" for s in steps)
        durations = [s.duration for s in steps if s.duration is not None]
        return await self.render(
            request,
            "workflow.html",
            view=view,
            steps=steps,
            counts=sorted(counts.items()),
            longest=max(durations, default=0.0),
            can_abort=not self.options.read_only and view.state is not WorkflowState.CANCELLED,
            nav_at="queues",
        )

    async def batch(self, request: Request) -> Response:
        """A batch's live counts, its failed members and its callback."""
        batch_id = optional(request.query_params, "id").strip()
        if not batch_id:
            raise HTTPException(400, "give a batch ID to look up")
        status = await self.inspector.batch(batch_id)
        return await self.render(
            request,
            "batch.html",
            batch=status,
            callback_id=callback_id(batch_id),
            done_share=0.0 if not status.total else (status.total - status.pending) / status.total,
            nav_at="queues",
        )

    async def lookup(self, request: Request) -> Response:
        """The lookup form's target: the job's page."""
        job_id = optional(request.query_params, "id").strip()
        if not job_id:
            raise HTTPException(400, "give a job ID to look up")
        return RedirectResponse(link(mount_path(request.scope), "/job", id=job_id), 303)

    async def schedules(self, request: Request) -> Response:
        rows = None if self.inspector.app is None else await self.inspector.schedules()
        # stored schedules are edited through the App (its tasks validate them)
        editable = (
            not self.options.read_only
            and isinstance(self.inspector.app, App)
            and Capability.DYNAMIC_SCHEDULES in capabilities_of(self.inspector.store)
        )
        return await self.render(
            request, "schedules.html", rows=rows, editable=editable, nav_at="schedules"
        )

    async def workers(self, request: Request) -> Response:
        rows = await self.inspector.workers()
        return await self.render(request, "workers.html", rows=rows, nav_at="workers")

    async def limits(self, request: Request) -> Response:
        rows = await self.inspector.limits()
        return await self.render(request, "limits.html", rows=rows, nav_at="limits")


def _time_label(state: JobState) -> str:
    if state is JobState.LEASED:
        return "lease expires"
    if state in FINISHED_STATES:
        return "finished"
    return "due"


def _time_of(state: JobState) -> Any:
    def of(job: Job) -> float | None:
        if state is JobState.LEASED:
            return job.lease_expires_at
        if state in FINISHED_STATES:
            return job.finished_at
        return job.run_at

    return of


__all__ = ["FLASH_COOKIE", "STATES", "Options", "Views", "job_actions", "optional", "required"]
