"""Schedules edited at run time: ``app.dynamic_schedules``.

Add, change, pause, resume and remove cron and interval schedules without
a deploy. They are kept in the app's store (it needs
:class:`~chronos_trio.store.ScheduleStoreRole`, capability
``dynamic_schedules``, and leadership), under the app's leadership name, and
the elected leader of any worker of the app fires them beside the
schedules declared in code, from its next round (within ``scheduler_tick``,
1 s by default). Guarantees:

* **Validated as code schedules are**, before anything is stored: the task
  must be registered in this app (or ``external=True``: another program
  runs it, the payload goes as JSON), the payload encodable as its payload
  type, the cron spec or interval valid, the time zone known. Bad input
  raises (``ValueError``, ``TypeError``, ``UnknownTask``, ``PayloadError``)
  and stores nothing.
* **Code is authoritative for its names**: an id that a schedule declared
  in this app's code has is refused here; a stored schedule that collides
  with a code schedule added later is ignored by the leader (logged).
* **A change keeps the id**, so the schedule's last fired time carries
  over: no trigger time at or before it fires again, and each (schedule,
  fire time) is enqueued at most once (exactly once with
  ``misfire="fire_once"``), fenced by the leadership epoch, also across a
  leader change while the schedule is edited.
* **Pause** stops its triggers from the leader's next round; **resume**
  fires the next trigger on schedule (``fire_once``: plus one catch-up for
  the triggers missed while paused, as after any outage).
* **Remove** forgets the definition but not the last fired time: adding
  the id again never fires an earlier trigger time again.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any, Unpack

from ..records._errors import ScheduleAlreadyStored, ScheduleNotStored, UnknownTask
from ..records._options import JOB_DEFAULT_OPTIONS, JobDefaults, checked_names
from ..runtime._registry import WorkerHost
from ..runtime._schedule import MisfirePolicy, Schedule
from ..runtime._stored_schedules import StoredEntry, encode_definition, entries
from ..store import Capability, ScheduleEdit, require_capabilities
from ._schedules import build_schedule

if TYPE_CHECKING:
    from ..store import ScheduleStoreRole


class DynamicSchedules:
    """``app.dynamic_schedules``: the schedules of ``app`` (an App) kept in
    its store; payloads are held to ``max_payload_bytes`` (the App's). See
    the module docstring for the guarantees. Every method raises
    ``MissingCapability`` (a ``TypeError``) when the app's store keeps no
    schedules, and StoreError when it cannot be reached (an edit may have
    been applied then: :meth:`list` shows)."""

    def __init__(self, app: WorkerHost, max_payload_bytes: int) -> None:
        self._app = app
        self._max_payload_bytes = max_payload_bytes

    def _store(self) -> ScheduleStoreRole:
        store = self._app.store
        require_capabilities(
            store,
            [Capability.DYNAMIC_SCHEDULES, Capability.LEADERSHIP],
            what="schedules edited at run time",
        )
        return store

    @property
    def _name(self) -> str:
        return self._app.registry.leadership_name

    # -- edits --------------------------------------------------------------------------
    @checked_names("schedule", JOB_DEFAULT_OPTIONS)
    async def add(
        self,
        schedule_id: str,
        payload: Any,
        *,
        cron: str | None = None,
        every: float | dt.timedelta | None = None,
        task: Any = None,
        tz: str = "UTC",
        misfire: MisfirePolicy = "skip",
        external: bool = False,
        **defaults: Unpack[JobDefaults],
    ) -> Schedule:
        """Store a new schedule ``schedule_id`` firing ``task`` with
        ``payload`` at each time of ``cron`` (in ``tz``) or ``every``
        seconds (exactly one of them), with the options of
        :meth:`App.cron <chronos_trio.App.cron>`; the validated schedule.

        Raises ``ValueError`` when the id is a code schedule's or already
        stored (use :meth:`change`), and as the module docstring says for
        bad input; nothing is stored then."""
        schedule = self._build(
            schedule_id, payload, cron, every, task, tz, misfire, external, defaults
        )
        store = self._store()
        version = await store.edit_schedule(
            self._name, ScheduleEdit.ADD, schedule.id, encode_definition(schedule)
        )
        if version is None:
            raise ScheduleAlreadyStored(
                f"a schedule {schedule_id!r} is already stored: change it (or remove it first)"
            )
        return schedule

    @checked_names("schedule", JOB_DEFAULT_OPTIONS)
    async def change(
        self,
        schedule_id: str,
        payload: Any,
        *,
        cron: str | None = None,
        every: float | dt.timedelta | None = None,
        task: Any = None,
        tz: str = "UTC",
        misfire: MisfirePolicy = "skip",
        external: bool = False,
        **defaults: Unpack[JobDefaults],
    ) -> Schedule:
        """Replace stored schedule ``schedule_id``'s definition (as
        :meth:`add` takes it; a paused one stays paused); the validated
        schedule. Its id, and so its last fired time, is kept: the new
        spec's first trigger is the first after the last one fired.

        Raises ``ValueError`` when no schedule of that id is stored (or it
        is a code schedule's), and for bad input as :meth:`add`."""
        schedule = self._build(
            schedule_id, payload, cron, every, task, tz, misfire, external, defaults
        )
        store = self._store()
        version = await store.edit_schedule(
            self._name, ScheduleEdit.CHANGE, schedule.id, encode_definition(schedule)
        )
        if version is None:
            raise self._not_stored(schedule_id)
        return schedule

    async def pause(self, schedule_id: str) -> None:
        """Stop firing stored schedule ``schedule_id`` (from the leader's next
        round) until :meth:`resume`. ``ValueError`` when none is stored."""
        await self._flag(ScheduleEdit.PAUSE, schedule_id)

    async def resume(self, schedule_id: str) -> None:
        """Fire a paused stored schedule again. ``ValueError`` when none is
        stored."""
        await self._flag(ScheduleEdit.RESUME, schedule_id)

    async def remove(self, schedule_id: str) -> None:
        """Forget stored schedule ``schedule_id`` (its last fired time stays,
        see the module docstring). ``ValueError`` when none is stored."""
        await self._flag(ScheduleEdit.REMOVE, schedule_id)

    # -- reads ----------------------------------------------------------------------------
    async def list(self) -> list[StoredEntry]:
        """Every stored schedule, by id: its :class:`Schedule` (None with an
        ``error`` when its definition cannot be read), whether it is paused,
        when it was last edited and whether a code schedule shadows it."""
        stored = await self._store().stored_schedules(self._name)
        return entries(stored, self._app.registry.schedules)

    async def get(self, schedule_id: str) -> StoredEntry | None:
        """Stored schedule ``schedule_id``, or None."""
        for entry in await self.list():
            if entry.id == schedule_id:
                return entry
        return None

    # -- helpers ----------------------------------------------------------------------------
    async def _flag(self, edit: ScheduleEdit, schedule_id: str) -> None:
        self._check_id(schedule_id)
        if await self._store().edit_schedule(self._name, edit, schedule_id) is None:
            raise self._not_stored(schedule_id)

    def _not_stored(self, schedule_id: str) -> ScheduleNotStored:
        return ScheduleNotStored(
            f"no stored schedule {schedule_id!r}: add it first "
            "(app.dynamic_schedules.list() shows the stored ones)"
        )

    def _check_id(self, schedule_id: str) -> None:
        if not isinstance(schedule_id, str):
            raise TypeError(f"schedule_id must be a string, got {type(schedule_id).__name__}")
        if any(s.id == schedule_id for s in self._app.registry.schedules):
            raise ValueError(
                f"schedule {schedule_id!r} is declared in the app's code, which is "
                "authoritative for it: change it in the code, or store one under another id"
            )

    def _build(
        self,
        schedule_id: str,
        payload: Any,
        cron: str | None,
        every: float | dt.timedelta | None,
        task: Any,
        tz: str,
        misfire: str,
        external: bool,
        defaults: JobDefaults,
    ) -> Schedule:
        self._check_id(schedule_id)
        if (cron is None) == (every is None):
            raise ValueError("a schedule has exactly one of cron= and every=")
        if task is None:
            raise TypeError("a stored schedule names its task: pass task= (a Task or a kind)")
        kind = task if isinstance(task, str) else getattr(task, "kind", None)
        if not external and kind not in self._app.registry.tasks:
            raise UnknownTask(
                f"schedule {schedule_id!r} names task {kind!r}, which this app does not "
                "register: register it, or pass external=True when another program "
                "sharing the store runs it"
            )
        return build_schedule(
            self._app.registry,
            self._max_payload_bytes,
            payload,
            task,
            cron=cron,
            interval=every,
            tz=tz if cron is not None else "UTC",
            schedule_id=schedule_id,
            misfire=misfire,
            external=external,
            **defaults,
        )


__all__ = ["DynamicSchedules"]
