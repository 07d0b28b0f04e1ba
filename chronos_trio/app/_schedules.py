"""App-aware schedule building: resolve the task a schedule fires and encode
its payload at registration, so a bad schedule fails where it is declared."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..records._codec import encode_payload
from ..records._errors import PayloadError, UnknownTask
from ..runtime._registry import Registry
from ..runtime._schedule import Schedule
from ._task import Task


def build_schedule(
    registry: Registry,
    max_payload_bytes: int,
    payload: Any,
    task: Task[Any] | str | None,
    **options: Any,
) -> Schedule:
    """A validated Schedule for an app's ``registry``: resolves the task (a Task, a kind, or
    None to find the one registered task whose payload type is
    ``type(payload)``) and encodes ``payload`` with its payload type now, so a
    payload that cannot be encoded fails at registration."""
    kind, payload_type = _resolve_task(registry, task, payload)
    data = encode_payload(payload, payload_type)
    if len(data) > max_payload_bytes:
        raise PayloadError(
            f"schedule payload of {kind!r} is {len(data)} bytes, over the "
            f"{max_payload_bytes}-byte limit"
        )
    return Schedule.build(kind, data, **options)


def _resolve_task(
    registry: Registry, task: Task[Any] | str | None, payload: Any
) -> tuple[str, Any]:
    if isinstance(task, Task):
        return task.kind, task.payload_type
    if isinstance(task, str):
        if not task:
            raise ValueError("task kind must be a non-empty string")
        known = registry.tasks.get(task)
        # A kind not registered yet is allowed here: its module may be
        # imported after the schedule's. A worker refuses to start while it
        # is still unknown (Registry.check_schedules), unless another
        # program registers it (external). Its payload goes as JSON.
        return task, known.payload_type if known is not None else Any
    if task is not None:
        raise TypeError(f"task must be a Task or a kind string, got {type(task).__name__}")
    matches = [t for t in registry.tasks.values() if t.payload_type is type(payload)]
    if len(matches) != 1:
        found = ", ".join(sorted(t.kind for t in matches)) or "none"
        raise UnknownTask(
            f"cannot tell which task a {type(payload).__name__} payload is for "
            f"(registered tasks taking it: {found}); pass task="
        )
    return matches[0].kind, matches[0].payload_type


def check_unique(existing: Sequence[Schedule], schedule: Schedule) -> None:
    for other in existing:
        if other.id == schedule.id:
            raise ValueError(
                f"a schedule with id {schedule.id!r} is already registered "
                "(same task, spec and payload?); pass schedule_id= to tell them apart"
            )
