"""The synchronous producer's own blocking connections to a plain Redis node
(``store.redis._blocking_node``): used for plain URLs, replies as redis-py's
pipeline gives them, and every failure mode (a restarted server, a hung one,
a closed producer, a forked child) loses nothing and leaves the producer
usable."""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import pytest
import redis

from chronos_trio.producers import SyncProducer
from chronos_trio.store import StoreError
from chronos_trio.store.redis._blocking import lean_pipeline
from chronos_trio.store.redis._blocking_node import BlockingNode, _Connection
from chronos_trio.store.redis._errors import NoScript
from chronos_trio.testing.redis_server import RedisServer
from tests._support import ready_ids

pytestmark = pytest.mark.redis


def _node(producer: SyncProducer) -> BlockingNode | None:
    producer._exec.client()  # made on first use
    return producer._exec._node


def test_a_plain_url_uses_the_blocking_node_and_others_do_not(
    own_redis_server: RedisServer,
) -> None:
    with SyncProducer(own_redis_server.url) as producer:
        assert isinstance(_node(producer), BlockingNode)
        handle = producer.enqueue("k", {"x": 1})
        assert handle.created
        assert handle.status().state.value == "ready"
    # a custom connection class (here: an option only redis-py knows) keeps redis-py
    client = redis.Redis.from_url(own_redis_server.url, single_connection_client=True)
    assert BlockingNode.for_client(client) is None
    client.close()


def test_replies_are_what_redis_pys_pipeline_gives(own_redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(own_redis_server.url, protocol=2)  # as the producer's own
    assert BlockingNode.for_client(redis.Redis.from_url(own_redis_server.url, protocol=3)) is None
    node = BlockingNode.for_client(client)
    assert node is not None
    commands: list[tuple[Any, ...]] = [
        ("SET", "a", "1"),
        ("TIME",),
        ("HSET", "h", "f", b"\x00\xff", "g", 2.5),
        ("HGETALL", "h"),
        ("LPUSH", "a", "x"),  # WRONGTYPE: an error reply, in place
        ("EVALSHA", "0" * 40, 0),  # NOSCRIPT: the transport reloads it
        ("GET", "a"),
    ]
    ours = node.execute(commands)
    client.delete("h")
    theirs = lean_pipeline(client, commands)
    assert ours[0] is True and theirs[0] is True
    assert isinstance(ours[1], tuple) and len(ours[1]) == 2
    assert ours[2:4] == theirs[2:4] == [2, {b"f": b"\x00\xff", b"g": b"2.5"}]
    assert type(ours[4]) is type(theirs[4]) is redis.exceptions.ResponseError
    assert str(ours[4]) == str(theirs[4])
    assert isinstance(ours[5], NoScript)
    assert isinstance(theirs[5], redis.exceptions.NoScriptError)
    assert ours[6] == theirs[6] == b"1"
    node.close()
    client.close()


def test_a_restarted_server_costs_no_enqueue(own_redis_server: RedisServer) -> None:
    """The idle connection died with the old server: the next enqueue is
    sent again once on a new connection, and both jobs are stored once."""
    url = own_redis_server.url + "?socket_timeout=5"
    with SyncProducer(url) as producer:
        first = producer.enqueue("k", 1)
        node = _node(producer)
        assert node is not None and len(node._idle) == 1
        own_redis_server.restart()  # no persistence: the first job is gone with it
        second = producer.enqueue("k", 2, job_id="after-restart")
        assert second.created
        again = producer.enqueue("k", 2, job_id="after-restart")
        assert not again.created  # stored exactly once
    assert ready_ids(own_redis_server.url) == {b"after-restart"}
    assert first.job_id != second.job_id


def test_a_dead_server_is_a_store_error_and_the_producer_recovers(
    own_redis_server: RedisServer,
) -> None:
    with SyncProducer(own_redis_server.url, connect_timeout=1) as producer:
        producer.enqueue("k", 1)
        own_redis_server.kill()
        with pytest.raises(StoreError, match="Redis"):
            producer.enqueue("k", 2, job_id="while-down")
        own_redis_server.start()
        handle = producer.enqueue("k", 3, job_id="back-up")
        assert handle.created
    assert ready_ids(own_redis_server.url) == {b"back-up"}


def test_a_hung_server_is_a_timeout_and_the_connection_is_not_reused(
    own_redis_server: RedisServer,
) -> None:
    """A round trip that gets no reply within the socket timeout fails with
    a StoreError and closes its connection (a late reply must never be read
    as the next call's); the next call works once the server answers."""
    with SyncProducer(own_redis_server.url + "?socket_timeout=0.3") as producer:
        producer.enqueue("k", 1)
        node = _node(producer)
        assert node is not None
        own_redis_server.pause()
        try:
            started = time.monotonic()
            with pytest.raises(StoreError, match=r"no reply from Redis within 0\.3s"):
                producer.enqueue("k", 2, job_id="during-pause")
            assert time.monotonic() - started < 3
            assert node._idle == []
        finally:
            own_redis_server.resume()
        handle = producer.enqueue("k", 3, job_id="after-pause")
        assert handle.created
        # the paused call ran once the server went on (it may or may not, as
        # StoreError says): either way a retry with its ID stores it once
        producer.enqueue("k", 2, job_id="during-pause")
        assert producer.enqueue("k", 2, job_id="during-pause").created is False
    assert {b"after-pause", b"during-pause"} <= ready_ids(own_redis_server.url)


def test_an_interrupted_handshake_closes_its_socket(
    own_redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KeyboardInterrupt (any BaseException) during a new connection's
    handshake: its socket is closed, never left open or pooled."""
    client = redis.Redis.from_url(own_redis_server.url + "?client_name=n", protocol=2)
    node = BlockingNode.for_client(client)
    client.close()
    assert node is not None and node._hello
    opened: list[socket.socket] = []

    def interrupted(self: _Connection, data: bytes, count: int) -> list[Any]:
        opened.append(self.sock)
        raise KeyboardInterrupt

    monkeypatch.setattr(_Connection, "round_trip", interrupted)
    with pytest.raises(KeyboardInterrupt):
        node.execute([("PING",)])
    [sock] = opened
    assert sock.fileno() == -1  # closed
    assert node._idle == []


def test_an_interrupted_round_trip_never_pools_its_connection(
    own_redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KeyboardInterrupt (any BaseException) mid round trip: the connection
    may hold half a reply, so it is closed, not pooled."""
    with SyncProducer(own_redis_server.url) as producer:
        producer.enqueue("k", 1)
        # the lone call's script loaded too (enqueue_plain.lua): the
        # interrupted call below runs it, not a NOSCRIPT reply
        producer.enqueue("k", 1)
        node = _node(producer)
        assert node is not None and len(node._idle) == 1
        real = socket.socket.recv

        def interrupted(self: socket.socket, size: int) -> bytes:
            raise KeyboardInterrupt

        monkeypatch.setattr(socket.socket, "recv", interrupted)
        with pytest.raises(KeyboardInterrupt):
            producer.enqueue("k", 2, job_id="interrupted")
        monkeypatch.setattr(socket.socket, "recv", real)
        assert node._idle == []
        assert producer.enqueue("k", 3, job_id="next").created
        # the interrupted enqueue reached Redis: enqueueing it again finds it
        assert producer.enqueue("k", 2, job_id="interrupted").created is False


def test_a_password_and_database_from_the_url(tmp_path: Any) -> None:
    with RedisServer(extra_args=["--requirepass", "s3cret"]) as secured:
        url = secured.url.replace("redis://", "redis://:s3cret@").rsplit("/", 1)[0] + "/3"
        with SyncProducer(url) as producer:
            assert isinstance(_node(producer), BlockingNode)
            producer.enqueue("k", 1, job_id="in-db-3")
        client = redis.Redis.from_url(url)
        assert client.keys("*:j:in-db-3")
        assert not redis.Redis.from_url(url.rsplit("/", 1)[0] + "/0").keys("*:j:in-db-3")
        client.close()
        wrong = url.replace("s3cret", "wrong")
        with SyncProducer(wrong) as producer, pytest.raises(StoreError):
            producer.enqueue("k", 1)


def test_a_forked_child_opens_its_own_connections(
    own_redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SyncProducer(own_redis_server.url) as producer:
        producer.enqueue("k", 1)
        # the lone call's script loaded too (enqueue_plain.lua): the
        # interrupted call below runs it, not a NOSCRIPT reply
        producer.enqueue("k", 1)
        node = _node(producer)
        assert node is not None
        [parents] = node._idle
        real_pid = os.getpid()
        monkeypatch.setattr(os, "getpid", lambda: real_pid + 1)
        assert producer.enqueue("k", 2).created
        assert node._idle and parents not in node._idle


def test_a_closed_producer_refuses(own_redis_server: RedisServer) -> None:
    producer = SyncProducer(own_redis_server.url)
    producer.enqueue("k", 1)
    producer.close()
    with pytest.raises(StoreError):
        producer.enqueue("k", 2)


def test_redis_pys_pool_without_its_pipeline_survives_a_restart(
    own_redis_server: RedisServer,
) -> None:
    """TLS, Sentinel and custom connections keep redis-py's pool
    (``lean_pipeline``): a pooled connection that died with the server is
    replaced once, a call while it is down is redis-py's ConnectionError,
    and the pool stays usable."""
    client = redis.Redis.from_url(own_redis_server.url, protocol=2, socket_connect_timeout=1)
    try:
        assert lean_pipeline(client, [("SET", "a", "1"), ("INCR", "a")]) == [True, 2]
        own_redis_server.restart()
        assert lean_pipeline(client, [("SET", "a", "5"), ("INCR", "a")]) == [True, 6]
        own_redis_server.kill()
        with pytest.raises(redis.exceptions.ConnectionError):
            lean_pipeline(client, [("GET", "a")])
        own_redis_server.start()
        assert lean_pipeline(client, [("GET", "a"), ("LPUSH", "a", "x")])[0] is None
        [wrong] = lean_pipeline(client, [("LPUSH", "s", "x"), ("INCR", "s")])[1:]
        assert isinstance(wrong, redis.exceptions.ResponseError)
    finally:
        client.close()
