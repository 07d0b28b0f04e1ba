"""Instructions of each piece of a chain link's worker-side Python (issue 29),
counted by callgrind, without Redis: what ``hotpath``'s ``redis_chain``
case counts as a whole (and whose count moves with the run order), here
piece by piece, the same in any order and at any load.

Each piece runs ``n`` and ``3 * n`` times in a process of its own under
``valgrind --tool=callgrind``; the figure is ``(I(3n) - I(n)) / 2n``, the
instructions of one call with the process's start-up taken out:

* ``walk``: ``chain_successor`` over a 10-link chain, from the first link's
  continuation (the producer's text, decoded once) to the flow's last step,
  as the completer walks it (per chain: 9 successors; the chain's start is
  not counted);
* ``walk_first``: only the first of them (the decode of the producer's text
  and the first successor), per chain;
* ``successor``: the completer's ``_successor`` of a link in the middle of a
  chain (its continuation found decoded, as the worker that wrote it finds
  it), with the ``Successor`` and the ``Settlement`` copy that carries it;
* ``successor_args``: the Redis store's settle.lua entries for that successor;
* ``handed_over``: the lease the worker reads back for it (``Job`` and
  ``LeasedJob``);
* ``settlement``, ``job``, ``leased_job``: one of each record (the
  constructors the pieces above call).

Compare trees (each imports its own ``chronos_trio``)::

    python -m benchmarks.chain_pieces [--trees old:new] [--pieces walk,...] [--n 1000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
PIECES = (
    "walk",
    "walk_first",
    "successor",
    "successor_args",
    "handed_over",
    "settlement",
    "job",
    "leased_job",
)


def _run_piece(piece: str, n: int) -> None:
    """The piece itself, ``n`` times (run in the measured process)."""
    from chronos_trio.actors import completer
    from chronos_trio.records import _workflow
    from chronos_trio.records._flow_build import FlowStep, chain, start
    from chronos_trio.records._jobs import Job, JobState, LeasedJob
    from chronos_trio.records._workflow import chain_successor
    from chronos_trio.store import SettleKind, Settlement, Successor
    from chronos_trio.store._results import QueueVersion, VersionState
    from chronos_trio.store.redis import _chain_settle, _jobs
    from chronos_trio.store.redis._core import QueueMeta, RedisCore
    from chronos_trio.store.redis.keys import KeySpace

    def step(payload: bytes | None = None) -> FlowStep:
        return FlowStep("link", "default", payload, 3, 30.0, payload_type=Any, result_type=Any)

    def flow(k: int) -> Any:
        return start(chain(step(b"0"), *(step() for _ in range(9))), f"{k:032x}").jobs[0]

    if piece in ("walk", "walk_first"):
        first = flow(0)
        assert first.then is not None
        text = first.then + " "
        steps = 9 if piece == "walk" else 1
        for _ in range(n):
            # a fresh copy of the text each time, as each lease reads one
            # (its hash not known yet)
            then, job_id = text[:-1], first.id
            for _ in range(steps):
                got = chain_successor(then, b"1", job_id)
                if got is None:
                    break
                then, job_id = got.jobs[0].then, got.jobs[0].id
        return
    first = flow(0)
    made = chain_successor(first.then, b"1", first.id)
    assert made is not None
    new = made.jobs[0]
    then = new.then
    assert then is not None
    job = Job(
        new.id, "default", "link", b"1", 0.0, JobState.LEASED, 1, 3, 30.0, "t", "w", 30.0,
        (1, 0), "", 0.0, None, "", None, None, (), then, None,
    )  # fmt: skip
    leased = LeasedJob(job, "t", 30.0, 0.0)
    outcome = Settlement(leased.ref, SettleKind.SUCCEEDED, "", 0.0, 0.0, b"2", 3600.0)
    successor = Successor(new, made.workflow, "w", 30.0)
    core = RedisCore(KeySpace("bench"), default_partitions=1, topology_ttl=1e9)
    active = QueueVersion(1, 1, VersionState.ACTIVE)
    core._meta["default"] = QueueMeta((active,), False, time.monotonic())
    taker = completer._Taker("w", 30.0, ["default"], {"link"})
    decoded = _workflow._load(then)
    for _ in range(n):
        if piece == "successor":
            # found decoded, as the worker that wrote it finds it (the
            # setting is a dict store: counted, small beside the rest)
            _workflow._MADE[then] = decoded
            completer._successor(then, outcome, taker)
        elif piece == "successor_args":
            _chain_settle.successor_args(core, successor, "nonce-h1")
        elif piece == "handed_over":
            _jobs._handed_over(successor, "nonce-h1", (1, 0), 1000.0)
        elif piece == "settlement":
            Settlement(leased.ref, SettleKind.SUCCEEDED, "", 0.0, 0.0, b"2", 3600.0)
        elif piece == "job":
            Job(
                new.id, "default", "link", b"1", 0.0, JobState.LEASED, 1, 3, 30.0, "t", "w",
                30.0, (1, 0), "", 0.0, None, "", None, None, (), then, None,
            )  # fmt: skip
        else:
            LeasedJob(job, "t", 30.0, 0.0)


def _instructions(tree: Path, piece: str, n: int) -> int:
    from .hotpath import callgrind_instructions

    return callgrind_instructions(tree, [sys.executable, str(HERE), "--run", piece, "--n", str(n)])


def per_call(tree: Path, piece: str, n: int) -> float:
    """Instructions of one call: (I(3n) - I(n)) / 2n."""
    return (_instructions(tree, piece, 3 * n) - _instructions(tree, piece, n)) / (2 * n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", default=str(HERE.parent.parent), help="tree[:tree...]")
    parser.add_argument("--pieces", default=",".join(PIECES))
    parser.add_argument("--n", type=int, default=1000, help="calls in the smaller run")
    parser.add_argument("--run", choices=PIECES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        _run_piece(args.run, args.n)
        return
    trees = [Path(t).resolve() for t in args.trees.split(":")]
    header = f"{'piece':<16}" + "".join(f"{t.name[-18:]:>20}" for t in trees)
    print(f"instructions per call (callgrind; n={args.n} and {3 * args.n})")
    print(header + (f"{'last/first':>12}" if len(trees) > 1 else ""))
    for piece in (p for p in args.pieces.split(",") if p):
        counts = [per_call(t, piece, args.n) for t in trees]
        row = f"{piece:<16}" + "".join(f"{c:>20,.0f}" for c in counts)
        if len(trees) > 1:
            row += f"{counts[-1] / counts[0]:>12.3f}"
        print(row, flush=True)


if __name__ == "__main__":
    main()
