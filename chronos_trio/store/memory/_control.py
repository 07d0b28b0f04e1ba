"""The MemoryStore's flow control state: rate-limit buckets and concurrency
slots (see ``records._control``), judged in the lease step by the rules of
``store._admission`` (a GCRA per rate key), as on Redis. A concurrency
slot is held by a job while its record is leased and the lease unexpired: a
settled, recovered or expired holder no longer counts, whoever noticed
first (nothing to leak).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from ...records._control import JobControl
from ...records._jobs import Job, JobState
from ...records._unique import RUN_SLOT_PREFIX
from .._admission import Verdict, judge, next_tat, tolerance


@attrs.define
class Admission:
    """What the lease does with one ready job, and, when held back by a rate
    limit, when its next permit comes (None: a concurrency limit held it)."""

    verdict: Verdict
    until: float | None = None


#: Lapsed limits are forgotten once more than this many are known.
_PURGE_ABOVE = 10_000

_LEASE = Admission(Verdict.LEASE)
_EXPIRED = Admission(Verdict.EXPIRED)


class ControlState:
    """Buckets and slots, per (queue, key)."""

    def __init__(self) -> None:
        self._tat: dict[tuple[str, str], float] = {}
        self._holders: dict[tuple[str, str], set[str]] = {}

    def admit(
        self, job: Job, control: JobControl, now: float, job_of: Callable[[str], Job | None]
    ) -> Admission:
        """Judge ``job`` for a lease at ``now`` (``store._admission``); on
        LEASE its permits and slots are taken (the caller leases it in the
        same step)."""
        queue = job.queue
        verdict, until = judge(
            control,
            now,
            lambda key: self._tat.get((queue, key)),
            lambda key: self.running(queue, key, now, job_of),
        )
        if verdict is Verdict.EXPIRED:
            return _EXPIRED
        if verdict is Verdict.HELD:
            return Admission(Verdict.HELD, until)
        if control.rates and len(self._tat) > _PURGE_ABOVE:
            self._purge(now)
        for key, count, per, _burst in control.rates:
            self._tat[(queue, key)] = next_tat(self._tat.get((queue, key)), now, count, per)
        for key, _limit in control.caps:
            self._holders.setdefault((queue, key), set()).add(job.id)
        return _LEASE

    def _purge(self, now: float) -> None:
        """Forget lapsed limits (a key per tenant must not pile up)."""
        self._tat = {k: tat for k, tat in self._tat.items() if tat > now}
        self._holders = {k: h for k, h in self._holders.items() if h}

    def running(self, queue: str, key: str, now: float, job_of: Callable[[str], Job | None]) -> int:
        """How many slots of ``key`` are held now (holders gone are dropped)."""
        holders = self._holders.get((queue, key))
        if not holders:
            return 0
        for job_id in list(holders):
            job = job_of(job_id)
            if (
                job is None
                or job.state is not JobState.LEASED
                or job.lease_expires_at is None
                or job.lease_expires_at <= now
            ):
                holders.discard(job_id)
        if not holders:
            del self._holders[(queue, key)]
        return len(holders)

    def hold_back(self, queue: str, control: JobControl, now: float, delay: float) -> None:
        """A handler was rate limited upstream: no permit of ``control``'s
        rate limits before ``now + delay``."""
        for key, count, per, burst in control.rates:
            floor = now + delay + tolerance(per / count, burst)
            self._tat[(queue, key)] = max(self._tat.get((queue, key), now), floor)

    def release(self, queue: str, control: JobControl, job_id: str) -> bool:
        """A settled lease gives its slots back; whether it held any. A key
        no one holds is forgotten (a unique key's run slot is a key per
        job's key: they must not pile up)."""
        freed = False
        for key, _limit in control.caps:
            holders = self._holders.get((queue, key))
            if holders is not None and job_id in holders:
                holders.discard(job_id)
                freed = True
                if not holders:
                    del self._holders[(queue, key)]
        return freed

    def usage(self, queue: str, now: float, job_of: Callable[[str], Job | None]) -> dict[str, int]:
        """Slots held now per concurrency key of ``queue`` (for inspection;
        unique keys' run slots are not listed, as on Redis)."""
        held = {
            key: self.running(q, key, now, job_of)
            for (q, key) in list(self._holders)
            if q == queue and not key.startswith(RUN_SLOT_PREFIX)
        }
        return {key: n for key, n in held.items() if n}

    def next_permits(self, queue: str, now: float) -> dict[str, float]:
        """Each rate key's theoretical arrival time (for inspection); lapsed
        ones are forgotten."""
        self._purge(now)
        return {key: tat for (q, key), tat in self._tat.items() if q == queue}
