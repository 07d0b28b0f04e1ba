"""What a worker does with a job of a kind it has no handler for.

In a mixed-version fleet (a rolling deploy that adds a task: new workers
know it, old ones do not yet) or with two apps that share a queue, another
worker may well have the handler. So the job goes back unrun for such a
worker: the store's UNCLAIMED settle makes it wait ``unknown_kind_delay``
seconds (so this worker does not spin on it, and one with the handler gets
it soon), gives back the attempt its lease took, and stamps in the record
when it first went back. Only once it has gone back unclaimed for
``unknown_kind_grace`` seconds, judged by the store's clock from that stamp
(so the time survives bounces between workers and their restarts), does
the store dead-letter it, with :meth:`UnknownKinds.reason` as its error.

Each such job is logged as a warning naming its kind, ID and queue and this
worker, at most once per :data:`WARN_EVERY` seconds per kind (the ones held
back are counted in the next), so a flood does not flood the log.
"""

from __future__ import annotations

import logging

import trio

from ..records._jobs import LeasedJob
from ..records._log import log_event
from ..store import SettleKind, Settlement
from ._config import WorkerConfig

log = logging.getLogger("chronos_trio.worker")  # the worker's own log (see _state)

#: One warning per kind at most this often (seconds, Trio's clock).
WARN_EVERY = 60.0
#: Kinds whose last warning is remembered, at most (the oldest is forgotten
#: first: a forgotten kind is warned about again at once).
KINDS_MAX = 1000
#: A kind is shown (and remembered) cut after this many characters: a
#: damaged record's kind may be a megabyte of text.
KIND_CUT = 100


def shown(kind: str) -> str:
    """``kind`` for a message: as it is, or cut with its length noted."""
    if len(kind) <= KIND_CUT:
        return kind
    return f"{kind[:KIND_CUT]}... ({len(kind)} characters)"


class UnknownKinds:
    """Decides the outcome of jobs whose kind has no handler here, and warns
    about them. Owned by the runtime; used by the executors only."""

    def __init__(self, config: WorkerConfig) -> None:
        self._worker_id = config.worker_id
        self._grace = config.unknown_kind_grace
        self._delay = config.unknown_kind_delay
        #: kind -> (when last warned, jobs of it since then not warned about)
        self._warned: dict[str, tuple[float, int]] = {}

    def unclaimed(self, leased: LeasedJob) -> Settlement:
        """The outcome of ``leased``, whose kind has no handler here: back
        for a worker that has one, or dead past the grace (the store
        decides which). Logs the warning (rate-limited per kind)."""
        job = leased.job
        kind = shown(job.kind)
        self._warn(kind, job.id, job.queue)
        return Settlement(
            leased.ref,
            SettleKind.UNCLAIMED,
            error=self.reason(kind),
            retry_delay=self._delay,
            unclaimed_grace=self._grace,
        )

    def reason(self, kind: str) -> str:
        """The ``last_error`` of a job of ``kind`` (as :func:`shown`)
        dead-lettered for want of a worker with its handler."""
        return (
            f"no worker registered kind {kind!r} within {self._grace:g}s "
            f"(unknown_kind_grace; see unclaimed_since); the last to lease it, "
            f"worker {self._worker_id}, has no handler for it"
        )

    def _warn(self, kind: str, job_id: str, queue: str) -> None:
        now = trio.current_time()
        last = self._warned.get(kind)
        if last is not None and now - last[0] < WARN_EVERY:
            self._warned[kind] = (last[0], last[1] + 1)
            return
        if last is None and len(self._warned) >= KINDS_MAX:
            del self._warned[next(iter(self._warned))]
        log_event(
            log,
            logging.WARNING,
            "no handler here: the job goes back unrun for a worker that has one "
            "(attempt not counted; dead-lettered after unknown_kind_grace with no taker)",
            kind=kind,
            worker=self._worker_id,
            job=job_id,
            queue=queue,
            unknown_kind_grace=self._grace,
            held_back=last[1] if last else 0,
        )
        self._warned.pop(kind, None)  # re-inserted last: the dict stays in warning order
        self._warned[kind] = (now, 0)
