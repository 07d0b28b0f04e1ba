"""Flow control in the SQLite claim: rate limits (GCRA arrival times in
``rate_buckets``) and concurrency limits (``slots``), judged for the jobs
with a control in the claim's own write transaction, by the rules of
``store._admission`` (the MemoryStore's).

The claim holds the file's write lock from BEGIN, so what :meth:`Admission.load`
reads (each rate key's theoretical arrival time, how many slots of each
concurrency key are held now: a slot counts while its job is leased and its
lease unexpired) cannot change under it, in any process: two claims of one
key never admit past its limit. :class:`Admission` judges jobs one after
another in memory, and :meth:`Admission.save` writes the new arrival times
and slots back.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable

import attrs

from ...records._control import JobControl
from .._admission import Verdict, judge, next_tat

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

    def load(self, conn: sqlite3.Connection, controls: Iterable[JobControl]) -> None:
        """Read the state of the keys of ``controls`` not read yet."""
        rates: set[str] = set()
        caps: set[str] = set()
        for control in controls:
            rates.update(key for key, *_ in control.rates)
            caps.update(key for key, _ in control.caps)
        rates -= self.loaded
        caps -= self.loaded
        if rates:
            for key, tat in conn.execute(_READ_TATS, (self.queue, json.dumps(sorted(rates)))):
                self.tats[key] = float(tat)
        if caps:
            for key, count in conn.execute(
                _READ_RUNNING, (self.queue, json.dumps(sorted(caps)), self.now)
            ):
                self.running[key] = int(count)
        self.loaded |= rates | caps

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
