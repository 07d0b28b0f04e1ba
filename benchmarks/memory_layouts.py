"""What other Redis layouts would cost per job (issue 27, item 4): a model,
not chronos_trio's code.

``python -m benchmarks.memory_layouts [--jobs N]``: on a private
redis-server, for each layout below, N synthetic jobs written with plain
commands (no scripts), ``used_memory`` delta / N. The records are the sizes
today's record format 2 writes for the memory workload's job (kind
``mem.none``, a 111-byte JSON payload, 32-hex-digit IDs, key prefix
``{chronos:q:default:v1:p0}:j:``), or a packed binary record of the same
fields (``PACKED``: version, state, attempts, max_retries as bytes; timeout,
run_at, created_at as 8-byte doubles; kind and payload length-prefixed =
150 bytes; a succeeded one adds finished_at, result_until and an 11-byte
result = 178). Nothing here reads or leases the jobs: it prices layouts,
the CPU and compatibility costs are discussed in docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import struct
import time
from collections.abc import Callable, Iterator

from benchmarks import _memory as mem
from benchmarks._redis import open_redis

PREFIX = b"{chronos:q:default:v1:p0}:j:"
SHORT = b"{c:default:0}j"
PAYLOAD = b'{"data":"' + b"x" * 100 + b'"}'  # 111 bytes, as the memory workload's
KIND = b"mem.none"
DUE = 1_796_283_166.1656351
NOW = DUE - 3600


def ids(n: int) -> Iterator[tuple[bytes, bytes]]:
    """(32 hex digits, the same 16 bytes raw) per job."""
    for _ in range(n):
        raw = os.urandom(16)
        yield raw.hex().encode(), raw


def packed(succeeded: bool = False, payload: bool = True) -> bytes:
    head = struct.pack("<BBBBddd", 2, 1, 0, 3, 30.0, DUE, NOW)
    body = bytes([len(KIND)]) + KIND
    if payload:
        body += struct.pack("<H", len(PAYLOAD)) + PAYLOAD
    if succeeded:
        body += struct.pack("<dd", NOW + 1, NOW + 3601) + bytes([11]) + b'{"ok":true}'
    return head + body


def chunked_fields() -> dict[bytes, bytes]:
    """Today's delayed record (format 2, payload in 64-byte chunks)."""
    return {
        b"kind": KIND, b"payload": PAYLOAD[:64], b"p1": PAYLOAD[64:], b"pn": b"1",
        b"run_at": repr(DUE).encode(), b"state": b"scheduled", b"attempts": b"0",
        b"max_retries": b"3", b"timeout": b"30.0", b"created_at": repr(NOW).encode(), b"v": b"2",
    }  # fmt: skip


def succeeded_fields(lease_fields: bool = True) -> dict[bytes, bytes]:
    """Today's succeeded record kept for its result (a hashtable: the whole
    payload is one value over 64 bytes)."""
    fields = {
        b"attempts": b"1", b"run_at": repr(NOW).encode(), b"max_retries": b"3", b"v": b"2",
        b"result_until": repr(NOW + 3601).encode(), b"result": b'{"ok":true}',
        b"finished_at": repr(NOW + 1).encode(), b"state": b"succeeded", b"kind": b"mem.result",
        b"payload": PAYLOAD, b"created_at": repr(NOW).encode(), b"timeout": b"30.0",
    }  # fmt: skip
    if lease_fields:
        fields.update({b"lease_owner": b"", b"lease_expires_at": b"", b"lease_token": b""})
    return fields


Writer = Callable[[object, int], None]


def chunked_succeeded() -> dict[bytes, bytes]:
    """:func:`succeeded_fields` without the empty lease fields and with the
    payload in 64-byte chunks (format 2's delayed-job form): a listpack."""
    fields = succeeded_fields(False)
    fields.update({b"payload": PAYLOAD[:64], b"p1": PAYLOAD[64:], b"pn": b"1"})
    return fields


def per_job_hash(
    fields: dict[bytes, bytes], zset: bytes | None, ttl: int = 0, short: bool = False
) -> Writer:
    def write(pipe: object, n: int) -> None:
        for hexid, raw in ids(n):
            key = SHORT + raw if short else PREFIX + hexid
            pipe.hset(key, mapping=fields)  # type: ignore[attr-defined]
            if ttl:
                pipe.expire(key, ttl)  # type: ignore[attr-defined]
            if zset:
                pipe.zadd(zset, {raw if short else hexid: DUE})  # type: ignore[attr-defined]

    return write


def per_job_string(value: bytes, short: bool, zset: bytes | None, ttl: int = 0) -> Writer:
    def write(pipe: object, n: int) -> None:
        for hexid, raw in ids(n):
            member = raw if short else hexid
            key = (SHORT if short else PREFIX) + member
            pipe.set(key, value, ex=ttl or None)  # type: ignore[attr-defined]
            if zset:
                pipe.zadd(zset, {member: DUE})  # type: ignore[attr-defined]

    return write


def partition_hash(value: bytes, short: bool, zset: bytes | None) -> Writer:
    def write(pipe: object, n: int) -> None:
        for hexid, raw in ids(n):
            member = raw if short else hexid
            pipe.hset(b"{c:default:0}:jobs", member, value)  # type: ignore[attr-defined]
            if zset:
                pipe.zadd(zset, {member: DUE})  # type: ignore[attr-defined]

    return write


def zset_only(value: bytes) -> Writer:
    def write(pipe: object, n: int) -> None:
        for _, raw in ids(n):
            pipe.zadd(b"{c:default:0}:scheduled", {raw + value: DUE})  # type: ignore[attr-defined]

    return write


def list_only(value: bytes) -> Writer:
    def write(pipe: object, n: int) -> None:
        for _, raw in ids(n):
            pipe.rpush(b"{c:default:0}:queue", raw + value)  # type: ignore[attr-defined]

    return write


Z = b"{chronos:q:default:v1:p0}:scheduled"
ZS = b"{c:default:0}:scheduled"
LAYOUTS: dict[str, tuple[str, Writer]] = {
    "D0": (
        "delayed, today's layout (hash per job, listpack, chunked payload) + zset",
        per_job_hash(chunked_fields(), Z),
    ),
    "D0s": (
        "D0 with 16-byte raw IDs and a short key prefix",
        per_job_hash(chunked_fields(), ZS, short=True),
    ),
    "D1": (
        "delayed, string per job (packed 150 B) + zset",
        per_job_string(packed(), False, Z),
    ),
    "D2": (
        "D1 with 16-byte raw IDs and a short key prefix",
        per_job_string(packed(), True, ZS),
    ),
    "D3": (
        "delayed, one hash per partition (field = ID, value = packed) + zset",
        partition_hash(packed(), False, Z),
    ),
    "D4": (
        "D3 with 16-byte raw IDs",
        partition_hash(packed(), True, ZS),
    ),
    "D5": (
        "floor: the packed record inside the zset member (no lookup by ID)",
        zset_only(packed()),
    ),
    "D6": (
        "floor: a list of packed records (no order by due time, no lookup)",
        list_only(packed()),
    ),
    "S0": (
        "succeeded+result, today's layout (hashtable, TTL)",
        per_job_hash(succeeded_fields(), None, 3600),
    ),
    "S1": (
        "S0 without the 3 empty lease fields",
        per_job_hash(succeeded_fields(False), None, 3600),
    ),
    "S1c": (
        "S1 with the payload chunked (a listpack)",
        per_job_hash(chunked_succeeded(), None, 3600),
    ),
    "S2": (
        "succeeded+result, string per job (packed 178 B), TTL",
        per_job_string(packed(True), False, None, 3600),
    ),
    "S3": (
        "S2 with 16-byte raw IDs, short prefix",
        per_job_string(packed(True), True, None, 3600),
    ),
    "S4": (
        "S3 without the payload (result record: 65 B), TTL",
        per_job_string(packed(True, payload=False), True, None, 3600),
    ),
    "S5": (
        "succeeded+result in a partition hash + expiry zset (no HEXPIRE before 7.4)",
        partition_hash(packed(True), True, ZS),
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    args = parser.parse_args()
    n = args.jobs
    with open_redis() as redis:
        client = redis.client
        print(f"redis-server {redis.version()}, {n:,} jobs per layout; used_memory delta / N")
        for name in args.layouts.split(","):
            what, write = LAYOUTS[name]

            def fill(write: Writer = write) -> dict[str, object]:
                for start in range(0, n, 1000):
                    pipe = client.pipeline(transaction=False)
                    write(pipe, min(1000, n - start))
                    pipe.execute()
                return {"enqueued": n}

            row = mem.measure(client, fill)
            usage = ", ".join(
                f"{g['type']} {g['encoding']} {g['memory_usage'] if g['per_job'] else ''}".strip()
                for g in row["key_groups"][:2]
            )
            print(f"{name}  {row['bytes_per_job']:7.0f} B/job  {what}  [{usage}]")
            time.sleep(0.1)


if __name__ == "__main__":
    main()
