"""What jobs cost in Redis memory (the ``memory`` and ``scale`` workloads;
sync redis-py, in the orchestrating process).

:func:`measure` empties the server (``FLUSHALL SYNC``, ``SCRIPT FLUSH``),
reads ``INFO memory``, lets a system enqueue its jobs (in this process or
in a peer's own), waits until every connection but the admin one is closed
(a client's buffers count in ``used_memory`` too), reads ``INFO memory``
again: bytes per job = the ``used_memory`` delta / jobs enqueued. That
delta is everything the jobs brought: their keys, the main dictionary's
growth (its table doubles, so bytes/job steps with N), the expires
dictionary for keys with a TTL, the system's Lua scripts (a few KB).

:func:`key_groups` then describes what is stored: every key (``SCAN``)
grouped by its name with job IDs taken out, and for one key of each group
its type, ``OBJECT ENCODING``, ``MEMORY USAGE ... SAMPLES 0`` and one
stored entry (a per-job key's whole value, or one member of a shared
structure), so each system's message can be read as it is.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

#: A sync ``redis.Redis`` with bytes replies (redis-py types its replies as
#: unions of every possible kind, so the reads here are not checked by type).
Client = Any

#: Job IDs in key names: UUIDs (with or without dashes) and runs of 16+ hex
#: digits; what is left of a name is its group.
_ID = re.compile(
    rb"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    rb"|[0-9a-fA-F]{16,}"
)
#: A key group this share of the jobs (or more) counts as per-job keys.
PER_JOB = 0.5


def flushall(client: Client) -> None:
    client.execute_command("FLUSHALL", "SYNC")
    client.script_flush()


def memory_info(client: Client) -> dict[str, int]:
    info = client.info("memory")
    keys = ("used_memory", "used_memory_dataset", "used_memory_scripts")
    return {k: int(info.get(k, 0)) for k in keys}


def wait_clients(client: Client, clients: int, timeout: float = 10.0) -> int:
    """Until at most ``clients`` connections are open (ours included); how many are."""
    deadline = time.monotonic() + timeout
    while True:
        now = int(client.info("clients")["connected_clients"])
        if now <= clients or time.monotonic() > deadline:
            return now
        time.sleep(0.05)


def measure(
    client: Client, enqueue: Callable[[], dict[str, Any]], *, keys: bool = True
) -> dict[str, Any]:
    """One system's jobs in an empty server: ``enqueue()`` stores them and
    returns at least ``enqueued`` (how many); the figures of the module doc.
    ``keys``: also the key groups (a SCAN of every key)."""
    flushall(client)
    base_clients = wait_clients(client, 1)
    time.sleep(0.2)
    before = memory_info(client)
    row = dict(enqueue())
    left = wait_clients(client, base_clients)
    after = memory_info(client)
    n = int(row["enqueued"])
    delta = {k: after[k] - before[k] for k in before}
    row.update(
        {
            "bytes_per_job": delta["used_memory"] / n if n else float("nan"),
            "dataset_bytes_per_job": delta["used_memory_dataset"] / n if n else float("nan"),
            "used_memory_delta": delta["used_memory"],
            "scripts_delta": delta["used_memory_scripts"],
            "keys": int(client.dbsize()),
            "keys_per_job": int(client.dbsize()) / n if n else float("nan"),
            "clients_left": left - base_clients,
        }
    )
    if keys and n:
        groups = key_groups(client, n)
        row["key_groups"] = groups
        row.update(summary(groups, n))
    return row


def key_groups(client: Client, jobs: int) -> list[dict[str, Any]]:
    """Every key, grouped by name with job IDs replaced by ``*`` (largest
    group first), each with one key of it described (see the module doc)."""
    groups: dict[bytes, list[Any]] = {}  # pattern -> [count, one key]
    for key in client.scan_iter(count=1000):
        pattern = _ID.sub(b"*", key)
        entry = groups.setdefault(pattern, [0, key])
        entry[0] += 1
    out = []
    for pattern, (count, key) in sorted(groups.items(), key=lambda kv: -kv[1][0]):
        kind = client.type(key).decode()
        usage = int(client.memory_usage(key, samples=0) or 0)
        group: dict[str, Any] = {
            "pattern": pattern.decode(errors="replace"),
            "type": kind,
            "count": count,
            "per_job": count >= PER_JOB * jobs,
            "encoding": client.object("encoding", key).decode(),
            "memory_usage": usage,
            "ttl_s": int(client.ttl(key)),
            **_entry(client, key, kind),
        }
        # one key per job: the group's share is count x this key; a shared
        # structure: its own usage spread over the jobs
        group["bytes_per_job"] = usage * count / jobs
        out.append(group)
    return out


def _entry(client: Client, key: bytes, kind: str) -> dict[str, Any]:
    """The size of ``key`` (members, fields, bytes) and one entry of it: its
    whole value when small (a string, a per-job hash), else one member."""
    if kind == "string":
        value = client.get(key) or b""
        return {"length": len(value), "entry_bytes": len(value), "entry": _show(value)}
    if kind == "hash":
        length = int(client.hlen(key))
        if length <= 32:
            fields = client.hgetall(key)
            size = sum(len(f) + len(v) for f, v in fields.items())
            shown = {_show(f): _show(v) for f, v in fields.items()}
            return {"length": length, "entry_bytes": size, "entry": shown}
        field, value = client.hrandfield(key, 1, withvalues=True)
        return {"length": length, "entry_bytes": len(value), "entry": {_show(field): _show(value)}}
    if kind == "zset":
        [(member, score)] = client.zrange(key, 0, 0, withscores=True) or [(b"", 0.0)]
        entry = {"member": _show(member), "score": score}
        return {"length": int(client.zcard(key)), "entry_bytes": len(member), "entry": entry}
    if kind == "list":
        value = client.lindex(key, 0) or b""
        return {"length": int(client.llen(key)), "entry_bytes": len(value), "entry": _show(value)}
    if kind == "set":
        value = client.srandmember(key) or b""
        return {"length": int(client.scard(key)), "entry_bytes": len(value), "entry": _show(value)}
    if kind == "stream":
        first = client.xrange(key, count=1)
        fields = first[0][1] if first else {}
        size = sum(len(f) + len(v) for f, v in fields.items())
        shown = {_show(f): _show(v) for f, v in fields.items()}
        return {"length": int(client.xlen(key)), "entry_bytes": size, "entry": shown}
    return {"length": None, "entry_bytes": None, "entry": None}


def _show(value: bytes, limit: int = 600) -> str:
    text = value.decode("utf-8", errors="backslashreplace")
    return text if len(text) <= limit else text[:limit] + f"...(+{len(text) - limit})"


def summary(groups: list[dict[str, Any]], jobs: int) -> dict[str, Any]:
    """Flat figures for the table: the per-job key(s) (their memory usage
    added when a job has several), the largest shared structure, and the
    bytes one job's message takes as stored (its key's value, or its member
    of the shared structure)."""
    per_job = [g for g in groups if g["per_job"]]
    shared = sorted((g for g in groups if not g["per_job"]), key=lambda g: -g["memory_usage"])
    row: dict[str, Any] = {"job_key": "none", "job_key_memory": None, "job_key_encoding": None}
    if per_job:  # one key per job, or (taskiq, streaQ) more
        row.update(
            {
                "job_key": " + ".join(f"{g['type']} {g['pattern']}" for g in per_job),
                "job_key_memory": sum(g["memory_usage"] for g in per_job),
                "job_key_encoding": " + ".join(g["encoding"] for g in per_job),
                "message_bytes": sum(g["entry_bytes"] or 0 for g in per_job),
            }
        )
    if shared:
        big = shared[0]
        row["index"] = f"{big['type']} {big['encoding']} {big['pattern']}"
        row["index_bytes_per_job"] = big["memory_usage"] / jobs
        if not per_job:
            row["message_bytes"] = big["entry_bytes"]
    return row
