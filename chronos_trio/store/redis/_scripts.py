"""The Lua scripts (``lua/*.lua``) and the operations that run them.

Every state transition is one script, run by ``EVALSHA``; a ``NOSCRIPT`` reply
(Redis restarted, ``SCRIPT FLUSH``, a Cluster node that never saw the script)
loads the script on that node and re-runs exactly the operations that failed.
That retry is safe: a ``NOSCRIPT`` reply means the script did not run.

Each script names the shared pieces it uses (``--@include <piece>`` lines,
see ``_compose``): the files of ``lua/lib/`` (checks, dead-lettering,
quarantine, unique keys, limits, wake-ups, ..., one concern each; the rules
every script keeps are in ``lua/README.md``) and the constants made here,
from Python: ``format`` (``FORMAT_S``: the record format,
:data:`~._codec.RECORD_FORMAT`, as a record's field v holds it; what a
record writer needs) and ``format_number`` (``FORMAT``, the same as a
number: what a judge of field v needs), ``chunk_sizes`` (``CHUNK``,
``CHUNKED_MAX``: its payload chunking), ``workflow_keep``
(``WORKFLOW_KEEP``), ``failure_mark`` (``FAILURE_MARK``), ``deleted_error``
(``DELETED_ERROR``, a deleted workflow step's), ``discarded_prefix``
(``DISCARDED_PREFIX``, a discarded one's), ``history_limit``
(``HISTORY_LIMIT``, ``ERROR_BYTES``) and
``lease_expired`` (``LEASE_EXPIRED``: the attempt history's bounds and an
expired lease's error, ``records._attempts``) and ``leased_sentinel`` (``LEASED_SENTINEL``, the
leased zsets' sentinel member, :data:`~.keys.LEASED_SENTINEL`) and
``wake_keep`` (``WAKE_KEEP``, :data:`~.keys.WAKE_KEEP`). A script is
sent as those pieces, each once, in dependency order, then its own text, so
it carries only what it uses; a new record format changes the SHA of every
script that judges a format, so a worker never runs a script of another
version.

A script is composed, and its SHA computed, when first used (its
``source`` or ``sha`` read, as the first call of it does), not when this
module is imported: a worker composes the few it runs before its first
job, not all of them. An unknown piece or pieces that include each other
raise CompositionError then; :func:`compose_all` composes every script at
once (the tests do, so such a mistake never ships). Laziness does not
touch ``NOSCRIPT``: a script is sent by its SHA, loaded with its source,
and both are those of the one composition, kept for the process's life.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from ...records._attempts import ERROR_BYTES, HISTORY_LIMIT, LEASE_EXPIRED
from ...records._attrs_methods import fields_eq, fields_hash, fields_repr
from ...records._flow_outcomes import DELETED_ERROR, DISCARDED_PREFIX
from ...records._workflow import FAILURE_MARK, WORKFLOW_KEEP
from .._roles import StoreError
from ._codec import CHUNKED_PAYLOAD_MAX, PAYLOAD_CHUNK, RECORD_FORMAT
from ._compose import compose
from .keys import LEASED_SENTINEL, WAKE_KEEP

#: The scripts' files (read with plain file I/O: ``importlib.resources``
#: would cost a worker's start-up more than the reads do).
_LUA = Path(__file__).with_name("lua")

#: The pieces made in Python (the values are defined once, here).
GENERATED: dict[str, bytes] = {
    "format": b"local FORMAT_S = '%d'\n" % RECORD_FORMAT,
    "format_number": b"local FORMAT = %d\n" % RECORD_FORMAT,
    "chunk_sizes": b"local CHUNK, CHUNKED_MAX = %d, %d\n" % (PAYLOAD_CHUNK, CHUNKED_PAYLOAD_MAX),
    "workflow_keep": b"local WORKFLOW_KEEP = %d\n" % WORKFLOW_KEEP,
    "failure_mark": b"local FAILURE_MARK = '%s'\n" % FAILURE_MARK.encode(),
    "deleted_error": b"local DELETED_ERROR = '%s'\n" % DELETED_ERROR.encode(),
    "discarded_prefix": b"local DISCARDED_PREFIX = '%s'\n" % DISCARDED_PREFIX.encode(),
    "history_limit": b"local HISTORY_LIMIT, ERROR_BYTES = %d, %d\n" % (HISTORY_LIMIT, ERROR_BYTES),
    "lease_expired": b"local LEASE_EXPIRED = '%s'\n" % LEASE_EXPIRED.encode(),
    "wake_keep": b"local WAKE_KEEP = %d\n" % WAKE_KEEP,
    "leased_sentinel": b"local LEASED_SENTINEL = '%s'\n" % LEASED_SENTINEL.encode(),
}


@functools.cache
def piece(name: str) -> bytes | None:
    """The text of piece ``name``: made in Python (:data:`GENERATED`) or
    ``lua/lib/<name>.lua``; None when there is no such piece. Read once."""
    made = GENERATED.get(name)
    if made is not None:
        return made
    try:
        return _LUA.joinpath("lib", f"{name}.lua").read_bytes()
    except FileNotFoundError:
        return None


class Script:
    """One Lua script as sent to Redis: its name, source (the pieces it
    includes, then its own file) and SHA1 (computed locally, no round trip).

    ``source`` and ``sha`` are computed on first read and then kept (see the
    module's doc); reading either raises CompositionError (naming the script
    and the piece) for an unknown piece or a cycle of pieces, and OSError
    when the script's file cannot be read. Scripts compare by identity: one
    object per script, made at import.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    @functools.cached_property
    def source(self) -> bytes:
        return compose(self.name, _LUA.joinpath(f"{self.name}.lua").read_bytes(), piece)

    @functools.cached_property
    def sha(self) -> str:
        return hashlib.sha1(self.source).hexdigest()

    @property
    def composed(self) -> bool:
        """Whether ``source`` has been composed yet."""
        return "source" in self.__dict__

    @classmethod
    def load(cls, name: str) -> Script:
        """The script ``lua/<name>.lua``, composed now. Raises as reading
        ``source`` does."""
        script = cls(name)
        script.sha  # noqa: B018  (composes it)
        return script

    def __repr__(self) -> str:
        return f"Script({self.name!r})"


def scripts() -> Iterator[Script]:
    """Every script of this module (not the store checker's)."""
    return (s for s in globals().values() if isinstance(s, Script))


def compose_all() -> None:
    """Compose every script of this module now. Raises CompositionError
    (or OSError) for the first that does not compose."""
    for script in scripts():
        script.sha  # noqa: B018


ENQUEUE = Script("enqueue")
ENQUEUE_PLAIN = Script("enqueue_plain")
OUTBOX_READ = Script("outbox_read")
WORKFLOW_KEEP_SCRIPT = Script("workflow_keep")
GROUP_ARRIVE = Script("group_arrive")
GROUP_STATUS = Script("group_status")
PROMOTE = Script("promote")
LEASE = Script("lease")
RENEW = Script("renew")
SETTLE = Script("settle")
RECOVER = Script("recover")
RECOVER_PEEK = Script("recover_peek")
PEEK_READY = Script("peek_ready")
DUE_PEEK = Script("due_peek")
TRIM = Script("trim")
RUN_NOW = Script("run_now")
DELETE = Script("delete")
ABORT = Script("abort")
COUNT_ABORTED = Script("count_aborted")
REQUEUE_DEAD = Script("requeue_dead")
PURGE = Script("purge")
CLOSE_PARTITION = Script("close_partition")
TOPOLOGY_PROMOTE = Script("topology_promote")
TOPOLOGY_COMPLETE = Script("topology_complete")
LEADER_ACQUIRE = Script("leader_acquire")
LEADER_RENEW = Script("leader_renew")
LEADER_GET = Script("leader_get")
TRIGGER_RECORD = Script("trigger_record")
WATCH = Script("watch")
WORKER_BEAT = Script("worker_beat")
WORKER_UNREGISTER = Script("worker_unregister")
WORKERS_LIST = Script("workers_list")
NOTES_WRITE = Script("notes_write")
SCHEDULE_EDIT = Script("schedule_edit")
SCHEDULES_READ = Script("schedules_read")
SEARCH_SCAN = Script("search_scan")
WORKFLOW_SAVE = Script("workflow_save")
WORKFLOW_CANCEL = Script("workflow_cancel")
AGGREGATES_ADD = Script("aggregates_add")
AGGREGATES_READ = Script("aggregates_read")


@attrs.frozen
class Op:
    """One command of a batch.

    ``route`` is a key in the slot the command touches (None: any node will
    do); on a Cluster, ops are grouped by the node that owns ``route``.
    """

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    route: str | bytes | None
    args: tuple[Any, ...]
    script: Script | None = None
    #: An error reply is returned as its exception instead of failing the
    #: batch: for reads of keys that may hold the wrong type (a damaged record).
    soft: bool = False
    #: A wake-up (XADD to a wake-up stream): sent again after ops before it
    #: that had to be re-run (their script was not loaded), so that a waiter
    #: it wakes finds what they did (it may then wake twice: allowed).
    wake: bool = False

    @classmethod
    def script_call(
        cls, script: Script, keys: list[str], argv: list[Any], *, soft: bool = False
    ) -> Op:
        """``soft``: an error reply is returned, not raised (see :attr:`soft`)."""
        return cls(keys[0], ("EVALSHA", script.sha, len(keys), *keys, *argv), script, soft)

    @classmethod
    def command(cls, route: str | None, *args: Any) -> Op:
        return cls(route, args)

    @classmethod
    def wake_command(cls, route: str | None, *args: Any) -> Op:
        """A wake-up command (see :attr:`wake`)."""
        return cls(route, args, wake=True)

    @classmethod
    def soft_command(cls, route: str | None, *args: Any) -> Op:
        """A command whose error reply (e.g. WRONGTYPE) is returned, not raised."""
        return cls(route, args, soft=True)


@attrs.frozen
class ReplicaWait:
    """End a batch with ``WAIT replicas timeout``: its writes count as done
    once ``replicas`` replicas acknowledged them within ``timeout`` seconds.

    Raises ``ValueError`` for fewer than 1 replica or a timeout that is not
    positive (``WAIT`` with timeout 0 would block for good).
    """

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    replicas: int
    timeout: float

    def __attrs_post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"wait_replicas must be >= 1, got {self.replicas}")
        if not self.timeout > 0:
            raise ValueError(f"wait_timeout must be > 0 seconds, got {self.timeout}")

    def op(self) -> Op:
        return Op.command(None, "WAIT", self.replicas, max(1, round(self.timeout * 1000)))

    def check(
        self, acks: Sequence[Any], where: str, error: Callable[[BaseException], StoreError]
    ) -> None:
        """Raise StoreError unless every ``WAIT`` reply in ``acks`` (one per
        node) counts at least :attr:`replicas`: ``error(reply)`` for an
        error reply; ``where`` names the store."""
        for ack in acks:
            if isinstance(ack, Exception):
                raise error(ack)
        fewest = min((int(a) for a in acks), default=self.replicas)
        if fewest < self.replicas:
            raise StoreError(
                f"Redis at {where}: only {fewest} of {self.replicas} replica(s) "
                f"acknowledged the writes within {self.timeout:g}s (WAIT). The master "
                "applied them, but a failover before they replicate would lose them; "
                "retrying with the same job IDs is safe"
            )
