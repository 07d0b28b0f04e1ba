"""Flow control in the PostgreSQL claim: rate limits (GCRA buckets in
``rate_buckets``) and concurrency limits (``slots``), judged for the jobs
with a control in the claim's own transaction, by the rules of
``memory/_control.py`` (the reference).

Before it judges, :func:`load` takes a transaction-scoped advisory lock of
every (schema, queue, key) involved, in sorted order, then reads each rate
key's theoretical arrival time and how many slots of each concurrency key
are held now (a slot counts while its job is leased and its lease
unexpired: a settled, recovered or expired holder no longer counts). So two
claims of one key never admit past its limit, in any number of processes.
:class:`Admission` then judges jobs one after another in memory, and
:meth:`Admission.save` writes the new arrival times and slots back in one
statement.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs
import psycopg

from ...records._control import JobControl
from .._admission import Verdict, judge, next_tat

_LOCK_KEYS = """
SELECT pg_advisory_xact_lock(hashtextextended(
    'chronos_limit:' || current_schema() || chr(31) || %s || chr(31) || k, 0))
FROM unnest(%s::text[]) AS k ORDER BY k
"""

_READ_STATE = """
SELECT 'r', b.key, b.tat, 0 FROM rate_buckets b WHERE b.queue = %(queue)s AND b.key = ANY(%(rates)s)
UNION ALL
SELECT 'c', s.key, NULL, count(*) FROM slots s JOIN jobs j ON j.id = s.job_id
WHERE s.queue = %(queue)s AND s.key = ANY(%(caps)s)
  AND j.state = 'leased' AND j.lease_expires_at > %(now)s
GROUP BY s.key
"""

_SAVE = """
WITH tats AS (
    INSERT INTO rate_buckets AS b (queue, key, tat)
    SELECT %(queue)s, k, t FROM unnest(%(keys)s::text[], %(tats)s::float8[]) AS u (k, t)
    ON CONFLICT (queue, key) DO UPDATE SET tat = EXCLUDED.tat
    RETURNING 1
)
INSERT INTO slots (queue, key, job_id)
SELECT %(queue)s, k, j FROM unnest(%(slot_keys)s::text[], %(slot_jobs)s::text[]) AS u (k, j)
ON CONFLICT DO NOTHING
"""


@attrs.define
class Admission:
    """The limit state of one queue's keys during one claim."""

    queue: str
    now: float
    tats: dict[str, float] = attrs.field(factory=dict)
    running: dict[str, int] = attrs.field(factory=dict)
    loaded: set[str] = attrs.field(factory=set)
    changed_tats: dict[str, float] = attrs.field(factory=dict)
    new_slots: list[tuple[str, str]] = attrs.field(factory=list)

    def load(self, conn: psycopg.Connection[Any], controls: Iterable[JobControl]) -> None:
        """Lock and read the state of the keys of ``controls`` not read yet."""
        rates: set[str] = set()
        caps: set[str] = set()
        for control in controls:
            rates.update(key for key, *_ in control.rates)
            caps.update(key for key, _ in control.caps)
        rates -= self.loaded
        caps -= self.loaded
        fresh = sorted(rates | caps)
        if not fresh:
            return
        conn.execute(_LOCK_KEYS, (self.queue, fresh))
        rows = conn.execute(
            _READ_STATE,
            {"queue": self.queue, "rates": sorted(rates), "caps": sorted(caps), "now": self.now},
        ).fetchall()
        for kind, key, tat, count in rows:
            if kind == "r":
                self.tats[key] = float(tat)
            else:
                self.running[key] = int(count)
        self.loaded.update(fresh)

    def judge(self, control: JobControl) -> tuple[Verdict, float | None]:
        """What the claim does with a ready job of ``control`` now (its keys
        loaded; ``store._admission``): LEASE it, EXPIRED, or HELD (with the
        time of the next permit; None: a concurrency limit)."""
        return judge(control, self.now, self.tats.get, lambda key: self.running.get(key, 0))

    def take(self, control: JobControl, job_id: str) -> None:
        """Take the permits and slots of an admitted job."""
        now = self.now
        for key, count, per, _burst in control.rates:
            self.tats[key] = self.changed_tats[key] = next_tat(self.tats.get(key), now, count, per)
        for key, _limit in control.caps:
            self.running[key] = self.running.get(key, 0) + 1
            self.new_slots.append((key, job_id))

    def save(self, conn: psycopg.Connection[Any]) -> None:
        """Write what :meth:`take` changed."""
        if not self.changed_tats and not self.new_slots:
            return
        conn.execute(
            _SAVE,
            {
                "queue": self.queue,
                "keys": list(self.changed_tats),
                "tats": list(self.changed_tats.values()),
                "slot_keys": [k for k, _ in self.new_slots],
                "slot_jobs": [j for _, j in self.new_slots],
            },
        )
        self.changed_tats.clear()
        self.new_slots.clear()
