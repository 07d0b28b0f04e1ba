"""noter: writes running jobs' notes (progress, log lines) to the store in
batches, off the settle path.

It sleeps while no handler reports anything. Then, at most once every
``notes_interval`` seconds, it takes what handlers reported since the last
write (``runtime._notes``: per job the latest progress and the new lines)
and writes it all in one ``write_notes`` call; an executor whose job
has notes pending asks for a write at once (the job's final flush, before
its outcome goes to the completer). Writes are fenced by each job's lease:
a refused one (the lease was lost) is dropped. A failed write is put back
and retried after a backoff; nothing waits for the noter but that final
flush, which gives up after ``notes_interval`` (see ``actors.executor``).
It runs only on a store that keeps notes (``NotesRole``).
"""

from __future__ import annotations

import math

import trio

from ..runtime._backoff import Backoff
from ..runtime._events import NotesWritten
from ..runtime._state import Runtime, log
from ..store import StoreError


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    backoff = Backoff(log, "noter")
    notes = rt.notes
    interval = rt.config.notes_interval
    task_status.started()
    last_write = -math.inf
    while True:
        # Asleep while nothing is reported; then at most one write per
        # interval, or at once for an executor's final flush.
        await notes.wait_pending()
        with trio.move_on_at(last_write + interval):
            await notes.wait_hurried()
        last_write = trio.current_time()
        writes = notes.take()
        if not writes:  # discarded meanwhile (lost leases)
            notes.done(writes, ())
            continue
        try:
            result = await rt.store.write_notes(writes)
        except StoreError as exc:
            notes.done(writes, None)
            await backoff.failed(exc)
            continue
        except BaseException:
            notes.done(writes, None)  # a restarted noter writes them
            raise
        backoff.reset()
        taken = notes.done(writes, result.refused)
        if taken is not None and rt.events.wants(NotesWritten):
            rt.events.publish(taken)
