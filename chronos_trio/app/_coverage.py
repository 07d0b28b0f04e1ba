"""Which waiting jobs no live worker will run: a queue no live worker
consumes, or jobs of a kind no live worker of their queue has a handler for
(each worker's registry entry lists its queues and, from this version on,
its task kinds: ``WorkerInfo.kinds``). What the dashboard's queues page
warns about.

Bounded: per queue with waiting jobs, the next :data:`SAMPLE` ready jobs
and the first :data:`SAMPLE` retry_wait jobs are looked at (two admin reads
per queue), so a kind is found when it is among those; counts are of those
looked at. A queue served by a worker that does not report its kinds (an
older version) is not judged by kind.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

import attrs

from ..records._jobs import JobState
from ..store._roles import AdminRole, RegistryRole
from ._inspector import QueueInfo

#: Jobs looked at per queue and state (ready, retry_wait).
SAMPLE = 100
#: States whose jobs wait for a worker (scheduled ones will, later).
WAITING = (JobState.SCHEDULED, JobState.READY, JobState.RETRY_WAIT)


@attrs.frozen
class Unserved:
    """Waiting jobs of ``queue`` no live worker will run: all of them
    (``kind`` None: no live worker consumes the queue; ``jobs`` its waiting
    jobs) or those of ``kind`` (``jobs``: how many of the jobs looked at;
    ``more``: the sample was full, there may be more)."""

    queue: str
    kind: str | None
    jobs: int
    more: bool = False


async def unserved(store: AdminRole, infos: Sequence[QueueInfo]) -> list[Unserved]:
    """What no live worker will run among the waiting jobs of ``infos``
    (see the module docstring); [] when ``store`` keeps no worker registry.
    Raises StoreError when the store cannot be reached."""
    if not isinstance(store, RegistryRole):
        return []
    # queue -> the kinds its live workers handle (None: one does not say)
    served: dict[str, set[str] | None] = {}
    for worker in await store.workers():
        for queue in worker.queues:
            known = served.setdefault(queue, set())
            if worker.kinds is None or known is None:
                served[queue] = None
            else:
                known.update(worker.kinds)
    out: list[Unserved] = []
    for info in infos:
        waiting = sum(info.counts.get(s, 0) for s in WAITING)
        if not waiting:
            continue
        if info.name not in served:
            out.append(Unserved(info.name, None, waiting))
            continue
        kinds = served[info.name]
        if kinds is None:
            continue
        seen: collections.Counter[str] = collections.Counter()
        full = False
        for state in (JobState.READY, JobState.RETRY_WAIT):
            if info.counts.get(state, 0):
                jobs = await store.list_jobs(info.name, state, limit=SAMPLE)
                full = full or len(jobs) == SAMPLE
                seen.update(job.kind for job in jobs if job.kind not in kinds)
        out += [Unserved(info.name, kind, n, full) for kind, n in sorted(seen.items())]
    return out


__all__ = ["SAMPLE", "Unserved", "unserved"]
