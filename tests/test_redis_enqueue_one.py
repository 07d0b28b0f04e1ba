"""The one-job enqueue plan (``store.redis._enqueue_one``) against the batch
plan it stands in for: for every kind of job, the same script call (KEYS and
ARGV), the same wake-up, the same result from the same reply; and the cases
it hands to ``enqueue_plan`` (nothing cached, a queue with a draining
version, a version closed under it) take the long way. On one node a plain
job takes ``enqueue_plain.lua`` instead (the same KEYS and ARGV where they
overlap, its wake-up inside); a job that needs anything more never does.
No Redis: the plans are sans-IO, stepped by hand (what the two scripts
store is compared on a real Redis in ``test_redis_enqueue_plain.py``)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from chronos_trio import NewJob
from chronos_trio.records import Unique
from chronos_trio.records._control import JobControl
from chronos_trio.records._jobs import EnqueueResult
from chronos_trio.store._roles import QueueVersion, VersionState
from chronos_trio.store.redis._codec import encode_topology
from chronos_trio.store.redis._core import Call, NeedMeta, RedisCore
from chronos_trio.store.redis._enqueue import enqueue_plan
from chronos_trio.store.redis._enqueue_one import enqueue_one_plan, is_plain
from chronos_trio.store.redis._scripts import ENQUEUE, ENQUEUE_PLAIN
from chronos_trio.store.redis.keys import KeySpace

ACTIVE = VersionState.ACTIVE


def _core(partitions: int, *versions: QueueVersion) -> RedisCore:
    core = RedisCore(KeySpace("t"), default_partitions=partitions, topology_ttl=3600)
    topology = encode_topology(versions or (QueueVersion(1, partitions, ACTIVE),))
    core.store_metas(["q"], [[topology.encode()], [None]], time.monotonic())
    return core


def _job(**fields: Any) -> NewJob:
    base: dict[str, Any] = {
        "id": "0123456789abcdef0123456789abcdef",
        "queue": "q",
        "kind": "k",
        "payload": b'{"a":1}',
        "id_given": False,
    }
    return NewJob(**{**base, **fields})


JOBS = {
    "plain": _job(),
    "delayed": _job(delay=5.0),
    "due in the past": _job(run_at=1.5),
    "due later": _job(run_at=time.time() + 3600),
    "options": _job(max_retries=7, timeout=12.25, headers=(("h", "v"),)),
    "given id": _job(id="mine", id_given=True),
    "workflow step": _job(then='{"x":1}'),
    "unique": _job(unique=Unique(key="u", mode="lock", ttl=2.5)),
    "limited": _job(control=JobControl(priority=3, caps=(("c", 2),))),
    "priority only": _job(control=JobControl(priority=1)),
    "expiring": _job(control=JobControl(expires_in=30.0)),
    "delayed a little": _job(delay=0.001),
    "kept for its waiter": _job(keep_outcome=True),
    "unique, kept for its waiter": _job(
        keep_outcome=True, unique=Unique(key="u", mode="lock", ttl=2.5)
    ),
}
#: The jobs enqueue_plain.lua may store (due now, nothing but a record and
#: its ready entry); every other one needs enqueue.lua.
PLAIN = {"plain", "options", "given id"}


def _first_call(plan: Any) -> Call:
    step = next(plan)
    assert type(step) is Call
    return step


@pytest.mark.parametrize("partitions", [1, 8])
@pytest.mark.parametrize("name", list(JOBS))
def test_one_job_sends_what_a_batch_of_one_sends_and_reads_its_reply_alike(
    name: str, partitions: int
) -> None:
    job = JOBS[name]
    if partitions > 1 and (job.unique is not None or job.control is not None):
        pytest.skip("a made-up ID is drawn again until it routes to its key: random")
    core = _core(partitions)
    one, batch = enqueue_one_plan(core, job), enqueue_plan(core, [job])
    got, want = _first_call(one), _first_call(batch)
    assert [op.script for op in got.ops] == [ENQUEUE]
    assert [op.args for op in got.ops] == [op.args for op in want.ops]
    assert [op.route for op in got.ops] == [op.route for op in want.ops]
    assert got.replicas == want.replicas
    assert len(got.after) == len(want.after) == 1
    mine, theirs = got.after[0].args, want.after[0].args
    if mine[-2] == "due":  # a scheduled wake-up: the guessed due time moves with the clock
        assert mine[:-1] == theirs[:-1]
        assert abs(float(mine[-1]) - float(theirs[-1])) < 1.0
    else:
        assert mine == theirs
    reply = [b"1700000000.25", 1, b"1700000005.5", job.id.encode()]
    with pytest.raises(StopIteration) as a:
        one.send([list(reply)])
    with pytest.raises(StopIteration) as b:
        batch.send([list(reply)])
    assert a.value.value == b.value.value
    [result] = a.value.value
    assert isinstance(result, EnqueueResult)
    assert (result.job_id, result.created, result.run_at) == (job.id, True, 1700000005.5)


def test_nothing_cached_takes_the_long_way() -> None:
    core = RedisCore(KeySpace("t"), default_partitions=1, topology_ttl=3600)
    step = next(enqueue_one_plan(core, _job()))
    assert type(step) is NeedMeta  # enqueue_plan reads the topology first


def test_a_queue_with_a_draining_version_takes_the_long_way() -> None:
    core = _core(1, QueueVersion(1, 4, VersionState.DRAINING), QueueVersion(2, 2, ACTIVE))
    step = _first_call(enqueue_one_plan(core, _job()))
    # enqueue_plan's look for the ID in the draining version, not the enqueue
    assert [op.args[0] for op in step.ops] == ["EXISTS", "HGET"]


def test_a_version_closed_under_it_is_routed_again_the_long_way() -> None:
    core = _core(1)
    plan = enqueue_one_plan(core, _job())
    _first_call(plan)
    step = plan.send([[b"closed"]])
    assert type(step) is NeedMeta and list(step.queues) == ["q"]  # the topology, read again


@pytest.mark.parametrize("name", list(JOBS))
def test_only_a_plain_job_takes_the_plain_script_and_only_on_one_node(name: str) -> None:
    job = JOBS[name]
    assert is_plain(job) == (name in PLAIN)
    core = _core(1)
    core.one_node = True
    got = _first_call(enqueue_one_plan(core, job))
    want = _first_call(enqueue_plan(_core(1), [job]))
    if name not in PLAIN:
        # enqueue.lua, as a batch of one sends it, its wake-up after it
        assert [op.script for op in got.ops] == [ENQUEUE]
        assert [op.args for op in got.ops] == [op.args for op in want.ops]
        assert len(got.after) == 1
        return
    [op] = got.ops
    assert op.script is ENQUEUE_PLAIN and not got.after  # its wake-up is its own
    assert got.replicas == want.replicas
    pk = core.keys.partition("q", 1, 0)
    keys = [pk.ready, pk.closed, pk.job_prefix, core.keys.wake_ready("q")]
    assert op.args[:7] == ("EVALSHA", ENQUEUE_PLAIN.sha, 4, *keys)
    # enqueue.lua's first 8 ARGV entries of the job (after its batch now),
    # but for run_at and delay, which it ignores
    full = want.ops[0].args[3 + 4 + 1 :]
    mine = op.args[7:]
    assert len(mine) == 8
    assert mine[:3] == full[:3] and mine[5:] == full[5:8]
    assert mine[3:5] == ("", "")


def test_a_plain_job_on_one_node_reads_its_reply_as_enqueue_lua_s() -> None:
    core = _core(1)
    core.one_node = True
    replies: list[tuple[Any, tuple[bool, float]]] = [
        (b"1700000000.25", (True, 1700000000.25)),  # stored: its due time, now
        ([b"1700000000.25", 0, b"1699999999.5", b"j"], (False, 1699999999.5)),
        # an existing key without a readable due time: as it is, judged here
        ([b"1700000000.25", 0, b"", b"j"], (False, 0.0)),
        ([b"1700000000.25", 0, b"0x10", b"j"], (False, 0.0)),
        ([b"1700000000.25", 0, b"inf", b"j"], (False, 0.0)),
    ]
    for reply, want in replies:
        plan = enqueue_one_plan(core, _job(id="j", id_given=True))
        _first_call(plan)
        with pytest.raises(StopIteration) as done:
            plan.send([reply])
        [result] = done.value.value
        assert (result.job_id, result.created, result.run_at) == ("j", *want)


def test_a_partition_closed_under_the_plain_script_is_routed_again_the_long_way() -> None:
    core = _core(1)
    core.one_node = True
    plan = enqueue_one_plan(core, _job())
    assert _first_call(plan).ops[0].script is ENQUEUE_PLAIN
    step = plan.send([[b"closed"]])
    assert type(step) is NeedMeta and list(step.queues) == ["q"]
