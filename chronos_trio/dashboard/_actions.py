"""The dashboard's actions: each is asked for on a confirmation page (GET,
changes nothing) whose form POSTs to ``/actions/<name>``.

A POST is carried out only when, in this order:

1. the dashboard is not read-only (else 403, whatever the request holds);
2. it comes from a page of this dashboard: its Origin (else Referer) names
   this host or an allowed origin (else 403);
3. its form carries the session's CSRF token (else 403).

It then runs one :class:`~chronos_trio.Inspector` call (whose errors become
the error page: 404 unknown job or queue, 409 refused, 400 bad input) and
answers 303 to the page that shows the result, with a one-time message.

``POST /logout`` (the header's "Sign out" button) passes checks 2 and 3 too
(read-only or not: it changes no job) and removes the session cookie.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Mapping
from urllib.parse import parse_qsl, quote

import attrs
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..app._app import App
from ..app._inspector import Inspector
from ..app._purge import purged_counts
from ..app._workflow_control import abort_workflow
from ..records._jobs import JobState
from . import _schedule_actions as sched
from ._render import link, shorten
from ._security import logout_cookie, mount_path, same_origin
from ._views import Views, optional, parse_int, required

#: A form is a few short fields; anything larger is not ours.
MAX_FORM = 16 * 1024

Form = Mapping[str, str]
#: (message, path, query) of the page to show afterwards.
Done = tuple[str, str, dict[str, object]]


@attrs.frozen
class Action:
    """One action: what its button says, what it acts on (``job`` needs
    ``id`` and ``queue``; ``queue`` needs ``queue``; ``schedule`` needs
    ``schedule``, but for an add; ``workflow`` needs ``id``), the question its
    confirmation page asks, and what it does."""

    name: str
    label: str
    target: str
    question: str
    run: Callable[[Inspector, Form], Awaitable[Done]]
    danger: bool = False


def _opt_int(form: Form, name: str, *, minimum: int = 1) -> int | None:
    text = form.get(name, "").strip()
    return parse_int(text, name, minimum=minimum) if text else None


def _job_page(job_id: str, queue: str) -> tuple[str, dict[str, object]]:
    return "/job", {"id": job_id, "queue": queue}


async def _run_now(insp: Inspector, form: Form) -> Done:
    job_id, queue = required(form, "id"), required(form, "queue")
    before = await insp.job(job_id, queue=queue)
    job = await insp.run_now(job_id, queue=queue)
    reset = "; attempts reset" if before.state is JobState.DEAD else ""
    return f"job {job.id} is {job.state} now (was {before.state}{reset})", *_job_page(
        job.id, job.queue
    )


async def _requeue(insp: Inspector, form: Form) -> Done:
    job_id, queue = required(form, "id"), required(form, "queue")
    await insp.requeue_dead(queue, job_id=job_id)
    return f"dead job {job_id} requeued: ready to run (attempts reset)", *_job_page(job_id, queue)


async def _delete(insp: Inspector, form: Form) -> Done:
    job = await insp.delete(required(form, "id"), queue=required(form, "queue"))
    return (
        f"deleted job {job.id} ({job.kind}, {job.state})",
        "/jobs",
        {"queue": job.queue, "state": job.state.value},
    )


async def _abort(insp: Inspector, form: Form) -> Done:
    job_id, queue = required(form, "id"), required(form, "queue")
    job = await insp.abort(job_id, queue=queue, reason=form.get("reason", "").strip())
    if job.state is JobState.LEASED:
        text = (
            f"abort of job {job.id} asked: its worker ({job.lease_owner or 'a worker'}) "
            "cancels it at its next lease renewal and records it aborted"
        )
    else:
        text = f"job {job.id} is {job.state} now"
    return text, *_job_page(job.id, job.queue)


async def _abort_workflow(insp: Inspector, form: Form) -> Done:
    workflow_id = required(form, "id")
    done = await abort_workflow(insp.store, workflow_id, form.get("reason", "").strip())
    if not done.found:
        raise HTTPException(404, f"no workflow {shorten(workflow_id, 80)!r} (no record of it)")
    text = (
        f"workflow {workflow_id} cancelled: {len(done.aborted_running)} running step(s) asked "
        f"to stop, {len(done.dropped)} waiting step(s) aborted, {len(done.not_created)} not "
        "made yet (never will be)"
    )
    return text, f"/workflows/{quote(workflow_id, safe='')}", {}


async def _requeue_dead(insp: Inspector, form: Form) -> Done:
    queue = required(form, "queue")
    count = await insp.requeue_dead(queue, limit=_opt_int(form, "limit"))
    return f"requeued {count} dead job(s) of queue {queue}", "/queue", {"name": queue}


async def _purge(insp: Inspector, form: Form) -> Done:
    queue = required(form, "queue")
    count = await insp.purge(queue)
    leased = (await insp.queue(queue)).counts.get(JobState.LEASED, 0)
    text = f"purged queue {queue}: deleted {count} job(s)"
    text += f"; {leased} leased job(s) left to finish" if leased else ""
    return text, "/queue", {"name": queue}


async def _pause(insp: Inspector, form: Form) -> Done:
    queue = required(form, "queue")
    await insp.pause(queue)
    text = f"queue {queue} paused: workers stop leasing from it within one poll"
    return text, "/queue", {"name": queue}


async def _resume(insp: Inspector, form: Form) -> Done:
    queue = required(form, "queue")
    await insp.resume(queue)
    return f"queue {queue} resumed", "/queue", {"name": queue}


async def _promote(insp: Inspector, form: Form) -> Done:
    queue = required(form, "queue")
    partitions = _opt_int(form, "partitions")
    if partitions is None:
        raise HTTPException(400, "give the new version's number of partitions")
    topology = await insp.promote(queue, partitions=partitions, version=_opt_int(form, "version"))
    active = topology.active
    text = (
        f"queue {queue}: new jobs go to version {active.version} "
        f"({active.partitions} partitions); older versions drain"
    )
    return text, "/queue", {"name": queue}


async def _complete(insp: Inspector, form: Form) -> Done:
    queue = required(form, "queue")
    await insp.complete(queue, version=_opt_int(form, "version"))
    return f"queue {queue}: drained version removed", "/queue", {"name": queue}


ACTIONS: dict[str, Action] = {
    a.name: a
    for a in (
        Action("run-now", "Run now", "job", "Make job {id} ready to run now?", _run_now),
        Action(
            "requeue",
            "Requeue",
            "job",
            "Requeue dead job {id}: ready to run again, attempts reset?",
            _requeue,
        ),
        Action("abort", "Abort", "job", "Abort job {id}?", _abort, danger=True),
        Action("delete", "Delete", "job", "Delete job {id} for good?", _delete, danger=True),
        Action(
            "abort-workflow",
            "Abort workflow",
            "workflow",
            "Cancel workflow {id}? Its running steps are aborted, its waiting ones dropped, "
            "and its later steps never made.",
            _abort_workflow,
            danger=True,
        ),
        Action(
            "requeue-dead",
            "Requeue all dead",
            "queue",
            "Requeue every dead job of queue {queue} (attempts reset)?",
            _requeue_dead,
        ),
        Action(
            "purge",
            "Purge",
            "queue",
            "Delete every job of queue {queue} that is not leased?",
            _purge,
            danger=True,
        ),
        Action(
            "pause",
            "Pause",
            "queue",
            "Pause queue {queue}? Workers stop leasing from it.",
            _pause,
            danger=True,
        ),
        Action("resume", "Resume", "queue", "Resume queue {queue}?", _resume),
        Action(
            "promote",
            "Promote a new version",
            "queue",
            "Route new jobs of queue {queue} to a new version (the current one drains)?",
            _promote,
        ),
        Action(
            "complete",
            "Complete drained version",
            "queue",
            "Remove the drained version of queue {queue}?",
            _complete,
        ),
        Action("schedule-add", "Add a schedule", "schedule", "Store a new schedule?",
               sched.schedule_add),
        Action("schedule-change", "Change", "schedule",
               "Replace stored schedule {schedule}'s definition (its id and last fire stay)?",
               sched.schedule_change),
        Action("schedule-pause", "Pause", "schedule", "Pause stored schedule {schedule}?",
               sched.schedule_pause, danger=True),
        Action("schedule-resume", "Resume", "schedule", "Resume stored schedule {schedule}?",
               sched.schedule_resume),
        Action("schedule-remove", "Remove", "schedule",
               "Remove stored schedule {schedule} for good?", sched.schedule_remove, danger=True),
    )
}  # fmt: skip


class Actions:
    """The confirmation pages and the POST endpoints, over ``views``."""

    def __init__(self, views: Views) -> None:
        self.views = views

    def _action(self, name: str) -> Action:
        if self.views.options.read_only:
            raise HTTPException(403, "this dashboard is read-only")
        action = ACTIONS.get(name)
        if action is None:
            raise HTTPException(404, f"no action {shorten(name, 60)!r}")
        return action

    async def confirm(self, request: Request) -> Response:
        action = self._action(request.path_params["name"])
        params = request.query_params
        if action.target == "schedule":
            return await self._confirm_schedule(request, action)
        if action.target == "workflow":
            return await self.views.render(
                request,
                "confirm.html",
                action=action,
                question=action.question.format(id=required(params, "id")),
                job=None,
                workflow=required(params, "id"),
                queue="",
                version="",
                partitions=1,
                nav_at="queues",
            )
        queue = required(params, "queue")
        job = None
        if action.target == "job":
            job = await self.views.inspector.job(required(params, "id"), queue=queue)
        else:
            await self.views.inspector.check_queue(queue)
        info = await self.views.inspector.queue(queue)
        active = [v.partitions for v in info.versions if v.state.value == "active"]
        return await self.views.render(
            request,
            "confirm.html",
            action=action,
            question=action.question.format(id=optional(params, "id"), queue=queue),
            job=job,
            queue=queue,
            version=optional(params, "version"),
            partitions=active[0] if active else 1,
            leased=info.counts.get(JobState.LEASED, 0),
            purged=purged_counts(info.counts) if action.name == "purge" else {},
            nav_at="queues",
        )

    async def _confirm_schedule(self, request: Request, action: Action) -> Response:
        params = request.query_params
        schedule_id = optional(params, "schedule")
        if action.name != "schedule-add" and not schedule_id:
            raise HTTPException(400, "give the schedule's id")
        current = None
        if action.name == "schedule-change":
            app = self.views.inspector.app
            entry = await app.dynamic_schedules.get(schedule_id) if isinstance(app, App) else None
            if entry is None or entry.schedule is None:
                raise HTTPException(404, f"no stored schedule {shorten(schedule_id, 60)!r}")
            current = entry.schedule
        return await self.views.render(
            request,
            "confirm.html",
            action=action,
            question=action.question.format(schedule=schedule_id),
            job=None,
            queue=None,
            schedule=schedule_id,
            current=current,
            nav_at="schedules",
        )

    async def checked_form(self, request: Request) -> dict[str, str]:
        """The form of a POST from a page of this dashboard, carrying this
        session's CSRF token; HTTP 403 otherwise (see the module docstring)."""
        if not same_origin(request.scope, self.views.options.allowed_origins):
            raise HTTPException(403, "cross-origin request refused (Origin/Referer check)")
        form = await _read_form(request)
        token = form.get("csrf", "")
        expected = self.views.session(request).csrf
        if not token or not hmac.compare_digest(token.encode(), expected.encode()):
            raise HTTPException(403, "missing or wrong CSRF token: reload the page and try again")
        return form

    async def perform(self, request: Request) -> Response:
        action = self._action(request.path_params["name"])
        form = await self.checked_form(request)
        message, path, query = await action.run(self.views.inspector, form)
        response = RedirectResponse(link(mount_path(request.scope), path, **query), 303)
        self.views.flash_cookie(request, response, message)
        return response

    async def logout(self, request: Request) -> Response:
        """End this browser's session: its cookie is removed, and the next
        request starts a new one (with a token, at the sign-in page)."""
        await self.checked_form(request)
        response = RedirectResponse(mount_path(request.scope) + "/", 303)
        response.headers.append("set-cookie", logout_cookie(request.scope))
        return response


async def _read_form(request: Request) -> dict[str, str]:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise HTTPException(400, "expected a form (application/x-www-form-urlencoded)")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            raise HTTPException(413, "form too large")
    try:
        return dict(parse_qsl(body.decode(), keep_blank_values=True, strict_parsing=False))
    except UnicodeDecodeError:
        raise HTTPException(400, "the form is not UTF-8") from None


__all__ = ["ACTIONS", "Action", "Actions"]
