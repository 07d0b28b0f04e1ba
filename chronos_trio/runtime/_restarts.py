"""The restart intensity of Erlang/OTP supervision, in one place.

Both the actor supervisor (one worker's actors) and the process manager (a
host's worker processes) give up when their children fail more than
``intensity`` times within ``period`` seconds. :class:`RestartWindow` is that
rule; the caller supplies the clock, so the rule is testable without one.
"""

from __future__ import annotations

import collections


class RestartWindow:
    """Failures within the last ``period`` seconds; more than ``intensity``
    of them means give up.

    Guarantees:

    * a failure exactly ``period`` seconds old still counts; one older than
      that does not;
    * ``intensity=0`` gives up at the first failure; ``intensity=N`` allows
      N failures (N restarts) within any ``period`` and gives up at the N+1st;
    * memory is bounded by the failures in one window (older ones are
      dropped as new ones are recorded).

    Times come from the caller (``trio.current_time()`` in the runtime) and
    must not decrease from one :meth:`record_failure` to the next.
    """

    __slots__ = ("_times", "intensity", "period")

    def __init__(self, intensity: int, period: float) -> None:
        if intensity < 0:
            raise ValueError(f"intensity must be >= 0, got {intensity!r}")
        if not period > 0:
            raise ValueError(f"period must be > 0, got {period!r}")
        self.intensity = intensity
        self.period = period
        self._times: collections.deque[float] = collections.deque()

    def record_failure(self, at: float) -> bool:
        """Record a failure at time ``at``; True when the failures now in the
        window exceed the intensity (the caller gives up)."""
        self._times.append(at)
        while self._times and self._times[0] < at - self.period:
            self._times.popleft()
        return len(self._times) > self.intensity

    @property
    def failures(self) -> int:
        """Failures in the window as of the last :meth:`record_failure`."""
        return len(self._times)

    def __repr__(self) -> str:
        return (
            f"RestartWindow(intensity={self.intensity}, period={self.period:g}, "
            f"failures={self.failures})"
        )


__all__ = ["RestartWindow"]
