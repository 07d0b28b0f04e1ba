"""What a chain link costs the worker's process where callgrind does not
look (issue 29): the kernel's share, the system calls, the scheduler's
rounds, the store calls' batches, and the server's commands, per link of
``benchmarks.workflows``' chains-apart workload (10-link chains from a
producer process of its own, one embedded worker, c=64, a private
redis-server) against a plain job of its plain drain.

Per row, on one redis-server, measured over the worker's run alone (the
plain drain's enqueue before it; the producer in its own process):

* the worker's process: wall time, user and system CPU (``getrusage``),
  context switches, and its system calls (``perf stat`` of its tracepoints,
  attached to this process: ``sendto``, ``recvfrom``, ``epoll_wait``...);
* each process (worker, server, producer): the time it ran on a CPU and
  the time it waited on a run queue for one (``/proc/PID/schedstat``): on
  2 cores three busy processes wait for each other;
* the server: ``INFO commandstats`` (calls and usec per command) and its
  CPU (``INFO cpu``);
* with ``--spy``: the store calls' batch sizes (``lease``, ``wait_lease``,
  ``settle``), Trio's rounds (a ``trio.abc.Instrument``: task steps, waits
  for I/O, and the waits that slept: the worker idle), and per round the
  chains-apart run in two phases (while the producer starts chains, then
  the rest): settles, their time in flight, and the worker's idle time
  with a settle or a lease in flight. The spy costs CPU of its own (and
  turns the lone round trips' quiet wait off), so its rows' times are not
  the others';
* with ``--perf DIR``: a ``perf record -g`` of the worker's process per
  row (``DIR/plain.data``, ``DIR/apart.data``; ``perf report --sort dso``
  gives the kernel's share).

::

    python -m benchmarks.chain_wall [--rounds 2] [--jobs 10000] [--chains 500] [--spy]
        [--perf DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import trio

from chronos_trio.store.redis import RedisStore

from . import workflows
from ._proc import REPO
from ._redis import BenchRedis, open_redis

#: (kind, sent, returned, CPU at send, CPU at return, batch) of every spied call
timeline: list[tuple[str, float, float, float, float, int]] = []

#: The system calls counted (``perf stat`` tracepoints; ``raw_syscalls``: all).
SYSCALLS = (
    "raw_syscalls:sys_enter",
    "syscalls:sys_enter_sendto",
    "syscalls:sys_enter_recvfrom",
    "syscalls:sys_enter_read",
    "syscalls:sys_enter_write",
    "syscalls:sys_enter_epoll_wait",
    "syscalls:sys_enter_epoll_ctl",
)


#: ``--perf DIR``: a ``perf record`` of the worker's process per row, there
PERF_DIR = ""


@contextlib.contextmanager
def perf_record(pid: int, name: str) -> Iterator[None]:
    """While open (and ``PERF_DIR`` set), ``perf record`` samples ``pid``
    at 1999 Hz into ``PERF_DIR/name.data``."""
    if not PERF_DIR:
        yield
        return
    out = os.path.join(PERF_DIR, f"{name}.data")
    argv = ["perf", "record", "-q", "-F", "1999", "-g", "-o", out, "-p", str(pid)]
    proc = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)


@contextlib.contextmanager
def syscall_counts(pid: int, out: dict[str, float]) -> Iterator[None]:
    """While open, ``perf stat`` counts ``pid``'s system calls (every
    thread); on close ``out`` gets them by short name (empty when perf
    cannot attach)."""
    argv = ["perf", "stat", "-x", ",", "-e", ",".join(SYSCALLS), "-p", str(pid)]
    try:
        proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    except OSError:
        yield
        return
    time.sleep(0.3)  # attached before the run starts
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        for line in err.splitlines():
            f = line.split(",")
            if len(f) > 2 and f[0].strip().isdigit():
                name = f[2].rsplit("_", 1)[-1] if "sys_enter_" in f[2] else "all"
                out[name] = float(f[0])


class Rounds(trio.abc.Instrument):
    """Counts Trio's task steps and its waits for I/O (each a pass of the
    run loop that found nothing runnable, or polled between rounds)."""

    def __init__(self) -> None:
        self.steps = 0
        self.io_waits = 0
        self.blocking = 0  # waits that could sleep (a timeout above zero)
        self.idle: list[tuple[float, float]] = []  # waits that slept: (from, to)
        self._t = 0.0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1

    def before_io_wait(self, timeout: float) -> None:
        self.io_waits += 1
        self._t = time.perf_counter()
        if timeout > 0:
            self.blocking += 1

    def after_io_wait(self, timeout: float) -> None:
        t = time.perf_counter()
        if t - self._t > 20e-6:  # slept (a poll that found events at once takes less)
            self.idle.append((self._t, t))


@contextlib.contextmanager
def spied(sizes: dict[str, list[int]]) -> Iterator[None]:
    """While open, ``RedisStore``'s lease, wait_lease and settle record
    each call's batch (jobs leased, settlements sent, successors handed
    over) in ``sizes``."""
    cls = RedisStore
    orig = {name: getattr(cls, name) for name in ("lease", "wait_lease", "settle")}

    async def lease(self: Any, *a: Any, **kw: Any) -> Any:
        t0, c0 = time.perf_counter(), time.process_time()
        got = await orig["lease"](self, *a, **kw)
        sizes["lease"].append(len(got.jobs))
        timeline.append(("lease", t0, time.perf_counter(), c0, time.process_time(), len(got.jobs)))
        return got

    async def wait_lease(self: Any, *a: Any, **kw: Any) -> Any:
        t0, c0 = time.perf_counter(), time.process_time()
        got = await orig["wait_lease"](self, *a, **kw)
        n = -1 if got is None else len(got.jobs)
        sizes["wait_lease"].append(n)
        timeline.append(("wait_lease", t0, time.perf_counter(), c0, time.process_time(), n))
        return got

    async def settle(self: Any, settlements: Any) -> Any:
        t0, c0 = time.perf_counter(), time.process_time()
        got = await orig["settle"](self, settlements)
        sizes["settle"].append(len(settlements))
        sizes["handed"].append(len(got.leased))
        timeline.append(
            ("settle", t0, time.perf_counter(), c0, time.process_time(), len(settlements))
        )
        return got

    for name, fn in (("lease", lease), ("wait_lease", wait_lease), ("settle", settle)):
        setattr(cls, name, fn)
    try:
        yield
    finally:
        for name, fn in orig.items():
            setattr(cls, name, fn)


def schedstat(pid: int | str) -> tuple[float, float]:
    """Seconds ``pid`` ran on a CPU and waited on a run queue for one
    (``/proc/PID/schedstat``, every thread; zeros where it is missing)."""
    total = [0.0, 0.0]
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError):
                f = open(f"/proc/{pid}/task/{tid}/schedstat").read().split()
                total[0] += int(f[0]) / 1e9
                total[1] += int(f[1]) / 1e9
    return total[0], total[1]


class Meter:
    """The worker process's and the server's costs over one run."""

    def __init__(self, redis: BenchRedis) -> None:
        self.redis = redis
        self.sys: dict[str, float] = {}
        self.out: dict[str, Any] = {}
        self.producer = 0  # its pid, once there is one
        self.sched: dict[str, tuple[float, float]] = {}

    def _sched(self) -> dict[str, tuple[float, float]]:
        pids = {"worker": os.getpid(), "server": self.server}
        if self.producer:
            pids["producer"] = self.producer
        return {k: schedstat(v) for k, v in pids.items()}

    name = "run"

    @contextlib.contextmanager
    def run(self) -> Iterator[None]:
        info = self.redis.client.info("cpu")
        self.server = int(self.redis.client.info("server")["process_id"])
        s0 = float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
        self.redis.reset_stats()
        with syscall_counts(os.getpid(), self.sys), perf_record(os.getpid(), self.name):
            r0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            q0 = self._sched()
            yield
            q1 = self._sched()
            r1, w1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        self.sched = {k: (q1[k][0] - q0[k][0], q1[k][1] - q0[k][1]) for k in q0 if k in q1}
        info = self.redis.client.info("cpu")
        s1 = float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
        stats = self.redis.client.info("commandstats")
        self.out = {
            "wall": w1 - w0,
            "utime": r1.ru_utime - r0.ru_utime,
            "stime": r1.ru_stime - r0.ru_stime,
            "nvcsw": r1.ru_nvcsw - r0.ru_nvcsw,
            "nivcsw": r1.ru_nivcsw - r0.ru_nivcsw,
            "server_cpu": s1 - s0,
            "commands": {
                k.removeprefix("cmdstat_"): (int(v["calls"]), float(v["usec"]))
                for k, v in stats.items()
            },
            "syscalls": dict(self.sys),
            "sched": self.sched,
        }


@contextlib.contextmanager
def _measured(meter: Meter, rounds: Rounds | None) -> Iterator[None]:
    """``meter`` running, and ``rounds`` (if any) instrumenting Trio, meanwhile."""
    with meter.run():
        if rounds is not None:
            trio.lowlevel.add_instrument(rounds)
        try:
            yield
        finally:
            if rounds is not None:
                trio.lowlevel.remove_instrument(rounds)


async def _plain(url: str, n: int, meter: Meter, rounds: Rounds | None) -> None:
    await workflows.plain(url, n, around=_measured(meter, rounds))


async def _apart(url: str, c: int, meter: Meter, rounds: Rounds | None) -> dict[str, Any]:
    app = workflows._app(url, {})
    argv = [sys.executable, "-m", "benchmarks.chain_wall", "--produce", str(c), "--url", url]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    async with app.open_worker(concurrency=64, poll_interval=0.05):
        # the producer's imports and start-up before the meter: it signals
        # when its warm-up chain is done, waits for a line, then runs
        proc = await trio.lowlevel.open_process(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=str(REPO), env=env
        )
        assert proc.stdout is not None and proc.stdin is not None
        buf = b""
        while b"\n" not in buf:
            buf += await proc.stdout.receive_some()
        meter.producer = proc.pid
        with _measured(meter, rounds):
            await proc.stdin.send_all(b"go\n")
            while buf.count(b"\n") < 2:
                buf += await proc.stdout.receive_some()
        await proc.wait()
    await app.store.aclose()
    out: dict[str, Any] = json.loads(buf.decode().splitlines()[1])
    return out


async def _produce(url: str, c: int) -> None:
    app = workflows._app(url, {})
    link = app.tasks["link"]
    flow = workflows.chain(link.s(0), *(link.s() for _ in range(workflows.LINKS - 1)))
    assert await (await app.enqueue_workflow(flow)).result(timeout=300) == workflows.LINKS
    print("ready", flush=True)
    sys.stdin.readline()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    p0, t0 = time.process_time(), time.perf_counter()
    started = [await app.enqueue_workflow(flow) for _ in range(c)]
    t_started = time.perf_counter()
    for wf in started:
        assert await wf.result(timeout=300) == workflows.LINKS
    took = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({
        "user": r1.ru_utime - r0.ru_utime, "sys": r1.ru_stime - r0.ru_stime,
        "links_per_s": c * workflows.LINKS / took, "took": took,
        "starts": t_started - t0, "cpu": time.process_time() - p0,
        "t0": t0, "t_started": t_started,
    }), flush=True)  # fmt: skip
    await app.store.aclose()


def _per(m: dict[str, Any], n: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    us = 1e6
    cmds = m["commands"]
    row: dict[str, Any] = {
        "wall_us": m["wall"] / n * us,
        "user_us": m["utime"] / n * us,
        "sys_us": m["stime"] / n * us,
        "busy": (m["utime"] + m["stime"]) / m["wall"],
        "csw": (m["nvcsw"] + m["nivcsw"]) / n,
        "server_us": m["server_cpu"] / n * us,
        "commands": sum(c for c, _ in cmds.values()) / n,
        "command_us": sum(u for _, u in cmds.values()) / n,
        "by_command": {k: round(c / n, 3) for k, (c, _) in sorted(cmds.items())},
        "syscalls": {k: round(v / n, 3) for k, v in m["syscalls"].items()},
        "ran_us": {k: v[0] / n * us for k, v in m["sched"].items()},
        "queued_us": {k: v[1] / n * us for k, v in m["sched"].items()},
    }
    if extra:
        row.update(extra)
    return row


def _spy_figures(sizes: dict[str, list[int]], rounds: Rounds, n: int) -> dict[str, Any]:
    def mean(xs: list[int]) -> float:
        xs = [x for x in xs if x >= 0]
        return statistics.fmean(xs) if xs else 0.0

    return {
        "calls": {k: round(len(v) / n, 4) for k, v in sizes.items() if k != "handed"},
        "batch": {k: round(mean(v), 1) for k, v in sizes.items()},
        "task_steps": rounds.steps / n,
        "io_waits": rounds.io_waits / n,
        "io_waits_blocking": rounds.blocking / n,
    }


@contextlib.contextmanager
def one_settle_at_a_time() -> Iterator[None]:
    """While open, this process's completer keeps one settle in flight and
    never splits a batch (what it did before settles went two at a time):
    ``--ab``'s other half."""
    from chronos_trio.actors import completer

    was = completer.SETTLES_IN_FLIGHT, completer.HALF_AT_LEAST
    completer.SETTLES_IN_FLIGHT, completer.HALF_AT_LEAST = 1, 1 << 30
    try:
        yield
    finally:
        completer.SETTLES_IN_FLIGHT, completer.HALF_AT_LEAST = was


def _round(redis: BenchRedis, args: argparse.Namespace) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for name in ("plain", "apart"):
        workflows.flushall(redis)
        meter = Meter(redis)
        meter.name = name
        sizes: dict[str, list[int]] = collections.defaultdict(list)
        rounds = Rounds() if args.spy else None
        timeline.clear()
        with spied(sizes) if args.spy else contextlib.nullcontext():
            if name == "plain":
                trio.run(_plain, redis.url, args.jobs, meter, rounds)
                n, extra = args.jobs, None
            else:
                extra = trio.run(_apart, redis.url, args.chains, meter, rounds)
                n = args.chains * workflows.LINKS
        row[name] = _per(meter.out, n, extra)
        if rounds is not None:
            row[name]["spy"] = _spy_figures(sizes, rounds, n)
            row[name]["timeline"] = list(timeline)
            row[name]["idle"] = rounds.idle
    row["ratio"] = row["apart"]["links_per_s"] / (1e6 / row["plain"]["wall_us"])
    return row


def report(rows: list[dict[str, Any]]) -> str:
    def med(name: str, key: str) -> float:
        return statistics.median(float(r[name][key]) for r in rows)

    def medd(name: str, key: str, sub: str) -> float:
        return statistics.median(float(r[name][key].get(sub, 0.0)) for r in rows)

    lines = ["| per plain job / per chain link (median of rounds) | plain | link | link/job |",
             "|---|---:|---:|---:|"]  # fmt: skip
    figs = [("wall_us", "worker run, wall us"), ("user_us", "worker user CPU us"),
            ("sys_us", "worker system CPU us"), ("busy", "worker busy (CPU/wall)"),
            ("csw", "context switches"), ("server_us", "server CPU us"),
            ("commands", "Redis commands"), ("command_us", "Redis command usec")]  # fmt: skip
    for key, label in figs:
        a, b = med("plain", key), med("apart", key)
        lines.append(f"| {label} | {a:.3f} | {b:.3f} | {b / a if a else 0:.2f} |")
    for sc in ("all", *(s.rsplit("_", 1)[-1] for s in SYSCALLS[1:])):
        a, b = medd("plain", "syscalls", sc), medd("apart", "syscalls", sc)
        lines.append(f"| syscalls: {sc} | {a:.3f} | {b:.3f} | {b / a if a else 0:.2f} |")
    for key in ("ran_us", "queued_us"):
        for who in ("worker", "server", "producer"):
            a, b = medd("plain", key, who), medd("apart", key, who)
            lines.append(f"| {key}: {who} | {a:.1f} | {b:.1f} | {b / a if a else 0:.2f} |")
    if "spy" in rows[0]["plain"]:
        for group in ("calls", "batch"):
            keys = sorted({k for r in rows for n in ("plain", "apart") for k in r[n]["spy"][group]})
            for k in keys:
                a = statistics.median(r["plain"]["spy"][group].get(k, 0.0) for r in rows)
                b = statistics.median(r["apart"]["spy"][group].get(k, 0.0) for r in rows)
                lines.append(f"| {group}: {k} | {a} | {b} | |")
        for k in ("task_steps", "io_waits", "io_waits_blocking"):
            a = statistics.median(r["plain"]["spy"][k] for r in rows)
            b = statistics.median(r["apart"]["spy"][k] for r in rows)
            lines.append(f"| trio: {k} | {a:.3f} | {b:.3f} | {b / a if a else 0:.2f} |")
    ratios = ", ".join(f"{r['ratio']:.2f}x" for r in rows)
    starts = ", ".join(f"{r['apart']['starts']:.3f}/{r['apart']['took']:.3f}" for r in rows)
    lines.append(f"chains apart over the plain drain (links/s / jobs/s, by round): {ratios}")
    lines.append(f"producer: its starts' time / the whole run, s: {starts}")
    top = collections.Counter(rows[0]["apart"]["by_command"]).most_common(8)
    lines.append(f"commands per link (round 1): {top}")
    top = collections.Counter(rows[0]["plain"]["by_command"]).most_common(8)
    lines.append(f"commands per job (round 1): {top}")
    return "\n".join(lines)


def ab_report(rows: list[dict[str, Any]]) -> str:
    """``--ab``: per mode, the median of its rounds (ratio, wall and CPU
    per link), and the paired ratios (two over one, round by round)."""
    lines = ["| settles in flight | chains apart / plain drain | worker wall us a link | "
             "worker busy | worker idle us a link | CPU us a link: worker / server / producer |",
             "|---|---:|---:|---:|---:|---|"]  # fmt: skip
    for mode in ("one", "two"):
        mine = [r for r in rows if r["mode"] == mode]

        def med(f: Any, mine: list[dict[str, Any]] = mine) -> float:
            return statistics.median(f(r) for r in mine)

        ratios = ", ".join(f"{r['ratio']:.2f}" for r in mine)
        idle = med(lambda r: r["apart"]["wall_us"] * (1 - r["apart"]["busy"]))
        cpu = " / ".join(
            f"{med(lambda r, w=w: r['apart']['ran_us'].get(w, 0.0)):.1f}"
            for w in ("worker", "server", "producer")
        )
        lines.append(
            f"| {mode} | {med(lambda r: r['ratio']):.2f}x ({ratios}) | "
            f"{med(lambda r: r['apart']['wall_us']):.1f} | {med(lambda r: r['apart']['busy']):.2f}"
            f" | {idle:.1f} | {cpu} |"
        )
    pairs = [(rows[i], rows[i + 1]) for i in range(0, len(rows) - 1, 2)]
    gains = [
        (b if b["mode"] == "two" else a)["ratio"] / (a if a["mode"] == "one" else b)["ratio"]
        for a, b in pairs
    ]
    above = sum(g > 1 for g in gains)
    lines.append(
        f"two over one, same round: {', '.join(f'{g:.2f}' for g in gains)} "
        f"(median {statistics.median(gains):.2f}; {above} of {len(gains)} above 1)"
    )
    return "\n".join(lines)


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """``spans`` merged where they overlap (two settles in flight at once
    count once)."""
    merged: list[tuple[float, float]] = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def _overlap(span: tuple[float, float], spans: list[tuple[float, float]]) -> float:
    total = 0.0
    for lo, hi in spans:
        total += max(0.0, min(span[1], hi) - max(span[0], lo))
    return total


def phases(rows: list[dict[str, Any]]) -> str:
    """With ``--spy``, per round: the chains-apart run in its two phases
    (while the producer still starts chains; then the chains left), the
    settles in each (calls, links a call, median time in flight), and the
    worker's idle time (Trio waiting for I/O), with a settle or a lease in
    flight meanwhile."""
    lines = []
    for k, row in enumerate(rows):
        a = row["apart"]
        t0, started, end = a["t0"], a["t_started"], a["t0"] + a["took"]
        settles = [(e[1], e[2], e[5]) for e in a["timeline"] if e[0] == "settle"]
        in_flight = _union([(s[0], s[1]) for s in settles])
        leases = _union([(e[1], e[2]) for e in a["timeline"] if e[0] != "settle"])
        for name, lo, hi in (("starting", t0, started), ("the rest", started, end)):
            mine = [s for s in settles if lo <= s[0] < hi]
            links = sum(s[2] for s in mine)
            rtt = statistics.median(s[1] - s[0] for s in mine) * 1e3 if mine else 0.0
            idle = [(max(x, lo), min(y, hi)) for x, y in a["idle"] if y > lo and x < hi]
            total = sum(y - x for x, y in idle)
            by_settle = sum(_overlap(i, in_flight) for i in idle)
            by_lease = sum(_overlap(i, leases) for i in idle)
            lines.append(
                f"round {k + 1}, {name}: {hi - lo:.3f} s, {len(mine)} settles of "
                f"{links / max(1, len(mine)):.1f} links (median {rtt:.2f} ms in flight); "
                f"worker idle {total:.3f} s ({total / (hi - lo):.0%}), with a settle in flight "
                f"{by_settle:.3f} s, a lease {by_lease:.3f} s"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--chains", type=int, default=500)
    parser.add_argument("--spy", action="store_true", help="batch sizes and Trio's rounds")
    parser.add_argument("--json", help="write every round's figures here")
    parser.add_argument("--ab", action="store_true", help="each round twice: the completer's "
                        "settles one at a time, then two (or the other way round)")  # fmt: skip
    parser.add_argument("--perf", default="", help="perf record the worker per row into DIR")
    parser.add_argument("--produce", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.produce is not None:
        trio.run(_produce, args.url, args.produce)
        return
    global PERF_DIR
    PERF_DIR = args.perf
    rows = []
    with open_redis() as redis:
        workflows.flushall(redis)
        trio.run(workflows.chains, redis.url, 20)  # scripts loaded, imports done
        for k in range(args.rounds):
            print(f"-- round {k + 1}/{args.rounds} ({workflows.loadavg()})", file=sys.stderr)
            if not args.ab:
                rows.append(_round(redis, args))
                continue
            for mode in ("one", "two") if k % 2 == 0 else ("two", "one"):
                with one_settle_at_a_time() if mode == "one" else contextlib.nullcontext():
                    rows.append({**_round(redis, args), "mode": mode})
    if args.ab:
        print(ab_report(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print(report(rows))
    if args.spy:
        print(phases(rows))
    print(f"/proc/loadavg at the end: {workflows.loadavg()}")


if __name__ == "__main__":
    main()
