"""Queue statistics as the SQL stores (PostgreSQL and SQLite) assemble
them: per-state counts read with one ``GROUP BY`` become
:class:`~._roles.QueueStats`, with the MemoryStore's answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..records._jobs import JobState
from ._roles import QueueStats


def queue_stats(
    names: Sequence[str],
    counted: Iterable[tuple[str, str, int, int, int]],
    paused: Iterable[str],
) -> list[QueueStats]:
    """One :class:`QueueStats` per name of ``names``, in order, from
    ``counted`` rows ``(queue, shown state, version, part, count)`` (a queue
    of ``names`` without rows counts zero in every state) and the ``paused``
    queues."""
    counts: dict[str, dict[JobState, int]] = {q: dict.fromkeys(JobState, 0) for q in names}
    parts: dict[str, dict[tuple[int, int], int]] = {q: {} for q in names}
    for queue, state, version, part, n in counted:
        counts[queue][JobState(state)] += n
        where = (version, part)
        parts[queue][where] = parts[queue].get(where, 0) + n
    held = set(paused)
    return [QueueStats(q, counts[q], q in held, parts[q]) for q in names]
