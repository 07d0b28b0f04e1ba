"""The memory and scale workloads' own parts (``benchmarks._memory`` and their
tables): a stand-in system's keys measured in a throwaway redis-server, and
the ratios and second table the report makes of the rows. The workloads
themselves run in the quick benchmark (tests/test_benchmarks_quick.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from benchmarks import _memory, report
from chronos_trio.testing.redis_server import RedisServer


@pytest.fixture
def private_redis_url(redis_server: RedisServer) -> Iterator[str]:
    """A server of this test's own: measure() counts the server's client
    connections, which the other tests' connections to the shared server
    (closing at their own pace) would skew."""
    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.close()


@pytest.mark.redis
def test_measure_finds_the_per_job_key_and_the_shared_index(private_redis_url: str) -> None:
    redis_url = private_redis_url
    client = redis.Redis.from_url(redis_url)
    n = 500

    def enqueue() -> dict[str, Any]:
        # a system with a hash per job (a value over 64 bytes: hashtable
        # encoding) and one zset of IDs, on its own connection
        other = redis.Redis.from_url(redis_url)
        pipe = other.pipeline(transaction=False)
        for _ in range(n):
            job_id = os.urandom(16).hex()
            pipe.hset(f"sys:job:{job_id}", mapping={"payload": "x" * 100, "state": "scheduled"})
            pipe.zadd("sys:scheduled", {job_id: 1.0})
        pipe.execute()
        other.close()
        return {"enqueued": n}

    try:
        row = _memory.measure(client, enqueue)
    finally:
        client.close()
    assert row["keys"] == n + 1
    assert row["clients_left"] == 0
    # at least the job hashes' own usage, and not wildly more
    assert row["job_key_memory"] < row["bytes_per_job"] < 4 * row["job_key_memory"]
    [job, index] = row["key_groups"]
    assert (job["pattern"], job["type"], job["count"], job["per_job"]) == (
        "sys:job:*", "hash", n, True,
    )  # fmt: skip
    assert job["encoding"] == "hashtable"
    assert job["entry_bytes"] == len("payload") + 100 + len("state") + len("scheduled")
    assert (index["pattern"], index["type"], index["length"], index["per_job"]) == (
        "sys:scheduled", "zset", n, False,
    )  # fmt: skip
    assert row["job_key"] == "hash sys:job:*"
    assert row["index"] == "zset skiplist sys:scheduled"
    assert row["message_bytes"] == job["entry_bytes"]


def test_scale_ratios_are_to_the_first_row_and_memory_has_a_key_table() -> None:
    scale = [
        {"system": report.OURS, "setting": "10,000 scheduled", "drain_per_s": 10_000.0},
        {"system": report.OURS, "setting": "1,000,000 scheduled", "drain_per_s": 9_000.0},
    ]
    headers, body = report.table_rows("scale", scale)
    column = headers.index("drain x")
    assert [row[column] for row in body] == ["", "0.90x"]

    group = {
        "pattern": "sys:job:*", "type": "hash", "encoding": "hashtable", "count": 2,
        "length": 2, "memory_usage": 900, "bytes_per_job": 900.0, "entry_bytes": 120,
    }  # fmt: skip
    memory = [
        {"system": report.OURS, "setting": "2 jobs", "bytes_per_job": 1000.0,
         "key_groups": [group]},
        {"system": "peer", "setting": "2 jobs", "bytes_per_job": 500.0, "key_groups": []},
    ]  # fmt: skip
    text = report.render({"workloads": {"memory": memory}}, report.text_table)
    assert "2.0x" in text  # chronos/peer bytes per job
    assert "sys:job:*" in text and "hashtable" in text
