"""Enqueue as one server-side call: the driver-agnostic plan every enqueue
path runs (the store's own, and transactional enqueue on a caller's
psycopg, SQLAlchemy or Django connection).

The database function ``chronos_enqueue`` (migration 0001) takes the batch
as ONE JSON parameter (an array, an object per job) and stores it in one
statement, atomically per job, with the MemoryStore's rules (an existing ID
is left alone, due jobs are ready, unique keys judged under a lock of their
key), places each created job at its queue's active version, and sends ONE
notification per queue per call. A caller runs::

    cursor.execute(enqueue_query(schema, jobs), enqueue_params(jobs))
    results = enqueue_results(cursor.fetchall(), jobs)

``enqueue_query`` is schema-qualified and the function sets its own
``search_path``, so it works on any connection. The placeholder is
psycopg's ``%s`` (also what Django's cursors and SQLAlchemy's
``exec_driver_sql`` on psycopg take). Why one JSON text and not an array
per field: a driver adapts one text value in microseconds, where psycopg
spent about 190 µs adapting sixteen one-element arrays (measured).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from typing import Any

import attrs
import orjson
from psycopg import sql

from ...records._jobs import EnqueueResult, NewJob
from ...records._unique import with_run_slot
from .._partitioning import id_hash
from .._rows import headers_text
from .._settling import KEEP_OUTCOME_WAITER
from .._topology_placement import topology_placement


def enqueue_query(schema: str, jobs: Sequence[NewJob] = ()) -> str:
    """``SELECT ord, job_id, created, run_at, version, part FROM
    "schema".chronos_enqueue(%s::jsonb) ORDER BY ord``: one row per job, in
    the order given. When a job of ``jobs`` is marked as waited on, the
    same statement also registers ``store._settling.KEEP_OUTCOME_WAITER`` for each
    such job it created (a second parameter: their IDs, see
    :func:`enqueue_params`), atomically with their enqueue."""
    name = sql.Identifier(schema).as_string(None)
    if not any(new.keep_outcome for new in jobs):
        return (
            "SELECT ord, job_id, created, run_at, version, part"
            f" FROM {name}.chronos_enqueue(%s::jsonb) ORDER BY ord"
        )
    return (
        "WITH e AS (SELECT ord, job_id, created, run_at, version, part"
        f" FROM {name}.chronos_enqueue(%s::jsonb)),"
        f" m AS (INSERT INTO {name}.result_waiters (job_id, waiter, expires_at)"
        f" SELECT e.job_id, '{KEEP_OUTCOME_WAITER}', 'Infinity'::float8 FROM e"
        " WHERE e.created AND e.job_id = ANY(%s::text[]) ON CONFLICT DO NOTHING)"
        " SELECT ord, job_id, created, run_at, version, part FROM e ORDER BY ord"
    )


def enqueue_params(jobs: Sequence[NewJob]) -> tuple[str] | tuple[str, list[str]]:
    """The parameters of :func:`enqueue_query` for ``jobs``: ``jobs`` as JSON
    text, and when a job is marked as waited on, the IDs of those that are.

    Raises ValueError for a unique job whose key is not resolved."""
    text = orjson.dumps([_job_object(new) for new in jobs]).decode()
    marked = [new.id for new in jobs if new.keep_outcome]
    return (text, marked) if marked else (text,)


def _job_object(new: NewJob) -> dict[str, Any]:
    control = with_run_slot(new.control, new.unique)
    relative = None
    if control is not None and control.expires_in is not None:
        relative = control.expires_in
        control = attrs.evolve(control, expires_in=None, expires_at=None)
    item: dict[str, Any] = {
        "id": new.id,
        "queue": new.queue,
        "kind": new.kind,
        "payload": base64.b64encode(new.payload).decode(),
        "run_at": None if new.run_at is None else _number(new.run_at),
        "delay": _number(new.delay),
        "max_retries": new.max_retries,
        "timeout": _number(new.timeout),
        "headers": headers_text(new.headers),
        "then": new.then,
        "control": "" if control is None else control.encode(),
        "priority": 0 if control is None else control.priority,
        "expires_in": None if relative is None else _number(relative),
        "hash": id_hash(new.id),
    }
    unique = new.unique
    if unique is not None:
        if unique.key is None:
            raise ValueError(f"job {new.id!r}: a stored unique job's key must be resolved")
        item["unique_key"] = unique.key
        item["unique_mode"] = unique.mode
        item["unique_ttl"] = None if unique.ttl is None else _number(unique.ttl)
    return item


def _number(value: float) -> float | str:
    """A float for the JSON document: JSON has no infinity or NaN, so those go
    as PostgreSQL's float8 text ('Infinity', '-Infinity', 'NaN'), which
    ``jsonb_to_recordset`` reads into a float8 column as it reads numbers."""
    value = float(value)
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def enqueue_results(rows: Sequence[Sequence[Any]], jobs: Sequence[NewJob]) -> list[EnqueueResult]:
    """The results of :func:`enqueue_query`'s ``rows`` for ``jobs``, in order.
    Raises RuntimeError when the rows do not answer the jobs one for one."""
    if len(rows) != len(jobs):
        raise RuntimeError(f"chronos_enqueue answered {len(rows)} rows for {len(jobs)} jobs")
    return [
        EnqueueResult(job_id, bool(created), float(run_at), topology_placement(version, part))
        for _ord, job_id, created, run_at, version, part in rows
    ]
