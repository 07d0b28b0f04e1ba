"""What the synchronous and the asyncio producer share: where the store is,
how a job is made (exactly as ``Task.new_job`` makes it), and the fields of
a job handle."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import repeat
from typing import Any, Protocol, Unpack

import attrs

from ..records._job_batch import JobBatch
from ..records._jobs import EnqueueResult, NewJob
from ..records._options import (
    EnqueueOptions,
    check_positive_int,
    check_seconds,
    check_text,
    unknown_options,
)
from ..records._placement import Placement
from ..records._producing import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    KindDefaults,
    ProducerHook,
    ResultTypeOf,
    TaskDefaults,
    handle_fields,
    new_job,
    new_job_batch,
    unknown_kind,
)
from ..store._schemes import open_producer_store, redact, scheme_of
from ..store._topology_placement import locate
from ..store._transactional import ProducerEnqueue, not_transactional
from ..store.redis._batch import AdapterStatistics
from ..store.redis._connect import Flavor, StoreUrl, connect, parse_store_url
from ..store.redis._core import RedisCore
from ..store.redis._scripts import ReplicaWait
from ..store.redis.keys import KeySpace


class TaskLike(Protocol):
    """A task as producers take it: a ``chronos_trio.Task`` (what
    ``@app.task`` returns) is one."""

    @property
    def kind(self) -> str: ...

    def new_job(self, payload: Any, **options: Unpack[EnqueueOptions]) -> NewJob: ...

    def new_jobs(
        self, payloads: Iterable[Any], *, delay: float | None = None, queue: str | None = None
    ) -> list[NewJob]: ...


class AppLike(Protocol):
    """An App as producers take it (``chronos_trio.App`` is one): its store
    URL, its registered tasks and their result types, its payload limit and
    its producer hooks."""

    @property
    def store_url(self) -> str: ...

    @property
    def store(self) -> Any: ...

    @property
    def registry(self) -> Any: ...

    @property
    def max_payload_bytes(self) -> int: ...

    @property
    def producer_hooks(self) -> Sequence[ProducerHook]: ...

    def result_type_of(self, kind: str) -> tuple[bool, Any]: ...


@attrs.frozen
class ProducerStatistics:
    """Counters of one producer: round trips and commands sent (a pipeline
    per node counts once), scripts loaded after ``NOSCRIPT``, subscriptions
    of its waiters' channel confirmed (re-subscriptions count too), and the
    waiters registered now."""

    round_trips: int
    commands: int
    script_loads: int
    subscriptions: int
    waiting: int


def _store_url(url: str | None, app: AppLike | None) -> str:
    """The producer's store URL: ``url``, else the app's. ``ValueError`` for
    a store that cannot be shared (the memory store lives in one process)."""
    if url is None:
        if app is None:
            raise ValueError("a producer needs the store's URL (or an app that names it)")
        url = app.store_url
        if not scheme_of(url).shared and getattr(app.store, "shared_across_processes", False):
            raise ValueError(
                "this app was given a store object, not a URL: pass the store's URL "
                "to the producer (url=...)"
            )
    scheme = scheme_of(url)
    if not scheme.shared:
        raise ValueError(
            f"{redact(url)!r}: the {scheme.name} store lives in one process and cannot be "
            "shared, so a producer outside it cannot reach its jobs; use a Redis URL "
            "(redis://, redis+cluster://, ...) for the app and its producers"
        )
    return url


class _Listener(Protocol):
    subscriptions: int

    @property
    def table(self) -> Any: ...


def statistics_of(stats: AdapterStatistics, listener: _Listener) -> ProducerStatistics:
    return ProducerStatistics(
        stats.round_trips,
        stats.commands,
        stats.script_loads,
        listener.subscriptions,
        listener.table.waiting(),
    )


#: A PostgreSQL or SQLite producer's waits look at the job again after
#: these many seconds, doubling up to the last (it polls: it holds no
#: LISTEN connection, and SQLite has none).
POLL_FIRST, POLL_MOST = 0.05, 0.5


def transactional_of(url: str | None, app: AppLike | None) -> ProducerEnqueue | None:
    """The producer's store when it is one that writes jobs in a caller's
    transaction (PostgreSQL, SQLite: a scheme with a producer opener):
    ``url``'s, opened without Trio, else the app's (its store object, if
    the app was given one or the scheme has such stores). None for a Redis
    store. Connects to nothing."""
    if url is not None:
        return open_producer_store(url)
    if app is None:
        return None
    scheme = scheme_of(app.store_url)
    if scheme.producer_opener or not scheme.shared:  # not shared: a store object given
        store = app.store
        return store if isinstance(store, ProducerEnqueue) else None
    return None


#: The producers' own options (besides ``url``), as their constructors name them
#: (tests/test_bad_input.py checks it against both constructors).
PRODUCER_OPTIONS = frozenset(
    {"app", "namespace", "topology_ttl", "max_payload_bytes", "socket_timeout", "connect_timeout"}
)
#: redis-py options the store sets itself (raw bytes, RESP2 reply shapes).
_FIXED_REDIS_OPTIONS = frozenset({"decode_responses", "protocol"})
#: The URL schemes a Redis Cluster client serves (``connect``'s).
_CLUSTER_SCHEMES = frozenset({"redis+cluster", "rediss+cluster"})


@functools.cache
def redis_client_options(flavor: Flavor | None = None, *, cluster: bool = True) -> frozenset[str]:
    """The keyword options redis-py's clients take, which a producer hands
    on: read from their signatures, once, so a new redis-py option is taken
    as it is. ``flavor`` None: every client (``redis.Redis``, its Cluster
    and their asyncio twins; what some producer may take); else the
    clients of that flavor, the Cluster's only with ``cluster`` (a Cluster
    hands its nodes' connections ``redis.Redis``'s options)."""
    import inspect

    import redis.asyncio
    import redis.asyncio.cluster
    import redis.cluster

    classes: list[Any] = []
    if flavor in (None, "blocking"):
        classes += [redis.Redis, *([redis.cluster.RedisCluster] if cluster else [])]
    if flavor in (None, "asyncio"):
        classes += [
            redis.asyncio.Redis,
            *([redis.asyncio.cluster.RedisCluster] if cluster else []),
        ]
    names: set[str] = set()
    for cls in classes:
        for p in inspect.signature(cls.__init__).parameters.values():
            if p.kind is p.POSITIONAL_OR_KEYWORD or p.kind is p.KEYWORD_ONLY:
                names.add(p.name)
    # Named by the store URL (its hosts), or set by the store: decode_responses
    # and protocol are refused by check_producer_options (_FIXED_REDIS_OPTIONS).
    return frozenset(names - {"self", "url", "startup_nodes", "host", "port", "path"})


def check_redis_options(
    what: str, redis_kwargs: Mapping[str, Any], *, flavor: Flavor, settings: StoreUrl
) -> None:
    """``TypeError`` naming a redis-py option (one some client takes, so
    past :func:`check_producer_options`) that the client this producer
    will make does not: the ``flavor``'s ``redis.Redis``, or its
    ``RedisCluster`` too for a Cluster URL (``read_from_replicas`` on a
    ``redis://`` URL). Checked when the URL is known, before connecting,
    rather than at the first call."""
    cluster = settings.scheme in _CLUSTER_SCHEMES
    wrong = sorted(set(redis_kwargs) - redis_client_options(flavor, cluster=cluster))
    if wrong:
        package = "redis" if flavor == "blocking" else "redis.asyncio"
        client = f"{package}.cluster.RedisCluster" if cluster else f"{package}.Redis"
        hint = "" if cluster else "; a Cluster's options need a redis+cluster:// URL"
        raise TypeError(
            f"{what} option{'s' if len(wrong) > 1 else ''} {', '.join(map(repr, wrong))} "
            f"{'are' if len(wrong) > 1 else 'is'} not taken by the client of "
            f"{settings.description} ({client}){hint}"
        )


def check_producer_options(
    what: str,
    *,
    url: object,
    app: object,
    namespace: object,
    topology_ttl: object,
    max_payload_bytes: object,
    socket_timeout: object,
    connect_timeout: object,
    redis_kwargs: Mapping[str, Any],
) -> None:
    """A producer's constructor options (``what`` names it), checked before
    anything is opened: ``TypeError`` for an unknown name (one neither the
    producer's nor redis-py's: a misspelling, with the closest name), an
    option redis-py must not change (``decode_responses``, ``protocol``),
    or an ``app`` that is not an App; ``ValueError`` for an empty ``url``
    or ``namespace``, a ``max_payload_bytes`` that is not an int >= 1, a
    ``topology_ttl`` not a finite number >= 0, or a timeout not a finite
    number > 0. None means "not given" for ``url``, ``app``, ``namespace``
    and ``max_payload_bytes``."""
    if redis_kwargs:
        fixed = sorted(_FIXED_REDIS_OPTIONS.intersection(redis_kwargs))
        if fixed:
            raise TypeError(
                f"{what} option {fixed[0]!r} is set by the store (it reads raw bytes in "
                "RESP2 replies) and cannot be given"
            )
        if not redis_client_options().issuperset(redis_kwargs):
            raise unknown_options(
                redis_kwargs,
                PRODUCER_OPTIONS | {"url"},
                what,
                unlisted=redis_client_options(),
                also=", and redis-py's client options (redis.Redis: max_connections, ...)",
            )
    if url is not None:
        check_text("url", url, note=" (or None: the app's)")
    if app is not None and not all(
        hasattr(app, name) for name in ("store_url", "registry", "max_payload_bytes")
    ):
        raise TypeError(f"app must be a chronos_trio.App (or None), got {app!r}")
    if namespace is not None:
        check_text("namespace", namespace, strip=True, note=" (or None: the URL's)")
    if max_payload_bytes is not None:
        check_positive_int("max_payload_bytes", max_payload_bytes, note=" (or None: the app's)")
    check_seconds("topology_ttl", topology_ttl, zero=True)
    check_seconds("socket_timeout", socket_timeout)
    check_seconds("connect_timeout", connect_timeout)


class ProducerCore:
    """The state both producers hold: the parsed URL and how to connect,
    the sans-IO Redis core (keys, topology cache), the app (if any) and the
    payload limit. On PostgreSQL or SQLite (``sql`` is the store, a
    :class:`ProducerEnqueue`) the Redis parts are not made; a store
    the producer opened from its own URL (``owns_sql``) is closed by its
    ``close``, never an app's."""

    def __init__(
        self,
        url: str | None,
        app: AppLike | None,
        *,
        what: str,
        flavor: Flavor,
        namespace: str | None,
        topology_ttl: float,
        max_payload_bytes: int | None,
        socket_timeout: float,
        connect_timeout: float,
        redis_kwargs: dict[str, Any],
    ) -> None:
        check_producer_options(
            what,
            url=url,
            app=app,
            namespace=namespace,
            topology_ttl=topology_ttl,
            max_payload_bytes=max_payload_bytes,
            socket_timeout=socket_timeout,
            connect_timeout=connect_timeout,
            redis_kwargs=redis_kwargs,
        )
        self.app = app
        if max_payload_bytes is None:
            max_payload_bytes = app.max_payload_bytes if app is not None else None
        self.max_payload_bytes = max_payload_bytes or DEFAULT_MAX_PAYLOAD_BYTES
        self.result_type_of: ResultTypeOf = app.result_type_of if app is not None else unknown_kind
        self.sql = transactional_of(url, app)
        self.owns_sql = self.sql is not None and url is not None
        self.where = redact(url) if url is not None else redact(app.store_url) if app else ""
        if self.sql is not None:
            if redis_kwargs:
                raise TypeError(
                    f"{what} options {', '.join(sorted(redis_kwargs))} are redis-py's, but "
                    f"this store is not Redis ({self.where})"
                )
            return
        self._connect_options = {
            "socket_timeout": socket_timeout,
            "connect_timeout": connect_timeout,
            **redis_kwargs,
        }
        self.settings: StoreUrl = parse_store_url(
            _store_url(url, app), namespace=namespace, socket_timeout=socket_timeout
        )
        check_redis_options(what, redis_kwargs, flavor=flavor, settings=self.settings)
        s = self.settings
        self.core = RedisCore(
            KeySpace(s.namespace),
            default_partitions=s.default_partitions,
            topology_ttl=topology_ttl,
            replica_wait=ReplicaWait(s.wait_replicas, s.wait_timeout) if s.wait_replicas else None,
        )

    def in_transaction(self) -> ProducerEnqueue:
        """The store, for an enqueue given ``connection=``; MissingCapability
        naming the store when it is Redis (nothing is written)."""
        if self.sql is None:
            raise not_transactional("RedisStore", self.where)
        return self.sql

    def close_sql(self) -> None:
        """Close the SQL store's connections if the producer opened it
        (blocking; an app's store is the app's to close)."""
        if self.sql is not None and self.owns_sql:
            self.sql.close_blocking()

    def redis_only(self, what: str) -> None:
        """Refuse ``what`` (statistics of Redis round trips) on a SQL store."""
        if self.sql is not None:
            raise NotImplementedError(
                f"{what}: a producer on PostgreSQL or SQLite keeps no statistics"
            )

    def client_factory(self, flavor: Flavor) -> Callable[[], Any]:
        """Makes the redis-py client (of ``flavor``) for the store URL."""
        return functools.partial(connect, self.settings.url, flavor=flavor, **self._connect_options)

    def _hooks(self) -> Sequence[ProducerHook]:
        return self.app.producer_hooks if self.app is not None else ()

    def _spec(self, kind: str) -> TaskDefaults:
        """The registered task of ``kind`` in the app, else a kind's defaults."""
        tasks: Mapping[str, Any] = self.app.registry.tasks if self.app is not None else {}
        spec: TaskDefaults | None = tasks.get(kind)
        return spec if spec is not None else KindDefaults(kind)

    def new_job(
        self, task: TaskLike | str, payload: Any, options: EnqueueOptions
    ) -> tuple[NewJob, ResultTypeOf]:
        """The job record (validated and encoded as ``Task.new_job`` does),
        and how to decode its result."""
        if isinstance(task, str):
            if not task:
                raise ValueError("task kind must be a non-empty string")
            spec, limit = self._spec(task), self.max_payload_bytes
            return new_job(spec, limit, self._hooks(), payload, **options), self.result_type_of
        return task.new_job(payload, **options), self._decoder_of(task)

    def new_jobs(
        self,
        task: TaskLike | str,
        payloads: Iterable[Any],
        delay: float | None,
        queue: str | None,
    ) -> tuple[Sequence[NewJob], ResultTypeOf]:
        """:meth:`new_job` for many payloads (``Task.new_jobs``), plain ones
        as a ``JobBatch`` (``records._job_batch``; a ``Task``'s by its
        ``_new_job_batch``, another task's by its ``new_jobs``)."""
        if isinstance(task, str):
            if not task:
                raise ValueError("task kind must be a non-empty string")
            spec, limit = self._spec(task), self.max_payload_bytes
            jobs = new_job_batch(spec, limit, self._hooks(), payloads, delay=delay, queue=queue)
            return jobs, self.result_type_of
        make: Any = getattr(task, "_new_job_batch", None)
        if make is None:
            return task.new_jobs(payloads, delay=delay, queue=queue), self._decoder_of(task)
        batch: Sequence[NewJob] = make(payloads, delay=delay, queue=queue)
        return batch, self._decoder_of(task)

    def _decoder_of(self, task: TaskLike) -> ResultTypeOf:
        """A Task decodes by its own app's registry (the producer may have none)."""
        host = getattr(task, "app", None)
        decoder = getattr(host, "result_type_of", None)
        return decoder if callable(decoder) else self.result_type_of

    def check_job_id(self, job_id: str) -> None:
        if not isinstance(job_id, str) or not job_id:
            raise ValueError("job_id must be a non-empty string")


def handle_args(
    result: EnqueueResult, job: NewJob
) -> tuple[str, bool, float, Placement | None, str | None, str]:
    """The handle fields of an enqueued job, in order."""
    return handle_fields(result, job.queue, job.kind)


def queues_and_kinds(jobs: Sequence[NewJob]) -> Iterable[tuple[str, str]]:
    """Each job's queue and kind, in order (a ``JobBatch``'s without
    building its records)."""
    if isinstance(jobs, JobBatch):
        return repeat((jobs.queue, jobs.kind), len(jobs))
    return [(j.queue, j.kind) for j in jobs]


class RedisPlacement:
    """The topology reading of a Redis producer's handle (a mixin): its
    placement is a RedisStore's, ``(version, partition)``."""

    __slots__ = ()
    placement: Placement | None

    @property
    def queue_version(self) -> int | None:
        """The topology version of the job's queue that holds it; None when
        not known (a handle made from a job ID). Kept for compatibility."""
        where = locate(self.placement)
        return None if where is None else where[0]

    @property
    def partition(self) -> int | None:
        """The partition that holds the job, as :attr:`queue_version`."""
        where = locate(self.placement)
        return None if where is None else where[1]
