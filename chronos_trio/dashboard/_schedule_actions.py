"""The dashboard's schedule actions: add, change, pause, resume and remove
schedules kept in the store (``app.dynamic_schedules``), each asked for on
a confirmation page (the add and change pages are their forms) whose form
POSTs to ``/actions/schedule-<edit>`` behind the same read-only, Origin and
CSRF checks as every action (``_actions``).

They need the dashboard to have the App (APP), whose tasks validate a
schedule as a code schedule is validated; bad input is a 400 page and
stores nothing, an unknown id a 404, an id already stored a 409.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.exceptions import HTTPException

from ..app._app import App
from ..app._inspector import Inspector
from ..records._codec import decode_payload, loads
from ..records._errors import (
    PayloadError,
    ScheduleAlreadyStored,
    ScheduleNotStored,
    UnknownTask,
)

Form = Mapping[str, str]
Done = tuple[str, str, dict[str, object]]

#: The form fields of an add or change.
FIELDS = ("schedule", "task", "payload", "cron", "every", "tz", "misfire", "queue")


def _app(insp: Inspector) -> App:
    if not isinstance(insp.app, App):
        raise HTTPException(
            400, "schedules are edited through the app: start the dashboard with APP"
        )
    return insp.app


def _schedule_id(form: Form) -> str:
    schedule_id = form.get("schedule", "").strip()
    if not schedule_id:
        raise HTTPException(400, "give the schedule's id")
    return schedule_id


def _not_found(exc: ValueError) -> HTTPException:
    text = str(exc)
    if isinstance(exc, ScheduleNotStored):
        return HTTPException(404, text)
    if isinstance(exc, ScheduleAlreadyStored):
        return HTTPException(409, text)
    return HTTPException(400, f"nothing stored: {text}")


def _definition(app: App, form: Form) -> dict[str, Any]:
    """The keyword arguments of an add or change, from the form."""
    kind = form.get("task", "").strip()
    if not kind:
        raise HTTPException(400, "give the task (kind) the schedule enqueues")
    external = form.get("external", "") == "on"
    text = form.get("payload", "").strip() or "null"
    spec = app.registry.tasks.get(kind)
    try:
        payload = loads(text.encode()) if external or spec is None else None
        if spec is not None and not external:
            payload = decode_payload(text.encode(), spec.payload_type)
    except (PayloadError, ValueError) as exc:
        raise HTTPException(400, f"nothing stored: payload: {exc}") from None
    cron = form.get("cron", "").strip() or None
    every_text = form.get("every", "").strip()
    try:
        every = float(every_text) if every_text else None
    except ValueError:
        raise HTTPException(
            400, f"nothing stored: every must be seconds, got {every_text!r}"
        ) from None
    options: dict[str, Any] = {}
    if form.get("queue", "").strip():
        options["queue"] = form["queue"].strip()
    return {
        "payload": payload,
        "task": kind,
        "cron": cron,
        "every": every,
        "tz": form.get("tz", "").strip() or "UTC",
        "misfire": form.get("misfire", "").strip() or "skip",
        "external": external,
        **options,
    }


async def _store_edit(insp: Inspector, form: Form, edit: str) -> Done:
    app = _app(insp)
    schedule_id = _schedule_id(form)
    kwargs = _definition(app, form)
    payload = kwargs.pop("payload")
    fn = app.dynamic_schedules.add if edit == "add" else app.dynamic_schedules.change
    try:
        await fn(schedule_id, payload, **kwargs)
    except (UnknownTask, PayloadError, TypeError) as exc:
        raise HTTPException(400, f"nothing stored: {exc}") from None
    except ValueError as exc:
        raise _not_found(exc) from None
    done = "added" if edit == "add" else "changed"
    text = f"schedule {schedule_id} {done}: the leader fires it from its next round"
    return text, "/schedules", {}


async def schedule_add(insp: Inspector, form: Form) -> Done:
    return await _store_edit(insp, form, "add")


async def schedule_change(insp: Inspector, form: Form) -> Done:
    return await _store_edit(insp, form, "change")


async def _flag(insp: Inspector, form: Form, edit: str, done: str) -> Done:
    app = _app(insp)
    schedule_id = _schedule_id(form)
    try:
        await getattr(app.dynamic_schedules, edit)(schedule_id)
    except ValueError as exc:
        raise _not_found(exc) from None
    return f"schedule {schedule_id} {done}", "/schedules", {}


async def schedule_pause(insp: Inspector, form: Form) -> Done:
    return await _flag(insp, form, "pause", "paused: no trigger fires from the leader's next round")


async def schedule_resume(insp: Inspector, form: Form) -> Done:
    return await _flag(insp, form, "resume", "resumed")


async def schedule_remove(insp: Inspector, form: Form) -> Done:
    return await _flag(insp, form, "remove", "removed")


__all__ = [
    "FIELDS",
    "schedule_add",
    "schedule_change",
    "schedule_pause",
    "schedule_remove",
    "schedule_resume",
]
