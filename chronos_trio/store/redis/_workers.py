"""The worker registry on Redis (see :meth:`WorkerRole.beat_worker`).

Two keys under one hash tag (``{ns:workers}``, see :mod:`.keys`), so every
script here touches one slot and runs unchanged on a Cluster: a hash of each
worker's entry (its JSON, ``records._workers``) and a zset of when each
entry lapses (last beat + ttl, on Redis's clock). A beat is one script that
writes both (``worker_beat.lua``); a listing is one read-only script that
returns only the entries not lapsed (``workers_list.lua``), so a worker
killed without unregistering drops out when its ttl passes, whether or not
a later beat has removed its entry yet.

Each operation here is a sans-IO plan (see ``_core``), run by
``StoreContext.run`` (``store.py`` calls ``ctx.run(plan)``).
"""

from __future__ import annotations

import logging

import attrs

from ...records._log import log_event
from ...records._workers import WorkerInfo, decode_worker, encode_worker, worker_order
from . import _scripts as S
from ._codec import ident, parse_number
from ._context import StoreContext
from ._core import Call, Plan
from ._scripts import Op

log = logging.getLogger("chronos_trio.store.redis")

#: Lapsed entries one beat removes at most (bounded work per beat).
SWEEP_PER_BEAT = 16


def beat(ctx: StoreContext, worker: WorkerInfo, ttl: float) -> Plan[None]:
    if not ttl > 0:
        raise ValueError(f"a worker's registry ttl must be > 0 seconds, got {ttl!r}")
    keys = ctx.keys.workers
    yield Call(
        [
            Op.script_call(
                S.WORKER_BEAT,
                [keys.info, keys.lapse],
                [worker.worker_id, encode_worker(worker, ttl), repr(float(ttl)), SWEEP_PER_BEAT],
            )
        ]
    )


def unregister(ctx: StoreContext, worker_id: str) -> Plan[None]:
    keys = ctx.keys.workers
    yield Call([Op.script_call(S.WORKER_UNREGISTER, [keys.info, keys.lapse], [worker_id])])


def workers(ctx: StoreContext) -> Plan[list[WorkerInfo]]:
    keys = ctx.keys.workers
    (reply,) = yield Call([Op.script_call(S.WORKERS_LIST, [keys.info, keys.lapse], [])])
    out = []
    for worker_id, lapses_at, data in zip(reply[1::3], reply[2::3], reply[3::3], strict=True):
        name = ident(worker_id)
        until = parse_number(lapses_at)
        try:
            if not data:
                raise ValueError("no entry behind its lapse time")
            info, ttl = decode_worker(data)
            if until is None:
                raise ValueError(f"lapse time {ident(lapses_at)!r} unreadable")
        except ValueError as exc:
            log_event(
                log, logging.WARNING, "worker registry entry skipped", worker=name, error=str(exc)
            )
            continue
        # the zset holds the lapse time; the entry its ttl: the beat was ttl before
        out.append(attrs.evolve(info, last_beat=until - ttl))
    return sorted(out, key=worker_order)
