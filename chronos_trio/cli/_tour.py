"""``python -m chronos_trio tour``: every feature end to end on the embedded
in-memory store, printed as it happens.

The demo is the short first run; the tour is the long one. Each chapter
opens its own app and worker(s) on a fresh in-memory store, does one thing
a production job queue is used for, prints what happens with the time it
happened (seconds since the chapter began), and checks the outcome it
promises: a chapter that sees anything else says ``UNEXPECTED`` and the
tour's exit code is 1. The chapters run on Trio's clock (the memory store's
clock is Trio's), so a test runs the whole tour under a virtual clock in
well under a second, and ``python -m chronos_trio tour`` in real time in
about fifteen seconds.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

import attrs
import trio

from ..app._app import App
from ..app._task import Task
from ..records._control import ConcurrencyLimit, RateLimit
from ..records._errors import JobAborted, SkipRetry
from ..records._flow_build import chain, group
from ..records._flow_outcomes import StepFailure
from ..records._graph import graph
from ..records._jobs import Job, JobState
from ..records._notes import JobProgress
from ..records._retry import RetryPolicy
from ..runtime._config import WorkerConfig
from ..runtime._context import JobContext
from ..runtime._schedule import leadership_name
from ..store import MemoryStore
from ..worker._worker import Worker


@attrs.define
class Chapter:
    """What one chapter prints, and whether it saw what it promises."""

    title: str
    out: TextIO
    start: float = attrs.field(factory=trio.current_time)
    problems: list[str] = attrs.field(factory=list)

    def say(self, text: str) -> None:
        print(f"  [{trio.current_time() - self.start:6.2f}s] {text}", file=self.out, flush=True)

    def expect(self, ok: bool, what: str) -> None:
        """Record ``what`` as a promise kept (``ok``) or broken."""
        if not ok:
            self.problems.append(what)
            self.say(f"UNEXPECTED: {what}")


def _task(app: App, kind: str, **options: Any) -> Callable[[Callable[..., Any]], Task[Any]]:
    """``app.task``, its payload type left to the handler's annotation."""
    return app.task(kind, **options)


#: Options every chapter's worker shares: quick polls and leases, so the
#: tour moves at the pace of its jobs rather than of production defaults.
FAST = {"poll_interval": 0.05, "heartbeat_interval": 0.2, "lease_duration": 2.0}


async def delays(ch: Chapter) -> None:
    """Jobs run at their due time, not before: a delay and an absolute run_at."""
    app = App(MemoryStore())
    ran: dict[str, float] = {}
    lateness: list[float] = []

    @_task(app, "remind")
    async def remind(what: str, job: JobContext) -> None:
        ran[what] = trio.current_time() - ch.start
        late = await app.store.now() - job.job.run_at
        lateness.append(late)
        ch.say(f"ran {what!r}, {late * 1000:.1f} ms after its due time")

    async with app.open_worker(**FAST) as worker:
        now = await app.store.now()
        await remind.enqueue("after 1.5 s", delay=1.5)
        await remind.enqueue("at now + 0.5 s", run_at=now + 0.5)
        await remind.enqueue("at once")
        ch.say("enqueued three reminders: at once, at now + 0.5 s, after 1.5 s")
        await worker.wait_idle()
    order = sorted(ran, key=ran.__getitem__)
    ch.expect(order == ["at once", "at now + 0.5 s", "after 1.5 s"], f"run order {order}")
    ch.expect(min(lateness) >= 0, f"no job ran before its due time (lateness {lateness})")


async def retries(ch: Chapter) -> None:
    """A flaky job retries with backoff until it succeeds; a poison job goes
    dead; fixed, the dead job is run again from the dead letters."""
    app = App(MemoryStore())
    dead: list[Job] = []
    fixed = False

    @_task(app, "payment.capture", max_retries=4)
    async def capture(order: str, job: JobContext) -> None:
        if job.attempt < 3:
            ch.say(f"capture {order}: attempt {job.attempt} fails (gateway timeout)")
            raise ConnectionError("gateway timeout")
        ch.say(f"capture {order}: attempt {job.attempt} succeeds")

    @_task(app, "image.resize", max_retries=1)
    async def resize(path: str, job: JobContext) -> None:
        if not fixed:
            raise SkipRetry(f"{path}: codec missing")  # no point retrying
        ch.say(f"resize {path}: the codec is installed now, attempt {job.attempt} succeeds")

    @app.on_dead_letter
    async def remember(job: Job) -> None:
        dead.append(job)
        ch.say(f"dead letter: {job.kind} {job.id[:8]}: {job.last_error.splitlines()[0]}")

    policy = RetryPolicy(base=0.2, max_delay=1.0)
    async with app.open_worker(retry=policy, **FAST) as worker:
        await capture.enqueue("order-1")
        poison = await resize.enqueue("cat.heic")
        await worker.wait_idle()
        ch.expect(worker.statistics().succeeded == 1, "the flaky payment succeeded")
        ch.expect([j.id for j in dead] == [poison.job_id], "one dead letter: the poison job")
        fixed = True
        ch.expect(await app.store.run_now(poison.job_id), "run_now takes the dead job")
        ch.say("run_now: the dead job is ready again")
        await worker.wait_idle()
        ch.expect(worker.statistics().succeeded == 2, "the re-run job succeeded")


@attrs.frozen
class Resize:
    url: str
    width: int


async def results(ch: Chapter) -> None:
    """A handler's typed result comes back through its handle."""
    app = App(MemoryStore())

    @_task(app, "thumb")
    async def thumb(args: Resize, job: JobContext) -> str:
        await trio.sleep(0.1)
        return f"{args.url}?w={args.width}"

    async with app.open_worker(**FAST):
        handle = await thumb.enqueue(Resize("https://img/cat.png", 64))
        ch.say(f"enqueued {handle.job_id[:8]}; awaiting its result")
        got = await handle.result(timeout=10)
        ch.say(f"result: {got!r}")
    ch.expect(got == "https://img/cat.png?w=64", f"result {got!r}")


async def unique(ch: Chapter) -> None:
    """At most one pending job per unique key: a second enqueue finds the first."""
    app = App(MemoryStore())
    runs: list[int] = []

    @_task(app, "reindex", unique=True)
    async def reindex(account: int, job: JobContext) -> None:
        runs.append(account)
        ch.say(f"reindexing account {account}")

    first = await reindex.enqueue(7, delay=0.5)
    second = await reindex.enqueue(7)
    ch.say(
        f"second enqueue stored a job: {second.created}; same job: {second.job_id == first.job_id}"
    )
    ch.expect(not second.created and second.job_id == first.job_id, "the duplicate is refused")
    async with app.open_worker(**FAST) as worker:
        await worker.wait_idle()
    ch.expect(runs == [7], f"one run, got {runs}")


async def priorities(ch: Chapter) -> None:
    """Within a queue, higher priority leases first."""
    app = App(MemoryStore())
    order: list[str] = []

    @_task(app, "report")
    async def report(name: str, job: JobContext) -> None:
        order.append(name)
        ch.say(f"report {name} (priority {job.job.priority})")

    await report.enqueue("weekly", priority=-5)
    await report.enqueue("daily")
    await report.enqueue("urgent", priority=9)
    ch.say("enqueued weekly (-5), daily (0), urgent (9) before any worker runs")
    async with app.open_worker(concurrency=1, batch_size=1, **FAST) as worker:
        await worker.wait_idle()
    ch.expect(order == ["urgent", "daily", "weekly"], f"order {order}")


async def limits(ch: Chapter) -> None:
    """A fleet-wide rate limit spaces a kind's starts; a concurrency limit
    caps how many run at once, whatever the worker's concurrency."""
    app = App(MemoryStore())
    started: list[float] = []
    running = 0
    peak = 0

    @_task(app, "geo.lookup", rate_limit=RateLimit(4, per=1.0, burst=1))
    async def lookup(n: int, job: JobContext) -> None:
        started.append(trio.current_time())
        ch.say(f"lookup {n} starts")

    @_task(app, "video.encode", concurrency_limit=ConcurrencyLimit(2))
    async def encode(n: int, job: JobContext) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await trio.sleep(0.3)
        running -= 1

    async with app.open_worker(concurrency=16, **FAST) as worker:
        await lookup.enqueue_many(list(range(5)))
        await encode.enqueue_many(list(range(6)))
        ch.say("enqueued 5 lookups (4/s) and 6 encodes (2 at a time) for 16 slots")
        await worker.wait_idle()
    gaps = [b - a for a, b in itertools.pairwise(started)]
    ch.say(f"lookups started {min(gaps, default=0):.2f}s apart at least; encodes peaked at {peak}")
    ch.expect(len(started) == 5 and min(gaps) >= 0.2, f"lookup gaps {gaps}")
    ch.expect(peak == 2, f"at most 2 encodes at once, saw {peak}")


async def abort(ch: Chapter) -> None:
    """Abort a waiting job (it never runs) and a running one (its handler is
    cancelled; its result raises JobAborted)."""
    app = App(MemoryStore())

    @_task(app, "export", timeout=60)
    async def export(account: int, job: JobContext) -> None:
        try:
            await trio.sleep(30)
        except trio.Cancelled:
            if job.abort_requested:
                ch.say(f"export {account}: aborted while running, cleaning up")
            raise

    async with app.open_worker(**FAST) as worker:
        waiting = await export.enqueue(1, delay=600)
        ch.say(f"abort the waiting export: {(await waiting.abort(reason='cancelled')).name}")
        running = await export.enqueue(2)
        await trio.sleep(0.3)
        ch.say(f"abort the running export: {(await running.abort()).name}")
        try:
            await running.result(timeout=5)
            ch.expect(False, "the running export was aborted")
        except JobAborted:
            ch.say("its result raises JobAborted")
        await worker.wait_idle()
        state = (await waiting.status()).state
        ch.expect(state is JobState.ABORTED, f"the waiting export ended {state}")


async def progress(ch: Chapter) -> None:
    """A handler reports progress and log lines; any process reads them."""
    app = App(MemoryStore())
    step = trio.Event()

    @_task(app, "import")  # returns a result, so its record (and notes) stay readable
    async def import_rows(rows: int, job: JobContext) -> int:
        for done in range(1, 5):
            await trio.sleep(0.25)
            await job.progress(done / 4, f"{done * rows // 4} of {rows} rows")
            if done == 2:
                job.log("half way: no bad rows so far")
                step.set()
        return rows

    async with app.open_worker(notes_interval=0.1, **FAST) as worker:
        handle = await import_rows.enqueue(1000)
        await step.wait()
        await trio.sleep(0.2)  # the worker writes notes every notes_interval
        mid = await handle.progress()
        ch.say(f"while it runs: {_shown(mid)}")
        ch.expect(mid is not None and 0 < mid.fraction < 1, f"a partial progress, got {mid}")
        await worker.wait_idle()
        end = await handle.progress()
        notes = await handle.notes()
        ch.say(f"when done: {_shown(end)}; its log: {[line.text for line in notes.lines]}")
        ch.expect(end is not None and end.fraction == 1.0, f"final progress {end}")


async def workflows(ch: Chapter) -> None:
    """A chain whose middle step is a group: each step once, in order, each
    handed its predecessor's result (a group's as a list in member order)."""
    app = App(MemoryStore())

    @_task(app, "order.price")
    async def price(cents: int, job: JobContext) -> int:
        ch.say(f"price: {cents}")
        return cents

    @_task(app, "order.tax")
    async def tax(cents: int, job: JobContext) -> int:
        ch.say(f"tax on {cents}: {cents // 5}")
        return cents // 5

    @_task(app, "order.shipping")
    async def shipping(cents: int, job: JobContext) -> int:
        await trio.sleep(0.1)
        ch.say(f"shipping for {cents}: 499")
        return 499

    @_task(app, "order.total")
    async def total(parts: list[int], job: JobContext) -> int:
        ch.say(f"total of {parts}: {sum(parts)}")
        return sum(parts)

    flow = chain(price.s(2500), group(tax.s(), shipping.s()), total.s())
    async with app.open_worker(**FAST):
        started = await app.enqueue_workflow(flow, workflow_id="order-7")
        ch.say("started workflow order-7: price -> (tax + shipping) -> total")
        got = await started.result(timeout=10)
        ch.say(f"its result: {got}")
    ch.expect(got == 2500 // 5 + 499, f"total {got}")


async def graphs(ch: Chapter) -> None:
    """A graph: two steps after one, a step after both (a join), each once,
    the join handed both results in its ``after`` order."""
    app = App(MemoryStore())
    ran: list[str] = []

    @_task(app, "photo.fetch")
    async def fetch(url: str, job: JobContext) -> str:
        ran.append("fetch")
        ch.say(f"fetch {url}")
        return url

    @_task(app, "photo.resize")
    async def resize(url: str, job: JobContext) -> str:
        await trio.sleep(0.2)  # finishes after the thumbnail: the join waits
        ran.append("resize")
        ch.say("resize done")
        return f"{url}@1024"

    @_task(app, "photo.thumb")
    async def thumb(url: str, job: JobContext) -> str:
        ran.append("thumb")
        ch.say("thumb done")
        return f"{url}@64"

    @_task(app, "photo.publish")
    async def publish(parts: list[str], job: JobContext) -> str:
        ran.append("publish")
        ch.say(f"publish {parts}")
        return " + ".join(parts)

    g = graph()
    g.add("fetch", fetch.s("cat.png"))
    g.add("resize", resize.s(), after="fetch")
    g.add("thumb", thumb.s(), after="fetch")
    g.add("publish", publish.s(), after=["resize", "thumb"])
    async with app.open_worker(**FAST):
        started = await app.enqueue_workflow(g, workflow_id="photo-1")
        ch.say("started graph photo-1: fetch -> (resize, thumb) -> publish after both")
        got = await started.result(timeout=10)
    ch.expect(sorted(ran) == ["fetch", "publish", "resize", "thumb"], f"each step once: {ran}")
    ch.expect(got == "cat.png@1024 + cat.png@64", f"publish got its inputs in order: {got!r}")


async def failures(ch: Chapter) -> None:
    """A step that fails for good calls its flow's ``on_failure`` callback
    once, with the failure; nothing behind the failed step runs."""
    app = App(MemoryStore())
    told: list[StepFailure] = []
    ran: list[str] = []

    @_task(app, "order.charge", max_retries=1)
    async def charge(cents: int, job: JobContext) -> int:
        ch.say(f"charge {cents}: attempt {job.attempt} declined")
        raise ConnectionError("card declined")

    @_task(app, "order.ship")
    async def ship(cents: int, job: JobContext) -> None:
        ran.append("ship")

    @_task(app, "order.refund")
    async def refund(failure: StepFailure, job: JobContext) -> None:
        told.append(failure)
        ch.say(f"on_failure: {failure.kind} ({failure.job_id}) failed after "
               f"{failure.attempts} attempts: {failure.error.splitlines()[0]}")  # fmt: skip

    flow = chain(charge.s(1999), ship.s(), on_failure=refund.s())
    async with app.open_worker(retry=RetryPolicy(base=0.2, max_delay=1.0), **FAST) as worker:
        await app.enqueue_workflow(flow, workflow_id="order-8")
        ch.say("started order-8: charge -> ship, on_failure=refund")
        await worker.wait_idle()
    ch.expect(len(told) == 1 and told[0].job_id == "order-8.0", f"one callback: {told}")
    ch.expect(not ran, "nothing behind the failed step ran")


async def cancel(ch: Chapter) -> None:
    """Cancel a whole workflow: its running step is aborted, and the steps
    behind it are never made."""
    app = App(MemoryStore())
    started_slow = trio.Event()
    ran: list[str] = []

    @_task(app, "etl.extract")
    async def extract(n: int, job: JobContext) -> int:
        ran.append("extract")
        return n

    @_task(app, "etl.transform", timeout=60)
    async def transform(n: int, job: JobContext) -> int:
        ran.append("transform")
        started_slow.set()
        try:
            await trio.sleep(30)
        except trio.Cancelled:
            if job.abort_requested:
                ch.say("transform: aborted while running")
            raise
        return n

    @_task(app, "etl.load")
    async def load(n: int, job: JobContext) -> None:
        ran.append("load")

    flow = chain(extract.s(3), transform.s(), load.s())
    async with app.open_worker(**FAST) as worker:
        await app.enqueue_workflow(flow, workflow_id="etl-1")
        await started_slow.wait()
        ch.say("workflow etl-1 is in its transform step: cancel the whole flow")
        done = await app.workflow("etl-1").abort(reason="bad input file")
        ch.say(
            f"abort: {len(done.aborted_running)} running step aborted, "
            f"{len(done.not_created)} step never to be made, {len(done.finished)} finished"
        )
        await worker.wait_idle()
        view = await app.workflow("etl-1").status()
        ch.say(f"the workflow is now {view.state}")
    ch.expect("load" not in ran, f"the step behind the cancel never ran: {ran}")
    ch.expect(len(done.aborted_running) == 1 and len(done.not_created) == 1, f"{done}")
    ch.expect(str(view.state).endswith("cancelled"), f"state {view.state}")


def _shown(p: JobProgress | None) -> str:
    return "no progress yet" if p is None else f"{p.fraction:.0%} {p.message!r}"


async def schedules(ch: Chapter) -> None:
    """An every-second schedule on two workers: only the leader fires its
    triggers (any worker runs them); when the leader stops, the other takes
    over, no trigger fires twice and none is missed."""
    store = MemoryStore()
    fired: dict[float, list[str]] = {}

    def make(worker_id: str) -> Worker:
        app = App(store)

        @_task(app, "tick")
        async def tick(n: int, job: JobContext) -> None:
            at = job.job.run_at
            fired.setdefault(at, []).append(job.id)
            clock = time.strftime("%H:%M:%S", time.gmtime(at))
            ch.say(f"trigger {clock} UTC ran on {worker_id}")

        app.every(1, 0, task=tick, schedule_id="tick", misfire="fire_once")
        return Worker(app, WorkerConfig.build(worker_id=worker_id, leader_ttl=3.0, **FAST))

    name = leadership_name("chronos")
    first, second = make("w1"), make("w2")
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        await trio.sleep(0.5)
        await nursery.start(second.run)
        await trio.sleep(2.6)
        lead = await store.current_leader(name)
        ch.say(f"leader: {lead.holder if lead else None} (epoch {lead.epoch if lead else '-'})")
        holder = first if lead is not None and lead.holder == "w1" else second
        other = second if holder is first else first
        ch.say(f"stopping the leader {holder.id}: it resigns, {other.id} takes over")
        holder.stop()
        await holder.wait_stopped()
        stopped_at = await store.now()
        await trio.sleep(3.2)
        lead = await store.current_leader(name)
        ch.say(f"leader: {lead.holder if lead else None} (epoch {lead.epoch if lead else '-'})")
        ch.expect(lead is not None and lead.holder == other.id, f"{other.id} leads")
        other.stop()
    times = sorted(fired)
    twice = {t: ids for t, ids in fired.items() if len(ids) > 1}
    ch.expect(not twice, f"no trigger ran twice: {twice}")
    gaps = {round(b - a, 3) for a, b in itertools.pairwise(times)}
    ch.expect(gaps == {1.0}, f"one trigger a second, none missed (gaps {gaps})")
    ch.expect(any(t > stopped_at for t in times), "the new leader fired triggers")
    ch.say(f"{len(times)} triggers, one a second, each ran once across the hand-over")


CHAPTERS: tuple[tuple[str, Callable[[Chapter], Awaitable[None]]], ...] = (
    ("Delays: jobs run at their due time", delays),
    ("Retries with backoff, dead letters, and a re-run", retries),
    ("Results through a handle", results),
    ("Unique jobs", unique),
    ("Priorities", priorities),
    ("Rate and concurrency limits", limits),
    ("Abort", abort),
    ("Progress and log lines", progress),
    ("Schedules with a leader hand-over", schedules),
    ("Workflows: a chain with a group", workflows),
    ("Workflow graphs: a join after two steps", graphs),
    ("Workflow failures: an on_failure callback", failures),
    ("Cancel a whole workflow", cancel),
)


async def run_tour(*, out: TextIO = sys.stdout, only: str | None = None) -> int:
    """Run every chapter (or those whose title contains ``only``, case
    blind); returns a process exit code: 0 when every chapter saw what it
    promises, 1 otherwise (each broken promise printed as UNEXPECTED).
    ValueError when ``only`` matches no chapter."""
    chosen = [(t, f) for t, f in CHAPTERS if only is None or only.lower() in t.lower()]
    if not chosen:
        titles = "; ".join(t for t, _ in CHAPTERS)
        raise ValueError(f"no chapter of the tour matches {only!r} (chapters: {titles})")
    broken: list[str] = []
    began = trio.current_time()
    for number, (title, chapter) in enumerate(chosen, 1):
        print(f"\n== {number}. {title}", file=out, flush=True)
        ch = Chapter(title, out)
        with trio.fail_after(120):
            await chapter(ch)
        broken.extend(f"{title}: {p}" for p in ch.problems)
        print(f"  -> {'ok' if not ch.problems else 'UNEXPECTED'}", file=out, flush=True)
    took = trio.current_time() - began
    print(
        f"\ntour: {len(chosen)} chapters in {took:.1f}s, "
        + ("every promise kept" if not broken else f"{len(broken)} UNEXPECTED"),
        file=out,
    )
    return 0 if not broken else 1
