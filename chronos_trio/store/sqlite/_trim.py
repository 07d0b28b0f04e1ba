"""Retention on SQLite (:meth:`AdminRole.trim`): at most three DELETE
statements per call, however many rows they remove, in one write
transaction.

The rules are the MemoryStore's (and the PostgreSQL store's):

1. lapsed records go: a retained success past its ``retain_until``
   (counted), a success kept only for its result or its waiters past it
   (uncounted), a discarded record kept for its waiters past it
   (uncounted), a dead or aborted job ``dead_max_age`` or more seconds
   after its finish (counted);
2. beyond ``dead_max_count`` dead and aborted jobs per queue, the oldest
   finished (then lowest job ID) go;
3. beyond ``keep_succeeded`` retained successes per queue, those whose
   retention ends first (then lowest job ID) go.

A discarded record never counts in 2 or 3. A workflow job whose end is
still in the outbox (column ``continuation``: not handled by a continuer
yet) is left for the next call, so its flow goes on (the MemoryStore and
Redis keep its entry beside the outbox instead). Finished jobs hold no unique
key but a throttle's, which lasts its own ttl in ``unique_locks`` whatever
becomes of its job, and no concurrency slot: trimming touches neither.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from .._roles import NOTHING_SET_ASIDE, CountResult
from . import _states
from ._inspect import LISTED, texts

_LAPSED = f"""
DELETE FROM jobs
 WHERE queue IN (SELECT value FROM json_each(:queues))
   AND NOT continuation  -- an end still in the outbox stays for its continuer
   AND ((discarded OR state = 'succeeded') AND coalesce(retain_until, 0) <= :now
        OR NOT discarded AND {_states.FAILED}
           AND coalesce(finished_at, 0) + :age <= :now)
RETURNING {LISTED}
"""

#: The jobs of each queue beyond the ``keep`` last in ``order`` (a window
#: over the queue's finished rows, read by the jobs_finished index).
_BEYOND = """
DELETE FROM jobs WHERE NOT continuation AND id IN (
    SELECT id FROM (
        SELECT id, row_number() OVER (
                   PARTITION BY queue ORDER BY {order} DESC, id DESC) AS rank
          FROM jobs
         WHERE queue IN (SELECT value FROM json_each(:queues)) AND {finished} AND {which}
           AND NOT discarded
    )
    WHERE rank > :keep)
"""

_DEAD_BEYOND = _BEYOND.format(
    order="coalesce(finished_at, 0)", finished=_states.FINISHED, which=_states.FAILED
)
_SUCCEEDED_BEYOND = _BEYOND.format(
    order="coalesce(retain_until, 0)",
    finished=_states.FINISHED,
    which="state = 'succeeded' AND retained",
)


def trim(
    conn: sqlite3.Connection,
    queues: Sequence[str],
    now: float,
    *,
    dead_max_age: float | None,
    dead_max_count: int | None,
    keep_succeeded: int | None,
) -> CountResult:
    """See the module docstring; the number of counted jobs deleted."""
    names = list(queues)
    if not names:
        return CountResult(0, NOTHING_SET_ASIDE)
    listed = texts(names)
    # an age of +inf keeps every dead job (None: no age limit)
    age = float("inf") if dead_max_age is None else dead_max_age
    rows = conn.execute(_LAPSED, {"queues": listed, "now": now, "age": age}).fetchall()
    deleted = sum(1 for (counted,) in rows if counted)
    if dead_max_count is not None:
        cur = conn.execute(_DEAD_BEYOND, {"queues": listed, "keep": max(0, dead_max_count)})
        deleted += cur.rowcount
    if keep_succeeded is not None:
        cur = conn.execute(_SUCCEEDED_BEYOND, {"queues": listed, "keep": max(0, keep_succeeded)})
        deleted += cur.rowcount
    return CountResult(deleted, NOTHING_SET_ASIDE)
