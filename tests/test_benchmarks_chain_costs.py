"""benchmarks.chain_costs' experiment stores what it says: with
``short_continuations`` open, chains still finish with their results, every
successor the settles stored holds a short token instead of its
continuation text, and closing it undoes the patch (continuations stored in
full again)."""

from __future__ import annotations

import shutil

import pytest
import trio

from benchmarks import chain_costs, workflows
from benchmarks._redis import BenchRedis, open_redis

pytestmark = [
    pytest.mark.redis,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]


def _continuations(redis: BenchRedis) -> list[bytes]:
    """Field x of every job record in the store (the workflow records,
    ``...:wf:...``, left out)."""
    out = []
    for key in redis.client.scan_iter(count=1000):
        if b":wf:" in key or redis.client.type(key) != b"hash":
            continue
        x = redis.client.hget(key, "x")
        if isinstance(x, bytes):
            out.append(x)
    return out


async def _chains(url: str, n: int) -> None:
    """workflows.chains (which checks each chain's result), bounded."""
    with trio.fail_after(60):
        await workflows.chains(url, n)


def test_short_continuations_are_stored_short_and_chains_still_finish() -> None:
    with open_redis() as redis:
        workflows.flushall(redis)
        with chain_costs.short_continuations() as kept:
            trio.run(_chains, redis.url, 5)
        stored = _continuations(redis)
        # the first links (the producer's) carry their text, and so do the
        # last ones ({"wf":ID}, short already); every successor a settle
        # stored holds a token (one the continuer made, when a settle found
        # its topology cache stale, has its text)
        tokens = [x for x in stored if x.partition(b"\0")[2].startswith(b'{"r":')]
        assert 0 < len(tokens) == len(kept) <= 5 * (workflows.LINKS - 2)
        assert all(len(x) <= chain_costs.SHORT for x in tokens)

        workflows.flushall(redis)
        trio.run(_chains, redis.url, 2)
        stored = _continuations(redis)
        assert stored and not [x for x in stored if b'{"r":' in x]
        assert max(len(x) for x in stored) > chain_costs.SHORT
