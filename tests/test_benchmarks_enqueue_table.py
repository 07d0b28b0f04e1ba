"""The enqueue-per-caller benchmark's own parts (``benchmarks.enqueue_callers``
and the timing loops in ``benchmarks._common``): the medians, ranges and
ratios its table is made of, on fixed rounds; its command line; and the
loops that time each contestant's calls, with stand-in callers (no server:
the benchmark itself is run by hand, see docs/BENCHMARKS.md)."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import _common as common
from benchmarks import enqueue_callers as ec
from benchmarks import report
from benchmarks.__main__ import main as suite_main


def figures(rate: float, p50: float | None, unit: int) -> dict[str, float]:
    """Figures as ``run_caller`` makes them; ``p50`` per call (default: the
    mean of a call of ``unit`` jobs at ``rate``)."""
    us = 1e6 / rate
    return {
        "jobs_per_s": rate,
        "us_per_job": us,
        "jobs_per_call": unit,
        "p50_call_us": us * unit if p50 is None else p50,
    }


def rnd(
    caller: str,
    system: str,
    i: int,
    single: float,
    bulk: float | None = None,
    *,
    p50: float | None = None,
) -> dict[str, Any]:
    return {
        "caller": caller,
        "system": system,
        "round": i,
        "one_label": f"{system}.one",
        "many_label": None if bulk is None else f"{system}.many",
        "single": figures(single, p50, 1),
        "bulk": None if bulk is None else figures(bulk, None, 1000),
    }


#: Three interleaved rounds: huey 10k/s single (no batch call, its median
#: call 40 us: 25k/s), dramatiq 12k/s (median call 70 us), ours from sync
#: code 8k/s single (median call 60 us) and 50k/s in batches of 1,000 (a
#: batch's median 20 ms); asyncio: ours 6k/s and 40k/s, arq 5k/s (no batch),
#: streaQ 4k/s and 20k/s.
ROUNDS = [
    r
    for i, d in enumerate((-1.0, 0.0, 1.0))
    for r in (
        rnd("sync", ec.OURS, i, 8_000 + 100 * d, 50_000 + 1_000 * d, p50=60.0),
        rnd("sync", "huey", i, 10_000 + 200 * d, p50=40.0 + d),
        rnd("sync", "dramatiq", i, 12_000, p50=70.0),
        rnd("asyncio", ec.OURS, i, 6_000, 40_000),
        rnd("asyncio", "arq", i, 5_000),
        rnd("asyncio", "streaq", i, 4_000, 20_000),
    )
]


def by(rows: list[dict[str, Any]], caller: str, system: str, mode: str) -> dict[str, Any]:
    [row] = [r for r in rows if (r["caller"], r["system"], r["mode"]) == (caller, system, mode)]
    return row


def test_summarize_takes_medians_and_ranges_over_rounds() -> None:
    rows = ec.summarize(ROUNDS)
    assert [(r["caller"], r["system"], r["mode"]) for r in rows[:4]] == [
        ("sync", ec.OURS, "single"),
        ("sync", ec.OURS, "bulk"),
        ("sync", "huey", "single"),
        ("sync", "huey", "bulk"),
    ]
    ours = by(rows, "sync", ec.OURS, "single")
    assert ours["jobs_per_s"] == 8_000
    assert (ours["lo"], ours["hi"], ours["rounds"]) == (7_900, 8_100, 3)
    assert ours["us_per_job"] == pytest.approx(125.0)
    assert ours["p50_call_us"] == ours["p50_job_us"] == 60.0
    huey = by(rows, "sync", "huey", "single")
    assert (huey["p50_job_us"], huey["p50_lo"], huey["p50_hi"]) == (40.0, 39.0, 41.0)
    bulk = by(rows, "sync", ec.OURS, "bulk")
    assert bulk["p50_job_us"] == pytest.approx(bulk["p50_call_us"] / 1000)
    assert ours["label"] == f"{ec.OURS}.one"
    assert by(rows, "sync", ec.OURS, "bulk")["jobs_per_s"] == 50_000
    # no batch call: a bulk row without a figure, not a missing row
    huey_bulk = by(rows, "sync", "huey", "bulk")
    assert huey_bulk["jobs_per_s"] is None and not huey_bulk.get("error")


def test_ratios_against_huey_and_the_best_peer_of_the_same_caller() -> None:
    rows = ec.add_ratios(ec.summarize(ROUNDS))
    ours = by(rows, "sync", ec.OURS, "single")
    assert ours["vs_ref"] == pytest.approx(0.8)  # 8k / huey's 10k
    assert not ours["vs_ref_single"]
    # the best sync peer is dramatiq (12k), not huey
    assert ours["vs_best"] == pytest.approx(8_000 / 12_000)
    assert ours["best_peer"] == "dramatiq"
    # the best peer itself is at 1.0; the others below it
    assert by(rows, "sync", "dramatiq", "single")["vs_best"] == pytest.approx(1.0)
    assert by(rows, "sync", "huey", "single")["vs_ref"] == pytest.approx(1.0)
    # asyncio callers: compared with asyncio peers only (arq 5k is the best)
    a = by(rows, "asyncio", ec.OURS, "single")
    assert (a["vs_best"], a["best_peer"]) == (pytest.approx(6_000 / 5_000), "arq")
    assert a["vs_ref"] == pytest.approx(0.6)


def test_ratios_by_the_median_call_pick_their_own_best_peer() -> None:
    rows = ec.add_ratios(ec.summarize(ROUNDS))
    ours = by(rows, "sync", ec.OURS, "single")
    # by the median call huey (40 us) is the best sync peer, dramatiq (70 us) not
    assert ours["vs_ref_p50"] == pytest.approx(40 / 60)
    assert (ours["vs_best_p50"], ours["best_peer_p50"]) == (pytest.approx(40 / 60), "huey")
    assert by(rows, "sync", "dramatiq", "single")["vs_best_p50"] == pytest.approx(40 / 70)
    # a batch's median over its jobs: 20 us each, against huey's 40 us calls
    bulk = by(rows, "sync", ec.OURS, "bulk")
    assert bulk["vs_ref_p50"] == pytest.approx(2.0) and bulk["vs_ref_single_p50"]
    assert (bulk["best_peer_p50"], bulk["best_single_p50"]) == ("huey", True)


def test_bulk_ratios_use_a_single_call_rate_where_there_is_no_batch_call() -> None:
    rows = ec.add_ratios(ec.summarize(ROUNDS))
    # huey has no batch call: its N jobs are N task() calls
    ours = by(rows, "sync", ec.OURS, "bulk")
    assert ours["vs_ref"] == pytest.approx(5.0) and ours["vs_ref_single"]
    # no sync peer has one either: the best is dramatiq's single rate, marked
    assert ours["vs_best"] == pytest.approx(50_000 / 12_000)
    assert (ours["best_peer"], ours["best_single"]) == ("dramatiq", True)
    # asyncio: streaQ's batches (20k) beat arq's single calls (5k)
    a = by(rows, "asyncio", ec.OURS, "bulk")
    assert a["vs_best"] == pytest.approx(2.0)
    assert (a["best_peer"], a["best_single"]) == ("streaq", False)
    # a row without a figure has no ratios
    assert by(rows, "asyncio", "arq", "bulk")["vs_best"] is None


def test_failed_contestant_shows_and_is_left_out_of_the_ratios() -> None:
    failed = {"caller": "sync", "system": "dramatiq", "round": 0, "error": "exit 1: boom"}
    rounds = [r for r in ROUNDS if r["system"] != "dramatiq"] + [failed]
    rows = ec.add_ratios(ec.summarize(rounds))
    assert by(rows, "sync", "dramatiq", "single")["error"] == "exit 1: boom"
    ours = by(rows, "sync", ec.OURS, "single")
    assert (ours["best_peer"], ours["vs_best"]) == ("huey", pytest.approx(0.8))
    _, body = ec.table([r for r in rows if r["mode"] == "single"])
    assert any("FAILED: exit 1: boom" in cell for line in body for cell in line)


def test_without_the_reference_there_is_no_ratio_to_it() -> None:
    rows = ec.add_ratios(ec.summarize([r for r in ROUNDS if r["system"] != "huey"]))
    assert all(r["vs_ref"] is None for r in rows)
    assert by(rows, "sync", ec.OURS, "single")["best_peer"] == "dramatiq"


def test_table_cells() -> None:
    rows = ec.add_ratios(ec.summarize(ROUNDS))
    headers, body = ec.table([r for r in rows if r["mode"] == "bulk"])
    assert headers[-4:] == ["vs huey task()", "(p50)", "vs best peer, same caller", "(p50)"]
    ours = next(line for line in body if line[:2] == ["sync", ec.OURS])
    assert ours[3:7] == ["50,000", "49,000-51,000", "20.0", "20.0 (19.6-20.4)"]
    assert ours[-4:] == ["5.00x*", "2.00x*", "4.17x* (dramatiq)", "2.00x* (huey)"]
    assert all(len(line) == len(headers) for line in body)
    huey = next(line for line in body if line[:2] == ["sync", "huey"])
    assert huey[2:4] == ["(none)", "no batch call"]
    text = ec.render(rows, report.markdown_table)
    assert text.startswith("one job per call:\n| caller |")
    assert "\n\nbatches:\n| caller |" in text


def test_cli_parses() -> None:
    args = ec.parse_args([])
    assert args.peers == list(ec.PEERS)
    assert (args.runs, args.n_single, args.n_bulk, args.batch) == (3, 2_000, 20_000, 1_000)
    assert args.run_ours is None
    args = ec.parse_args(["--peers", "huey,arq", "--runs", "5", "--n-bulk", "4000", "--markdown"])
    assert args.peers == ["huey", "arq"] and args.runs == 5 and args.n_bulk == 4_000
    assert args.markdown
    assert ec.contestants(args.peers) == [
        ("sync", ec.OURS),
        ("sync", "huey"),
        ("trio", ec.OURS),
        ("asyncio", ec.OURS),
        ("asyncio", "arq"),
    ]
    assert ec.parse_args(["--run-ours", "trio", "--url", "redis://x"]).run_ours == "trio"


@pytest.mark.parametrize(
    "argv", [["--peers", "huey,nope"], ["--runs", "0"], ["--run-ours", "gevent"]]
)
def test_cli_refuses(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        ec.parse_args(argv)
    assert exc.value.code == 2


def test_suite_command_hands_over_to_it() -> None:
    # python -m benchmarks --enqueue-callers ...: the options are this
    # benchmark's own (an unknown peer is refused by its parser)
    with pytest.raises(SystemExit) as exc:
        suite_main(["--enqueue-callers", "--peers", "nope"])
    assert exc.value.code == 2


class Stand:
    """A stand-in caller that counts its calls (sync)."""

    one_label = "one"
    many_label = "many"
    calls: list[int]
    last: Stand

    def open(self, url: str) -> None:
        self.calls = []
        Stand.last = self

    def close(self) -> None:
        self.closed = True

    def one(self) -> None:
        self.calls.append(1)

    def many(self, k: int) -> None:
        self.calls.append(k)


class AStand:
    """An awaited stand-in caller without a batch call."""

    one_label = "one"
    many_label = None
    last: AStand

    async def open(self, url: str) -> None:
        self.calls = 0
        AStand.last = self

    async def close(self) -> None:
        self.closed = True

    async def one(self) -> None:
        self.calls += 1


def test_run_caller_warms_up_then_times_single_calls_and_batches() -> None:
    out = common.run_caller(Stand, "sync", "redis://x", 7, 25, 10, 3)
    calls = Stand.last.calls
    # 3 warm-up calls and one warm-up batch, then 7 single calls, then 25
    # jobs in batches of 10 (the last one smaller)
    assert calls == [1, 1, 1, 10] + [1] * 7 + [10, 10, 5]
    assert Stand.last.closed
    assert out["single"]["n"] == 7 and out["single"]["jobs_per_call"] == 1
    assert out["bulk"]["n"] == 25 and out["bulk"]["jobs_per_call"] == 10
    assert out["single"]["jobs_per_s"] > 0
    assert out["single"]["us_per_job"] == pytest.approx(1e6 / out["single"]["jobs_per_s"])
    assert (out["one_label"], out["many_label"]) == ("one", "many")


@pytest.mark.parametrize("kind", ["trio", "asyncio"])
def test_run_caller_awaits_on_either_loop(kind: str) -> None:
    out = common.run_caller(AStand, kind, "redis://x", 5, 100, 10, 2)
    assert AStand.last.calls == 7 and AStand.last.closed
    assert out["bulk"] is None and out["single"]["n"] == 5


def test_run_caller_refuses_an_unknown_class() -> None:
    with pytest.raises(ValueError, match="gevent"):
        common.run_caller(Stand, "gevent", "redis://x", 1, 1, 1, 0)
