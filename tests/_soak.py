"""The fault soak's machinery: real worker processes, a real server (a
redis-server with an append-only file, or a private PostgreSQL cluster: see
``tests/_soak_servers.py``), a loopback proxy, a producer and a fault
injector; the scenario in ``tests/test_soak.py`` sets the sizes and runs it.

Layout of one soak (all on 127.0.0.1, ports picked free)::

    producer (this process) ------------------------------> redis-server (AOF,
    single workers x S  (python -m chronos_trio worker) ---> appendfsync always)
    manager --processes M -> children --> TcpProxy (here) --^  or postgres

Every process runs ``tests.soak_app:app`` through the real command line with
JSON logs at debug level (``succeeded job=...`` lines are the store's
acknowledgements) and records each handler run in its own append-only file.

Faults (``Soak.fault_kinds``), drawn from the seed: ``kill -9`` of a worker
process (a single worker is started again by the soak after a pause, a
managed child by its manager), SIGSTOP/SIGCONT of a worker (long stops of a
managed child trip the manager's liveness check, which kills it), ``kill -9``
of the server and a restart on the same port and directory, a kill of some
of the server's client connections (``CLIENT KILL`` on Redis,
``pg_terminate_backend`` on PostgreSQL), a blackhole of the proxy (healed
with the held bytes delivered, or with every connection cut), added latency
on the proxy, a cut of every proxied connection, and SIGSTOP of the elected
leader for longer than its leadership lease while the ``every(1)`` schedule
runs.

On SQLite there is no server and no proxy: every process opens one file in
the soak's directory, and the only fault is ``kill -9`` of worker processes
(single and managed), which may hit a process inside a write transaction.

Why ``appendfsync always``: the soak checks that nothing Redis acknowledged
is lost across ``kill -9``. With ``everysec`` Redis may postpone even the
write(2) of the AOF buffer for up to 2 s while a background fsync is slow
(a busy shared disk), and replies go out meanwhile, so a kill -9 could lose
acknowledged writes: a property of that setting, not of the library, which
would make the soak flaky. ``always`` writes and fsyncs before replying.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from chronos_trio import Job, JobState, NewJob, leadership_name
from chronos_trio.records import StoreError
from chronos_trio.testing.proxy import TcpProxy
from tests import soak_app
from tests._soak_check import Expected, Fault
from tests._soak_servers import SoakPostgres, SoakRedis, SoakServer, SoakSqlite

ROOT = Path(__file__).resolve().parent.parent
APP = "tests.soak_app:app"

#: Job mix: label -> weight.
JOB_MIX = {
    "immediate": 40,
    "delayed": 20,
    "flaky": 10,
    "slow": 8,
    "slow_sync": 4,
    "poison": 6,
    "poison_skip": 3,
    "poison_payload": 3,
}


@attrs.frozen
class Plan:
    """Sizes and rates of one soak; ``seed`` fixes every random choice the
    soak makes (which fault, when, for how long, which jobs), though the
    victims are drawn from the processes alive at that moment."""

    seed: int
    fault_seconds: float  # faults are injected for this long
    produce_seconds: float  # the producer enqueues for this long (from the start)
    jobs_per_second: float
    fault_interval: float  # mean seconds between two faults starting
    drain_timeout: float  # longest wait for the queues to empty after the faults
    single_workers: int = 2
    managed_processes: int = 2
    concurrency: int = 16
    lease: float = 3.0
    leader_ttl: float = 3.0
    liveness_timeout: float = 6.0
    max_delay: float = 15.0  # delayed jobs are due up to this far out
    max_concurrent_faults: int = 3
    partitions: int = 4

    @property
    def bound(self) -> float:
        """A generous bound on the whole soak, for ``trio.fail_after``."""
        return 60 + self.fault_seconds + self.drain_timeout + 120


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return False


def send_signal(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


#: The log events the soak follows.
_EVENTS = ("worker process started", "worker process ready", "store reachable")


class WorkerProcess:
    """``python -m chronos_trio worker APP ...`` in a subprocess, its JSON log
    in ``log_path`` (children of a ``--processes N`` manager log there too)."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], log_path: Path) -> None:
        self.argv = [sys.executable, "-m", "chronos_trio", "worker", APP, *argv]
        self.env = env
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._read_to = 0
        self._events: dict[str, list[dict[str, Any]]] = {}

    def start(self) -> WorkerProcess:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def events(self, name: str) -> list[dict[str, Any]]:
        """The log's records of event ``name`` so far (read incrementally: a
        manager's log holds its children's debug lines and grows large)."""
        with self.log_path.open("rb") as f:
            f.seek(self._read_to)
            data = f.read()
        complete = data.rfind(b"\n") + 1
        self._read_to += complete
        for line in data[:complete].decode(errors="replace").splitlines():
            if line.startswith("{") and any(f'"{e}"' in line for e in _EVENTS):
                with contextlib.suppress(ValueError):
                    rec = json.loads(line)
                    self._events.setdefault(rec.get("event"), []).append(rec)
        return list(self._events.get(name, []))

    def children(self) -> dict[int, int]:
        """For a manager: index -> pid of the newest child in each slot."""
        return {int(e["index"]): int(e["pid"]) for e in self.events("worker process started")}

    def all_children(self) -> set[int]:
        return {int(e["pid"]) for e in self.events("worker process started")}

    async def wait_ready(self, count: int = 1) -> None:
        """Until this process (a manager: each of its newest children) runs a worker."""
        while True:
            assert self.running, self.log_path.read_text()[-3000:]
            if self.argv.count("--processes"):
                children = self.children()
                ready = {int(e["pid"]) for e in self.events("worker process ready")}
                if len(children) == count and set(children.values()) <= ready:
                    return
            elif self.events("store reachable"):
                return
            await trio.sleep(0.1)

    async def terminate(self, timeout: float) -> int | None:
        """SIGTERM, wait up to ``timeout`` s for a graceful exit; SIGKILL after.
        Returns the exit code of a graceful exit, None if it had to be killed."""
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGTERM)
        with trio.move_on_after(timeout):
            while self.proc.poll() is None:
                await trio.sleep(0.05)
            return self.proc.returncode
        self.kill()
        return None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        """Kill it and every child it ever started (also when SIGSTOPped)."""
        pids = self.all_children() if self.argv.count("--processes") else set()
        self.kill()
        for pid in pids:
            if alive(pid):
                send_signal(pid, signal.SIGKILL)
                send_signal(pid, signal.SIGCONT)


def soak_server(name: str, directory: Path, partitions: int) -> SoakServer:
    """The soak's server by name: ``redis``, ``postgres`` or ``sqlite``."""
    if name == "redis":
        return SoakRedis(directory, partitions)
    if name == "postgres":
        return SoakPostgres(directory)
    if name == "sqlite":
        return SoakSqlite(directory)
    raise ValueError(f"unknown soak server {name!r}")


class Soak:
    """One soak run: processes, faults, producer, drain, final snapshot."""

    def __init__(self, plan: Plan, directory: Path, server: str = "redis") -> None:
        self.plan = plan
        # One generator per task: the producer and the injector draw in an
        # order the scheduler decides, so a shared one would not repeat.
        self.job_rng = random.Random(f"{plan.seed}:jobs")
        self.fault_rng = random.Random(f"{plan.seed}:faults")
        self.directory = directory
        self.runs_dir = directory / "runs"
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir = directory / "logs"
        self.logs_dir.mkdir(exist_ok=True)
        self.server: SoakServer = soak_server(server, directory, plan.partitions)
        # the faults by name, in the order the seed draws from
        self._fault_calls = {
            "kill -9 worker": self._kill_9_worker,
            "SIGSTOP worker": self._sigstop_worker,
            f"kill -9 {self.server.name}": self._kill_9_server,
            self.server.client_kill_name: self._client_kill,
            "proxy blackhole": self._proxy_blackhole,
            "proxy delay": self._proxy_delay,
            "proxy reset": self._proxy_reset,
            "SIGSTOP leader": self._sigstop_leader,
        }
        if not self.server.networked:
            # One file, no server: the processes sharing it are what fails.
            # (A stopped process could hold the file's write lock and stall
            # every other for busy_timeout: not a fault this soak injects.)
            self._fault_calls = {"kill -9 worker": self._kill_9_worker}
        self.fault_kinds = tuple(self._fault_calls)
        self.proxy: TcpProxy | None = None
        self.singles: list[WorkerProcess] = []
        self.manager: WorkerProcess | None = None
        self.drainer: WorkerProcess | None = None
        self.expected: dict[str, Expected] = {}
        self.faults: list[Fault] = []
        self.fault_counts: collections.Counter[str] = collections.Counter()
        self.fault_notes: collections.Counter[str] = collections.Counter()
        self.stopped: set[int] = set()
        self._busy: set[str] = set()
        self._server_lock = trio.Lock()
        self.timings: dict[str, float] = {}
        self.enqueue_failures = 0
        #: Pending jobs when the drain timed out, and processes SIGTERM did not stop.
        self.stuck_at_drain: list[str] = []
        self.unclean_stops: list[str] = []
        self._single_logs = 0

    # -- processes -------------------------------------------------------------------
    def url(self, port: int) -> str:
        return self.server.url(port)

    def _env(self, url: str, *, schedules: bool = True) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONOS_")}
        env.update(
            CHRONOS_URL=url,
            CHRONOS_SOAK_RUNS=str(self.runs_dir),
            CHRONOS_SOAK_SCHEDULES="1" if schedules else "0",
            PYTHONUNBUFFERED="1",
        )
        return env

    def _worker_options(self, url: str) -> list[str]:
        p = self.plan
        return [
            "--url", url,
            "--concurrency", str(p.concurrency),
            "--queues", f"default=3,{soak_app.TICK_QUEUE}=1",
            "--lease-duration", str(p.lease),
            "--recover-interval", "0.5",
            "--poll-interval", "1",
            "--retain-succeeded", "86400",
            "--leader-ttl", str(p.leader_ttl),
            "--shutdown-grace", "10",
            "--log-format", "json",
            "--log-level", "debug",
        ]  # fmt: skip

    def _new_single(self, index: int) -> WorkerProcess:
        self._single_logs += 1
        url = self.url(self.server.port)
        return WorkerProcess(
            self._worker_options(url),
            self._env(url),
            self.logs_dir / f"single{index}-{self._single_logs}.log",
        )

    def worker_logs(self) -> list[Path]:
        return sorted(self.logs_dir.glob("*.log"))

    def worker_pids(self) -> dict[int, str]:
        """pid -> "single" or "managed", of every worker process alive now."""
        pids = {w.pid: "single" for w in self.singles if w.running and w.pid is not None}
        if self.manager is not None:
            for pid in self.manager.children().values():
                if alive(pid):
                    pids[pid] = "managed"
        return pids

    async def start(self, nursery: trio.Nursery) -> None:
        await trio.to_thread.run_sync(self.server.start)
        if self.server.networked:
            self.proxy = TcpProxy(self.server.port)
            await nursery.start(self.proxy.run)
        self.singles = [self._new_single(i).start() for i in range(self.plan.single_workers)]
        url = self.url(self.proxy.port if self.proxy is not None else self.server.port)
        manager_options = [
            "--processes", str(self.plan.managed_processes),
            "--liveness-timeout", str(self.plan.liveness_timeout),
            "--max-restarts", "100000",
        ]  # fmt: skip
        self.manager = WorkerProcess(
            [*self._worker_options(url), *manager_options],
            self._env(url),
            self.logs_dir / "manager.log",
        ).start()
        for w in self.singles:
            await w.wait_ready()
        await self.manager.wait_ready(self.plan.managed_processes)

    def close(self) -> None:
        for pid in list(self.stopped):
            send_signal(pid, signal.SIGCONT)
        for w in [*self.singles, self.manager, self.drainer]:
            if w is not None:
                w.close()
        self.server.close()

    def save(self) -> None:
        """Write ``expected.jsonl`` and ``faults.jsonl`` next to the run files."""
        with (self.directory / "expected.jsonl").open("w") as f:
            for e in self.expected.values():
                f.write(json.dumps(attrs.asdict(e)) + "\n")
        with (self.directory / "faults.jsonl").open("w") as f:
            for fault in self.faults:
                record = attrs.asdict(fault)
                record["pids"] = None if fault.pids is None else sorted(fault.pids)
                f.write(json.dumps(record) + "\n")

    # -- producer --------------------------------------------------------------------
    def _new_job(self, producer: Any, label: str) -> NewJob:
        rng = self.job_rng
        tasks = producer.tasks
        spec = soak_app.Spec
        if label == "poison_payload":  # a payload that is not JSON: dead without running
            return attrs.evolve(tasks["soak.work"].new_job(spec()), payload=b'{"sleep": ')
        options: dict[str, Any] = {}
        if label in ("delayed",) or (label == "flaky" and rng.random() < 0.3):
            options["delay"] = rng.uniform(0.2, self.plan.max_delay)
        if label in ("immediate", "delayed"):
            kind, payload = "soak.work", spec(sleep=rng.uniform(0, 0.05))
        elif label == "flaky":
            kind, payload = "soak.flaky", spec(rng.uniform(0, 0.05), rng.randint(1, 2))
        elif label == "slow":
            kind, payload = "soak.slow", spec(sleep=rng.uniform(1.0, 4.0))
        elif label == "slow_sync":
            kind, payload = "soak.slow_sync", spec(sleep=rng.uniform(1.0, 3.0))
        else:
            kind, payload = f"soak.{label}", spec()
        job: NewJob = tasks[kind].new_job(payload, **options)
        return job

    async def produce(self, producer: Any) -> None:
        """Enqueue batches at ``jobs_per_second`` for ``produce_seconds``. A
        batch that fails (the server down, a connection cut) is sent again with
        the same job IDs until the store answers, so every job tried gets an
        EnqueueResult (``created=False`` for the ones the failed try stored)."""
        rng = self.job_rng
        labels = list(JOB_MIX)
        weights = [JOB_MIX[k] for k in labels]
        deadline = trio.current_time() + self.plan.produce_seconds
        mean_batch = 8
        while trio.current_time() < deadline:
            await trio.sleep(rng.expovariate(self.plan.jobs_per_second / mean_batch))
            chosen = rng.choices(labels, weights, k=rng.randint(1, 2 * mean_batch - 1))
            jobs = [self._new_job(producer, label) for label in chosen]
            while True:
                try:
                    results = await producer.enqueue_jobs(jobs)
                    break
                except StoreError:
                    self.enqueue_failures += 1
                    await trio.sleep(0.2)
            for job, result, label in zip(jobs, results, chosen, strict=True):
                assert result.job_id == job.id
                self.expected[job.id] = Expected(
                    job_id=job.id,
                    label=label,
                    task=job.kind,
                    max_retries=job.max_retries,
                    run_at=result.run_at if result.created else None,
                )

    # -- faults ----------------------------------------------------------------------
    async def inject_faults(self, store: Any) -> None:
        """Start a fault every ``fault_interval`` s on average for
        ``fault_seconds``; every kind comes up at least once (a shuffled
        round of all kinds first). Faults run concurrently (at most
        ``max_concurrent_faults``), one at a time per resource (the server, the
        proxy, the leader, each worker process); each heals itself."""
        rng = self.fault_rng
        plan = self.plan
        first_round = list(self.fault_kinds)
        rng.shuffle(first_round)
        deadline = trio.current_time() + plan.fault_seconds
        limiter = trio.CapacityLimiter(plan.max_concurrent_faults)
        async with trio.open_nursery() as nursery:
            while True:
                await trio.sleep(rng.expovariate(1 / plan.fault_interval))
                if trio.current_time() >= deadline:
                    break
                kind = first_round.pop() if first_round else rng.choice(self.fault_kinds)
                # Draw the fault's parameters now, so they follow from the seed
                # whatever happens to be busy.
                params = (rng.random(), rng.random(), rng.random())
                if limiter.available_tokens == 0:
                    self.fault_notes["skipped: too many faults at once"] += 1
                    continue
                nursery.start_soon(self._fault, limiter, store, kind, params)

    async def _fault(
        self, limiter: trio.CapacityLimiter, store: Any, kind: str, params: tuple[float, ...]
    ) -> None:
        async with limiter:
            try:
                await self._fault_calls[kind](store, *params)
            except _Skip as skip:
                self.fault_notes[f"skipped {kind}: {skip}"] += 1
            except StoreError:  # finding the leader while the server is down
                self.fault_notes[f"skipped {kind}: store unreachable"] += 1

    def _record(self, kind: str, start: float, pids: set[int] | None = None) -> None:
        self.fault_counts[kind] += 1
        self.faults.append(
            Fault(kind, start, time.time(), None if pids is None else frozenset(pids))
        )

    def _claim(self, resource: str) -> None:
        if resource in self._busy:
            raise _Skip(f"{resource} busy")
        self._busy.add(resource)

    def _pick_worker(self, r: float, *, running: bool = True) -> tuple[int, str]:
        pids = self.worker_pids()
        candidates = sorted(p for p in pids if not (running and p in self.stopped))
        if not candidates:
            raise _Skip("no worker to hit")
        pid = candidates[int(r * len(candidates)) % len(candidates)]
        return pid, pids[pid]

    async def _kill_9_worker(self, store: Any, r1: float, r2: float, r3: float) -> None:
        pid, group = self._pick_worker(r1, running=False)
        start = time.time()
        send_signal(pid, signal.SIGKILL)
        self._record("kill -9 worker", start, {pid})
        if group == "single":
            await trio.sleep(0.2 + 2 * r2)  # then start it again, as a supervisor would
            for i, w in enumerate(self.singles):
                if w.pid == pid:
                    w.kill()  # reap it
                    self.singles[i] = self._new_single(i).start()

    async def _stop_for(self, pid: int, seconds: float) -> None:
        self._claim(f"pid {pid}")
        self.stopped.add(pid)
        try:
            send_signal(pid, signal.SIGSTOP)
            await trio.sleep(seconds)
        finally:
            send_signal(pid, signal.SIGCONT)
            self.stopped.discard(pid)
            self._busy.discard(f"pid {pid}")

    async def _sigstop_worker(self, store: Any, r1: float, r2: float, r3: float) -> None:
        pid, _ = self._pick_worker(r1)
        start = time.time()
        await self._stop_for(pid, 0.3 + r2 * 2.5 * self.plan.lease)
        self._record("SIGSTOP worker", start, {pid})
        if not alive(pid):
            self.fault_notes["stopped managed child killed by its manager (hung)"] += 1

    async def _sigstop_leader(self, store: Any, r1: float, r2: float, r3: float) -> None:
        lead = await store.current_leader(leadership_name(soak_app.app.name))
        if lead is None:
            raise _Skip("no leader")
        pid = int(lead.holder.split(":")[-2])
        if pid not in self.worker_pids():
            raise _Skip("leader not a live worker")
        self._claim("leader")
        try:
            start = time.time()
            ttl = self.plan.leader_ttl
            await self._stop_for(pid, ttl + 0.5 + r2 * 1.5 * ttl)
            self._record("SIGSTOP leader", start, {pid})
        finally:
            self._busy.discard("leader")

    async def _kill_9_server(self, store: Any, r1: float, r2: float, r3: float) -> None:
        self._claim("server")
        try:
            async with self._server_lock:
                start = time.time()
                await trio.to_thread.run_sync(self.server.kill)
                await trio.sleep(0.2 + 2.8 * r1)
                await trio.to_thread.run_sync(self.server.start)
                self._record(f"kill -9 {self.server.name}", start)
        finally:
            self._busy.discard("server")

    async def _client_kill(self, store: Any, r1: float, r2: float, r3: float) -> None:
        async with self._server_lock:
            if not self.server.running:
                raise _Skip("server down")
            start = time.time()
            seed = int(r1 * 2**32)
            try:
                killed = await trio.to_thread.run_sync(
                    self.server.kill_clients, random.Random(seed)
                )
            except (OSError, *self.server.errors) as exc:
                raise _Skip(f"server unreachable: {exc}") from None
        name = self.server.client_kill_name
        self.fault_notes[f"clients killed by {name}"] += killed
        self._record(name, start)

    def _proxied(self) -> set[int]:
        return {p for p, group in self.worker_pids().items() if group == "managed"}

    async def _proxy_blackhole(self, store: Any, r1: float, r2: float, r3: float) -> None:
        assert self.proxy is not None
        self._claim("proxy")
        try:
            start = time.time()
            self.proxy.blackhole()
            await trio.sleep(0.5 + r1 * 2.5 * self.plan.lease)
            reset = r2 < 0.5
            self.proxy.heal(reset=reset)
            self.fault_notes[f"blackholes healed {'by cutting' if reset else 'in place'}"] += 1
            self._record("proxy blackhole", start, self._proxied())
        finally:
            self.proxy.heal()
            self._busy.discard("proxy")

    async def _proxy_delay(self, store: Any, r1: float, r2: float, r3: float) -> None:
        assert self.proxy is not None
        self._claim("proxy")
        try:
            start = time.time()
            self.proxy.set_delay(0.05 + 0.55 * r1)
            await trio.sleep(2 + 8 * r2)
            self._record("proxy delay", start, self._proxied())
        finally:
            self.proxy.set_delay(0)
            self._busy.discard("proxy")

    async def _proxy_reset(self, store: Any, r1: float, r2: float, r3: float) -> None:
        assert self.proxy is not None
        start = time.time()
        self.fault_notes["proxied connections cut"] += self.proxy.reset_all()
        self._record("proxy reset", start, self._proxied())

    # -- end ---------------------------------------------------------------------------
    def heal_everything(self) -> None:
        for pid in list(self.stopped):
            send_signal(pid, signal.SIGCONT)
        if self.proxy is not None:
            self.proxy.heal()
            self.proxy.set_delay(0)

    async def pending(self, store: Any, queues: Sequence[str]) -> int:
        stats = await store.stats(list(queues))
        return sum(s.counts.get(state, 0) for s in stats for state in _PENDING)

    async def wait_drained(self, store: Any, queues: Sequence[str], timeout: float) -> bool:
        """Until ``queues`` hold no pending job (twice in a row); False on timeout."""
        with trio.move_on_after(timeout):
            clear = 0
            while clear < 2:
                try:
                    clear = clear + 1 if await self.pending(store, queues) == 0 else 0
                except StoreError:
                    clear = 0
                await trio.sleep(0.5)
            return True
        return False

    async def drain(self, store: Any) -> None:
        """After the faults: the server up, single workers running, every process
        resumed; wait for the producer's jobs to finish, stop every worker
        gracefully, then run one worker without schedules until nothing is
        left (trigger jobs fired just before the stop, expired leases)."""
        plan = self.plan
        self.heal_everything()
        async with self._server_lock:
            if not self.server.running:
                await trio.to_thread.run_sync(self.server.start)
        for i, w in enumerate(self.singles):
            if not w.running:
                self.singles[i] = self._new_single(i).start()
        started = trio.current_time()
        if not await self.wait_drained(store, ["default"], plan.drain_timeout):
            for state in _PENDING:
                for job in await store.list_jobs("default", state, limit=1000):
                    self.stuck_at_drain.append(
                        f"{job.id}: still {state} {plan.drain_timeout:g}s after the faults "
                        f"ended (run_at {job.run_at:.3f}, attempts {job.attempts}, "
                        f"lease owner {job.lease_owner or '-'})"
                    )
        self.timings["drain seconds"] = trio.current_time() - started
        for w in [*self.singles, self.manager]:
            if w is not None:
                code = await w.terminate(30)
                if code is None:
                    self.unclean_stops.append(f"{w.argv[5:]} pid {w.pid}: killed 30s after SIGTERM")
                elif code != 0:
                    self.fault_notes[f"worker processes that exited {code} on SIGTERM"] += 1
        url = self.url(self.server.port)
        self.drainer = WorkerProcess(
            self._worker_options(url),
            self._env(url, schedules=False),
            self.logs_dir / "drainer.log",
        ).start()
        await self.drainer.wait_ready()
        await self.wait_drained(store, await store.queues(), 30)
        if await self.drainer.terminate(30) is None:
            self.unclean_stops.append(f"drainer pid {self.drainer.pid}: killed 30s after SIGTERM")

    async def snapshot(self, store: Any) -> dict[str, Job]:
        """Every job record of every queue, by id; expected jobs missing from
        every index are looked up one by one (a record in no index is listed
        with whatever state it says)."""
        final: dict[str, Job] = {}
        for queue in await store.queues():
            for state in JobState:
                offset = 0
                while True:
                    page = await store.list_jobs(queue, state, offset=offset, limit=2000)
                    for job in page:
                        final[job.id] = job
                    if len(page) < 2000:
                        break
                    offset += len(page)
        for job_id in self.expected:
            if job_id not in final:
                job = await store.get_job(job_id)
                if job is not None:
                    self.fault_notes["records found outside every listing"] += 1
                    final[job_id] = job
        return final


_PENDING = (JobState.SCHEDULED, JobState.READY, JobState.LEASED, JobState.RETRY_WAIT)


class _Skip(Exception):
    """A fault that could not be injected now (its target is busy or gone)."""
