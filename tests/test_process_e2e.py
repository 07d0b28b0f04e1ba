"""End to end: ``python -m chronos_trio worker tests.tests_app:app --processes 2``
as a subprocess against a test Redis. ``kill -9`` of a child holding leases
loses no job; SIGTERM drains and exits 0; ``kill -9`` of the parent leaves no
orphans; a hung (stopped) child is killed and replaced; a running job aborted
from this process is cancelled there within one heartbeat and never re-run."""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
import trio

from chronos_trio import AbortResult, Inspector, JobAborted, JobState
from chronos_trio.actors.continuer import SWEEP_FACTOR
from chronos_trio.cli import EXIT_OK
from chronos_trio.cli._options import CHILD_HEARTBEAT_INTERVAL
from tests.tests_app import Record, make_app

pytestmark = pytest.mark.redis

ROOT = Path(__file__).resolve().parent.parent
LEASE = 2.0
RECOVER_INTERVAL = 0.25
#: After a workflow's last callback, how long a duplicate could still show
#: up: a job the killed child held is run again within a lease (and a
#: recovery round) of the kill, and the continuers sweep the outbox every
#: SWEEP_FACTOR recovery rounds.
DUPLICATE_WINDOW = max(LEASE + RECOVER_INTERVAL, RECOVER_INTERVAL * SWEEP_FACTOR) + 0.5


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


class Manager:
    """The CLI process manager in a subprocess; its log goes to a file."""

    def __init__(self, url: str, tmp_path: Path, *options: str, processes: int = 2) -> None:
        self.processes = processes
        argv = [sys.executable, "-m", "chronos_trio", "worker", "tests.tests_app:app"]
        argv += ["--processes", str(processes), "--lease-duration", str(LEASE)]
        argv += ["--recover-interval", str(RECOVER_INTERVAL), "--poll-interval", "0.2"]
        argv += [*options]
        env = {**os.environ, "CHRONOS_URL": url}
        self.log_path = tmp_path / "manager.log"
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            )

    def log(self) -> str:
        return self.log_path.read_text()

    def _pids(self, event: str) -> dict[int, int]:
        pattern = rf"worker process {event} index=(\d+) pid=(\d+)"
        return {int(i): int(p) for i, p in re.findall(pattern, self.log())}

    def children(self) -> dict[int, int]:
        """index -> pid of the latest child started in each slot."""
        return self._pids("started")

    def all_pids(self) -> set[int]:
        return {
            int(p) for p in re.findall(r"worker process started index=\d+ pid=(\d+)", self.log())
        }

    async def wait_ready(self) -> dict[int, int]:
        while True:
            children, ready = self.children(), self._pids("ready")
            if len(children) == self.processes and all(
                ready.get(i) == pid for i, pid in children.items()
            ):
                return children
            assert self.proc.poll() is None, self.log()
            await trio.sleep(0.05)

    async def wait_exit(self) -> int:
        while self.proc.poll() is None:
            await trio.sleep(0.02)
        return self.proc.returncode

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in self.all_pids():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


class Runs:
    """The handlers' records in Redis: ``<key>:start`` and ``<key>:done``."""

    def __init__(self, url: str, key: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.key = key

    async def lines(self, which: str) -> list[list[str]]:
        raw = await trio.to_thread.run_sync(self.client.lrange, f"{self.key}:{which}", 0, -1)
        return [(x.decode() if isinstance(x, bytes) else x).split() for x in raw]

    async def done_count(self) -> int:
        return int(await trio.to_thread.run_sync(self.client.llen, f"{self.key}:done"))


async def leased_by(inspector: Inspector, pid: int) -> list[str]:
    page = await inspector.jobs("default", JobState.LEASED, limit=5000)
    return [j.id for j in page.jobs if j.lease_owner.endswith(f":{pid}:0")]


async def test_kill_9_of_a_child_holding_leases_loses_no_job(
    redis_url: str, tmp_path: Path, record_property: object
) -> None:
    jobs = 2000
    manager = Manager(redis_url, tmp_path, "--concurrency", "16", "--retain-succeeded", "600")
    producer = make_app(redis_url)
    inspector = producer.inspector()
    runs = Runs(redis_url, "kill9")
    try:
        with trio.fail_after(90):
            children = await manager.wait_ready()
            victim = children[0]
            results = await producer.tasks["tests.record"].enqueue_many(
                [Record("kill9", sleep=0.05) for _ in range(jobs)]
            )
            ids = {r.job_id for r in results}
            assert len(ids) == jobs
            while True:  # kill it mid-flight: some work done, leases held
                held = await leased_by(inspector, victim)
                if held and await runs.done_count() >= 300:
                    break
                await trio.sleep(0.01)
            os.kill(victim, signal.SIGKILL)
            killed_at = time.monotonic()
            while await leased_by(inspector, victim):
                await trio.sleep(0.05)
            recovered_after = time.monotonic() - killed_at
            while manager.children()[0] == victim:
                await trio.sleep(0.05)
            await manager.wait_ready()
            while (await inspector.queue("default")).counts[JobState.SUCCEEDED] < jobs:
                assert manager.proc.poll() is None, manager.log()
                await trio.sleep(0.1)
            counts = (await inspector.queue("default")).counts
            assert counts[JobState.SUCCEEDED] == jobs
            assert sum(counts.values()) == jobs, counts
            done = await runs.lines("done")
            starts = await runs.lines("start")
            manager.proc.send_signal(signal.SIGTERM)
            assert await manager.wait_exit() == EXIT_OK
    finally:
        manager.close()
        await producer.aclose()

    ran = collections.Counter(line[0] for line in done)
    assert set(ran) == ids, "every job ran to completion at least once"
    duplicates = {job_id: n for job_id, n in ran.items() if n > 1}
    cut_short = {line[0] for line in starts if int(line[1]) == victim} - {
        line[0] for line in done if int(line[1]) == victim
    }
    print(
        f"\n{jobs} jobs; kill -9 of pid {victim} holding {len(held)} lease(s) "
        f"({len(cut_short)} handler(s) cut short); leases recovered after "
        f"{recovered_after:.2f}s; duplicate runs: {len(duplicates)} {sorted(duplicates)[:5]}"
    )
    assert callable(record_property)
    record_property("duplicates", len(duplicates))
    record_property("recovered_after", round(recovered_after, 2))
    assert cut_short, "the victim was killed while running handlers"
    assert cut_short <= set(ran), "handlers cut short ran again elsewhere"
    # Leases expire LEASE after their last renewal, and the recoverer runs every
    # RECOVER_INTERVAL; the slack covers the test's own polling on a busy machine.
    assert recovered_after <= LEASE + RECOVER_INTERVAL + 1.0
    # A duplicate needs a handler that finished but whose ack died with the victim.
    assert len(duplicates) <= len(held)
    log = manager.log()
    assert f'worker process exited index=0 pid={victim} code=-9 status="killed by SIGKILL' in log
    assert "restarting worker process index=0" in log
    assert "Traceback" not in log


async def test_kill_9_mid_workflow_fires_every_callback_exactly_once(
    redis_url: str, tmp_path: Path
) -> None:
    """Chords (a group of members, then a callback) across two worker
    processes, one killed with kill -9 while it holds leases: members it was
    running (or had run but not settled) run again elsewhere; continuations
    it had settled but not drained are found by the other's sweep; every
    callback runs exactly once, with every member's result."""
    from chronos_trio import chain, group

    flows, members = 30, 8
    manager = Manager(redis_url, tmp_path, "--concurrency", "8")
    producer = make_app(redis_url)
    inspector = producer.inspector()
    client = redis.Redis.from_url(redis_url)
    member, callback = producer.tasks["tests.wf_member"], producer.tasks["tests.wf_callback"]
    flow = chain(group(*(member.s(k) for k in range(members))), callback.s())
    try:
        with trio.fail_after(120):
            children = await manager.wait_ready()
            victim = children[0]
            for i in range(flows):
                await producer.enqueue_workflow(flow, workflow_id=f"wf{i}")
            while True:  # kill it mid-flight: some members done, leases held
                held = await leased_by(inspector, victim)
                if held and client.llen("wf:done") >= 60:
                    break
                await trio.sleep(0.01)
            os.kill(victim, signal.SIGKILL)
            while client.llen("wf:callbacks") < flows:
                assert manager.proc.poll() is None, manager.log()
                await trio.sleep(0.1)
            await trio.sleep(DUPLICATE_WINDOW)  # room for a duplicate to show up
            manager.proc.send_signal(signal.SIGTERM)
            assert await manager.wait_exit() == EXIT_OK
    finally:
        manager.close()
        await producer.aclose()
    fired = collections.Counter(x.decode() for x in client.lrange("wf:callbacks", 0, -1))
    expected = {f"wf{i}.1 {sum(range(members))}": 1 for i in range(flows)}
    assert fired == collections.Counter(expected), "each callback once, with every result"
    done = {x.decode().split()[0] for x in client.lrange("wf:done", 0, -1)}
    assert done == {f"wf{i}.0.{k}" for i in range(flows) for k in range(members)}
    assert f"worker process exited index=0 pid={victim} code=-9" in manager.log()


async def run_one_chord(
    redis_url: str, tmp_path: Path, workflow_id: str, members: int
) -> tuple[list[str], collections.Counter[str], str]:
    """One chord (``members`` tests.wf_member, then tests.wf_callback) through
    a two-process manager, until its callback ran and 2 leases more; then
    SIGTERM. The callbacks recorded, the members' finished runs, the log."""
    from chronos_trio import chain, group

    manager = Manager(redis_url, tmp_path, "--concurrency", "8")
    producer = make_app(redis_url)
    client = redis.Redis.from_url(redis_url)
    member, callback = producer.tasks["tests.wf_member"], producer.tasks["tests.wf_callback"]
    flow = chain(group(*(member.s(k) for k in range(members))), callback.s())
    try:
        with trio.fail_after(90):
            await manager.wait_ready()
            await producer.enqueue_workflow(flow, workflow_id=workflow_id)
            while client.llen("wf:callbacks") < 1:
                assert manager.proc.poll() is None, manager.log()
                await trio.sleep(0.1)
            await trio.sleep(DUPLICATE_WINDOW)  # room for a duplicate to show up
            manager.proc.send_signal(signal.SIGTERM)
            assert await manager.wait_exit() == EXIT_OK
    finally:
        manager.close()
        await producer.aclose()
    fired = [x.decode() for x in client.lrange("wf:callbacks", 0, -1)]
    ran = collections.Counter(x.decode().split()[0] for x in client.lrange("wf:done", 0, -1))
    return fired, ran, manager.log()


async def test_kill_9_after_a_member_ran_but_before_its_settle(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A member's handler finishes its work and its process dies before the
    settle (kill -9 from inside, deterministic): the lease expires, the
    member runs again elsewhere, and the callback fires once."""
    monkeypatch.setenv("WF_KILL_AFTER", "wfk.0.3")
    fired, ran, log = await run_one_chord(redis_url, tmp_path, "wfk", 6)
    assert fired == ["wfk.1 15"]
    assert ran["wfk.0.3"] >= 2, "the killed member ran again"
    # the others ran at least once (those whose settles died with it, again)
    assert all(ran[f"wfk.0.{k}"] >= 1 for k in range(6))
    assert "code=-9" in log


async def test_kill_9_after_a_member_s_settle_before_its_continuation(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A member settles (its outbox entry is written with the settle), then
    its process dies before its continuer handles the entry (kill -9 from
    inside the continuer, deterministic): another continuer's sweep finds
    the entry, and the callback fires once, with every result."""
    monkeypatch.setenv("WF_KILL_IN_CONTINUER", "wfc.0.2")
    monkeypatch.setenv("WF_KILL_MARK", str(tmp_path / "killed"))
    fired, ran, log = await run_one_chord(redis_url, tmp_path, "wfc", 6)
    assert fired == ["wfc.1 15"]
    assert all(ran[f"wfc.0.{k}"] >= 1 for k in range(6))
    assert "code=-9" in log, "a continuer died with the entry in hand"
    assert (tmp_path / "killed").exists()


async def test_sigterm_drains_and_exits_zero(redis_url: str, tmp_path: Path) -> None:
    grace = 5.0
    manager = Manager(
        redis_url,
        tmp_path,
        "--concurrency",
        "4",
        "--lease-duration",
        "30",
        "--shutdown-grace",
        str(grace),
    )
    producer = make_app(redis_url)
    inspector = producer.inspector()
    runs = Runs(redis_url, "term")
    try:
        with trio.fail_after(40):
            children = await manager.wait_ready()
            await producer.tasks["tests.record"].enqueue_many(
                [Record("term", sleep=0.5) for _ in range(100)]
            )
            while await runs.done_count() < 8:
                await trio.sleep(0.02)
            await trio.sleep(0.1)
            in_flight = (await inspector.queue("default")).counts[JobState.LEASED]
            assert in_flight > 0
            sent = time.monotonic()
            manager.proc.send_signal(signal.SIGTERM)
            code = await manager.wait_exit()
            elapsed = time.monotonic() - sent
            counts = (await inspector.queue("default")).counts
    finally:
        manager.close()
        await producer.aclose()
    assert code == EXIT_OK
    assert elapsed < grace, "exited within the grace period"
    assert not any(alive(pid) for pid in children.values())
    # Nothing waits for lease expiry (30 s): unstarted leases went back at once.
    assert counts[JobState.LEASED] == 0
    started = {line[0] for line in await runs.lines("start")}
    finished = {line[0] for line in await runs.lines("done")}
    assert started == finished, "every running handler finished within the grace"
    assert counts[JobState.READY] == 100 - len(finished), "nothing lost"
    log = manager.log()
    assert "stopping worker processes gracefully signal=SIGTERM" in log
    assert log.count("status=exited") == 2 and "Traceback" not in log


async def test_kill_9_of_the_parent_leaves_no_orphans(redis_url: str, tmp_path: Path) -> None:
    manager = Manager(redis_url, tmp_path, "--lease-duration", "30")
    producer = make_app(redis_url)
    inspector = producer.inspector()
    try:
        with trio.fail_after(30):
            children = await manager.wait_ready()
            await producer.tasks["tests.record"].enqueue_many(
                [Record("orphans", sleep=0.2) for _ in range(200)]
            )
            while (await inspector.queue("default")).counts[JobState.LEASED] == 0:
                await trio.sleep(0.02)
            os.kill(manager.proc.pid, signal.SIGKILL)
            killed_at = time.monotonic()
            await manager.wait_exit()
            while any(alive(pid) for pid in children.values()):
                await trio.sleep(0.05)
            gone_after = time.monotonic() - killed_at
            counts = (await inspector.queue("default")).counts
    finally:
        manager.close()
        await producer.aclose()
    assert gone_after < 5
    assert counts[JobState.LEASED] == 0, "the children drained: leases went back at once"
    assert "shutting down: process manager gone how=" in manager.log()


async def test_hung_child_is_killed_and_replaced(redis_url: str, tmp_path: Path) -> None:
    manager = Manager(redis_url, tmp_path, "--liveness-timeout", "1.5")
    try:
        with trio.fail_after(30):
            children = await manager.wait_ready()
            os.kill(children[1], signal.SIGSTOP)  # its event loop stops: no heartbeats
            stopped_at = time.monotonic()
            while manager.children()[1] == children[1]:
                await trio.sleep(0.05)
            replaced_after = time.monotonic() - stopped_at
            await manager.wait_ready()
            manager.proc.send_signal(signal.SIGTERM)
            assert await manager.wait_exit() == EXIT_OK
    finally:
        manager.close()
    # the 1.5 s count from the child's last heartbeat, which came up to one
    # heartbeat interval before the SIGSTOP
    assert 1.5 - CHILD_HEARTBEAT_INTERVAL <= replaced_after < 4
    log = manager.log()
    assert f"killing hung worker process index=1 pid={children[1]} no_heartbeat_for=1.5" in log
    assert "(hung: no heartbeat)" in log


async def test_abort_of_a_job_running_in_another_process(redis_url: str, tmp_path: Path) -> None:
    """Cancelled within one heartbeat interval of the abort (the flag comes
    back with the worker's next batched renewal), recorded ``aborted``, and
    never run again, also after its lease would have expired."""
    heartbeat = 0.3
    manager = Manager(redis_url, tmp_path, "--heartbeat-interval", str(heartbeat))
    producer = make_app(redis_url)
    inspector = producer.inspector()
    runs = Runs(redis_url, "abort")
    try:
        with trio.fail_after(30):
            await manager.wait_ready()
            handle = await producer.tasks["tests.record"].enqueue(Record("abort", sleep=60))
            while not await runs.lines("start"):
                await trio.sleep(0.02)
            asked_at = time.time()
            assert await producer.job(handle.job_id).abort(reason="e2e") is AbortResult.FLAGGED
            with pytest.raises(JobAborted):
                await handle.result(timeout=10)
            [cancelled] = await runs.lines("aborted")
            job = await inspector.job(handle.job_id)
            # a lease (2 s) and a recovery pass later, nothing ran it again
            await trio.sleep(LEASE + 2 * RECOVER_INTERVAL)
            started = await runs.lines("start")
            manager.proc.send_signal(signal.SIGTERM)
            assert await manager.wait_exit() == EXIT_OK
    finally:
        manager.close()
        await producer.aclose()
    assert cancelled[0] == handle.job_id
    # the renewal comes within one interval; allow for the round trip and load
    assert 0 < float(cancelled[2]) - asked_at <= heartbeat + 0.25, (cancelled, asked_at)
    assert job.state is JobState.ABORTED and job.last_error == "aborted: e2e"
    assert job.attempts == 1 and not job.lease_owner
    assert [line[0] for line in started] == [handle.job_id], "never re-run"
    assert await runs.lines("done") == []
    assert "abort asked job=" in manager.log()


async def test_kill_9_after_a_settle_handed_the_next_link_over(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chain link's settle stores its successor leased to its own worker
    process (``Successor.lease_to``), which dies with kill -9 before it runs
    it (deterministic, from inside, right after the settle's reply): the
    lease expires, recovery takes the successor back and the other process
    runs it, once; every chain ends with its result."""
    from chronos_trio import chain

    steps, flows = 5, 4
    monkeypatch.setenv("WF_KILL_AFTER_ENQUEUE", "hk1.2")
    monkeypatch.setenv("WF_KILL_HANDED", "1")
    monkeypatch.setenv("WF_KILL_MARK", str(tmp_path / "killed"))
    manager = Manager(redis_url, tmp_path, "--concurrency", "8")
    producer = make_app(redis_url)
    client = redis.Redis.from_url(redis_url)
    member = producer.tasks["tests.wf_member"]
    try:
        with trio.fail_after(90):
            await manager.wait_ready()
            started = [
                await producer.enqueue_workflow(
                    chain(member.s(i), *(member.s() for _ in range(steps - 1))),
                    workflow_id=f"hk{i}",
                )
                for i in range(flows)
            ]
            results = [await s.result(timeout=60) for s in started]
            await trio.sleep(DUPLICATE_WINDOW)  # room for a duplicate to show up
            job = await producer.inspector().job("hk1.2")
            manager.proc.send_signal(signal.SIGTERM)
            assert await manager.wait_exit() == EXIT_OK
    finally:
        manager.close()
        await producer.aclose()
    assert results == list(range(flows))
    assert (tmp_path / "killed").exists(), "a process died holding the handed-over link"
    starts = collections.Counter(x.decode().split()[0] for x in client.lrange("wf:start", 0, -1))
    done = collections.Counter(x.decode().split()[0] for x in client.lrange("wf:done", 0, -1))
    assert starts["hk1.2"] == 1 and done["hk1.2"] == 1, "the handed-over link ran once"
    # its first lease was the dead process's (never run): recovered, then run
    assert job.state is JobState.SUCCEEDED and job.attempts == 2
    assert all(done[f"hk{i}.{k}"] >= 1 for i in range(flows) for k in range(steps))
    assert "code=-9" in manager.log()


async def test_kill_9_while_flows_are_cancelled_and_continued(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chains continued by two worker processes; one dies with kill -9 just
    after a step was made (its settle stored it as the link's successor, or
    its continuer enqueued it before its second cancel check), and at that
    moment half the flows are cancelled from this process. No
    cancelled flow gets further than one step past where the cancel found
    it (a step its continuer made in the race is aborted, and what would
    follow it is never made); every step of a cancelled flow ends finished
    or aborted; the other flows and the plain jobs all complete."""
    from chronos_trio import chain

    steps, flows = 5, 8
    monkeypatch.setenv("WF_KILL_AFTER_ENQUEUE", "cx3.2")
    monkeypatch.setenv("WF_KILL_MARK", str(tmp_path / "killed"))
    manager = Manager(redis_url, tmp_path, "--concurrency", "8")
    producer = make_app(redis_url)
    client = redis.Redis.from_url(redis_url)
    member = producer.tasks["tests.wf_member"]
    record = producer.tasks["tests.record"]
    runs = Runs(redis_url, "cxplain")
    results = {}
    try:
        with trio.fail_after(120):
            await manager.wait_ready()
            for i in range(flows):
                for name in ("cx", "keep"):
                    flow = chain(member.s(i), *(member.s() for _ in range(steps - 1)))
                    await producer.enqueue_workflow(flow, workflow_id=f"{name}{i}")
            await record.enqueue_many([Record("cxplain", sleep=0.01) for _ in range(40)])
            while not (tmp_path / "killed").exists():
                assert manager.proc.poll() is None, manager.log()
                await trio.sleep(0.005)
            for i in range(flows):
                results[i] = await producer.workflow(f"cx{i}").abort(reason="e2e")
            done_at = time.time()
            while True:
                done = {x.decode().split()[0] for x in client.lrange("wf:done", 0, -1)}
                if {f"keep{i}.{steps - 1}" for i in range(flows)} <= done and (
                    await runs.done_count() >= 40
                ):
                    break
                assert manager.proc.poll() is None, manager.log()
                await trio.sleep(0.1)
            await trio.sleep(DUPLICATE_WINDOW)  # room for a late step to show up
            manager.proc.send_signal(signal.SIGTERM)
            assert await manager.wait_exit() == EXIT_OK
        starts = collections.defaultdict(list)
        for line in client.lrange("wf:start", 0, -1):
            job_id, _pid, at = line.decode().split()
            starts[job_id].append(float(at))
        late = []
        for i, result in results.items():
            assert result.found
            reached = [
                int(j.rsplit(".", 1)[1])
                for j in (*result.finished, *result.aborted_running, *result.dropped)
            ]
            bound = max(reached, default=-1) + 1  # a step made in the race, at most
            for k in range(steps):
                job = await producer.store.get_job(f"cx{i}.{k}")
                if k > bound:
                    assert f"cx{i}.{k}" not in starts, f"cx{i}.{k} started after the cancel"
                    assert job is None or job.state is JobState.ABORTED
                if job is not None:
                    assert job.state in (JobState.SUCCEEDED, JobState.ABORTED), (job.id, job.state)
                late += [f"cx{i}.{k}" for t in starts.get(f"cx{i}.{k}", ()) if t > done_at]
        for i in range(flows):  # nothing outside the cancelled flows was lost
            for k in range(steps):
                job = await producer.store.get_job(f"keep{i}.{k}")
                assert job is not None and job.state is JobState.SUCCEEDED
    finally:
        manager.close()
        await producer.aclose()
    assert "code=-9" in manager.log(), "a worker died just after a step was made"
    print(f"\nsteps of cancelled flows started after every abort returned: {late}")
