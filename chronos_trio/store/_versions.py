"""Queue routing versions (``TopologyRole``) as the SQL stores judge them
(PostgreSQL and SQLite keep them in a ``queue_versions`` table): the
default topology and the rules of a promotion and of a completion, with the
MemoryStore's answers. Each store reads the queue's versions under its own
lock, calls these, then writes.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._roles import QueueVersion, TopologyError, VersionState

#: The topology of a queue that was never promoted.
DEFAULT_VERSION = QueueVersion(1, 1, VersionState.ACTIVE)


def check_promotion(
    queue: str, versions: Sequence[QueueVersion], version: int, partitions: int
) -> None:
    """Raises TopologyError unless ``version`` with ``partitions`` partitions
    may become ``queue``'s active version over its ``versions``:
    ``partitions`` >= 1 and ``version`` greater than every one of them."""
    if partitions < 1:
        raise TopologyError(f"partitions must be >= 1, got {partitions}")
    highest = max(v.version for v in versions)
    if version <= highest:
        raise TopologyError(
            f"queue {queue!r}: new version {version} must be greater than {highest}"
        )


def check_completion(queue: str, versions: Sequence[QueueVersion], version: int) -> None:
    """Raises TopologyError unless ``version`` is a draining version among
    ``queue``'s ``versions`` (see :func:`check_drained` for its jobs)."""
    match = [v for v in versions if v.version == version]
    if not match:
        raise TopologyError(f"queue {queue!r} has no version {version}")
    if match[0].state is VersionState.ACTIVE:
        raise TopologyError(f"queue {queue!r}: version {version} is active, not draining")


def check_drained(queue: str, version: int, left: int) -> None:
    """Raises TopologyError when ``version`` of ``queue`` still holds
    ``left`` jobs (in any state)."""
    if left:
        raise TopologyError(
            f"queue {queue!r}: version {version} still holds {left} job(s); "
            "let workers drain it first"
        )
