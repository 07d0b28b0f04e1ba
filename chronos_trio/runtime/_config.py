"""Worker configuration."""

from __future__ import annotations

import os
import secrets
import socket
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from ..records._aggregate_limits import check_keep
from ..records._attrs_methods import fields_eq, fields_hash, fields_repr
from ..records._options import (
    check_bool,
    check_positive_int,
    check_seconds,
    check_text,
    is_number,
    unknown_options,
)
from ..records._retry import RetryPolicy
from ..store import QueueWeight


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(2)}"


def parse_queues(spec: str | Mapping[str, int] | Iterable[Any]) -> tuple[QueueWeight, ...]:
    """Queues with weights from ``"critical=6,default=3,low=1"``, a mapping,
    or an iterable of names / ``QueueWeight`` / ``(name, weight)``.

    Raises ``ValueError``, its message starting ``queues:`` (the worker
    option it reads), for anything else: no queue, an empty name, a weight
    that is not an int >= 1 (never a bool), an entry of another shape, a
    name listed twice."""
    items: list[QueueWeight] = []
    if isinstance(spec, str):
        for part in spec.split(","):
            part = part.strip()
            if not part:
                continue
            name, sep, weight = part.partition("=")
            try:
                w = int(weight) if sep else 1
            except ValueError:
                raise ValueError(
                    f"queues: bad queue weight in {part!r}: expected name=INT, e.g. critical=6"
                ) from None
            items.append(QueueWeight(name.strip(), w))
    elif isinstance(spec, Mapping):
        items = [_queue_weight(k, v) for k, v in spec.items()]
    elif isinstance(spec, Iterable) and not isinstance(spec, bytes):
        for item in spec:
            if isinstance(item, QueueWeight):
                items.append(_queue_weight(item.name, item.weight))
            elif isinstance(item, str):
                items.append(_queue_weight(item, 1))
            elif isinstance(item, tuple | list) and len(item) == 2:
                items.append(_queue_weight(*item))
            else:
                raise ValueError(
                    f"queues: bad entry {item!r}: expected a name, a QueueWeight or a "
                    "(name, weight) pair"
                )
    else:
        raise ValueError(
            "queues must be 'name=weight,...' text, a mapping of name to weight, or a "
            f"list of names, QueueWeights or (name, weight) pairs; got {spec!r}"
        )
    if not items:
        raise ValueError("queues: at least one queue is needed")
    names = [q.name for q in items]
    for q in items:
        if not q.name or q.weight < 1:
            raise ValueError(
                f"queues: bad queue {q.name!r}={q.weight}: names are non-empty, weights >= 1"
            )
    if len(set(names)) != len(names):
        raise ValueError(f"queues: queue listed twice in {names}")
    return tuple(items)


def _queue_weight(name: object, weight: object) -> QueueWeight:
    """One queue of ``queues``: ``ValueError`` for a name that is not a
    non-empty string or a weight that is not an int >= 1."""
    name = check_text("queues: a queue name", name)
    return QueueWeight(name, check_positive_int(f"queues: the weight of {name!r}", weight))


def _retained_caps(value: int | Mapping[str, int] | None) -> int | Mapping[str, int] | None:
    """``max_retained_succeeded``: None, one cap for every queue, or caps by
    queue name (a read-only copy); each an int >= 0."""
    if value is None:
        return None
    caps = value if isinstance(value, Mapping) else {"": value}
    for name, cap in caps.items():
        if type(cap) is not int or cap < 0:
            where = f" for queue {name!r}" if isinstance(value, Mapping) else ""
            raise ValueError(f"max_retained_succeeded{where} must be an int >= 0, got {cap!r}")
    if isinstance(value, Mapping):
        return types.MappingProxyType({str(k): v for k, v in value.items()})
    return value


def _number_type(_: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    """``ValueError`` naming the option and the value when a field typed
    ``int`` (a count) or ``float`` (seconds) gets something else (a bool,
    a string). Run by :meth:`WorkerConfig.build` before the defaults
    derived from other options are computed from them."""
    kind, _, optional = str(attribute.type).partition(" | ")
    if value is None and optional == "None":
        return
    if optional not in ("", "None"):  # a union of more (max_retained_succeeded)
        return
    if kind == "int" and (not isinstance(value, int) or isinstance(value, bool)):
        raise ValueError(f"{attribute.name} must be an int, got {value!r}")
    if kind == "float" and not is_number(value):
        raise ValueError(f"{attribute.name} must be a number of seconds, got {value!r}")


def _positive(_: Any, attribute: attrs.Attribute[Any], value: float | None) -> None:
    _number_type(_, attribute, value)
    if value is not None and not value > 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value!r}")


def _non_negative(_: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    _number_type(_, attribute, value)
    if not value >= 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value!r}")


def _finite(*, zero: bool) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    """A validator: a finite number > 0 (>= 0 with ``zero``), never a bool."""

    def check(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        check_seconds(attribute.name, value, zero=zero, what="a finite number")

    return check


def _worker_id(_: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    """A non-empty string: the store records an empty lease owner as none."""
    check_text(attribute.name, value)


def _bool(_: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    check_bool(attribute.name, value)


def _retry_policy(_: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    """A RetryPolicy (anything else crashed the executors at the first
    failing job), refused as the task option ``retry`` is."""
    if not isinstance(value, RetryPolicy):
        raise TypeError(f"{attribute.name} must be a RetryPolicy, got {value!r}")


def _derived(compute: Callable[[WorkerConfig], Any]) -> Any:
    """A default computed from the fields before it (attrs fills them in order)."""
    return attrs.Factory(compute, takes_self=True)


def _aggregate_keep(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    try:
        check_keep(value)
    except ValueError as exc:  # named as every other option's error is
        raise ValueError(f"{attribute.name} must be {exc}") from None


@attrs.frozen(kw_only=True)
class WorkerConfig:
    """Knobs of one worker process, validated when built: a bad value or
    combination raises ``ValueError`` naming it (``TypeError`` for an unknown
    option). Defaults that depend on other options are computed from them:
    heartbeat every lease/3, recovery every lease/6 (at most 5 s), a
    worker registry entry lapsing three heartbeats after its last, an
    in-flight cap of concurrency + 2 * batch_size, a leased-job buffer of
    batch_size and four abandoned threads per plain-handler thread.

    The in-flight cap leaves room for two batches beyond the running
    handlers: one being handed to executors and one being leased or settled,
    so the next batch's round trip overlaps the work of this one."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    worker_id: str = attrs.field(factory=default_worker_id, validator=_worker_id)
    queues: tuple[QueueWeight, ...] = attrs.field(
        default=(QueueWeight("default"),), converter=parse_queues
    )
    #: Strict priority: ``queues`` in the order given, highest first; a
    #: queue is leased from only while every queue before it has no ready
    #: job (weights are ignored). False: shares by weight, no queue starves.
    strict_priority: bool = attrs.field(default=False, validator=_bool)
    concurrency: int = attrs.field(default=16, validator=_positive)
    #: Plain-function handlers running in threads at once, at most (each
    #: also holds one of the ``concurrency`` places while it runs). A job
    #: waiting for a thread has not started: its timeout does not run yet.
    #: A thread whose run was called off (timeout, lost lease, abort) is
    #: abandoned and gives its place back at once.
    sync_concurrency: int = attrs.field(
        default=_derived(lambda c: c.concurrency), validator=_positive
    )
    #: Abandoned handler threads (still running after their run was called
    #: off: Python cannot stop a thread) at which the worker stops starting
    #: plain-function handlers, with an error, until one of them ends.
    max_abandoned_threads: int = attrs.field(
        default=_derived(lambda c: 4 * c.sync_concurrency), validator=_positive
    )
    #: Child processes isolated handlers (``@app.task(isolate=True)``)
    #: run in, started with the worker when it has such a task: at most
    #: this many isolated jobs run at once (each also holds one of the
    #: ``concurrency`` places, waiting for a child included).
    isolate_processes: int = attrs.field(
        default=_derived(lambda c: min(c.concurrency, os.cpu_count() or 1)), validator=_positive
    )
    #: Seconds an isolated handler has after its ``timeout`` (the soft
    #: limit, ``SoftTimeLimit`` raised in it) before its child is killed
    #: (the hard limit: the attempt fails as a timeout).
    hard_limit_grace: float = attrs.field(default=5.0, validator=_non_negative)
    batch_size: int = attrs.field(default=64, validator=_positive)
    #: Leased jobs waiting for a free executor, at most.
    queue_buffer: int = attrs.field(default=_derived(lambda c: c.batch_size), validator=_positive)
    poll_interval: float = attrs.field(default=30.0, validator=_positive)
    #: Seconds after its last lease of jobs it has a handler for (a lease of
    #: only unknown kinds opens none) that an idle worker waits for a wake-up
    #: with its next lease queued behind it (``store.wait_lease``), where the
    #: store offers that (one Redis node): the jobs come with the wake-up, one
    #: round trip sooner. The store runs that lease whether or not the worker
    #: is still there to read its reply: a worker that stalls (SIGSTOP, a
    #: paused VM, a cut link) while such a wait is out holds that one lease's
    #: jobs until it expires (``lease_duration``, then recovery), where a
    #: plain wait takes none. So it is kept to a worker that is getting jobs:
    #: one lease, only in this window. 0: never (every idle worker waits
    #: without a lease, as on the other stores).
    wait_lease_window: float = attrs.field(default=1.0, validator=_non_negative)
    lease_duration: float = attrs.field(default=30.0, validator=_positive)
    heartbeat_interval: float = attrs.field(
        default=_derived(lambda c: c.lease_duration / 3), validator=_positive
    )
    #: The worker's entry in the store's worker registry lapses this long
    #: after its last beat (it beats every ``heartbeat_interval``): a worker
    #: killed without unregistering drops out of ``workers`` within it.
    registry_ttl: float = attrs.field(
        default=_derived(lambda c: 3 * c.heartbeat_interval), validator=_positive
    )
    #: Expired leases are found within this long of expiring.
    recover_interval: float = attrs.field(
        default=_derived(lambda c: min(5.0, c.lease_duration / 6)), validator=_positive
    )
    #: Leases held at once (backpressure).
    max_in_flight: int = attrs.field(
        default=_derived(lambda c: c.concurrency + 2 * c.batch_size), validator=_positive
    )
    retry: RetryPolicy = attrs.field(factory=RetryPolicy, validator=_retry_policy)
    shutdown_grace: float = attrs.field(default=10.0, validator=_non_negative)
    flush_timeout: float = attrs.field(default=5.0, validator=_positive)
    retain_succeeded: float = attrs.field(default=0.0, validator=_non_negative)
    #: At most this many retained successes per queue (one cap for all, or
    #: caps by queue name; a queue not named is not capped; None: no cap):
    #: the janitor deletes those whose retention ends first beyond it, so a
    #: queue may hold more for up to one ``janitor_interval``.
    max_retained_succeeded: int | Mapping[str, int] | None = attrs.field(
        default=None, converter=_retained_caps
    )
    janitor_interval: float = attrs.field(default=60.0, validator=_positive)
    #: Running jobs' progress and log lines (``job.progress``, ``job.log``)
    #: are written at most this often, all jobs in one batch (and a job's
    #: last ones once its handler returns, before its settle).
    notes_interval: float = attrs.field(default=0.5, validator=_positive)
    #: How often the elected leader reads the jobs per state of every queue
    #: for ``Metrics.queue_depths`` (only with a metrics object that has it).
    gauge_interval: float = attrs.field(default=15.0, validator=_positive)
    #: What the worker ran (outcomes, run times) is added to the store's
    #: per-minute aggregates at most this often, in one call (none while
    #: idle); the store keeps each minute ``aggregate_keep`` seconds
    #: (60 s to 31 days: the dashboard's charts show up to that far back).
    aggregate_interval: float = attrs.field(default=5.0, validator=_positive)
    aggregate_keep: float = attrs.field(default=86400.0, validator=_aggregate_keep)
    dead_max_age: float | None = attrs.field(default=7 * 86400.0, validator=_positive)
    dead_max_count: int | None = attrs.field(default=100_000, validator=_positive)
    restart_intensity: int = attrs.field(default=5, validator=_non_negative)
    restart_period: float = attrs.field(default=10.0, validator=_positive)
    #: Leadership lease (schedules, janitor): renewed every ttl/2; a dead
    #: leader is replaced within this long, a resigning one within ttl/3.
    leader_ttl: float = attrs.field(default=15.0, validator=_positive)
    #: Longest the scheduler sleeps before re-reading the store's clock.
    scheduler_tick: float = attrs.field(default=1.0, validator=_positive)
    #: A trigger fired this late still counts as on time (see misfire policies).
    misfire_grace: float = attrs.field(default=1.0, validator=_positive)
    #: Events (hooks, metrics) buffered for the notifier, at most; beyond
    #: that the newest are dropped and counted.
    event_buffer: int = attrs.field(default=10_000, validator=_positive)
    #: Longest one event subscriber call (a dead-letter hook, say) may take.
    hook_timeout: float = attrs.field(default=10.0, validator=_positive)
    #: Subscriber calls the notifier runs at once.
    hook_concurrency: int = attrs.field(default=16, validator=_positive)
    #: A job of a kind this worker has no handler for goes back unrun (its
    #: attempt given back) for a worker that has one, due again after
    #: ``unknown_kind_delay`` seconds; once it has gone back unclaimed for
    #: ``unknown_kind_grace`` seconds (store clock, counted from the first
    #: time any worker sent it back) it is dead-lettered. The grace outlasts
    #: a slow rolling deploy (new task, old workers still up); 0 dead-letters
    #: such a job at once.
    unknown_kind_grace: float = attrs.field(default=3600.0, validator=_finite(zero=True))
    unknown_kind_delay: float = attrs.field(default=1.0, validator=_finite(zero=False))
    #: Recycling (see ``runtime._recycle``; None: off). After leasing
    #: ``max_jobs`` jobs in all the worker leases no more, and once those
    #: are settled it ends its run by itself; once its resident memory
    #: reaches ``max_memory_mb`` MB (read every ``memory_check_interval``
    #: seconds) it stops leasing, hands back the jobs it has not started
    #: and ends its run once its running handlers finish. Either way
    #: running handlers finish (no ``shutdown_grace`` applies unless
    #: :meth:`Worker.stop` is called meanwhile), :meth:`Worker.run` returns
    #: normally and ``Worker.recycled`` says why.
    max_jobs: int | None = attrs.field(default=None, validator=_positive)
    max_memory_mb: int | None = attrs.field(default=None, validator=_positive)
    memory_check_interval: float = attrs.field(default=1.0, validator=_positive)

    def __attrs_post_init__(self) -> None:
        if self.heartbeat_interval >= self.lease_duration:
            raise ValueError(
                f"heartbeat_interval ({self.heartbeat_interval}s) must be shorter than "
                f"lease_duration ({self.lease_duration}s) or every lease would expire"
            )
        if self.registry_ttl <= self.heartbeat_interval:
            raise ValueError(
                f"registry_ttl ({self.registry_ttl}s) must be longer than "
                f"heartbeat_interval ({self.heartbeat_interval}s) or the worker's "
                "registry entry would lapse between beats"
            )
        if self.max_in_flight < self.concurrency:
            raise ValueError(
                f"max_in_flight ({self.max_in_flight}) must be at least concurrency "
                f"({self.concurrency}), or executors would sit idle"
            )

    @classmethod
    def build(cls, **options: Any) -> WorkerConfig:
        """``WorkerConfig(**options)``, with clearer errors: ``TypeError``
        for an unknown name (with the closest valid one), ``ValueError``
        naming a count or a number of seconds of the wrong type before any
        default is derived from it."""
        fields = attrs.fields_dict(cls)
        if not fields.keys() >= options.keys():
            raise unknown_options(options, fields, "worker")
        for name, value in options.items():
            _number_type(cls, fields[name], value)
        return cls(**options)

    @property
    def queue_names(self) -> list[str]:
        return [q.name for q in self.queues]

    def retained_cap(self, queue: str) -> int | None:
        """How many retained successes ``queue`` may keep (None: no cap)."""
        caps = self.max_retained_succeeded
        return caps.get(queue) if isinstance(caps, Mapping) else caps
