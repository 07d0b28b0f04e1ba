"""Conformance checks of a running job's notes (:class:`~chronos_trio.store.NotesRole`):
written by the lease holder only, bounded, and kept exactly as long as the
job's record. Registered in :data:`~chronos_trio.testing.conformance.CHECKS`
like the others when ``chronos_trio.testing`` is imported."""

from __future__ import annotations

import math

import trio

from ..records._jobs import JobRef, LeasedJob
from ..records._notes import (
    MAX_LINE_CHARS,
    MAX_NOTE_LINES,
    MAX_PROGRESS_MESSAGE,
    JobNotes,
    NoteLine,
    NoteWrite,
    Progress,
)
from ..store._capabilities import Capability
from ..store._roles import SettleKind, Store
from .conformance import Fresh, check, job, lease, ref_of, settle, stale

#: Slack for comparing the store's clock read in two calls (Redis: microseconds).
_SLACK = 0.01


def write(leased: LeasedJob, *lines: str, progress: Progress | None = None) -> NoteWrite:
    return NoteWrite(leased.ref, progress, lines)


async def notes_of(store: Store, leased: LeasedJob) -> JobNotes:
    found = await store.job_notes(ref_of(leased))
    assert found is not None, f"job {leased.job.id!r} exists: its notes must be readable"
    return found


@check(Capability.NOTES)
async def check_notes_are_written_by_the_lease_holder_only(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("a"), job("b")])
    a, b = sorted(await lease(store, ttl=0.4), key=lambda lj: lj.job.id)
    untouched = await notes_of(store, a)
    assert untouched == JobNotes("a", "q", None, (), 0), "a job without notes has empty ones"

    before = await store.now()
    done = await store.write_notes(
        [
            write(a, "one", "two", progress=Progress(0.25, "a quarter")),
            NoteWrite(stale(b.ref), Progress(0.5), ("stale",)),
            write(a, "three", progress=Progress(0.5, "half")),  # the same job again: in order
        ]
    )
    after = await store.now()
    assert done.written == ("a", "a") and done.refused == ("b",) and done.dropped == 0
    got = await notes_of(store, a)
    assert got.job_id == "a" and got.queue == "q" and got.dropped == 0
    assert got.progress is not None
    assert (got.progress.fraction, got.progress.message, got.progress.attempt) == (0.5, "half", 1)
    assert before - _SLACK <= got.progress.at <= after + _SLACK, "written on the store's clock"
    assert [(line.attempt, line.text) for line in got.lines] == [
        (1, "one"),
        (1, "two"),
        (1, "three"),
    ]
    assert all(before - _SLACK <= line.at <= after + _SLACK for line in got.lines)
    assert await notes_of(store, b) == JobNotes("b", "q", None, (), 0), "a stale write changed b"

    # progress alone leaves the lines; lines alone leave the progress
    await store.write_notes([write(a, progress=Progress(1, "done"))])
    await store.write_notes([write(a, "four")])
    got = await notes_of(store, a)
    assert got.progress is not None and (got.progress.fraction, got.progress.message) == (1, "done")
    assert [line.text for line in got.lines] == ["one", "two", "three", "four"]

    # an expired lease writes nothing, even before recovery
    await trio.sleep(0.5)
    late = await store.write_notes([write(a, "late", progress=Progress(0.1))])
    assert late.written == () and late.refused == ("a",)
    assert await notes_of(store, a) == got

    # the next attempt appends after the earlier attempt's lines; the old
    # lease stays fenced
    assert set((await store.recover_expired(["q"], 10)).requeued) == {"a", "b"}
    again = {lj.job.id: lj for lj in await lease(store)}["a"]
    assert again.job.attempts == 2
    mixed = await store.write_notes(
        [write(a, "old"), write(again, "retried", progress=Progress(0))]
    )
    assert mixed.written == ("a",) and mixed.refused == ("a",)
    got = await notes_of(store, again)
    assert got.progress is not None and (got.progress.fraction, got.progress.attempt) == (0, 2)
    assert [(line.attempt, line.text) for line in got.lines][-2:] == [(1, "four"), (2, "retried")]

    # a settled lease writes nothing more; unknown jobs and queues read None
    assert (await store.settle([settle(again, SettleKind.DEAD, error="x")])).settled == (True,)
    assert (await store.write_notes([write(again, "after")])).refused == ("a",)
    assert [line.text for line in (await notes_of(store, again)).lines][-1] == "retried"
    assert await store.job_notes(JobRef("nope", "q")) is None
    assert await store.job_notes(JobRef("a", "other-queue")) is None
    assert (await store.write_notes([])).written == ()


@check(Capability.NOTES)
async def check_notes_keep_their_bounds(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job("a")])
    [a] = await lease(store)
    good = write(a, "kept?", progress=Progress(0.5, "ok"))
    bad: list[NoteWrite] = [
        write(a, progress=Progress(1.5)),
        write(a, progress=Progress(-0.1)),
        write(a, progress=Progress(math.nan)),
        write(a, progress=Progress(math.inf)),
        write(a, progress=Progress(True)),
        write(a, progress=Progress(0.5, "m" * (MAX_PROGRESS_MESSAGE + 1))),
        write(a, "x" * (MAX_LINE_CHARS + 1)),
    ]
    for wrong in bad:
        try:
            await store.write_notes([good, wrong])
        except (ValueError, TypeError):
            pass
        else:
            raise AssertionError(f"{wrong!r} breaks the bounds and must be refused")
    assert await notes_of(store, a) == JobNotes("a", "q", None, (), 0), "a refused batch wrote"

    # the longest message and line are kept whole
    longest = write(a, "y" * MAX_LINE_CHARS, progress=Progress(0.5, "m" * MAX_PROGRESS_MESSAGE))
    assert (await store.write_notes([longest])).written == ("a",)
    got = await notes_of(store, a)
    assert got.progress is not None and got.progress.message == "m" * MAX_PROGRESS_MESSAGE
    assert [line.text for line in got.lines] == ["y" * MAX_LINE_CHARS]

    # past the bound the newest lines are kept and the pushed-out ones counted
    first = [f"first {n}" for n in range(MAX_NOTE_LINES - 10)]
    second = [f"second {n}" for n in range(30)]
    assert (await store.write_notes([write(a, *first)])).dropped == 0
    assert (await store.write_notes([write(a, *second)])).dropped == 21
    got = await notes_of(store, a)
    assert len(got.lines) == MAX_NOTE_LINES and got.dropped == 21
    assert [line.text for line in got.lines] == first[20:] + second
    many = [f"many {n}" for n in range(MAX_NOTE_LINES * 2)]
    assert (await store.write_notes([write(a, *many)])).dropped == MAX_NOTE_LINES * 2
    got = await notes_of(store, a)
    assert [line.text for line in got.lines] == many[MAX_NOTE_LINES:]
    assert got.dropped == 21 + MAX_NOTE_LINES * 2


@check(Capability.NOTES, Capability.ADMIN)
async def check_notes_go_with_the_job_record(fresh: Fresh) -> None:
    store = await fresh()
    await store.enqueue_many([job(n) for n in ("dropped", "kept", "dead", "deleted")])
    leased = {lj.job.id: lj for lj in await lease(store)}
    noted = await store.write_notes([write(lj, f"{n} line") for n, lj in leased.items()])
    assert sorted(noted.written) == ["dead", "deleted", "dropped", "kept"]
    settled = await store.settle(
        [
            settle(leased["dropped"], SettleKind.SUCCEEDED),
            settle(leased["kept"], SettleKind.SUCCEEDED, retain_for=0.3),
            settle(leased["dead"], SettleKind.DEAD, error="boom"),
            settle(leased["deleted"], SettleKind.DEAD, error="boom"),
        ]
    )
    assert settled.settled == (True, True, True, True)
    assert await store.job_notes(ref_of(leased["dropped"])) is None, "gone with its record"
    for kept in ("kept", "dead", "deleted"):
        got = await notes_of(store, leased[kept])
        assert got.lines == (NoteLine(1, got.lines[0].at, f"{kept} line"),)
    assert await store.delete_job("deleted", queue="q")
    assert await store.job_notes(ref_of(leased["deleted"])) is None, "gone with its record"
    await trio.sleep(0.4)
    assert (await store.trim(["q"], dead_max_age=None, dead_max_count=0)).count == 2
    assert await store.job_notes(ref_of(leased["kept"])) is None, "trimmed with its record"
    assert await store.job_notes(ref_of(leased["dead"])) is None, "trimmed with its record"

    # a requeued dead job keeps its earlier run's lines (its attempts count
    # from 0 again)
    await store.enqueue_many([job("again")])
    [first] = await lease(store)
    await store.write_notes([write(first, "attempt one")])
    await store.settle([settle(first, SettleKind.DEAD, error="boom")])
    assert (await store.requeue_dead("q")).count == 1
    [second] = await lease(store)
    await store.write_notes([write(second, "attempt two")])
    got = await notes_of(store, second)
    assert [(line.attempt, line.text) for line in got.lines] == [
        (1, "attempt one"),
        (1, "attempt two"),
    ]
