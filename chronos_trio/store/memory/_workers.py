"""The MemoryStore's worker registry (see :meth:`WorkerRole.beat_worker`).

Entries are kept as the registry's stored text (``records._workers``), as a
RedisStore keeps them, so a listing decodes each one and skips (with a
warning) an entry it cannot read, exactly as there.
"""

from __future__ import annotations

import attrs

from ...records._workers import WorkerInfo, encode_worker, readable_workers


@attrs.frozen
class _Entry:
    data: bytes
    last_beat: float
    expires_at: float


class WorkerRegistry:
    """Live workers by id; a lapsed entry is never listed and is dropped by
    the next beat or listing."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def beat(self, worker: WorkerInfo, ttl: float, now: float) -> None:
        """Record or refresh ``worker``, its last beat ``now``.
        ``ValueError`` for a ttl that is not positive."""
        if not ttl > 0:
            raise ValueError(f"a worker's registry ttl must be > 0 seconds, got {ttl!r}")
        self._drop_lapsed(now)
        self.put(worker.worker_id, encode_worker(worker, ttl), now, ttl)

    def put(self, worker_id: str, data: bytes, now: float, ttl: float) -> None:
        """Store ``data`` as the entry of ``worker_id`` as it is (tests use it
        to plant an entry that cannot be read)."""
        self._entries[worker_id] = _Entry(data, now, now + ttl)

    def unregister(self, worker_id: str) -> None:
        self._entries.pop(worker_id, None)

    def live(self, now: float) -> list[WorkerInfo]:
        """The entries not lapsed at ``now``, sorted by host, pid."""
        self._drop_lapsed(now)
        return readable_workers(
            (worker_id, entry.data, entry.last_beat) for worker_id, entry in self._entries.items()
        )

    def _drop_lapsed(self, now: float) -> None:
        for worker_id in [w for w, e in self._entries.items() if e.expires_at <= now]:
            del self._entries[worker_id]

    def __len__(self) -> int:
        return len(self._entries)
