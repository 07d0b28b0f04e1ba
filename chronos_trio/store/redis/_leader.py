"""Leadership leases and fenced schedule triggers on Redis.

All keys of one leadership name share the tag ``{ns:L:<name>}`` (see
:mod:`.keys`), so every script here touches one slot.

``enqueue_trigger`` cannot be one script: the trigger's job lives in its
queue's partition, another slot on a Cluster. It runs in three steps:

(a) ``trigger_record.lua`` (one slot): checks the epoch and that its lease is
    unexpired, checks ``last_fired < fire_at``, records ``fire_at`` as last
    fired and the trigger's job as *pending*;
(b) the normal, idempotent enqueue of the job (its ID is deterministic);
(c) the pending entry is deleted.

If the caller dies between (a) and (c), the trigger stays pending, and
whoever next calls ``enqueue_trigger`` under that name, or newly acquires the
leadership, enqueues it again: idempotent, because the ID is deterministic.
So a recorded trigger is never lost and never enqueued as two jobs; as with
any at-least-once system, a job that already ran and was dropped before (c)
can run once more.

Damaged leadership records: an unreadable expiry counts as expired; an
unreadable epoch makes ``acquire`` raise StoreError (continuing it could
reissue an epoch, breaking the fence); an unreadable last-fired time counts
as never fired; a pending trigger that cannot be decoded is moved to
``{ns:L:<name>}:damaged`` (field as in pending) and logged, and the others
are enqueued.

Each operation here is a sans-IO plan (see ``_core``), run by
``StoreContext.run`` (``store.py`` calls ``ctx.run(plan)``).
"""

from __future__ import annotations

import logging

from ...records._jobs import NewJob
from ...records._log import log_event
from .._roles import Leadership, StoreError, TriggerResult
from . import _scripts as S
from ._codec import decode_new_job, encode_new_job, ident, parse_number
from ._context import StoreContext
from ._core import Call, Plan
from ._enqueue import enqueue_plan
from ._scripts import Op
from .keys import LeaderKeys

log = logging.getLogger("chronos_trio.store.redis")


def _enqueue_pending(ctx: StoreContext, keys: LeaderKeys, flat: list[bytes]) -> Plan[None]:
    """Steps (b) and (c) for ``[field, encoded job, ...]``; an entry that
    cannot be decoded is moved to the name's damaged hash instead."""
    if not flat:
        return
    fields, jobs, damaged = [], [], []
    for field, value in zip(flat[0::2], flat[1::2], strict=True):
        try:
            jobs.append(decode_new_job(value))
            fields.append(field)
        except ValueError as exc:
            log_event(
                log,
                logging.WARNING,
                "pending trigger set aside",
                trigger=ident(field),
                error=str(exc),
            )
            damaged.append((field, value))
    if jobs:
        yield from enqueue_plan(ctx, jobs)
    ops = [Op.command(keys.damaged, "HSET", keys.damaged, f, v) for f, v in damaged]
    drop = fields + [f for f, _ in damaged]
    yield Call([*ops, Op.command(keys.pending, "HDEL", keys.pending, *drop)])


def acquire(ctx: StoreContext, name: str, holder: str, ttl: float) -> Plan[Leadership | None]:
    keys = ctx.keys.leader(name)
    (reply,) = yield Call(
        [Op.script_call(S.LEADER_ACQUIRE, [keys.lead], [holder, repr(float(ttl))])]
    )
    if not reply:
        return None
    if reply[0] == b"damaged":
        raise StoreError(f"leadership {name!r} cannot be taken: damaged record: {ident(reply[1])}")
    epoch, expires, fresh = reply
    if fresh == 1:
        # A predecessor may have died between recording a trigger and enqueuing it.
        (pending,) = yield Call([Op.command(keys.pending, "HGETALL", keys.pending)])
        # redis-py turns an HGETALL reply into a dict
        yield from _enqueue_pending(ctx, keys, [x for kv in pending.items() for x in kv])
    return Leadership(name, holder, int(epoch), float(expires))


def renew(ctx: StoreContext, name: str, holder: str, epoch: int, ttl: float | None) -> Plan[bool]:
    """Extend (``ttl``) or give up (``ttl`` None) a held leadership."""
    keys = ctx.keys.leader(name)
    (reply,) = yield Call(
        [
            Op.script_call(
                S.LEADER_RENEW,
                [keys.lead],
                [holder, str(int(epoch)), "" if ttl is None else repr(float(ttl))],
            )
        ]
    )
    return bool(reply == 1)


def current(ctx: StoreContext, name: str) -> Plan[Leadership | None]:
    keys = ctx.keys.leader(name)
    (reply,) = yield Call([Op.script_call(S.LEADER_GET, [keys.lead], [])])
    if not reply:
        return None
    holder, epoch, expires = reply
    return Leadership(name, ident(holder), int(epoch), float(expires))


def enqueue_trigger(
    ctx: StoreContext, name: str, epoch: int, schedule_id: str, fire_at: float, job: NewJob
) -> Plan[TriggerResult]:
    keys = ctx.keys.leader(name)
    field = f"{schedule_id}@{float(fire_at)!r}"
    (reply,) = yield Call(
        [
            Op.script_call(
                S.TRIGGER_RECORD,
                [keys.lead, keys.fired, keys.pending],
                [str(int(epoch)), schedule_id, repr(float(fire_at)), field, encode_new_job(job)],
            )
        ]
    )
    status = reply[0]
    if status == b"stale":
        return TriggerResult.STALE_EPOCH
    yield from _enqueue_pending(ctx, keys, reply[1:])
    return TriggerResult.ENQUEUED if status == b"enqueued" else TriggerResult.ALREADY_FIRED


def last_fired(ctx: StoreContext, name: str) -> Plan[dict[str, float]]:
    keys = ctx.keys.leader(name)
    (fired,) = yield Call([Op.command(keys.fired, "HGETALL", keys.fired)])
    out = {}
    for k, v in fired.items():  # redis-py made it a dict
        at = parse_number(v)
        if at is None:  # counts as never fired (trigger_record.lua overwrites it)
            log_event(
                log,
                logging.WARNING,
                "schedule's last fired time unreadable",
                schedule=ident(k),
                lock=name,
                value=repr(v),
            )
            continue
        out[ident(k)] = at
    return out
