"""Tables (terminal and Markdown) and charts of a results document.

A results document is the JSON that ``python -m benchmarks`` writes:
``{"meta": {...}, "workloads": {name: [row, ...]}}``; each row has
``system``, ``setting`` and the median figures of its runs (``ok`` False with
``error`` for a run that failed or a workload a peer cannot do).

A table's ratios compare chronos_trio with each peer in the same setting
(``ratio``), or each row with the first row of its system (``baseline``: the
scale workload, where flat is 1.0x); ``details`` adds a second table made
from the rows (the memory workload's key groups).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

OURS = "chronos_trio"

#: Per workload: the columns (key, header, format) and the figure used for the
#: chronos_trio/peer ratio (with whether higher is better).
Column = tuple[str, str, str]
TABLES: dict[str, dict[str, Any]] = {
    "lifecycle": {
        "title": "1. Store lifecycle (enqueue > promote > lease > renew > complete), us/job",
        "columns": [
            ("enqueue_us", "enqueue", "{:.1f}"),
            ("promote_us", "promote", "{:.1f}"),
            ("lease_us", "lease", "{:.1f}"),
            ("renew_us", "renew", "{:.1f}"),
            ("complete_us", "complete", "{:.1f}"),
            ("cycle_us", "us/job", "{:.1f}"),
            ("jobs_per_s", "jobs/s", "{:,.0f}"),
        ],
    },
    "drain": {
        "title": "2. Drain: pre-enqueued no-op jobs, jobs/s (higher is better)",
        "columns": [("jobs_per_s", "jobs/s", "{:,.0f}"), ("completed", "done", "{:,.0f}")],
        "ratio": [("jobs_per_s", True, "chronos/peer")],
    },
    "cluster": {
        "title": "2b. Drain on a local 3-master Redis Cluster (pN: N partitions) against one node "
        "(1 partition), both in every run: jobs/s, Cluster/node (median of the runs' ratios), "
        "CPU us per job (Redis: the masters' summed)",
        "columns": [
            ("single_per_s", "node jobs/s", "{:,.0f}"),
            ("cluster_per_s", "cluster jobs/s", "{:,.0f}"),
            ("ratio", "ratio", "{:.2f}"),
            ("single_worker_cpu_us", "worker us node", "{:.1f}"),
            ("cluster_worker_cpu_us", "worker us cluster", "{:.1f}"),
            ("single_redis_cpu_us", "redis us node", "{:.1f}"),
            ("cluster_redis_cpu_us", "redis us cluster", "{:.1f}"),
            ("loadavg1", "load", "{:.2f}"),
        ],
    },
    "saturation": {
        "title": "3. Saturation: 4 producers enqueue while one worker consumes",
        "columns": [
            ("jobs_per_s", "jobs/s", "{:,.0f}"),
            ("enqueue_per_s", "enq/s", "{:,.0f}"),
            ("p50_ms", "p50 ms", "{:.2f}"),
            ("p95_ms", "p95 ms", "{:.2f}"),
            ("p99_ms", "p99 ms", "{:.2f}"),
        ],
    },
    "enqueue": {
        "title": "4. Enqueue, jobs/s (higher is better)",
        "columns": [
            ("single_per_s", "one-at-a-time", "{:,.0f}"),
            ("concurrent_per_s", "32 producers", "{:,.0f}"),
            ("bulk_per_s", "bulk", "{:,.0f}"),
        ],
        "ratio": [
            ("single_per_s", True, "ratio 1-by-1"),
            ("concurrent_per_s", True, "ratio 32 prod."),
            ("bulk_per_s", True, "ratio bulk"),
        ],
    },
    "replicas": {
        "title": "4b. Enqueue against a master with one replica: the cost of wait_replicas=1 "
        "(WAIT after each round trip; slices of both interleaved; p50 per call)",
        "columns": [
            ("single_per_s", "1-by-1/s", "{:,.0f}"),
            ("single_wait_per_s", "+WAIT/s", "{:,.0f}"),
            ("single_p50_us", "p50 us", "{:.0f}"),
            ("single_wait_p50_us", "+WAIT p50 us", "{:.0f}"),
            ("bulk_per_s", "bulk/s", "{:,.0f}"),
            ("bulk_wait_per_s", "+WAIT/s", "{:,.0f}"),
            ("bulk_p50_us", "p50 us/1000", "{:.0f}"),
            ("bulk_wait_p50_us", "+WAIT p50 us/1000", "{:.0f}"),
        ],
    },
    "pickup": {
        "title": "5. Pickup latency of immediate jobs at a steady light rate (enqueue -> start)",
        "columns": [
            ("p50_ms", "p50 ms", "{:.2f}"),
            ("p95_ms", "p95 ms", "{:.2f}"),
            ("p99_ms", "p99 ms", "{:.2f}"),
            ("max_ms", "max ms", "{:.2f}"),
        ],
    },
    "lateness": {
        "title": "6. Delayed-job lateness: start - run_at (lower is better)",
        "columns": [
            ("p50_ms", "p50 ms", "{:.1f}"),
            ("p99_ms", "p99 ms", "{:.1f}"),
            ("max_ms", "max ms", "{:.1f}"),
        ],
        "ratio": [("p99_ms", False, "chronos/peer p99")],
    },
    "recovery": {
        "title": "7. Recovery after kill -9 of a worker holding leases (seconds after the kill)",
        "columns": [
            ("first_s", "first restart", "{:.2f}"),
            ("all_s", "all restarted", "{:.2f}"),
            ("recovered", "jobs", "{:.0f}"),
            ("lease_duration_s", "lease s", "{:.0f}"),
        ],
    },
    "idle": {
        "title": "8. Idle cost: Redis commands/s issued by one idle worker",
        "columns": [("commands_per_s", "commands/s", "{:.2f}")],
    },
    "results": {
        "title": "9. Drain with a small attrs result stored vs returning None, one worker "
        "process, c=64: separate drains and alternating blocks in one drain (both in every "
        "run); jobs/s, result/None (median of the runs' ratios), CPU us per job",
        "columns": [
            ("plain_per_s", "sep. None/s", "{:,.0f}"),
            ("result_per_s", "sep. result/s", "{:,.0f}"),
            ("ratio", "sep. ratio", "{:.3f}"),
            ("mixed_plain_per_s", "blocks None/s", "{:,.0f}"),
            ("mixed_result_per_s", "blocks result/s", "{:,.0f}"),
            ("mixed_ratio", "blocks ratio", "{:.3f}"),
            ("plain_worker_cpu_us", "worker us None", "{:.1f}"),
            ("result_worker_cpu_us", "worker us result", "{:.1f}"),
            ("plain_redis_cpu_us", "redis us None", "{:.1f}"),
            ("result_redis_cpu_us", "redis us result", "{:.1f}"),
        ],
    },
    "roundtrip": {
        "title": "10. Result round trip at a steady light rate: enqueue -> result in hand "
        "(lower is better)",
        "columns": [
            ("p50_ms", "p50 ms", "{:.2f}"),
            ("p95_ms", "p95 ms", "{:.2f}"),
            ("p99_ms", "p99 ms", "{:.2f}"),
            ("max_ms", "max ms", "{:.2f}"),
            ("samples", "samples", "{:,.0f}"),
        ],
        "ratio": [("p50_ms", False, "chronos/peer p50"), ("p99_ms", False, "chronos/peer p99")],
    },
    "waiters": {
        "title": "11. Concurrent result() waiters in one process: jobs due together "
        "(times from the due time; wake = handler ran -> result in the waiter's hands)",
        "columns": [
            ("waiters", "waiters", "{:,.0f}"),
            ("blocked_ms", "all blocked ms", "{:.0f}"),
            ("all_back_ms", "all back ms", "{:.1f}"),
            ("wake_p50_ms", "wake p50 ms", "{:.1f}"),
            ("wake_p99_ms", "wake p99 ms", "{:.1f}"),
            ("conns_waiting", "conns while blocked", "{:.0f}"),
            ("conns_subscribed", "of them subscribed", "{:.0f}"),
            ("peak_extra_clients", "peak extra clients", "{:.0f}"),
            ("accepted", "conns accepted", "{:,.0f}"),
        ],
    },
    "incr": {
        "title": "12. One Redis round trip per job: drain of pre-enqueued jobs whose handler "
        "makes one INCR the system's own way (ours: job.redis; asyncio peers: an asyncio "
        "client; thread peers: sync redis-py), one worker process, jobs/s (higher is better)",
        "columns": [
            ("jobs_per_s", "jobs/s", "{:,.0f}"),
            ("completed", "done", "{:,.0f}"),
            ("incr_count", "INCRs", "{:,.0f}"),
        ],
        "ratio": [("jobs_per_s", True, "chronos/peer")],
    },
    "io": {
        "title": "13. I/O-bound handlers: each awaits 1 ms (trio.sleep / asyncio.sleep / "
        "time.sleep in threads), one worker process at concurrency C; drain of pre-enqueued "
        "jobs, jobs/s against the ideal C / 1 ms (higher is better)",
        "columns": [
            ("jobs_per_s", "jobs/s", "{:,.0f}"),
            ("ideal_per_s", "ideal/s", "{:,.0f}"),
            ("of_ideal", "of ideal", "{:.1%}"),
            ("completed", "done", "{:,.0f}"),
        ],
        "ratio": [("jobs_per_s", True, "chronos/peer")],
    },
    "startup": {
        "title": "14. Start-up: worker CLI spawned -> first job handled (one job waiting), "
        "one process (lower is better)",
        "columns": [("startup_s", "seconds", "{:.3f}")],
        "ratio": [("startup_s", False, "chronos/peer")],
    },
    "memory": {
        "title": "15. Memory per job: N delayed jobs (due in 1 h, no worker running), one "
        "100-character str argument each; Redis used_memory delta / N after FLUSHALL, and the "
        "per-job key if the system has one (lower is better)",
        "columns": [
            ("enqueued", "jobs", "{:,.0f}"),
            ("bytes_per_job", "bytes/job", "{:,.0f}"),
            ("message_bytes", "message B", "{:,.0f}"),
            ("keys_per_job", "keys/job", "{:.2f}"),
            ("job_key", "per-job key", "{}"),
            ("job_key_memory", "MEMORY USAGE", "{:,.0f}"),
            ("job_key_encoding", "encoding", "{}"),
            ("index", "largest shared key", "{}"),
            ("enqueue_per_s", "enqueued/s", "{:,.0f}"),
        ],
        "ratio": [("bytes_per_job", False, "chronos/peer")],
        "details": "memory_keys",
    },
    "scale": {
        "title": "16. Scale: chronos_trio with S delayed jobs scheduled a month ahead in the "
        "same queue: idle pickup at 100 jobs/s (c=16), drain of immediate jobs (c=64), "
        "lateness of jobs due over 1 s (c=16), store calls (64 jobs/call); ratios: this S / "
        "the first S (flat = 1.0x)",
        "columns": [
            ("scheduled", "scheduled", "{:,.0f}"),
            ("load_per_s", "loaded/s", "{:,.0f}"),
            ("bytes_per_job", "bytes/job", "{:,.0f}"),
            ("pickup_p50_ms", "pickup p50 ms", "{:.2f}"),
            ("pickup_p99_ms", "pickup p99 ms", "{:.2f}"),
            ("drain_per_s", "drain jobs/s", "{:,.0f}"),
            ("drain_redis_cpu_us", "redis CPU us/job", "{:.1f}"),
            ("late_p50_ms", "late p50 ms", "{:.1f}"),
            ("late_p99_ms", "late p99 ms", "{:.1f}"),
            ("promote_us", "promote us", "{:.1f}"),
            ("lease_us", "lease us", "{:.1f}"),
            ("complete_us", "complete us", "{:.1f}"),
        ],
        "baseline": [
            ("pickup_p99_ms", "pickup p99"),
            ("drain_per_s", "drain"),
            ("drain_redis_cpu_us", "redis CPU"),
            ("late_p99_ms", "late p99"),
            ("promote_us", "promote"),
            ("lease_us", "lease"),
            ("complete_us", "complete"),
        ],
    },
}

#: The memory workload's key groups, one line per group of keys (the second
#: table of ``memory``): MEMORY USAGE is one key's for per-job keys, the whole
#: structure's for shared ones; its share per job either way.
MEMORY_KEYS: list[Column] = [
    ("pattern", "key (job IDs as *)", "{}"),
    ("type", "type", "{}"),
    ("encoding", "encoding", "{}"),
    ("count", "keys", "{:,.0f}"),
    ("length", "entries", "{:,.0f}"),
    ("memory_usage", "MEMORY USAGE", "{:,.0f}"),
    ("bytes_per_job", "per job", "{:,.1f}"),
    ("entry_bytes", "entry B", "{:,.0f}"),
]


def _fmt(value: Any, spec: str) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float) and math.isnan(value):
        return "-"
    try:
        return spec.format(value)
    except (TypeError, ValueError):
        return str(value)


def _ratio(rows: Sequence[dict[str, Any]], row: dict[str, Any], key: str, higher: bool) -> str:
    if row["system"] == OURS:
        return ""
    ours = next((r for r in rows if r["system"] == OURS and r["setting"] == row["setting"]), None)
    if ours is None or not row.get("ok", True) or not ours.get("ok", True):
        return ""
    a, b = ours.get(key), row.get(key)
    if not a or not b or any(isinstance(v, float) and math.isnan(v) for v in (a, b)):
        return ""
    r = a / b
    return f"{r:.1f}x" if r >= 0.95 else f"{r:.2g}x"


def _of_first(rows: Sequence[dict[str, Any]], row: dict[str, Any], key: str) -> str:
    """``row``'s ``key`` over the first row's of its system (blank for that one)."""
    first = next(r for r in rows if r["system"] == row["system"])
    if first is row or first.get("error"):
        return ""
    a, b = row.get(key), first.get(key)
    if not a or not b or any(isinstance(v, float) and math.isnan(v) for v in (a, b)):
        return ""
    return f"{a / b:.2f}x"


def table_rows(name: str, rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    spec = TABLES[name]
    headers = ["system", "setting"] + [h for _, h, _ in spec["columns"]]
    ratios = spec.get("ratio", [])
    headers += [label for _, _, label in ratios]
    baseline = spec.get("baseline", [])
    headers += [f"{label} x" for _, label in baseline]
    body = []
    for row in rows:
        cells = [row["system"], row["setting"]]
        if row.get("error"):
            cells += [f"FAILED: {row['error']}"] + [""] * (len(spec["columns"]) - 1)
        else:
            cells += [_fmt(row.get(k), f) for k, _, f in spec["columns"]]
            if not row.get("ok", True):
                cells[-1] += " (incomplete)"
        for key, higher, _ in ratios:
            cells.append("" if row.get("error") else _ratio(rows, row, key, higher))
        for key, _ in baseline:
            cells.append("" if row.get("error") else _of_first(rows, row, key))
        body.append(cells)
    return headers, body


def memory_keys(rows: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """One line per key group of each memory row (see :data:`MEMORY_KEYS`)."""
    headers = ["system", "setting"] + [h for _, h, _ in MEMORY_KEYS]
    body = []
    for row in rows:
        for group in row.get("key_groups") or ():
            cells = [row["system"], row["setting"]]
            body.append(cells + [_fmt(group.get(k), f) for k, _, f in MEMORY_KEYS])
    return headers, body


#: Second tables, by the name a ``details`` entry of :data:`TABLES` gives.
DETAILS: dict[str, Callable[[Sequence[dict[str, Any]]], tuple[list[str], list[list[str]]]]] = {
    "memory_keys": memory_keys,
}


def text_table(headers: list[str], body: list[list[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *body, strict=False)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "-" * len(line)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in body]
    return "\n".join(out)


def markdown_table(headers: list[str], body: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(out)


def render(doc: dict[str, Any], fmt: Callable[[list[str], list[list[str]]], str]) -> str:
    parts = []
    for name, rows in doc["workloads"].items():
        if not rows or name not in TABLES:
            continue
        title = TABLES[name]["title"]
        parts.append(f"### {title}" if fmt is markdown_table else f"== {title}")
        parts.append(fmt(*table_rows(name, rows)))
        parts.append("")
        details = TABLES[name].get("details")
        if details:
            parts.append(fmt(*DETAILS[details](rows)))
            parts.append("")
    return "\n".join(parts)


# -- charts ---------------------------------------------------------------------------------


MODES = (
    ("single_per_s", "one-at-a-time"),
    ("concurrent_per_s", "32 producers"),
    ("bulk_per_s", "bulk"),
)


def charts(doc: dict[str, Any], out_dir: Path) -> list[Path]:
    """PNG charts where a picture reads better; [] when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    w = doc["workloads"]
    if w.get("drain"):
        written.append(_grouped_bars(plt, w["drain"], "jobs_per_s", "jobs/s",
                                     "Drain of 20,000 no-op jobs (higher is better)",
                                     out_dir / "drain.png", log=True))  # fmt: skip
    if w.get("enqueue"):
        rows = []
        for r in w["enqueue"]:
            for key, label in MODES:
                rows.append({**r, "setting": label, "value": r.get(key)})
        written.append(_grouped_bars(plt, rows, "value", "jobs/s",
                                     "Enqueue throughput (higher is better)",
                                     out_dir / "enqueue.png", log=True))  # fmt: skip
    if w.get("lateness"):
        rows = []
        for r in w["lateness"]:
            for key in ("p50_ms", "p99_ms"):
                rows.append({**r, "setting": f"{r['setting']} {key[:3]}", "value": r.get(key)})
        written.append(_grouped_bars(plt, rows, "value", "ms (log)",
                                     "Delayed-job lateness, start - run_at (lower is better)",
                                     out_dir / "lateness.png", log=True))  # fmt: skip
    if w.get("lifecycle"):
        written.append(_lifecycle(plt, w["lifecycle"], out_dir / "lifecycle.png"))
    if w.get("incr"):
        written.append(_grouped_bars(plt, w["incr"], "jobs_per_s", "jobs/s (log)",
                                     "Drain, one Redis round trip (INCR) per job "
                                     "(higher is better)",
                                     out_dir / "incr.png", log=True))  # fmt: skip
    if w.get("io"):
        rows = list(w["io"])
        for setting in dict.fromkeys(r["setting"] for r in rows):
            ideal = next((r.get("ideal_per_s") for r in rows if r["setting"] == setting), None)
            rows.append({"system": "ideal (C / 1 ms)", "setting": setting, "value": ideal})
        rows = [{**r, "value": r.get("value", r.get("jobs_per_s"))} for r in rows]
        written.append(_grouped_bars(plt, rows, "value", "jobs/s (log)",
                                     "Handlers awaiting 1 ms each, against the ideal "
                                     "(higher is better)",
                                     out_dir / "io.png", log=True))  # fmt: skip
    if w.get("startup"):
        rows = [{**r, "value": r.get("startup_s")} for r in w["startup"]]
        written.append(_grouped_bars(plt, rows, "value", "seconds",
                                     "Worker start-up: spawn -> first job handled "
                                     "(lower is better)",
                                     out_dir / "startup.png", label_fmt="{:.3f}"))  # fmt: skip
    return written


def _grouped_bars(
    plt: Any, rows: list[dict[str, Any]], key: str, ylabel: str, title: str, path: Path,
    *, log: bool = False, label_fmt: str | None = None,
) -> Path:  # fmt: skip
    settings = list(dict.fromkeys(r["setting"] for r in rows))
    systems = list(dict.fromkeys(r["system"] for r in rows))
    fig, ax = plt.subplots(figsize=(max(7, 1.3 * len(settings) + 3), 4.2))
    width = 0.8 / max(1, len(systems))
    for i, system in enumerate(systems):
        xs, ys = [], []
        for j, setting in enumerate(settings):
            row = next((r for r in rows if r["system"] == system and r["setting"] == setting), None)
            value = row.get(key) if row and not row.get("error") else None
            if isinstance(value, int | float) and not math.isnan(value) and value > 0:
                xs.append(j + i * width)
                ys.append(value)
        bars = ax.bar(xs, ys, width, label=system)
        fmt = label_fmt or ("{:,.0f}" if max(ys, default=0) >= 100 else "{:.1f}")
        ax.bar_label(bars, fmt=fmt, fontsize=6, rotation=90, padding=2)
    ax.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(settings))])
    ax.set_xticklabels(settings, fontsize=8)
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if len(systems) > 5:  # beside the axes: inside, it would cover the bars
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.legend(fontsize=8)
    ax.margins(y=0.25)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _lifecycle(plt: Any, rows: list[dict[str, Any]], path: Path) -> Path:
    labels = [r["setting"] for r in rows]
    values = [r.get("cycle_us") or 0.0 for r in rows]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.5))
    bars = ax.barh(labels, values, color="tab:blue")
    ax.bar_label(bars, fmt="{:,.1f} us", fontsize=7, padding=3)
    ax.set_xscale("log")
    ax.set_xlabel("microseconds per job, whole cycle (log; lower is better)")
    ax.set_title("Store lifecycle: enqueue > promote > lease > renew > complete", fontsize=10)
    ax.invert_yaxis()
    ax.margins(x=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
