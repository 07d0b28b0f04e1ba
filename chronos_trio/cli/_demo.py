"""``python -m chronos_trio demo [--url URL]``: producer and worker in one
process, with live progress and a summary: on the embedded in-memory store
(no server needed), or on the store at ``URL`` (``sqlite:///demo.db``: a
file, no server; ``postgresql://``, ``redis://``; best one of its own, e.g.
``?schema=chronos_demo``: jobs other programs left in its queues would be
run too).

On a store at a URL (durable), the demo first says what it finds there from
earlier runs, and leaves a job for the next one: a weekly digest due in a
week (in a queue its worker does not serve), which a second run finds still
scheduled, with the dead letters of the first."""

from __future__ import annotations

import random
import sys
from typing import TextIO

import attrs
import trio

from ..app._app import App
from ..records._errors import SkipRetry
from ..records._flow_build import chain, group
from ..records._jobs import PENDING_STATES, Job, JobState
from ..records._retry import RetryPolicy
from ..runtime._context import JobContext
from ..store import MemoryStore
from ..worker._worker import Worker


@attrs.frozen
class SendEmail:
    to: str
    subject: str


@attrs.frozen
class BuildReport:
    name: str
    rows: int


@attrs.frozen
class CapturePayment:
    order: str
    cents: int
    flaky_attempts: int  # fail this many times before succeeding


@attrs.frozen
class ResizeImage:
    path: str


@attrs.frozen
class WeeklyDigest:
    to: str


#: The job the demo leaves on a durable store for its next run: its ID (an
#: enqueue with it again finds the one there), its queue (not served by the
#: demo's worker, so it waits) and its delay.
DIGEST_ID, DIGEST_QUEUE, DIGEST_DELAY = "demo-weekly-digest", "digests", 7 * 86400.0


def build_demo_app(url: str | None = None) -> tuple[App, list[Job]]:
    app = App(url if url is not None else MemoryStore())
    dead: list[Job] = []

    @app.task("email.send", timeout=5)
    async def send_email(args: SendEmail, job: JobContext) -> None:
        await trio.sleep(random.uniform(0.05, 0.3))

    @app.task("report.build", queue="reports")
    async def build_report(args: BuildReport, job: JobContext) -> None:
        await trio.sleep(args.rows / 20_000)

    @app.task("payment.capture", queue="critical", max_retries=3)
    async def capture(args: CapturePayment, job: JobContext) -> None:
        await trio.sleep(0.05)
        if job.attempt <= args.flaky_attempts:
            raise ConnectionError(f"gateway timeout (attempt {job.attempt})")

    @app.task("image.resize", max_retries=2)
    async def resize(args: ResizeImage, job: JobContext) -> None:
        if args.path.endswith(".exe"):
            raise SkipRetry(f"{args.path} is not an image")
        raise OSError(f"{args.path}: corrupt file")

    # a workflow: price an order, then tax and shipping at once (a group),
    # then the invoice on both results (the chord's callback)
    @app.task("order.price")
    async def price(cents: int, job: JobContext) -> int:
        await trio.sleep(0.02)
        return cents

    @app.task("order.tax")
    async def tax(cents: int, job: JobContext) -> int:
        return cents + cents // 5  # the price with its tax

    @app.task("order.shipping")
    async def shipping(cents: int, job: JobContext) -> int:
        return 0 if cents >= 5000 else 499

    @app.task("order.invoice")
    async def invoice(parts: list[int], job: JobContext) -> int:
        return sum(parts)

    @app.task("digest.weekly", queue=DIGEST_QUEUE)
    async def digest(args: WeeklyDigest, job: JobContext) -> None:
        await trio.sleep(0.01)

    @app.on_dead_letter
    async def remember(job: Job) -> None:
        dead.append(job)

    return app, dead


async def _produce(app: App, jobs: int) -> int:
    tasks = app.tasks
    count = 0
    emails = [SendEmail(f"user{i}@example.com", "Welcome!") for i in range(jobs)]
    count += len(await tasks["email.send"].enqueue_many(emails))
    for i in range(max(1, jobs // 10)):
        await tasks["report.build"].enqueue(
            BuildReport(f"daily-{i}", rows=random.randint(1_000, 20_000)),
            delay=random.uniform(1.0, 5.0),
        )
        count += 1
    for i in range(max(1, jobs // 8)):
        await tasks["payment.capture"].enqueue(
            CapturePayment(f"order-{i}", 1999, flaky_attempts=i % 3)
        )
        count += 1
    await tasks["image.resize"].enqueue(ResizeImage("uploads/cat.png"))
    await tasks["image.resize"].enqueue(ResizeImage("uploads/virus.exe"))
    count += 2
    # A producer that does not share our types: a payload that cannot decode.
    await app.enqueue("image.resize", b'{"file": 3}')
    return count + 1


def order_flow(app: App, cents: int) -> object:
    tasks = app.tasks
    return chain(
        tasks["order.price"].s(cents),
        group(tasks["order.tax"].s(), tasks["order.shipping"].s()),
        tasks["order.invoice"].s(),
    )


#: Jobs in one order workflow (price, tax, shipping, invoice).
ORDER_JOBS = 4


QUEUES = ("critical", "default", "reports")


async def _render(app: App, worker: Worker, out: TextIO, start: float) -> str:
    stats = {s.queue: s for s in await app.store.stats(list(QUEUES))}
    ws = worker.statistics()
    cols = [JobState.SCHEDULED, JobState.READY, JobState.LEASED, JobState.RETRY_WAIT, JobState.DEAD]
    lines = [
        f"chronos_trio demo  t={trio.current_time() - start:5.1f}s  worker {ws.worker_id}",
        f"{'queue':<10}" + "".join(f"{c.value:>12}" for c in cols),
    ]
    for q in QUEUES:
        counts = stats[q].counts
        lines.append(f"{q:<10}" + "".join(f"{counts[c]:>12}" for c in cols))
    lines.append(
        f"succeeded={ws.succeeded} retried={ws.retried} dead={ws.dead} "
        f"running={ws.running} in_flight={ws.in_flight}"
    )
    return "\n".join(lines)


async def run_demo(
    *, jobs: int = 200, out: TextIO = sys.stdout, live: bool | None = None, url: str | None = None
) -> int:
    """Run the demo (on the store at ``url``; None: in memory); returns a
    process exit code (0 when every job ended as expected: all succeeded
    except the three deliberately dead ones). Raises what opening and using
    the store raises (ValueError for a bad URL, StoreError)."""
    app, dead = build_demo_app(url)
    try:
        earlier = 0
        if url is not None:
            await app.store.now()  # reachable? (a StoreError now, not retries later)
            earlier = await _found_earlier(app, out)
            await _leave_digest(app, out)
        return await _run(app, dead, jobs, out, live, earlier)
    finally:
        await app.aclose()


async def _found_earlier(app: App, out: TextIO) -> int:
    """Say what the store holds in the demo's queues before this run (what
    earlier runs left); how many of those jobs this run's worker will run
    (pending in the queues it serves)."""
    stats = await app.store.stats([*QUEUES, DIGEST_QUEUE])
    held = [
        f"{s.queue}: " + ", ".join(f"{n} {state.value}" for state, n in s.counts.items() if n)
        for s in stats
        if s.total
    ]
    if not held:
        print("the store holds no job of the demo's queues (a first run)", file=out)
        return 0
    print(f"found on the store from earlier runs: {'; '.join(held)}", file=out)
    return sum(s.counts[st] for s in stats if s.queue in QUEUES for st in PENDING_STATES)


async def _leave_digest(app: App, out: TextIO) -> None:
    """Enqueue the weekly digest for the next run (the one already there,
    if an earlier run left it)."""
    handle = await app.tasks["digest.weekly"].enqueue(
        WeeklyDigest("team@example.com"), job_id=DIGEST_ID, delay=DIGEST_DELAY
    )
    found = await app.store.get_job(DIGEST_ID)
    state = found.state.value if found is not None else "gone"
    days = (handle.run_at - await app.store.now()) / 86400
    if handle.created:
        print(
            f"left for the next run: the weekly digest {DIGEST_ID} ({state}, due in "
            f"{days:.1f} days, queue {DIGEST_QUEUE!r})",
            file=out,
        )
    else:
        print(
            f"the weekly digest {DIGEST_ID} an earlier run left is still there ({state}, "
            f"due in {days:.1f} days)",
            file=out,
        )


async def _run(
    app: App, dead: list[Job], jobs: int, out: TextIO, live: bool | None, earlier: int = 0
) -> int:
    live = out.isatty() if live is None else live
    start = trio.current_time()
    async with app.open_worker(
        queues="critical=6,default=3,reports=1",
        concurrency=32,
        poll_interval=0.25,
        lease_duration=10,
        retry=RetryPolicy(base=0.5, max_delay=4),
    ) as worker:
        total = await _produce(app, jobs)
        orders = [1000 * (i + 1) for i in range(max(1, jobs // 40))]
        flows = [await app.enqueue_workflow(order_flow(app, c)) for c in orders]  # type: ignore[arg-type]
        total += ORDER_JOBS * len(flows)
        print(
            f"enqueued {total} jobs (immediate, delayed, flaky, poison, and {len(flows)} "
            "order workflows: price -> tax + shipping -> invoice)",
            file=out,
        )
        shown = 0
        with trio.move_on_after(120):
            async with trio.open_nursery() as nursery:

                async def progress() -> None:
                    nonlocal shown
                    while True:
                        frame = await _render(app, worker, out, start)
                        if live and shown:
                            out.write(f"\x1b[{shown}F\x1b[J")
                        out.write(frame + "\n")
                        out.flush()
                        shown = frame.count("\n") + 1
                        await trio.sleep(0.25 if live else 1.0)

                nursery.start_soon(progress)
                invoices = [await flow.result(timeout=60) for flow in flows]
                await worker.wait_idle()
                nursery.cancel_scope.cancel()
        print(await _render(app, worker, out, start), file=out)
        ws = worker.statistics()
    elapsed = trio.current_time() - start
    print(f"\nsummary: {total} jobs in {elapsed:.1f}s", file=out)
    print(f"  succeeded  {ws.succeeded}", file=out)
    print(f"  retries    {ws.retried} (flaky payments recovered by backoff)", file=out)
    print(f"  dead       {ws.dead}", file=out)
    for job in dead:
        reason = job.last_error.splitlines()[0]
        print(f"    - {job.kind} {job.id[:8]} after {job.attempts} attempt(s): {reason}", file=out)
    expected = [c + c // 5 + (0 if c >= 5000 else 499) for c in orders]
    print(f"  workflows  {len(flows)} invoices: {', '.join(map(str, invoices))}", file=out)
    if earlier:  # jobs earlier runs left pending ran too: each ended once
        print(f"  earlier    {earlier} job(s) left pending by earlier runs, run too", file=out)
        ended = ws.succeeded + ws.dead == total + earlier and ws.dead >= 3
        ok = ended and len(dead) == ws.dead and invoices == expected
    else:
        ok = ws.succeeded == total - 3 and ws.dead == 3 and len(dead) == 3
        ok = ok and invoices == expected
    print("all jobs accounted for" if ok else "UNEXPECTED OUTCOME", file=out)
    return 0 if ok else 1
