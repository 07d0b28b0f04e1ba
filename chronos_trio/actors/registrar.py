"""registrar: keeps this worker process's entry in the store's worker registry.

Guarantees:

* The worker is listed (``Inspector.workers``, ``python -m chronos_trio
  workers``) from its start: the first beat goes out before this actor
  reports itself started. A store that cannot be reached then does not
  stop the worker (the registry is for observing it): the next beat tries
  again.
* One store call per ``heartbeat_interval`` (``periodic``, so a slow call
  does not add drift), never one per job: the running jobs are read from
  the in-flight table at each beat (its count, and at most
  ``MAX_RUNNING_IDS`` job IDs), nothing is copied or kept between beats.
* The entry lapses ``registry_ttl`` (three beats by default) after the
  last beat that reached the store, so a worker that is killed, hangs or
  loses the store drops out by itself.
* On a clean stop (this actor is cancelled: it stops last, with the
  notifier) the entry is removed, bounded by ``min(flush_timeout, 2 s)`` and
  shielded; when that fails it lapses by itself. A crash of this actor
  leaves the entry in place for its restart (which keeps the start time).
"""

from __future__ import annotations

import logging
import os
import socket

import trio
from trio_util import periodic

from ..records._log import log_event
from ..records._workers import MAX_KINDS, MAX_RUNNING_IDS, WorkerInfo
from ..runtime._backoff import Backoff
from ..runtime._state import Runtime, log
from ..store import StoreError

#: Longest a clean stop waits to remove the entry (it lapses by itself anyway).
UNREGISTER_TIMEOUT = 2.0


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    cfg = rt.config
    backoff = Backoff(log, "worker registry beat", maximum=cfg.heartbeat_interval)
    host, pid = socket.gethostname(), os.getpid()
    queues = tuple(cfg.queue_names)
    kinds = tuple(sorted(rt.registry.tasks))[:MAX_KINDS]
    started = False
    try:
        async for _ in periodic(cfg.heartbeat_interval):
            try:
                if rt.registered_at is None:
                    rt.registered_at = await rt.store.now()
                table = rt.table
                await rt.store.beat_worker(
                    WorkerInfo(
                        worker_id=cfg.worker_id,
                        host=host,
                        pid=pid,
                        queues=queues,
                        concurrency=cfg.concurrency,
                        started_at=rt.registered_at,
                        last_beat=0.0,  # the store's to set
                        running=table.running,
                        running_job_ids=tuple(table.running_job_ids(MAX_RUNNING_IDS)),
                        kinds=kinds,
                    ),
                    cfg.registry_ttl,
                )
            except StoreError as exc:
                if not started:
                    log_event(
                        log,
                        logging.WARNING,
                        "worker not registered yet",
                        worker=cfg.worker_id,
                        error=str(exc),
                    )
                else:
                    await backoff.failed(exc)
            else:
                backoff.reset()
            if not started:
                started = True
                task_status.started()
    except trio.Cancelled:
        # A clean stop: leave the registry now rather than after the ttl.
        with trio.CancelScope(shield=True):
            with trio.move_on_after(min(cfg.flush_timeout, UNREGISTER_TIMEOUT)):
                try:
                    await rt.store.unregister_worker(cfg.worker_id)
                except StoreError as exc:
                    log_event(
                        log,
                        logging.WARNING,
                        "worker left in the registry until its entry lapses",
                        worker=cfg.worker_id,
                        error=str(exc),
                    )
        raise
