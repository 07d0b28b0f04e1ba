"""Enqueue as one server-side call: the driver-agnostic plan every enqueue
path runs (the store's own, and transactional enqueue on a caller's
psycopg, SQLAlchemy or Django connection).

The database function ``chronos_enqueue`` (migration 0002) takes one array
per job field and stores the batch in one statement, atomically per job,
with the MemoryStore's rules (an existing ID is left alone, due jobs are
ready, unique keys judged under a lock of their key) and ONE notification
per queue per call. A caller runs::

    cursor.execute(enqueue_query(schema), enqueue_params(jobs))
    results = enqueue_results(cursor.fetchall(), jobs)

``enqueue_query`` is schema-qualified and the function sets its own
``search_path``, so it works on any connection. The placeholders are
psycopg's ``%s`` (also what Django's cursors and SQLAlchemy's
``exec_driver_sql`` on psycopg take).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
from psycopg import sql

from ...records._jobs import EnqueueResult, NewJob
from ...records._unique import with_run_slot
from ._rows import PLACEMENT, headers_text

#: The SQL types of the arrays, in ``chronos_enqueue``'s order.
_ARRAY_TYPES = (
    "text[]",  # ids
    "text[]",  # queues
    "text[]",  # kinds
    "bytea[]",  # payloads
    "float8[]",  # run_at (NULL: now + delay)
    "float8[]",  # delays
    "integer[]",  # max_retries
    "float8[]",  # timeouts
    "text[]",  # headers
    "text[]",  # then (NULL: none)
    "text[]",  # stored control, without its expiry
    "integer[]",  # priorities
    "float8[]",  # expires_in (NULL: none, or absolute in the control)
    "text[]",  # unique keys (NULL: not unique)
    "text[]",  # unique modes
    "float8[]",  # unique ttls
)


def enqueue_query(schema: str) -> str:
    """``SELECT ord, job_id, created, run_at FROM "schema".chronos_enqueue(%s::text[],
    ...) ORDER BY ord``: one row per job, in the order given."""
    args = ", ".join(f"%s::{t}" for t in _ARRAY_TYPES)
    name = sql.Identifier(schema).as_string(None)
    return f"SELECT ord, job_id, created, run_at FROM {name}.chronos_enqueue({args}) ORDER BY ord"


def enqueue_params(jobs: Sequence[NewJob]) -> tuple[list[Any], ...]:
    """The arrays of ``jobs``, one per parameter of :func:`enqueue_query`."""
    columns: tuple[list[Any], ...] = tuple([] for _ in _ARRAY_TYPES)
    (
        ids,
        queues,
        kinds,
        payloads,
        run_ats,
        delays,
        max_retries,
        timeouts,
        headers,
        thens,
        controls,
        priorities,
        expires_in,
        unique_keys,
        unique_modes,
        unique_ttls,
    ) = columns
    for new in jobs:
        ids.append(new.id)
        queues.append(new.queue)
        kinds.append(new.kind)
        payloads.append(new.payload)
        run_ats.append(new.run_at)
        delays.append(float(new.delay))
        max_retries.append(new.max_retries)
        timeouts.append(float(new.timeout))
        headers.append(headers_text(new.headers))
        thens.append(new.then)
        control = with_run_slot(new.control, new.unique)
        relative = None
        if control is not None and control.expires_in is not None:
            relative = control.expires_in
            control = attrs.evolve(control, expires_in=None, expires_at=None)
        controls.append("" if control is None else control.encode())
        priorities.append(0 if control is None else control.priority)
        expires_in.append(relative)
        unique = new.unique
        if unique is None:
            unique_keys.append(None)
            unique_modes.append(None)
            unique_ttls.append(None)
        else:
            if unique.key is None:
                raise ValueError(f"job {new.id!r}: a stored unique job's key must be resolved")
            unique_keys.append(unique.key)
            unique_modes.append(unique.mode)
            unique_ttls.append(None if unique.ttl is None else float(unique.ttl))
    return columns


def enqueue_results(rows: Sequence[Sequence[Any]], jobs: Sequence[NewJob]) -> list[EnqueueResult]:
    """The results of :func:`enqueue_query`'s ``rows`` for ``jobs``, in order.
    Raises RuntimeError when the rows do not answer the jobs one for one."""
    if len(rows) != len(jobs):
        raise RuntimeError(f"chronos_enqueue answered {len(rows)} rows for {len(jobs)} jobs")
    return [
        EnqueueResult(job_id, bool(created), float(run_at), PLACEMENT)
        for _ord, job_id, created, run_at in rows
    ]
