"""Filters on a job's state, written as SQLite must see them.

A state filter is written as an OR chain (``(state = 'a' OR state = 'b')``),
never ``state IN (...)``: in a CHECK constraint or a partial index's WHERE,
SQLite evaluates an IN list by building a small temporary table for every
row it writes, which made each UPDATE of a job 15x dearer (about 290 µs
against 18 µs a row measured here). And SQLite uses a partial index only
for a query whose WHERE holds the index's own expression term for term, so
the claims, waits and listings use these constants, which ``schema.sql``
repeats verbatim (``tests/test_sqlite_store.py`` checks both: the text is
in the schema, and the queries' plans use the indexes).
"""

from __future__ import annotations


def any_state(*states: str) -> str:
    """The filter "the job is in one of ``states``" (in the order given)."""
    return "(" + " OR ".join(f"state = '{state}'" for state in states) + ")"


#: Due or waiting to be due: the ``jobs_claim`` index's filter.
DUE = any_state("ready", "scheduled", "retry_wait")
#: Waiting for a time (scheduled or retrying): the ``jobs_due`` index's filter.
WAITING = any_state("scheduled", "retry_wait")
#: Finished: the ``jobs_finished`` index's filter.
FINISHED = any_state("succeeded", "dead", "aborted")
#: Every state the schema allows (its CHECK constraint).
ANY = any_state("scheduled", "ready", "leased", "retry_wait", "succeeded", "dead", "aborted")
#: Dead-lettered or aborted (finished without success).
FAILED = any_state("dead", "aborted")

#: The filters the schema's indexes and CHECK repeat verbatim.
INDEXED = (DUE, WAITING, FINISHED, ANY)
