"""What a queue purge removes, in words: the text the command line and the
dashboard put in its confirmation (see :meth:`Inspector.purge`)."""

from __future__ import annotations

from collections.abc import Mapping

from ..records._jobs import JobState


def purged_counts(counts: Mapping[JobState, int]) -> dict[JobState, int]:
    """The counts per state a purge of a queue with ``counts`` removes:
    every state's but the leased jobs' (those are left to finish), zeros
    left out, in state order."""
    return {s: counts.get(s, 0) for s in JobState if s is not JobState.LEASED and counts.get(s)}


def purge_summary(queue: str, counts: Mapping[JobState, int]) -> str:
    """One sentence: what purging ``queue`` (whose counts per state are
    ``counts``) removes and what it leaves, e.g. ``"purge queue 'q':
    delete 3 jobs (2 ready, 1 dead); 1 leased job is left to finish"``."""
    gone = purged_counts(counts)
    n = sum(gone.values())
    parts = ", ".join(f"{count} {state.value}" for state, count in gone.items())
    text = f"purge queue {queue!r}: delete {n} job{'s' if n != 1 else ''}"
    text += f" ({parts})" if parts else ""
    leased = counts.get(JobState.LEASED, 0)
    if leased:
        text += f"; {leased} leased job{'s are' if leased != 1 else ' is'} left to finish"
    return text


__all__ = ["purge_summary", "purged_counts"]
