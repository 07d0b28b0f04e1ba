"""A :class:`~chronos_trio.JobContext` for tests: what a handler gets when a
test calls it directly (:func:`~chronos_trio.testing.run_inline`) or runs
its job eagerly (:func:`~chronos_trio.testing.eager`), with no worker.

Its lease is never lost and its run never called off unless the test says
so (``lose_lease()``, ``request_abort()``, ``call_off()``), from the test
or from another task while the handler runs. Calls a handler makes that
talk to a worker (``job.progress(...)``, ``job.log(...)``, and any other
recorded through :meth:`FakeJobContext.record`) are kept in ``calls``, in
order, instead of being sent anywhere.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import trio

from ..records._checks import check_positive_int
from ..records._jobs import Job, JobState, LeasedJob, NewJob
from ..records._notes import check_fraction, check_message, cut_line
from ..runtime._context import JobContext, Producer


@attrs.define(eq=False)
class FakeLease:
    """The lease a :class:`FakeJobContext` reads: held for ever (its
    deadline is infinite) until a test sets ``lost``; ``abort_requested``
    as a worker's would be after an abort reached it."""

    lost: bool = False
    deadline: float = math.inf
    abort_requested: bool = False

    @property
    def leased(self) -> LeasedJob:
        """A fake lease holds no store lease: raises ``AttributeError``
        (the fake context records ``progress``/``log`` instead of writing)."""
        raise AttributeError("a fake lease holds no store lease (nothing is written)")


@attrs.frozen
class RecordedCall:
    """One call a handler made on its fake context: the method's ``name``
    and what it was given."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = attrs.field(factory=dict)


@attrs.define(eq=False)
class FakeJobContext(JobContext):
    """A JobContext with no worker behind it (see the module doc).

    ``job.redis`` is the ``redis`` it was given; without one it raises
    ``TypeError`` saying how to give one. ``calls`` lists the recorded
    calls (:class:`RecordedCall`)."""

    calls: list[RecordedCall] = attrs.field(factory=list)
    _redis: Any = None

    @property
    def redis(self) -> Any:
        """The ``redis`` this context was given (``run_inline(...,
        redis=...)``). Raises ``TypeError`` when none was."""
        if self._redis is None:
            raise TypeError(
                "job.redis in a test: this fake job context has no Redis connections; "
                "pass redis=... (e.g. a RedisStore's commands(), or a stub with execute) "
                "to run_inline or job_context"
            )
        return self._redis

    @property
    def lease_lost(self) -> bool:
        """True once the test said so (:meth:`lose_lease`)."""
        return self.fake_lease.lost

    @property
    def cancelled(self) -> bool:
        """True once the test called this run off (:meth:`call_off`)."""
        return self._called_off

    @property
    def fake_lease(self) -> FakeLease:
        lease = self._lease
        assert isinstance(lease, FakeLease)
        return lease

    def lose_lease(self) -> None:
        """Make ``lease_lost`` True, as when a worker's renewal is refused."""
        self.fake_lease.lost = True

    def request_abort(self) -> None:
        """Make ``abort_requested`` True, as when an abort reaches a worker."""
        self.fake_lease.abort_requested = True

    def call_off(self) -> None:
        """Make ``cancelled`` True (and ``check_cancelled()`` raise
        ``JobCancelled``), as when a worker calls a run off. Nothing is
        cancelled: the handler decides what to do."""
        self._called_off = True

    def record(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Keep one call in ``calls``: how the fake context's stand-ins for
        worker calls report, and a hook for ones it does not know yet."""
        self.calls.append(RecordedCall(name, args, kwargs))

    def calls_to(self, name: str) -> list[RecordedCall]:
        """The recorded calls of method ``name``, in order."""
        return [call for call in self.calls if call.name == name]

    async def progress(self, fraction: float, message: str = "") -> None:
        """Checked as a worker's context checks it (the same errors), then
        recorded in ``calls`` as ``progress`` (``job.progress(...)``)."""
        self.progress_nowait(fraction, message)
        await trio.lowlevel.checkpoint()

    def progress_nowait(self, fraction: float, message: str = "") -> None:
        """As :meth:`progress`, without the checkpoint; recorded as ``progress``."""
        self.record("progress", check_fraction(fraction), check_message(message))

    def log(self, line: str) -> None:
        """Cut and checked as a worker's context does it (the same errors),
        then recorded in ``calls`` (``job.log(...)``)."""
        self.record("log", cut_line(line))


def job_context(
    job: Job | NewJob,
    *,
    app: Producer,
    attempt: int | None = None,
    worker_id: str = "test-worker",
    lifespan: Any = None,
    redis: Any = None,
) -> FakeJobContext:
    """A fake context for ``job``: a stored record (as leased), or a job as
    a producer builds it (``task.new_job(payload, ...)``), then taken as
    leased for its ``attempt`` (default 1). ``app`` is ``job.app``. Its
    deadline is the job's timeout from now on Trio's clock (infinite when
    called outside Trio). Raises ValueError for an ``attempt`` (or a
    record's) that is not an int >= 1."""
    if attempt is None:
        attempt = job.attempts if isinstance(job, Job) else 1
    check_positive_int("attempt", attempt, note=" (1 is the first run)")
    if isinstance(job, NewJob):
        job = leased_record(job, attempt)
    elif attempt != job.attempts:
        job = attrs.evolve(job, attempts=attempt)
    try:
        deadline = trio.current_time() + job.timeout
    except RuntimeError:  # outside Trio
        deadline = math.inf
    return FakeJobContext(
        job=job,
        worker_id=worker_id,
        deadline=deadline,
        app=app,
        lease=FakeLease(),
        lifespan=lifespan,
        redis=redis,
    )


def leased_record(new: NewJob, attempt: int) -> Job:
    """The record a worker would lease for ``new`` on its ``attempt``."""
    return Job(
        id=new.id,
        queue=new.queue,
        kind=new.kind,
        payload=new.payload,
        run_at=0.0 if new.run_at is None else new.run_at,
        state=JobState.LEASED,
        attempts=attempt,
        max_retries=new.max_retries,
        timeout=new.timeout,
        lease_token="test",
        lease_owner="test-worker",
        headers=new.headers,
        then=new.then,
        control=new.control,
    )
