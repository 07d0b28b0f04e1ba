"""The store checker on Redis: walk a namespace, judge every job from one
atomic reading, repair with one atomic script per job.

The walk, in bounded steps (``batch`` keys or entries per command, so it
never blocks Redis for long, and never a ``KEYS``):

1. records: ``SCAN MATCH {ns:q:*}:j:*`` on every primary (each node of a
   Cluster), keeping the job hashes of the checked partitions (the queues'
   topology versions; other keys are counted as skipped and left alone);
2. indexes: ``ZSCAN`` of the six index zsets of every checked partition, to
   find entries whose record is gone;
3. quarantine: ``HSCAN`` of every checked partition's ``<tag>:damaged``.

Each job found is judged from one reading by ``check_inspect.lua``: its
record and its score in each of its partition's indexes, read atomically, so
a job that a worker moves while the walk runs is seen either before or after
the move, never half-moved. A repair runs ``check_repair.lua``, which acts
only if the job is still exactly as read (every field and every index
score); otherwise it does nothing and the finding reports ``SKIPPED``.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from ...records._jobs import JobState
from .._checking import asked_queues
from .._record_rules import damaged_already, parse_count, stored_damage, stored_state
from .._roles import DAMAGED_RECORD, CheckReport, Finding, Problem, Repair, finding_order
from ._admin import queue_names
from ._codec import RECORD_FORMAT, show
from ._context import StoreContext
from ._scripts import Op, Script
from .keys import LEASED_SENTINEL, PartitionKeys, escape

T = TypeVar("T")

#: A partition: (queue, version, partition).
Ident = tuple[str, int, int]

INSPECT = Script.load("check_inspect")
REPAIR = Script.load("check_repair")

#: Cursors (index zsets, quarantine hashes) walked side by side in one round
#: trip: bounds one step's work to this many times ``batch`` entries however
#: many partitions the namespace has.
CURSORS_PER_STEP = 32

#: The fields check_inspect.lua reads, in its order (``payload`` joined from
#: its chunks, see ``lua/lib/inspect_fields.lua``).
FIELDS = (
    "kind",
    "payload",
    "run_at",
    "state",
    "attempts",
    "max_retries",
    "timeout",
    "lease_token",
    "lease_owner",
    "lease_expires_at",
    "last_error",
    "created_at",
    "finished_at",
    "v",
    "h",
    "fc",
    "result_until",
    "chunks",  # not a field: why the payload's chunks cannot be joined (None: they can)
)
#: Entries per job in a check_inspect.lua reply: id, exists, FIELDS, 6 scores.
_STRIDE = 2 + len(FIELDS) + 6

#: The index zsets in the scripts' order (KEYS[1..6]) and the state each holds.
INDEX_STATES = (
    JobState.SCHEDULED,
    JobState.READY,
    JobState.LEASED,
    JobState.RETRY_WAIT,
    JobState.SUCCEEDED,
    JobState.DEAD,
)

#: The field whose value is a job's score in the index of its state.
SCORE_FIELD = {
    JobState.SCHEDULED: "run_at",
    JobState.READY: "run_at",
    JobState.LEASED: "lease_expires_at",
    JobState.RETRY_WAIT: "run_at",
    # The end of its retention is kept only as its score: a succeeded record
    # put back in its index counts as retained until it finished (the next
    # trim removes it, as it would have been by now or soon).
    JobState.SUCCEEDED: "finished_at",
    JobState.DEAD: "finished_at",
    JobState.ABORTED: "finished_at",
}

#: The index each state's jobs are in (aborted jobs are kept in the dead one).
INDEX_OF = {state: JobState.DEAD if state is JobState.ABORTED else state for state in JobState}

_STATES = {s.value.encode(): s for s in JobState}
_SKIPPED = "the job changed since it was inspected: left alone (check again)"


def zsets(pk: PartitionKeys) -> list[str]:
    """The partition's index zsets in :data:`INDEX_STATES` order."""
    return [pk.scheduled, pk.ready, pk.leased, pk.retry, pk.succeeded, pk.dead]


# -- judging one record ------------------------------------------------------------------
def record_format(value: bytes | None) -> tuple[int | None, str]:
    """The record format of a ``v`` field (None absent: format 1), or None
    and why it cannot be read (as ``lua/lib/check_format.lua``)."""
    if value is None:
        return 1, ""
    n = parse_count(value) if len(value) <= 9 else None
    if n is not None and n >= 1:
        return n, ""
    return None, f"field 'v' holds {show(value)}, not a record format"


def record_damage(f: Mapping[str, bytes | None]) -> list[str]:
    """What makes a job record (``f``: :data:`FIELDS` -> stored value, None
    when absent) unusable, one message per field naming it and its value;
    empty for a sound record. The one judgement every path makes
    (:func:`~chronos_trio.store._record_rules.stored_damage`), after the
    record format, with why the payload's chunks cannot be joined in place
    of the payload. A dead record already set aside as damaged needs only
    what the dead index needs."""
    out: list[str] = []
    done = damaged_already(stored_state(f), f.get("last_error"))
    if not done:
        _fmt, fmt_problem = record_format(f["v"])
        if fmt_problem:
            out.append(fmt_problem)
    damage = stored_damage(f)
    chunks = f.get("chunks")
    if chunks is not None and not done:
        damage["payload"] = chunks.decode("utf-8", "backslashreplace")
    out += damage.values()
    return out


@attrs.frozen
class Fix:
    """The repair of one finding: the script call, and the state the job
    ends in when it applies as planned (for wake-ups; None: no index a
    worker waits on)."""

    op: Op
    becomes: JobState | None = None


@attrs.frozen
class Reading:
    """One job as check_inspect.lua read it."""

    pk: PartitionKeys
    job_id: bytes
    exists: bool
    fields: tuple[bytes | None, ...]  # FIELDS order
    scores: tuple[bytes | None, ...]  # INDEX_STATES order
    now: float
    #: The record has a TTL: a succeeded job kept only for its result (or
    #: its waiters), or a discarded dead job kept for its waiters, in no
    #: index by design (it expires by itself; nothing trims it).
    expiring: bool = False

    @property
    def held(self) -> tuple[str, ...]:
        return tuple(INDEX_STATES[i].value for i, s in enumerate(self.scores) if s is not None)

    def repair_op(self, action: str, arg: str | bytes, score: bytes = b"") -> Op:
        pk = self.pk
        expected = [b"" if v is None else b"=" + v for v in self.fields]
        return Op.script_call(
            REPAIR,
            [*zsets(pk), pk.damaged, pk.job_prefix],
            [
                self.job_id,
                action,
                arg,
                score,
                b"1" if self.exists else b"0",
                *expected,
                *(s or b"" for s in self.scores),
            ],
        )


def parse_readings(pk: PartitionKeys, reply: Sequence[Any]) -> list[Reading]:
    now = float(reply[0])
    out = []
    n = len(FIELDS)
    for i in range(1, len(reply), _STRIDE):
        out.append(
            Reading(
                pk,
                reply[i],
                reply[i + 1] in (1, 2),
                tuple(reply[i + 2 : i + 2 + n]),
                tuple(reply[i + 2 + n : i + _STRIDE]),
                now,
                reply[i + 1] == 2,
            )
        )
    return out


def _ago(seconds: float) -> str:
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.0f}m"


def judge(r: Reading, grace: float) -> tuple[Finding, Fix | None] | None:
    """The finding one reading makes (None for a sound job, or one that is
    gone from record and indexes alike), with the repair script call that
    fixes it (None: report only)."""
    f = dict(zip(FIELDS, r.fields, strict=True))
    held = r.held
    finding = Finding(
        problem=Problem.DAMAGED,
        job_id=r.job_id.decode(errors="replace"),
        queue=r.pk.queue,
        placement=r.pk.placement,
        detail="",
        state=(f["state"] or b"").decode(errors="replace"),
        indexes=held,
    )
    if not r.exists:
        if not held:
            return None
        detail = f"index entry without a record (in {', '.join(held)})"
        fix = Fix(r.repair_op("orphan", detail + "; removed by the store checker"))
        return attrs.evolve(finding, problem=Problem.NO_RECORD, detail=detail), fix
    fmt, _ = record_format(f["v"])
    finding = attrs.evolve(finding, record_format=fmt)
    if fmt is not None and fmt > RECORD_FORMAT:
        detail = f"record format {fmt}, newer than {RECORD_FORMAT}: left for a newer version"
        return attrs.evolve(finding, problem=Problem.NEWER_FORMAT, detail=detail), None
    problems = record_damage(f)
    if problems:
        detail = "; ".join(problems)
        fix = Fix(r.repair_op("dead", DAMAGED_RECORD + detail), JobState.DEAD)
        return attrs.evolve(finding, detail=detail), fix
    state = _STATES[f["state"] or b""]
    if state in (JobState.SUCCEEDED, JobState.DEAD) and not held and r.expiring:
        return None
    if held != (INDEX_OF[state].value,):
        if not held:
            problem, detail = Problem.NO_INDEX, f"{state} record in no index"
        elif len(held) > 1:
            problem, detail = Problem.TWO_INDEXES, f"{state} record in {' and '.join(held)}"
        else:
            problem, detail = Problem.WRONG_INDEX, f"{state} record in the {held[0]} index"
        score = f[SCORE_FIELD[state]] or b""
        target = str(INDEX_STATES.index(INDEX_OF[state]) + 1)
        fix = Fix(r.repair_op("reindex", target, score), state)
        return attrs.evolve(finding, problem=problem, detail=detail), fix
    if state is JobState.LEASED:
        late = r.now - float(f["lease_expires_at"] or 0)
        if late >= grace:
            owner = (f["lease_owner"] or b"").decode(errors="replace") or "a worker"
            detail = f"lease of {owner} expired {_ago(late)} ago and was not recovered"
            fix = Fix(r.repair_op("recover", repr(grace)), JobState.READY)
            return attrs.evolve(finding, problem=Problem.EXPIRED_LEASE, detail=detail), fix
    return None


def repaired(finding: Finding, reply: Sequence[Any]) -> Finding:
    """``finding`` with what check_repair.lua did about it."""
    action = reply[0].decode()
    if action == "skipped":
        return attrs.evolve(finding, repair=Repair.SKIPPED, repair_detail=_SKIPPED)
    if action == "reindex":
        where = INDEX_STATES[int(reply[1]) - 1]
        return attrs.evolve(
            finding, repair=Repair.REINDEXED, repair_detail=f"put in the {where} index"
        )
    if action == "dead":
        # the detail is the last_error written
        return attrs.evolve(finding, repair=Repair.DEAD_LETTERED, repair_detail=reply[1].decode())
    if action == "aborted":
        # an abort had been asked for it: taken back as aborted, as recovery does
        detail = f"aborted (an abort was asked): {reply[1].decode(errors='replace')}"
        return attrs.evolve(finding, repair=Repair.RECOVERED, repair_detail=detail)
    if action == "orphan":
        held = ", ".join(finding.indexes)
        return attrs.evolve(
            finding,
            repair=Repair.QUARANTINED,
            repair_detail=f"removed from {held}; job id recorded in the quarantine hash",
        )
    return attrs.evolve(finding, repair=Repair.RECOVERED, repair_detail="ready again (due now)")


def quarantine_detail(value: bytes) -> str:
    """A quarantine entry's reason and time, from the JSON object
    ``{"reason": ..., "at": epoch seconds}`` (any other value as text)."""
    try:
        entry = json.loads(value)
        reason, at = str(entry["reason"]), float(entry["at"])
    except (ValueError, TypeError, KeyError):
        return value.decode(errors="replace")
    when = dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{reason} (set aside {when})"


# -- the walk ----------------------------------------------------------------------------
def _glob(text: str) -> str:
    """``text`` matched literally by a Redis glob pattern."""
    return re.sub(r"([\\*?\[\]])", r"\\\1", text)


def _unescape(name: str) -> str:
    return name.replace("%7B", "{").replace("%7D", "}").replace("%25", "%")


class Walk:
    """One check: the partitions to walk, what was found, and the counters."""

    def __init__(
        self,
        ctx: StoreContext,
        parts: dict[Ident, PartitionKeys],
        *,
        repair: bool,
        batch: int,
        grace: float,
    ) -> None:
        self.ctx = ctx
        self.parts = parts
        self.repair = repair
        self.batch = batch
        self.grace = grace
        self.findings: dict[tuple[Ident, bytes], Finding] = {}
        self.quarantined: list[Finding] = []
        self.records = self.index_entries = self.skipped_keys = 0
        ns = re.escape(escape(ctx.keys.namespace).encode())
        self._key = re.compile(
            rb"\{" + ns + rb":q:(?P<q>[^{}]*):v(?P<v>\d+):p(?P<p>\d+)\}:j:(?P<id>.*)\Z", re.DOTALL
        )

    def parse_key(self, key: bytes) -> tuple[Ident, bytes] | None:
        """The checked partition and job id of a job hash's key; None for any
        other key (another queue, a version outside the topology)."""
        m = self._key.match(key)
        if m is None:
            return None
        try:
            ident = (_unescape(m["q"].decode()), int(m["v"]), int(m["p"]))
        except UnicodeDecodeError:
            return None
        return (ident, m["id"]) if ident in self.parts else None

    def pattern(self) -> str:
        """The SCAN pattern of the checked queues' job hashes."""
        ns = _glob(escape(self.ctx.keys.namespace))
        queues = {q for q, _, _ in self.parts}
        if len(queues) == 1:
            return f"{{{ns}:q:{_glob(escape(queues.pop()))}:v*}}:j:*"
        return f"{{{ns}:q:*}}:j:*"

    async def judge_ids(self, mode: str, ids: dict[Ident, dict[bytes, None]]) -> None:
        """Inspect ``ids`` (per partition, at most ``batch`` per script call),
        record their findings, and repair them if asked."""
        calls: list[tuple[PartitionKeys, list[bytes]]] = []
        for ident, members in ids.items():
            pk, chunk = self.parts[ident], list(members)
            calls.extend((pk, chunk[i : i + self.batch]) for i in range(0, len(chunk), self.batch))
        if not calls:
            return
        replies = await self.ctx.adapter.execute(
            [
                Op.script_call(INSPECT, [*zsets(pk), pk.job_prefix], [mode, *chunk])
                for pk, chunk in calls
            ]
        )
        fixes: list[tuple[tuple[Ident, bytes], Fix]] = []
        for (pk, _), reply in zip(calls, replies, strict=True):
            for reading in parse_readings(pk, reply):
                key = (pk.slot_id, reading.job_id)
                if key in self.findings:
                    continue  # seen twice (SCAN may repeat keys): judged once
                judged = judge(reading, self.grace)
                if judged is None:
                    continue
                finding, fix = judged
                self.findings[key] = finding
                if self.repair and fix is not None:
                    fixes.append((key, fix))
        if fixes:
            await self.apply(fixes)

    async def apply(self, fixes: Sequence[tuple[tuple[Ident, bytes], Fix]]) -> None:
        replies = await self.ctx.adapter.execute([fix.op for _, fix in fixes])
        ready: dict[str, int] = {}
        due: dict[str, float] = {}
        for (key, fix), reply in zip(fixes, replies, strict=True):
            finding = self.findings[key] = repaired(self.findings[key], reply)
            if finding.repair not in (Repair.REINDEXED, Repair.RECOVERED):
                continue
            # wake idle workers for a job made ready, promoters for one made to
            # wait (due 0: "look now"; the promoter re-reads the real due time)
            if fix.becomes is JobState.READY:
                ready[finding.queue] = ready.get(finding.queue, 0) + 1
            elif fix.becomes in (JobState.SCHEDULED, JobState.RETRY_WAIT):
                due[finding.queue] = 0.0
        if ready or due:
            await self.ctx.adapter.execute(
                [], after=[*self.ctx.wake_ready_ops(ready), *self.ctx.wake_scheduled_ops(due)]
            )

    async def walk_records(self) -> None:
        pattern = self.pattern()
        for node in await self.ctx.adapter.scan_nodes():
            cursor = 0
            while True:
                cursor, keys = await self.ctx.adapter.scan(node, cursor, pattern, self.batch)
                ids: dict[Ident, dict[bytes, None]] = {}
                for key in keys:
                    parsed = self.parse_key(key)
                    if parsed is None:
                        self.skipped_keys += 1
                        continue
                    self.records += 1
                    ids.setdefault(parsed[0], {})[parsed[1]] = None
                await self.judge_ids("all", ids)
                if cursor == 0:
                    break

    async def walk_indexes(self) -> None:
        targets = [(ident, z) for ident in self.parts for z in range(len(INDEX_STATES))]

        def zscan(target: tuple[Ident, int], cursor: int) -> Op:
            pk = self.parts[target[0]]
            return Op.command(pk.tag, "ZSCAN", zsets(pk)[target[1]], cursor, "COUNT", self.batch)

        async def step(got: list[tuple[tuple[Ident, int], Any]]) -> None:
            ids: dict[Ident, dict[bytes, None]] = {}
            for (ident, _), members in got:
                for member, _score in members:
                    if member == LEASED_SENTINEL.encode():
                        continue
                    self.index_entries += 1
                    ids.setdefault(ident, {})[member] = None
            await self.judge_ids("missing", ids)

        await self.cursor_walk(targets, zscan, step)

    async def walk_quarantine(self) -> None:
        # a job id this check quarantined itself is listed once, as repaired
        fresh = {key for key, f in self.findings.items() if f.repair is Repair.QUARANTINED}

        def hscan(ident: Ident, cursor: int) -> Op:
            pk = self.parts[ident]
            return Op.command(pk.tag, "HSCAN", pk.damaged, cursor, "COUNT", self.batch)

        async def step(got: list[tuple[Ident, Any]]) -> None:
            for ident, entries in got:
                pk = self.parts[ident]
                for job_id, value in entries.items():
                    if (ident, job_id) in fresh:
                        continue
                    fresh.add((ident, job_id))  # HSCAN may repeat entries
                    self.quarantined.append(
                        Finding(
                            problem=Problem.QUARANTINED,
                            job_id=job_id.decode(errors="replace"),
                            queue=pk.queue,
                            placement=pk.placement,
                            detail=quarantine_detail(value),
                        )
                    )

        await self.cursor_walk(list(self.parts), hscan, step)

    async def cursor_walk(
        self,
        targets: list[T],
        command: Callable[[T, int], Op],
        step: Callable[[list[tuple[T, Any]]], Awaitable[None]],
    ) -> None:
        """Walk one SCAN-family cursor per target, up to :data:`CURSORS_PER_STEP`
        of them side by side (one round trip per step), handing each step's
        items to ``step``."""
        for start in range(0, len(targets), CURSORS_PER_STEP):
            active = targets[start : start + CURSORS_PER_STEP]
            cursors = dict.fromkeys(active, 0)
            while active:
                replies = await self.ctx.adapter.execute([command(t, cursors[t]) for t in active])
                await step([(t, reply[1]) for t, reply in zip(active, replies, strict=True)])
                left = []
                for t, reply in zip(active, replies, strict=True):
                    if int(reply[0]) != 0:
                        cursors[t] = int(reply[0])
                        left.append(t)
                active = left


async def check(
    ctx: StoreContext,
    queues: Sequence[str] | None,
    *,
    repair: bool,
    batch: int,
    lease_grace: float,
) -> CheckReport:
    """See :meth:`~chronos_trio.store.CheckRole.check`."""
    names = asked_queues(queues, batch=batch, lease_grace=lease_grace)
    if names is None:
        names = await ctx.run(queue_names(ctx))
    (t,) = await ctx.adapter.execute([Op.command(None, "TIME")])
    now = ctx.observe_now(int(t[0]) + int(t[1]) / 1_000_000)
    metas = await ctx.meta(names, fresh=True) if names else {}
    parts = {pk.slot_id: pk for q in names for pk in ctx.partitions_of(q, metas[q])}
    walk = Walk(ctx, parts, repair=repair, batch=batch, grace=lease_grace)
    if parts:
        await walk.walk_records()
        await walk.walk_indexes()
        await walk.walk_quarantine()
    return CheckReport(
        queues=tuple(names),
        repair=repair,
        lease_grace=lease_grace,
        now=now,
        findings=(*sorted(walk.findings.values(), key=finding_order), *walk.quarantined),
        partitions=len(parts),
        records=walk.records,
        index_entries=walk.index_entries,
        skipped_keys=walk.skipped_keys,
    )
