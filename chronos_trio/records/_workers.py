"""The worker registry's record: one live worker process as the store holds it.

Every worker process records itself (see ``actors/registrar``) and refreshes
its entry on a beat; the entry lapses ``ttl`` seconds after its last beat on
the store's clock, and goes at once when the worker stops cleanly. A record
travels as compact JSON (orjson, through the payload codec's ``dumps`` and
``loads``), the same text in every backend that stores bytes.

:func:`decode_worker` raises ``ValueError`` for anything that is not a
record of this shape, so a store can skip a malformed entry (with a warning)
instead of failing a whole listing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import attrs

from ._attrs_methods import fields_eq, fields_hash, fields_repr
from ._codec import dumps, loads
from ._log import log_event

#: Running job IDs a record lists at most (``running`` still counts them all):
#: a worker of concurrency 1000 must not write a megabyte per beat.
MAX_RUNNING_IDS = 100
#: Task kinds a record lists at most (an app's registry, which a beat
#: carries whole: kinds are few).
MAX_KINDS = 1000

#: The record format written in every entry (``"v"``): a reader refuses a
#: newer one rather than guess at its fields.
WORKER_FORMAT = 1


@attrs.frozen
class WorkerInfo:
    """One live worker process, as its last beat recorded it.

    ``worker_id`` is the worker's own id (``host:pid:random`` by default);
    ``queues`` the queues it consumes, in its order; ``concurrency`` how many
    handlers it runs at once. ``started_at`` (when it registered) and
    ``last_beat`` are epoch seconds on the store's clock. ``running`` is how
    many handlers ran at its last beat, ``running_job_ids`` their job IDs
    (at most :data:`MAX_RUNNING_IDS` of them); ``kinds`` the task kinds it
    has handlers for (None: not reported)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    worker_id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    started_at: float
    last_beat: float
    running: int
    running_job_ids: tuple[str, ...]
    #: The task kinds it has handlers for (at most :data:`MAX_KINDS`, sorted);
    #: None: not reported (a worker of a version before kinds were
    #: recorded), so nothing can be said about what it runs.
    kinds: tuple[str, ...] | None = None


def encode_worker(info: WorkerInfo, ttl: float) -> bytes:
    """The stored text of ``info`` (its ``last_beat`` is the store's to set
    and is not written) with the entry's ``ttl``, seconds."""
    return dumps(
        {
            "v": WORKER_FORMAT,
            "id": info.worker_id,
            "host": info.host,
            "pid": info.pid,
            "queues": list(info.queues),
            "concurrency": info.concurrency,
            "started_at": info.started_at,
            "ttl": ttl,
            "running": info.running,
            "running_job_ids": list(info.running_job_ids[:MAX_RUNNING_IDS]),
            # optional: a reader of an older version ignores it
            **({} if info.kinds is None else {"kinds": list(info.kinds[:MAX_KINDS])}),
        }
    )


def _field(raw: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    value = raw.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"field {name!r} holds {value!r}")
    return value


def _strings(raw: dict[str, Any], name: str) -> tuple[str, ...]:
    value = _field(raw, name, list)
    if not all(isinstance(v, str) for v in value):
        raise ValueError(f"field {name!r} holds {value!r}, not a list of strings")
    return tuple(value)


def decode_worker(data: bytes, *, last_beat: float | None = None) -> tuple[WorkerInfo, float]:
    """The record in ``data`` and its ttl. ``last_beat`` (from the store's own
    index) is put in the record; without it the record's ``last_beat`` is 0.

    Raises ``ValueError`` naming what is wrong: not JSON, not an object, a
    newer format, or a field missing or of the wrong type."""
    try:
        raw = loads(data)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"not a JSON object: {type(raw).__name__}")
    version = _field(raw, "v", int)
    if version > WORKER_FORMAT:
        raise ValueError(f"record format {version} is newer than this version reads")
    ttl = float(_field(raw, "ttl", (int, float)))
    info = WorkerInfo(
        worker_id=_field(raw, "id", str),
        host=_field(raw, "host", str),
        pid=_field(raw, "pid", int),
        queues=_strings(raw, "queues"),
        concurrency=_field(raw, "concurrency", int),
        started_at=float(_field(raw, "started_at", (int, float))),
        last_beat=0.0 if last_beat is None else last_beat,
        running=_field(raw, "running", int),
        running_job_ids=_strings(raw, "running_job_ids"),
        kinds=_strings(raw, "kinds") if "kinds" in raw else None,
    )
    return info, ttl


def worker_order(info: WorkerInfo) -> tuple[str, int, str]:
    """The order listings use: by host, then pid (then id, for equal pids)."""
    return (info.host, info.pid, info.worker_id)


__all__ = [
    "MAX_KINDS",
    "MAX_RUNNING_IDS",
    "WorkerInfo",
    "decode_worker",
    "encode_worker",
    "worker_order",
]


def readable_workers(entries: Iterable[tuple[str, bytes, float]]) -> list[WorkerInfo]:
    """The registry entries ``(worker id, stored text, last beat)`` that
    decode, sorted by :func:`worker_order`; each that does not is skipped
    with a warning naming the worker and why (logger ``chronos_trio.store``)."""
    out = []
    for worker_id, data, last_beat in entries:
        try:
            info, _ttl = decode_worker(data, last_beat=last_beat)
        except ValueError as exc:
            log_event(
                _store_log,
                logging.WARNING,
                "worker registry entry skipped",
                worker=worker_id,
                error=str(exc),
            )
            continue
        out.append(info)
    return sorted(out, key=worker_order)


_store_log = logging.getLogger("chronos_trio.store")
