"""Running jobs' notes on Redis (:class:`~chronos_trio.store.NotesRole`):
fields of the job hash (see ``lua/notes_write.lua``), so they are kept and
removed with it. Writes are one ``notes_write.lua`` per partition, all in one
round trip; a read is a sans-IO plan, so producers outside Trio drive it too."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...records._jobs import JobRef
from ...records._notes import (
    MAX_NOTE_LINES,
    JobNotes,
    JobProgress,
    NoteLine,
    NoteWrite,
    check_write,
)
from .._results import NotesResult
from ._codec import ident, parse_count, parse_number
from ._core import Call, Plan, RedisCore, ref_locations_plan
from ._scripts import NOTES_WRITE, Op
from .keys import PartitionKeys

if TYPE_CHECKING:  # the store's context runs on Trio; producers read without it
    from ._context import StoreContext

#: What a read takes of the job hash: the state (the job exists), then the
#: notes' fields (see notes_write.lua).
_READ = ("state", "kind", "np", "nm", "na", "nt", "nl", "nd")


async def write_notes(ctx: StoreContext, writes: Sequence[NoteWrite]) -> NotesResult:
    for write in writes:
        check_write(write)
    groups: dict[PartitionKeys, list[int]] = {}
    for i, write in enumerate(writes):
        pk = ctx.keys.placed(write.lease.queue, write.lease.placement)
        groups.setdefault(pk, []).append(i)
    ops = []
    for pk, idxs in groups.items():
        argv: list[object] = [MAX_NOTE_LINES]
        for i in idxs:
            w = writes[i]
            p = w.progress
            argv += [w.lease.job_id, w.lease.token]
            argv += ["", ""] if p is None else [repr(float(p.fraction)), p.message]
            argv += [len(w.lines), *w.lines]
        ops.append(Op.script_call(NOTES_WRITE, [pk.job_prefix], argv))
    replies = await ctx.adapter.execute(ops) if ops else []
    written = [False] * len(writes)
    dropped = 0
    for (_, idxs), reply in zip(groups.items(), replies, strict=True):
        dropped += int(reply[0])
        for k, i in enumerate(idxs):
            written[i] = reply[1 + k] == 1
    return NotesResult(
        tuple(w.lease.job_id for w, ok in zip(writes, written, strict=True) if ok),
        tuple(w.lease.job_id for w, ok in zip(writes, written, strict=True) if not ok),
        dropped,
    )


def read_plan(core: RedisCore, ref: JobRef) -> Plan[JobNotes | None]:
    """The notes of the job of ``ref``, None when there is no such job (one
    HMGET per place it may live, in one round trip)."""
    places = yield from ref_locations_plan(core, ref)
    replies = yield Call(
        [Op.soft_command(pk.tag, "HMGET", pk.job(ref.job_id), *_READ) for pk in places]
    )
    for pk, reply in zip(places, replies, strict=True):
        if isinstance(reply, Exception) or (reply[0] is None and reply[1] is None):
            continue  # no hash there (or a key of another type: no job)
        return _notes_from(ident(ref.job_id), pk.queue, reply[2:])
    return None


def _number(value: bytes | str | None) -> float | None:
    if not value:
        return None
    return parse_number(value.encode() if isinstance(value, str) else value)


def _notes_from(job_id: str, queue: str, f: Sequence[bytes | None]) -> JobNotes:
    """Notes from the stored fields np, nm, na, nt, nl, nd. A value that
    cannot be read counts as absent: notes are advisory, never damage."""
    np_, nm, na, nt, nl, nd = f
    fraction = _number(np_)
    progress = None
    if fraction is not None:
        message = (nm or b"").decode("utf-8", "backslashreplace")
        progress = JobProgress(fraction, message, parse_count(na or b"") or 0, _number(nt) or 0.0)
    lines: list[NoteLine] = []
    try:
        stored: Any = json.loads(nl) if nl else []
    except ValueError:
        stored = []
    for entry in stored if isinstance(stored, list) else ():
        match entry:
            case [int(attempt), str(at), str(text)]:
                lines.append(NoteLine(attempt, _number(at) or 0.0, text))
    return JobNotes(job_id, queue, progress, tuple(lines), parse_count(nd or b"") or 0)
