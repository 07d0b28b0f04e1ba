"""Redis's cost of one script call: ``EVALSHA`` of a composed script against
the same script loaded once as a Redis Function (``FCALL``), in instructions.

A private ``redis-server`` (7.0 or later: functions) runs under
``valgrind --tool=callgrind``, counting only inside ``call()`` (the running
of a command, whatever it is; not networking or parsing), dumped before
every ``ECHO``, which the workload sends around each case, so a case's
count is exact whatever else runs on the machine. ``--cluster`` runs it
Cluster-enabled, every slot its own (what a Cluster master pays on top:
the slot checks of the commands inside a script).

Each case makes ``--calls`` calls on one partition (``{bq:p1}``) whose jobs
are written here as a ready record of the current format (20-byte
payloads) before the case:

* ``trivial``: ``return 1`` with lease.lua's 6 keys and 5 arguments (the
  floor: the call, its ``KEYS``/``ARGV`` tables and the reply);
* ``lease_empty``: lease.lua on an empty ready zset (its fixed cost: the
  pieces and its own functions defined, a ``ZCARD``);
* ``lease_one`` / ``lease_64``: lease.lua leasing 1 / 64 jobs a call;
* ``peek_equal`` / ``peek_distinct``: peek_ready.lua over 64 entries that
  share one due time (a bulk enqueue's) / each have their own (jobs
  enqueued one at a time): what a Cluster's lease asks of every partition
  first (EVALSHA only); ``peek_distinct_16`` the same read no further
  than 16 entries (its ``ARGV[3]``, what a lease of 64 over 8 partitions
  asks first).

The function form of a script is its pieces and own text inside a Lua
function that a registered function calls once, on its first call, to
make the script's function, which later calls reuse: Redis 7.0 runs a
library's top level with nothing but ``redis`` in reach (a piece that
reads ``string`` or ``math`` there fails ``FUNCTION LOAD``), and the
script's own text then gets ``KEYS`` and ``ARGV`` as parameters, not
globals. Only what the pieces define is made once; the script's own local
functions are still made at every call, as with ``EVALSHA``.

    python -m benchmarks.script_call_cost [--cluster] [--calls 300]

Needs ``valgrind`` and ``redis-server`` >= 7.0.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from chronos_trio.store.redis import _scripts as S
from chronos_trio.store.redis._codec import RECORD_FORMAT
from chronos_trio.store.redis._compose import resolve
from chronos_trio.store.redis.keys import LEASED_SENTINEL
from chronos_trio.testing.redis_server import free_port

from .redis_scripts import wait_until_serving

TAG = "{bq:p1}"
#: lease.lua's keys of one partition (see its header).
KEYS = [f"{TAG}:{k}" for k in ("ready", "leased", "tokens", "job:", "dead", "damaged")]
FUNCTION = "bench_lease"
CASES = (
    "trivial", "lease_empty", "lease_one", "lease_64", "peek_equal", "peek_distinct",
    "peek_distinct_16",
)  # fmt: skip


def library(script: S.Script, name: str) -> bytes:
    """``script`` as a function library ``name`` with one function ``name``
    (see the module's doc)."""
    own_file = Path(S.__file__).with_name("lua") / f"{script.name}.lua"
    order, own = resolve(script.name, own_file.read_bytes(), S.piece)
    n = name.encode()
    return b"".join(
        [
            b"#!lua name=%s\nlocal function make()\n" % n,
            *(body for _, body in order),
            b"return function(KEYS, ARGV)\n",
            own,
            b"\nend\nend\nlocal run\n",
            b"redis.register_function('%s', function(KEYS, ARGV)\n" % n,
            b"  run = run or make()\n  return run(KEYS, ARGV)\nend)\n",
        ]
    )


def fill(c: redis.Redis, n: int, *, equal: bool = False) -> None:
    """An empty partition, then ``n`` ready jobs in it (one due time for
    all when ``equal``, else one each)."""
    c.delete(*KEYS[:3], KEYS[4], KEYS[5])
    c.zadd(KEYS[1], {LEASED_SENTINEL: float("inf")})
    p = c.pipeline(transaction=False)
    for i in range(n):
        jid = f"j{i:08d}"
        fields = {
            "v": RECORD_FORMAT, "kind": "bench.job", "payload": "x" * 20, "attempts": 0,
            "max_retries": 3, "timeout": 10, "created_at": 1.0, "state": "ready", "run_at": 1.0,
        }  # fmt: skip
        p.hset(KEYS[3] + jid, mapping=fields)  # type: ignore[arg-type]
        p.zadd(KEYS[0], {jid: 1.0 if equal else 1.0 + i})
        if i % 1000 == 999:
            p.execute()
    p.execute()


def _summary(path: Path) -> int:
    text = path.read_text()
    match = re.search(r"^summary: (\d+)", text, re.M) or re.search(r"^totals: (\d+)", text, re.M)
    return int(match.group(1)) if match else 0


def _calls(c: redis.Redis, case: str, mode: str, calls: int, shas: dict[str, str]) -> None:
    """Set up ``case`` (see the module's doc), then make its ``calls`` calls."""
    per = 64 if case == "lease_64" else 1
    if case.startswith("peek"):
        fill(c, 2000, equal=case == "peek_equal")
    else:
        fill(c, 0 if case in ("trivial", "lease_empty") else calls * per)
    argv: list[Any] = [per, 30, "bench", "nonce", LEASED_SENTINEL]
    c.echo("mark")  # the server dumps its counts before this runs
    for _ in range(calls):
        if case.startswith("peek"):
            cap = [0, 16] if case.endswith("_16") else []
            c.execute_command("EVALSHA", shas["peek"], 1, KEYS[0], 64, *cap)
        elif mode == "evalsha":
            sha = shas["trivial" if case == "trivial" else "lease"]
            c.execute_command("EVALSHA", sha, len(KEYS), *KEYS, *argv)
        else:
            name = "bench_trivial" if case == "trivial" else FUNCTION
            c.execute_command("FCALL", name, len(KEYS), *KEYS, *argv)
    c.echo("mark")


def measure(calls: int, *, cluster: bool) -> list[tuple[str, str, float]]:
    """(case, mode, instructions per call) of every case, EVALSHA and FCALL
    in turn, each twice."""
    port = free_port(with_bus=cluster)
    with tempfile.TemporaryDirectory(prefix="chronos-cg-") as tmp:
        argv = [
            shutil.which("valgrind") or "valgrind", "--tool=callgrind",
            f"--callgrind-out-file={tmp}/cg.out", "--dump-before=echoCommand",
            "--toggle-collect=call",
            shutil.which("redis-server") or "redis-server",
            "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", tmp, "--logfile", "redis.log",
        ]  # fmt: skip
        if cluster:
            argv += ["--cluster-enabled", "yes", "--cluster-config-file", f"{tmp}/nodes.conf"]
        server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        order: list[tuple[str, str]] = []
        try:
            wait_until_serving(server, port)
            c = redis.Redis(port=port)
            if cluster:
                c.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
                while b"cluster_state:ok" not in c.execute_command("CLUSTER", "INFO"):
                    time.sleep(0.2)
            trivial = b"return 1"
            shas = {
                "trivial": c.script_load(trivial),
                "lease": c.script_load(S.LEASE.source),
                "peek": c.script_load(S.PEEK_READY.source),
            }
            c.execute_command("FUNCTION", "LOAD", library(S.LEASE, FUNCTION))
            c.execute_command(
                "FUNCTION", "LOAD",
                b"#!lua name=bench_trivial\n"
                b"redis.register_function('bench_trivial', function(KEYS, ARGV) return 1 end)",
            )  # fmt: skip
            for case in CASES:
                modes = ("evalsha",) if case.startswith("peek") else ("evalsha", "fcall")
                for mode in modes * 2:
                    _calls(c, case, mode, calls, shas)
                    order.append((case, mode))
        finally:
            server.terminate()
            server.wait(60)
        dumps = sorted(Path(tmp).glob("cg.out.*"), key=lambda p: int(p.name.rsplit(".", 1)[1]))
        counts = [_summary(p) for p in dumps]
    # dump 1: start-up and the first case's set-up (to its first mark); then
    # per case its calls (to its second mark) and the next case's set-up
    return [(case, mode, counts[1 + 2 * i] / calls) for i, (case, mode) in enumerate(order)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="calls per case and turn")
    parser.add_argument("--cluster", action="store_true", help="a Cluster-enabled server")
    args = parser.parse_args()
    rows = measure(args.calls, cluster=args.cluster)
    where = "Cluster-enabled" if args.cluster else "one node"
    print(f"Redis instructions per call inside call() (callgrind, {where}, {args.calls} calls)")
    print(f"{'case':<16}{'mode':<10}{'turn 1':>12}{'turn 2':>12}")
    seen: dict[tuple[str, str], list[float]] = {}
    for case, mode, count in rows:
        seen.setdefault((case, mode), []).append(count)
    for (case, mode), counts in seen.items():
        print(f"{case:<16}{mode:<10}" + "".join(f"{c:>12,.0f}" for c in counts))


if __name__ == "__main__":
    main()
