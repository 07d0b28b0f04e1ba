"""Purging a queue from the command line and the Inspector: the
confirmation states what goes per state, every job but the leased ones goes,
and the leased one finishes as usual (memory store and a test Redis; the
store operation itself is held to the conformance suite on every backend)."""

from __future__ import annotations

import io
import re

import pytest
import trio

from chronos_trio import Inspector, JobState, MemoryStore, NewJob, QueueWeight
from chronos_trio.app._purge import purge_summary
from chronos_trio.cli import EXIT_NOT_FOUND, EXIT_OK, EXIT_REFUSED
from chronos_trio.records import UnknownQueue
from chronos_trio.store import SettleKind, Settlement
from tests.test_cli import Cli, FakeTerminal, cli

__all__ = ["cli"]


def test_purge_summary_names_each_state_and_the_leased_left() -> None:
    counts = {JobState.READY: 2, JobState.LEASED: 1, JobState.DEAD: 1, JobState.SCHEDULED: 0}
    assert purge_summary("q", counts) == (
        "purge queue 'q': delete 3 jobs (2 ready, 1 dead); 1 leased job is left to finish"
    )
    assert purge_summary("q", {}) == "purge queue 'q': delete 0 jobs"


def test_cli_purge_confirms_then_deletes_all_but_the_leased(cli: Cli) -> None:
    before = next(q for q in cli("queues", args=("--json",)).json() if q["queue"] == "default")
    counts = before["counts"]
    doomed = sum(n for s, n in counts.items() if s != "leased")
    assert counts["leased"] == 1 and doomed >= 5

    piped = cli("purge", args=("default",), stdin=io.StringIO("y\n"))
    assert piped.code == EXIT_REFUSED and "without confirmation" in piped.err
    declined = cli("purge", args=("default",), stdin=FakeTerminal("n\n"))
    assert declined.code == EXIT_REFUSED
    assert f"delete {doomed} jobs (" in declined.err and "1 leased job is left" in declined.err
    assert cli("job", args=("dead-1", "--json")).json()["state"] == "dead", "nothing went"

    done = cli("purge", args=("default", "--yes", "--json"))
    assert done.code == EXIT_OK, done.err
    assert done.json() == {"queue": "default", "deleted": doomed, "leased_left": 1}
    after = next(q for q in cli("queues", args=("--json",)).json() if q["queue"] == "default")
    assert {s: n for s, n in after["counts"].items() if n} == {"leased": 1}
    assert cli("job", args=("dead-1",)).code == EXIT_NOT_FOUND
    assert cli("job", args=("leased-1", "--json")).json()["state"] == "leased"
    critical = next(q for q in cli("queues", args=("--json",)).json() if q["queue"] == "critical")
    assert sum(critical["counts"].values()) == 1, "another queue is untouched"

    again = cli("purge", args=("default",))  # nothing to delete: no question asked
    assert again.code == EXIT_OK and "deleted 0 job(s); 1 leased job(s) left" in again.out
    unknown = cli("purge", args=("nope", "--yes"))
    assert unknown.code != EXIT_OK and "unknown queue 'nope'" in unknown.err


async def test_inspector_purge_in_batches_while_a_job_runs(autojump_clock: object) -> None:
    store = MemoryStore(default_partitions=4)
    inspector = Inspector(store)
    await store.enqueue_many(
        [NewJob(id="run", queue="q", kind="k", payload=b"{}")]
        + [NewJob(id=f"j{i}", queue="q", kind="k", payload=b"{}", delay=60) for i in range(25)]
    )
    [running] = (await store.lease([QueueWeight("q")], 1, worker_id="w", lease_duration=30)).jobs
    assert await inspector.purge("q", batch=7) == 25
    assert (await inspector.queue("q")).counts[JobState.LEASED] == 1
    done = await store.settle([Settlement(running.ref, SettleKind.SUCCEEDED)])
    assert done.settled == (True,), "the running job settles after a purge"
    with pytest.raises(UnknownQueue):
        await inspector.purge("nope")
    with pytest.raises(ValueError, match="batch must be an int >= 1"):
        await inspector.purge("q", batch=0)
    with trio.fail_after(1):
        assert await inspector.purge("q") == 0


# -- queue names checked at enqueue ---------------------------------------------------
@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("", "non-empty string"),
        (" lead", "whitespace at an end"),
        ("trail\n", "whitespace at an end"),
        ("tab\there", "control character (U+0009) at position 3"),
        ("bi\u202edi", "RIGHT-TO-LEFT OVERRIDE (U+202E)"),
        ("zero\u200bwidth", "ZERO WIDTH SPACE (U+200B)"),
        ("no\u00a0break", "NO-BREAK SPACE (U+00A0)"),
        ("line\u2028sep", "LINE SEPARATOR"),
        ("q" * 201, "over the 200-character limit"),
    ],
)
async def test_a_queue_name_that_cannot_be_shown_is_refused_before_anything_is_stored(
    name: str, says: str
) -> None:
    from tests.tests_app import Record, make_app

    store = MemoryStore()
    app = make_app(None)
    app.use_store(store)
    record = app.tasks["tests.record"]
    with pytest.raises(ValueError, match=re.escape(says)):
        await record.enqueue(Record("k"), queue=name)
    with pytest.raises(ValueError, match=re.escape(says)):
        await record.enqueue_many([Record("k")], queue=name)
    assert await store.queues() == [], "nothing was stored"


async def test_every_other_character_is_a_fine_queue_name() -> None:
    from tests.tests_app import Record, make_app

    store = MemoryStore()
    app = make_app(None)
    app.use_store(store)
    names = ["a b", "{tag}:v1/%25", "émoji-🚀", "q" * 200]
    for name in names:
        await app.tasks["tests.record"].enqueue(Record("k"), queue=name)
    assert sorted(await store.queues()) == sorted(names)
