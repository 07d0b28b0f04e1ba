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
The jobs are then judged one after another in memory
(``store._admission.KeyStates``, shared with the SQLite store), and
:meth:`Admission.save` writes the new arrival times and slots back in one
statement.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg

from ...records._control import JobControl
from .._admission import KeyStates

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


class Admission(KeyStates):
    """The limit state of one queue's keys during one claim: locked and read
    by :meth:`load`, judged and taken in memory (``store._admission``),
    written back by :meth:`save`."""

    def load(self, conn: psycopg.Connection[Any], controls: Iterable[JobControl]) -> None:
        """Lock and read the state of the keys of ``controls`` not read yet."""
        rates, caps = self.unread(controls)
        fresh = sorted({*rates, *caps})
        if not fresh:
            return
        conn.execute(_LOCK_KEYS, (self.queue, fresh))
        rows = conn.execute(
            _READ_STATE, {"queue": self.queue, "rates": rates, "caps": caps, "now": self.now}
        ).fetchall()
        for kind, key, tat, count in rows:
            if kind == "r":
                self.tats[key] = float(tat)
            else:
                self.running[key] = int(count)

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
