"""Worker recycling: a worker past ``max_jobs`` leases or ``max_memory_mb``
of resident memory ends its run by itself, the way a graceful shutdown
does, so that a fresh process can take its place (Celery's
``max_tasks_per_child`` and ``max_memory_per_child``).

:class:`Recycle` is the one owner of that decision in a worker's runtime:
the leaser tells it when it has leased its last job (it leases no more than
``max_jobs`` in all, so nothing it leased has to be handed back), the
``recycler`` actor asks for the recycle (once those jobs are settled, or
once the memory reading is over the limit) and the worker waits for it
beside its own stop. The first request wins; later ones change nothing.
"""

from __future__ import annotations

import os
import resource
import sys

import attrs
import trio

from ..records._attrs_methods import fields_eq, fields_hash, fields_repr

#: ``Recycled.reason`` values.
MAX_JOBS = "max_jobs"
MAX_MEMORY = "max_memory"


@attrs.frozen
class Recycled:
    """Why a worker ended its run by itself (``Worker.recycled``).

    ``reason`` is ``"max_jobs"`` (it leased ``limit`` jobs and settled
    them) or ``"max_memory"`` (its resident memory, ``rss_mb``, reached
    ``limit`` MB); ``jobs`` is how many jobs it had leased by then."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    reason: str
    limit: int
    jobs: int
    rss_mb: float | None = None


class Recycle:
    """Whether, and why, this worker asked to be recycled."""

    def __init__(self) -> None:
        self.requested: Recycled | None = None
        self._requested = trio.Event()
        #: Set by the leaser once it has leased ``max_jobs`` jobs (it leases no more).
        self.jobs_capped = trio.Event()

    def request(self, recycled: Recycled) -> None:
        """Ask for a recycle (the first request wins). Never awaits."""
        if self.requested is None:
            self.requested = recycled
            self._requested.set()

    async def wait(self) -> Recycled:
        """Until a recycle is requested; returns why."""
        await self._requested.wait()
        assert self.requested is not None
        return self.requested


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_mb() -> float:
    """This process's resident set size in MB (2**20 bytes): the current one
    from ``/proc/self/statm`` where there is one (Linux), else the peak one
    ``getrusage`` reports (macOS and the BSDs, which have no cheap current
    figure: a process there recycles once its peak reached the limit)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            pages = int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # ru_maxrss is in bytes on macOS, in KiB elsewhere
        return peak / 2**20 if sys.platform == "darwin" else peak / 2**10
    return pages * _PAGE_SIZE / 2**20


__all__ = ["MAX_JOBS", "MAX_MEMORY", "Recycle", "Recycled", "resident_mb"]
