"""Damage one stored job record, for tests of what a store does with it.

A store must be total (see the conventions of :mod:`chronos_trio.store`): an
operation that meets a damaged record sets it aside and carries on with the
rest of its batch. These helpers make the damage, on a
:class:`~chronos_trio.testing.damageable.DamageableMemoryStore` (its records
are ``Job`` objects in memory; a plain ``MemoryStore``, the typed reference
model, judges none of its records, so it cannot be damaged) or a
``RedisStore`` (its records are hashes, written here directly with a
redis-py client, on one node or a Cluster)::

    client = redis_client(url)                       # Redis only
    done = await damage_job(store, "j1", queue="q", field="attempts",
                            how=Damage.WRONG_TYPE, client=client)

Each field of a record (:func:`fields_of`) can be made missing, empty, of
the wrong type or huge (a 1 MB value); the whole record can be deleted while
its index entries remain (field :data:`RECORD`), and on Redis its key can hold
another type, and field ``v`` can name a newer record format. :func:`kinds_of`
says which kinds apply to a field of a store.

What each kind writes:

=============  ===============================  ===================================
kind           MemoryStore (a ``Job`` field)    RedisStore (a hash field)
=============  ===============================  ===================================
MISSING        ``None``                         HDEL
EMPTY          ``""`` (``b""`` for payload)     ``""``
WRONG_TYPE     an int for text, ``str`` for     not UTF-8 for text, not a number
               bytes/numbers, the plain string  for numbers, not a state for
               ``"ready"`` for the state        ``state``, ``x`` for ``v``
HUGE           1 MB of text/bytes, 10**400 for  1 MB: digits for numbers and
               numbers (too large for a float)  ``v``, else ``x`` repeated
NEWER          (no record format in memory)     ``v`` = RECORD_FORMAT + 1
DELETED        the record removed from memory   DEL (the index entries remain)
NOT_A_HASH     (not possible)                   the key holds a list
=============  ===============================  ===================================
"""

from __future__ import annotations

import enum
from typing import Any

import attrs
import redis
import redis.cluster
import trio

from ..records._jobs import Job
from ..store.memory import MemoryStore
from ..store.redis import RedisStore
from ..store.redis._codec import JOB_FIELDS, RECORD_FORMAT
from ..store.redis._connect import connect
from ..store.redis.keys import KeySpace
from .damageable import DamageableMemoryStore

__all__ = [
    "HUGE_SIZE",
    "RECORD",
    "Damage",
    "DamageableMemoryStore",
    "Damaged",
    "RedisClient",
    "damage_job",
    "fields_of",
    "kinds_of",
    "redis_client",
]

#: Bytes (or characters) of a HUGE value.
HUGE_SIZE = 1 << 20

#: The pseudo-field of damage to the whole record (DELETED, NOT_A_HASH).
RECORD = "record"

RedisClient = redis.Redis | redis.cluster.RedisCluster


class Damage(enum.StrEnum):
    """How a field (or the record) is damaged; see the module docstring."""

    MISSING = "missing"
    EMPTY = "empty"
    WRONG_TYPE = "wrong_type"
    HUGE = "huge"
    NEWER = "newer"
    DELETED = "deleted"
    NOT_A_HASH = "not_a_hash"


#: The kinds that damage one field, in the order tests list them.
FIELD_KINDS = (Damage.MISSING, Damage.EMPTY, Damage.WRONG_TYPE, Damage.HUGE)

#: MemoryStore record fields by the type they hold (``damage`` is not stored
#: data: it is what a read found wrong, so it is not damaged here).
_MEMORY_TEXT = ("id", "queue", "kind", "lease_token", "lease_owner", "last_error")
_MEMORY_NUMBERS = (
    "run_at", "attempts", "max_retries", "timeout", "lease_expires_at", "placement",
    "created_at", "finished_at", "unclaimed_since",
)  # fmt: skip
#: RedisStore hash fields that hold numbers (the rest is text, or the payload).
_REDIS_NUMBERS = (
    "run_at", "attempts", "max_retries", "timeout", "lease_expires_at", "created_at",
    "finished_at",
)  # fmt: skip


@attrs.frozen
class Damaged:
    """What :func:`damage_job` did: ``value`` is what the field now holds
    (None when removed; cut to 40 characters for a huge one), ``key`` the
    Redis key of the record ("" on a MemoryStore)."""

    job_id: str
    queue: str
    field: str
    how: Damage
    value: str | None
    key: str = ""


def _kind(store: object) -> type:
    cls = store if isinstance(store, type) else type(store)
    for kind in (MemoryStore, RedisStore):
        if issubclass(cls, kind):
            return kind
    raise TypeError(f"cannot damage the records of a {cls.__name__}")


def fields_of(store: object) -> tuple[str, ...]:
    """The record fields of ``store`` (an instance or a class): a
    MemoryStore's ``Job`` fields but ``damage`` (and ``history``, which reads
    attach), a RedisStore's hash fields
    with ``v``; then :data:`RECORD`. ``TypeError`` for another store."""
    if _kind(store) is MemoryStore:
        # the record's own fields (``history``, attached by reads, is not one)
        names = tuple(f.name for f in attrs.fields(Job) if f.init and f.name != "damage")
    else:
        names = (*JOB_FIELDS, "v")
    return (*names, RECORD)


def kinds_of(store: object, field: str) -> tuple[Damage, ...]:
    """The kinds of damage :func:`damage_job` makes to ``field`` of ``store``
    (an instance or a class). ``TypeError`` for another store."""
    redis_store = _kind(store) is RedisStore
    if field == RECORD:
        return (Damage.DELETED, Damage.NOT_A_HASH) if redis_store else (Damage.DELETED,)
    if field == "v":
        return (*FIELD_KINDS, Damage.NEWER)
    return FIELD_KINDS


def redis_client(url: str) -> RedisClient:
    """A redis-py client for a store URL (``redis://``, ``redis+cluster://``,
    ...), as the store itself connects (raw bytes). Close it when done."""
    return connect(url.partition("?")[0])


async def damage_job(
    store: DamageableMemoryStore | RedisStore,
    job_id: str,
    *,
    queue: str,
    field: str,
    how: Damage,
    client: RedisClient | None = None,
) -> Damaged:
    """Damage the stored record of job ``job_id`` of ``queue``: ``field``
    (one of :func:`fields_of`) made ``how`` (one of :func:`kinds_of`).

    The record must exist and be sound (it is located by reading it). A
    RedisStore needs ``client`` (see :func:`redis_client`), on the same
    Redis or Cluster. Raises ``LookupError`` when there is no such job,
    ``ValueError`` for a kind that does not apply to the field, and
    ``TypeError`` for another store (a plain ``MemoryStore`` among them:
    it judges none of its typed records) or a RedisStore without a client.
    """
    if isinstance(store, MemoryStore) and not isinstance(store, DamageableMemoryStore):
        raise TypeError(
            "a MemoryStore judges none of its typed records: damage a DamageableMemoryStore"
        )
    if how not in kinds_of(store, field):
        raise ValueError(f"{how} does not apply to field {field!r} of a {type(store).__name__}")
    job = await store.get_job(job_id, queue=queue)
    if job is None:
        raise LookupError(f"no job {job_id!r} in queue {queue!r}")
    if isinstance(store, DamageableMemoryStore):
        return _damage_memory(store, job, field, how)
    if client is None:
        raise TypeError("damaging a RedisStore record needs a redis-py client")
    key = KeySpace(store.namespace).placed(queue, job.placement).job(job_id)
    value = _redis_value(field, how)
    await trio.to_thread.run_sync(_write_redis, client, key, field, how, value)
    shown = None if value is None else _show(value.decode("latin-1"))
    return Damaged(job_id, queue, field, how, shown, key)


def _show(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:40]}... ({len(text)} long)"


def _memory_value(field: str, how: Damage) -> Any:
    if how is Damage.MISSING:
        return None
    text = field in _MEMORY_TEXT
    if how is Damage.EMPTY:
        return b"" if field == "payload" else ""
    if how is Damage.WRONG_TYPE:
        if field == "state":
            return "ready"  # equal to JobState.READY, but not one: a trap for `is`
        return 12345 if text else "12"
    # HUGE
    if field == "payload":
        return b"x" * HUGE_SIZE
    return 10**400 if field in _MEMORY_NUMBERS else "x" * HUGE_SIZE


def _damage_memory(store: DamageableMemoryStore, job: Job, field: str, how: Damage) -> Damaged:
    # Reaching into the store's records is the point: this is how a bug (or a
    # test) damages one. The record is replaced, not mutated: a Job handed out
    # before (a LeasedJob, say) keeps what it held.
    records = store._records
    if field == RECORD:
        del records[job.id]
        return Damaged(job.id, job.queue, field, how, None)
    value = _memory_value(field, how)
    rec = records[job.id]
    rec.job = attrs.evolve(rec.job, **{field: value})
    shown = None if value is None else _show(repr(value))
    return Damaged(job.id, job.queue, field, how, shown)


def _redis_value(field: str, how: Damage) -> bytes | None:
    if how in (Damage.MISSING, Damage.DELETED, Damage.NOT_A_HASH):
        return None
    if how is Damage.EMPTY:
        return b""
    if how is Damage.NEWER:
        return str(RECORD_FORMAT + 1).encode()
    numeric = field in _REDIS_NUMBERS or field == "v"
    if how is Damage.WRONG_TYPE:
        if field == "v":
            return b"x"
        if field == "state":
            return b"not-a-state"
        return b"not-a-number" if numeric else b"\xff\xfe not UTF-8"
    return (b"9" if numeric else b"x") * HUGE_SIZE


def _write_redis(
    client: RedisClient, key: str, field: str, how: Damage, value: bytes | None
) -> None:
    if how is Damage.DELETED:
        client.delete(key)
    elif how is Damage.NOT_A_HASH:
        client.delete(key)
        client.rpush(key, b"not a job hash")
    elif how is Damage.MISSING:
        client.hdel(key, field)
    else:
        assert value is not None
        client.hset(key, field, value)
