"""A bulk enqueue's jobs kept as columns: :class:`JobBatch`.

``task.enqueue_many`` and the producers' ``enqueue_many`` make jobs that
differ only in their ID, payload and (with producer hooks) headers. Built
as one :class:`~chronos_trio.NewJob` each, a batch spends more on the
frozen records (one ``object.__setattr__`` a field, 13 fields) than on
anything else it does for a job; a store that knows this class (Redis)
reads the columns instead and never builds them. Any other reader sees a
``Sequence[NewJob]`` whose records are built on first access, once, and
are the ones :func:`~._producing.new_jobs` returns for the same inputs.

Only plain jobs are batched so: no unique key, no flow control, no
continuation, no ``run_at``, an ID the producer drew (``id_given``
False). Others stay a list of ``NewJob``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import repeat
from typing import overload

from ._jobs import NewJob


class JobBatch(Sequence[NewJob]):
    """Plain jobs of one kind and queue, with one delay, retry limit and
    timeout, as columns (see the module docstring). Read-only: its columns
    are not to be changed once made (the records built from them would no
    longer match them)."""

    __slots__ = (
        "_jobs",
        "delay",
        "headers",
        "ids",
        "kind",
        "max_retries",
        "payloads",
        "queue",
        "timeout",
    )

    def __init__(
        self,
        ids: list[str],
        payloads: list[bytes],
        headers: list[tuple[tuple[str, str], ...]] | None,
        *,
        queue: str,
        kind: str,
        delay: float,
        max_retries: int,
        timeout: float,
    ) -> None:
        if len(ids) != len(payloads) or (headers is not None and len(headers) != len(ids)):
            raise ValueError("a job batch's columns must have one entry per job")
        #: Each job's ID (drawn by the producer: ``NewJob.id_given`` False).
        self.ids = ids
        #: Each job's encoded payload.
        self.payloads = payloads
        #: Each job's headers; None: every job has none.
        self.headers = headers
        self.queue = queue
        self.kind = kind
        self.delay = delay
        self.max_retries = max_retries
        self.timeout = timeout
        self._jobs: list[NewJob] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, index: int) -> NewJob: ...
    @overload
    def __getitem__(self, index: slice) -> list[NewJob]: ...
    def __getitem__(self, index: int | slice) -> NewJob | list[NewJob]:
        return self.jobs()[index]

    def __iter__(self) -> Iterator[NewJob]:
        return iter(self.jobs())

    def __repr__(self) -> str:
        return f"JobBatch({len(self)} jobs of {self.kind!r} in queue {self.queue!r})"

    def jobs(self) -> list[NewJob]:
        """Its jobs as records, built on the first call (a new list each
        call; the records are the same ones)."""
        built = self._jobs
        if built is None:
            q, k, d, r, t = self.queue, self.kind, self.delay, self.max_retries, self.timeout
            headers = self.headers or repeat((), len(self.ids))
            built = self._jobs = [
                NewJob(job_id, q, k, payload, None, d, r, t, h, None, False, None, None)
                for job_id, payload, h in zip(self.ids, self.payloads, headers, strict=True)
            ]
        return list(built)
