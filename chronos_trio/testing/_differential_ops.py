"""The differential test's operations and their seeded generator.

An operation is a frozen description of one store call (or a clock jump),
drawn from a seed without looking at any store, so the same seed gives the
same sequence on every backend and a failure can be replayed. Operations
name jobs by ID and leases by the job they were taken on: the runner turns
a :class:`LeasePick` into the fencing token that store itself issued
(``current``: the job's latest lease there; otherwise an older one, or a
token no store issued), so stores whose tokens differ get the same call.

Choices that keep the comparison exact (each one says which contract rule
leaves the stores free to differ otherwise):

* Every due time the generator sets (enqueue delays and ``run_at``, retry,
  defer and unclaimed delays, lease durations) carries a fraction of its
  own below one clock tick (:data:`TICK`), and the clock moves a tick per
  step, so no two of them tie: the contract orders leases and promotions by
  due time and leaves ties open ("oldest due first"; across partitions ties
  go partition by partition on Redis).
* A keyed job (unique, or with a rate or concurrency limit) has exactly one
  key, and its ID routes to that key's partition for any partition count
  dividing :data:`ROUTING_MODULUS`: ``records._control`` counts a job's
  further keys per partition on Redis, and ``routed_job_id`` refuses a
  given ID that does not route to its key.
* Job IDs are unique across queues (``_roles``: "give jobs of different
  queues different IDs") and grow in generation order.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Sequence

import attrs

from ..records._jobs import LeaseRef
from ..store._results import SettleKind, Settlement

#: How far the clock moves between two steps (s): a power of two, so due
#: times on the grid are exact floats.
TICK = 1 / 64
#: Unit of the fraction that makes each generated due time unique (s);
#: 4095 of them stay below one :data:`TICK`.
_FRACTION = 2.0**-18
_FRACTIONS = 4095
#: Keyed jobs' IDs route to their key's partition modulo this (and so for
#: 1, 2, 4 and 8 partitions).
ROUTING_MODULUS = 8

QUEUES = ("qa", "qb")
KINDS = ("k1", "k2")
UNIQUE_KEYS = ("u1", "u2")
RATE_KEYS = ("r1",)
CAP_KEYS = ("c1", "c2")
GROUPS = ("g1", "g2")


@attrs.frozen
class JobSpec:
    """One job to enqueue. ``run_at_offset`` (seconds from the store's now
    when the call is made; negative: already due) wins over ``delay``."""

    id: str
    queue: str
    kind: str
    payload: bytes
    delay: float = 0.0
    run_at_offset: float | None = None
    max_retries: int = 1
    priority: int = 0
    expires_in: float | None = None
    #: (key, mode, ttl)
    unique: tuple[str, str, float | None] | None = None
    #: (key, count, per, burst)
    rate: tuple[str, int, float, int] | None = None
    #: (key, limit)
    cap: tuple[str, int] | None = None
    then: str | None = None


@attrs.frozen
class LeasePick:
    """A lease named by its job: ``current`` its latest token on the store
    the call goes to, else a stale one (an older token, or one never issued)."""

    job_id: str
    current: bool = True


#: The lease a drawn settlement holds until it runs: the runner puts the
#: lease its pick names in its place.
UNLEASED = LeaseRef("", "", "")


@attrs.frozen
class SettleItem:
    """One settlement of a :class:`Settle` step: the lease it picks, and
    what it asks (a :class:`Settlement` on :data:`UNLEASED`)."""

    pick: LeasePick
    outcome: Settlement


@attrs.frozen
class Enqueue:
    jobs: tuple[JobSpec, ...]


@attrs.frozen
class Lease:
    #: (queue, weight) pairs
    queues: tuple[tuple[str, int], ...]
    count: int
    duration: float
    strict: bool = False
    worker: str = "w1"


@attrs.frozen
class Renew:
    picks: tuple[LeasePick, ...]
    duration: float


@attrs.frozen
class Settle:
    items: tuple[SettleItem, ...]


@attrs.frozen
class Recover:
    queues: tuple[str, ...]
    limit: int


@attrs.frozen
class Promote:
    queues: tuple[str, ...]
    limit: int


@attrs.frozen
class Abort:
    job_id: str
    queue: str | None
    reason: str = ""


@attrs.frozen
class RunNow:
    job_id: str
    queue: str | None


@attrs.frozen
class Delete:
    job_id: str
    queue: str | None


@attrs.frozen
class RequeueDead:
    queue: str
    limit: int | None


@attrs.frozen
class GroupArrive:
    #: (group id, member index, size, result)
    arrivals: tuple[tuple[str, int, int, bytes | None], ...]
    ttl: float


@attrs.frozen
class Continue:
    """Read the workflow outbox, then finish the entries whose job ID's
    CRC32 is even (with ``finish``)."""

    queues: tuple[str, ...]
    finish: bool


@attrs.frozen
class Jump:
    """Move the store clock on (besides the tick every step takes)."""

    seconds: float


Operation = (
    Enqueue
    | Lease
    | Renew
    | Settle
    | Recover
    | Promote
    | Abort
    | RunNow
    | Delete
    | RequeueDead
    | GroupArrive
    | Continue
    | Jump
)


def describe(op: Operation) -> str:
    """One line naming the operation and its arguments."""
    return repr(op)


def routed_id(base: str, key: str) -> str:
    """``base`` with the shortest suffix that makes it route like ``key``
    (same CRC32 modulo :data:`ROUTING_MODULUS`)."""
    want = zlib.crc32(key.encode()) % ROUTING_MODULUS
    for n in range(10_000):
        candidate = f"{base}.{n}"
        if zlib.crc32(candidate.encode()) % ROUTING_MODULUS == want:
            return candidate
    raise AssertionError("no routed ID found")  # pragma: no cover - 1 in 8 routes


@attrs.frozen
class Mix:
    """Relative weights of the operations a sequence is drawn from (0: never)."""

    enqueue: int = 6
    bulk: int = 3
    lease: int = 6
    renew: int = 3
    settle: int = 6
    recover: int = 2
    promote: int = 3
    abort: int = 1
    run_now: int = 1
    delete: int = 1
    requeue_dead: int = 1
    group: int = 1
    continuations: int = 1
    jump: int = 3
    #: share of new jobs that are unique / rate-limited / capped / workflow jobs
    unique: float = 0.15
    rate: float = 0.08
    cap: float = 0.12
    workflow: float = 0.1
    #: share of new jobs with a priority other than 0
    priority: float = 0.3
    #: share of new jobs with an expiry
    expiry: float = 0.1


class _Draw:
    """The generator's state: the jobs made so far and fresh fractions."""

    def __init__(self, rng: random.Random, mix: Mix) -> None:
        self.rng = rng
        self.mix = mix
        self.jobs: list[str] = []
        self._fractions = 0

    def fraction(self) -> float:
        """A fraction of a tick no other due time of the sequence has."""
        self._fractions = self._fractions % _FRACTIONS + 1
        return self._fractions * _FRACTION

    def delay(self, *, zero: bool = True) -> float:
        if zero and self.rng.random() < 0.3:
            return 0.0
        return float(self.rng.choice((0, 0, 1, 2, 3, 5, 8, 20))) + self.fraction()

    def job_id(self) -> str:
        """An existing job's ID mostly, else one never enqueued."""
        if self.jobs and self.rng.random() < 0.9:
            return self.rng.choice(self.jobs[-40:])
        return f"zz-{self.rng.randrange(1000):03d}"

    def queue_or_none(self, job_id: str) -> str | None:
        if self.rng.random() < 0.3:
            return None
        queue = job_id.partition("-")[0]
        return queue if queue in QUEUES and self.rng.random() < 0.9 else self.rng.choice(QUEUES)

    def queues(self) -> tuple[str, ...]:
        return tuple(self.rng.sample(QUEUES, self.rng.choice((1, 2))))

    def new_job(self, *, single: bool) -> JobSpec:
        rng, mix = self.rng, self.mix
        queue = rng.choice(QUEUES)
        base = f"{queue}-{len(self.jobs):04d}"
        unique: tuple[str, str, float | None] | None = None
        rate: tuple[str, int, float, int] | None = None
        cap: tuple[str, int] | None = None
        roll = rng.random()
        if roll < mix.unique:
            mode = rng.choice(("lock", "throttle", "debounce"))
            ttl = None if mode != "throttle" and rng.random() < 0.5 else rng.choice((2, 6, 30))
            unique = (rng.choice(UNIQUE_KEYS), mode, None if ttl is None else ttl + 0.5)
        elif roll < mix.unique + mix.rate:
            rate = (rng.choice(RATE_KEYS), rng.choice((1, 2)), rng.choice((2.0, 4.0)), 1)
        elif roll < mix.unique + mix.rate + mix.cap:
            cap = (rng.choice(CAP_KEYS), rng.choice((1, 2)))
        key = unique[0] if unique else rate[0] if rate else cap[0] if cap else None
        job_id = base if key is None else routed_id(base, key)
        self.jobs.append(job_id)
        run_at_offset: float | None = None
        delay = 0.0
        if single:
            delay = self.delay()
        elif rng.random() < 0.5:
            run_at_offset = -self.fraction()  # due already, and tie-free
        else:
            delay = self.delay(zero=False)
        return JobSpec(
            id=job_id,
            queue=queue,
            kind=rng.choice(KINDS),
            payload=f"p{len(self.jobs)}".encode(),
            delay=delay,
            run_at_offset=run_at_offset,
            max_retries=rng.choice((0, 1, 1, 2)),
            priority=rng.choice((1, -1, 2)) if rng.random() < mix.priority else 0,
            expires_in=rng.choice((3.5, 12.5)) if rng.random() < mix.expiry else None,
            unique=unique,
            rate=rate,
            cap=cap,
            then=f'{{"step":{len(self.jobs)}}}' if rng.random() < mix.workflow else None,
        )

    def pick(self) -> LeasePick:
        return LeasePick(self.job_id(), current=self.rng.random() < 0.8)

    def settle_item(self) -> SettleItem:
        rng = self.rng
        kind = rng.choice(list(SettleKind))
        keep = rng.random() < 0.5
        pick = self.pick()
        outcome = Settlement(
            UNLEASED,
            kind,
            error=f"e{rng.randrange(100)}",
            retry_delay=self.delay(),
            retain_for=float(rng.choice((0, 4, 30))) + self.fraction() if keep else 0.0,
            result=f"r{rng.randrange(100)}".encode() if rng.random() < 0.4 else None,
            result_ttl=float(rng.choice((0, 5, 50))) + self.fraction(),
            unclaimed_grace=float(rng.choice((0, 3, 10))) + self.fraction(),
        )
        return SettleItem(pick, outcome)


def generate(seed: int | str, steps: int, mix: Mix | None = None) -> list[Operation]:
    """``steps`` operations drawn from ``seed`` (the same on every run)."""
    mix = mix or Mix()
    rng = random.Random(f"chronos-differential-{seed}")
    draw = _Draw(rng, mix)
    makers: dict[str, Callable[[], Operation]] = {
        "enqueue": lambda: Enqueue((draw.new_job(single=True),)),
        "bulk": lambda: Enqueue(
            tuple(draw.new_job(single=False) for _ in range(rng.randint(2, 5)))
        ),
        "lease": lambda: Lease(
            tuple((q, rng.randint(1, 3)) for q in draw.queues()),
            rng.randint(1, 4),
            float(rng.choice((1, 3, 10))) + 0.5 + draw.fraction(),
            strict=rng.random() < 0.3,
            worker=rng.choice(("w1", "w2")),
        ),
        "renew": lambda: Renew(
            tuple(draw.pick() for _ in range(rng.randint(1, 3))),
            float(rng.choice((1, 3, 10))) + 0.5 + draw.fraction(),
        ),
        "settle": lambda: Settle(tuple(draw.settle_item() for _ in range(rng.randint(1, 3)))),
        "recover": lambda: Recover(draw.queues(), rng.randint(1, 6)),
        "promote": lambda: Promote(draw.queues(), rng.randint(1, 6)),
        "abort": lambda: _abort(draw),
        "run_now": lambda: _by_id(draw, RunNow),
        "delete": lambda: _by_id(draw, Delete),
        "requeue_dead": lambda: RequeueDead(rng.choice(QUEUES), rng.choice((None, 1, 2))),
        "group": lambda: GroupArrive(_arrivals(rng), float(rng.choice((5, 60))) + 0.5),
        "continuations": lambda: Continue(draw.queues(), rng.random() < 0.7),
        "jump": lambda: Jump(float(rng.choice((1, 2, 3, 5, 10, 30)))),
    }
    weights = {name: getattr(mix, name) for name in makers}
    names = [n for n, w in weights.items() if w > 0]
    ops: list[Operation] = []
    for _ in range(steps):
        name = rng.choices(names, [weights[n] for n in names])[0]
        ops.append(makers[name]())
    return ops


def _abort(draw: _Draw) -> Abort:
    job_id = draw.job_id()
    return Abort(job_id, draw.queue_or_none(job_id), draw.rng.choice(("", "stop")))


def _by_id(draw: _Draw, cls: type[RunNow] | type[Delete]) -> RunNow | Delete:
    job_id = draw.job_id()
    return cls(job_id, draw.queue_or_none(job_id))


def _arrivals(rng: random.Random) -> tuple[tuple[str, int, int, bytes | None], ...]:
    group = rng.choice(GROUPS)
    size = 2 if group == "g1" else 3
    return tuple(
        (group, rng.randrange(size), size, rng.choice((None, f"m{rng.randrange(9)}".encode())))
        for _ in range(rng.randint(1, 2))
    )


def job_ids_of(ops: Sequence[Operation]) -> list[str]:
    """Every job ID the operations enqueue, in order."""
    return [spec.id for op in ops if isinstance(op, Enqueue) for spec in op.jobs]
