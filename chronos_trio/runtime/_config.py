"""Worker configuration."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from ..records._retry import RetryPolicy
from ..store import QueueWeight


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(2)}"


def parse_queues(spec: str | Mapping[str, int] | Iterable[Any]) -> tuple[QueueWeight, ...]:
    """Queues with weights from ``"critical=6,default=3,low=1"``, a mapping,
    or an iterable of names / ``QueueWeight`` / ``(name, weight)``."""
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
                    f"bad queue weight in {part!r}: expected name=INT, e.g. critical=6"
                ) from None
            items.append(QueueWeight(name.strip(), w))
    elif isinstance(spec, Mapping):
        items = [QueueWeight(str(k), int(v)) for k, v in spec.items()]
    else:
        for item in spec:
            if isinstance(item, QueueWeight):
                items.append(item)
            elif isinstance(item, str):
                items.append(QueueWeight(item))
            else:
                name, weight = item
                items.append(QueueWeight(str(name), int(weight)))
    if not items:
        raise ValueError("at least one queue is needed")
    names = [q.name for q in items]
    for q in items:
        if not q.name or q.weight < 1:
            raise ValueError(f"bad queue {q.name!r}={q.weight}: names are non-empty, weights >= 1")
    if len(set(names)) != len(names):
        raise ValueError(f"queue listed twice in {names}")
    return tuple(items)


def _positive(_: Any, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value!r}")


@attrs.frozen
class WorkerConfig:
    """Knobs of one worker process. Derived defaults (``None``) are filled in
    by :meth:`build`: heartbeat every lease/3, recovery every lease/6 (at
    most 5 s), in-flight cap of
    concurrency + 2 * batch_size, a leased-job buffer of batch_size.

    The in-flight cap leaves room for two batches beyond the running
    handlers: one being handed to executors and one being leased or settled,
    so the next batch's round trip overlaps the work of this one."""

    worker_id: str = attrs.field(factory=default_worker_id)
    queues: tuple[QueueWeight, ...] = attrs.field(
        default=(QueueWeight("default"),), converter=parse_queues
    )
    concurrency: int = attrs.field(default=16, validator=_positive)
    batch_size: int = attrs.field(default=64, validator=_positive)
    queue_buffer: int | None = attrs.field(default=None, validator=_positive)
    poll_interval: float = attrs.field(default=30.0, validator=_positive)
    lease_duration: float = attrs.field(default=30.0, validator=_positive)
    heartbeat_interval: float | None = attrs.field(default=None, validator=_positive)
    recover_interval: float | None = attrs.field(default=None, validator=_positive)
    max_in_flight: int | None = attrs.field(default=None, validator=_positive)
    retry: RetryPolicy = attrs.field(factory=RetryPolicy)
    shutdown_grace: float = attrs.field(default=10.0, validator=attrs.validators.ge(0))
    flush_timeout: float = attrs.field(default=5.0, validator=_positive)
    retain_succeeded: float = attrs.field(default=0.0, validator=attrs.validators.ge(0))
    janitor_interval: float = attrs.field(default=60.0, validator=_positive)
    dead_max_age: float | None = attrs.field(default=7 * 86400.0, validator=_positive)
    dead_max_count: int | None = attrs.field(default=100_000, validator=_positive)
    restart_intensity: int = attrs.field(default=5, validator=attrs.validators.ge(0))
    restart_period: float = attrs.field(default=10.0, validator=_positive)
    #: Leadership lease (schedules, janitor): renewed every ttl/2; a dead
    #: leader is replaced within this long, a resigning one at once.
    leader_ttl: float = attrs.field(default=15.0, validator=_positive)
    #: Longest the scheduler sleeps before re-reading the store's clock.
    scheduler_tick: float = attrs.field(default=1.0, validator=_positive)
    #: A trigger fired this late still counts as on time (see misfire policies).
    misfire_grace: float = attrs.field(default=1.0, validator=_positive)

    @classmethod
    def build(cls, **options: Any) -> WorkerConfig:
        """Validate ``options`` and fill in derived defaults."""
        unknown = set(options) - {a.name for a in attrs.fields(cls)}
        if unknown:
            raise TypeError(f"unknown worker option(s): {', '.join(sorted(unknown))}")
        cfg = cls(**options)
        if cfg.heartbeat_interval is None:
            cfg = attrs.evolve(cfg, heartbeat_interval=cfg.lease_duration / 3)
        if cfg.max_in_flight is None:
            cfg = attrs.evolve(cfg, max_in_flight=cfg.concurrency + 2 * cfg.batch_size)
        if cfg.recover_interval is None:
            # Expired leases are found within lease/6 (at most 5 s) of expiring.
            cfg = attrs.evolve(cfg, recover_interval=min(5.0, cfg.lease_duration / 6))
        if cfg.queue_buffer is None:
            cfg = attrs.evolve(cfg, queue_buffer=cfg.batch_size)
        assert cfg.heartbeat_interval is not None
        if cfg.heartbeat_interval >= cfg.lease_duration:
            raise ValueError(
                f"heartbeat_interval ({cfg.heartbeat_interval}s) must be shorter than "
                f"lease_duration ({cfg.lease_duration}s) or every lease would expire"
            )
        return cfg

    @property
    def queue_names(self) -> list[str]:
        return [q.name for q in self.queues]

    # Typed accessors for the derived fields (always set after build()).
    @property
    def heartbeat_every(self) -> float:
        assert self.heartbeat_interval is not None
        return self.heartbeat_interval

    @property
    def recover_every(self) -> float:
        assert self.recover_interval is not None
        return self.recover_interval

    @property
    def in_flight_cap(self) -> int:
        assert self.max_in_flight is not None
        return self.max_in_flight

    @property
    def buffer_size(self) -> int:
        assert self.queue_buffer is not None
        return self.queue_buffer
