"""Flow control in the SQLite claim: rate limits (GCRA arrival times in
``rate_buckets``) and concurrency limits (``slots``), judged for the jobs
with a control in the claim's own write transaction, by the rules of
``store._admission`` (the MemoryStore's).

The claim holds the file's write lock from BEGIN, so what :meth:`Admission.load`
reads (each rate key's theoretical arrival time, how many slots of each
concurrency key are held now: a slot counts while its job is leased and its
lease unexpired) cannot change under it, in any process: two claims of one
key never admit past its limit. The jobs are judged one after another in
memory (``store._admission.KeyStates``, shared with the PostgreSQL store),
and :meth:`Admission.save` writes the new arrival times and slots back.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable

from ...records._control import JobControl
from .._admission import KeyStates

_READ_TATS = """
SELECT key, tat FROM rate_buckets
WHERE queue = ? AND key IN (SELECT value FROM json_each(?))
"""

_READ_RUNNING = """
SELECT s.key, count(*) FROM slots s JOIN jobs j ON j.id = s.job_id
WHERE s.queue = ? AND s.key IN (SELECT value FROM json_each(?))
  AND j.state = 'leased' AND j.lease_expires_at > ?
GROUP BY s.key
"""

_SAVE_TAT = """
INSERT INTO rate_buckets (queue, key, tat) VALUES (?, ?, ?)
ON CONFLICT (queue, key) DO UPDATE SET tat = excluded.tat
"""

_SAVE_SLOT = "INSERT INTO slots (queue, key, job_id) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"


class Admission(KeyStates):
    """The limit state of one queue's keys during one claim: read by
    :meth:`load`, judged and taken in memory (``store._admission``),
    written back by :meth:`save`."""

    def load(self, conn: sqlite3.Connection, controls: Iterable[JobControl]) -> None:
        """Read the state of the keys of ``controls`` not read yet."""
        rates, caps = self.unread(controls)
        if rates:
            for key, tat in conn.execute(_READ_TATS, (self.queue, json.dumps(rates))):
                self.tats[key] = float(tat)
        if caps:
            for key, count in conn.execute(_READ_RUNNING, (self.queue, json.dumps(caps), self.now)):
                self.running[key] = int(count)

    def save(self, conn: sqlite3.Connection) -> None:
        """Write what :meth:`take` changed."""
        if self.changed_tats:
            conn.executemany(
                _SAVE_TAT, [(self.queue, key, tat) for key, tat in self.changed_tats.items()]
            )
            self.changed_tats.clear()
        if self.new_slots:
            conn.executemany(_SAVE_SLOT, [(self.queue, key, job) for key, job in self.new_slots])
            self.new_slots.clear()
