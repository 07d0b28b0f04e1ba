"""The store checker's findings (:meth:`~chronos_trio.store.CheckRole.check`):
what it found wrong with each job and what repair did about it, and the
report of one walk. A module of their own, loaded on first use (the
``chronos_trio.store`` package names them lazily): a worker never checks a
store, so it does not build these classes while it starts."""

from __future__ import annotations

import enum

import attrs

from ..records._placement import Placement
from ..records._public import fixup_module_metadata


class Problem(enum.StrEnum):
    """What the store checker found wrong with one job (or index entry)."""

    NO_INDEX = "no_index"  # a record in no index: nothing will ever lease, promote or trim it
    NO_RECORD = "no_record"  # an index entry whose record is gone
    TWO_INDEXES = "two_indexes"  # a record in more than one index
    WRONG_INDEX = "wrong_index"  # a record in one index, not the one its state names
    EXPIRED_LEASE = "expired_lease"  # a lease expired more than the grace ago, not recovered
    DAMAGED = "damaged"  # a field missing or of the wrong type (the detail names it)
    NEWER_FORMAT = "newer_format"  # written in a newer record format: left for a newer version
    QUARANTINED = "quarantined"  # an entry of a quarantine hash: already set aside

    @property
    def report_only(self) -> bool:
        """True for findings that are listed but are not a problem to repair:
        a newer format's record (a rolling upgrade in progress) and a
        quarantine entry (a problem already dealt with)."""
        return self in (Problem.NEWER_FORMAT, Problem.QUARANTINED)


class Repair(enum.StrEnum):
    """What ``check(repair=True)`` did about one finding."""

    NONE = "none"  # nothing: repair not asked, or a report-only finding
    REINDEXED = "reindexed"  # put in the index its state names, with the right score
    RECOVERED = "recovered"  # an expired lease taken back: ready again
    DEAD_LETTERED = "dead_lettered"  # made dead, with a last_error naming the problem
    QUARANTINED = "quarantined"  # index entries removed, the job id recorded in quarantine
    SKIPPED = "skipped"  # the job changed since it was inspected: left alone (check again)


@attrs.frozen
class Finding:
    """One problem the store checker found, and what repair did about it.

    ``state`` is the record's state as stored ("" when there is no record or
    no state), ``indexes`` the indexes (state names) that held the job when
    it was inspected, ``record_format`` the record's format version (None
    with no record, or one that cannot be read). ``detail`` says what is
    wrong, naming the field and value for a damaged record;
    ``repair_detail`` what the repair did (or why it did nothing).
    """

    problem: Problem
    job_id: str
    queue: str
    #: Where the store keeps the job (opaque, see ``records._placement``;
    #: a store with topology reads it with ``TopologyRole.locate``).
    placement: Placement
    detail: str
    state: str = ""
    indexes: tuple[str, ...] = ()
    record_format: int | None = None
    repair: Repair = Repair.NONE
    repair_detail: str = ""


def finding_order(finding: Finding) -> tuple[str, Placement, str]:
    """The order reports list findings in: by queue, placement (for a store
    with topology: version, then partition), job id."""
    return (finding.queue, finding.placement, finding.job_id)


@attrs.frozen
class CheckReport:
    """What one walk of a store found (see :meth:`CheckRole.check`).

    ``findings`` lists problems and newer-format records by queue, version,
    partition and job id (:func:`finding_order`), then quarantine entries.
    The counters say how much was walked: ``records`` job records and
    ``index_entries`` index entries seen (a record or entry that moved during
    the walk may be seen twice), in ``partitions`` partitions;
    ``skipped_keys`` are job keys of the namespace outside the checked
    partitions (another queue, or a version no longer in the topology), left
    alone. ``now`` is the store's clock when the walk began.
    """

    queues: tuple[str, ...]
    repair: bool
    lease_grace: float
    now: float
    findings: tuple[Finding, ...] = ()
    partitions: int = 0
    records: int = 0
    index_entries: int = 0
    skipped_keys: int = 0

    @property
    def problems(self) -> tuple[Finding, ...]:
        """Findings that are problems (not report-only)."""
        return tuple(f for f in self.findings if not f.problem.report_only)

    @property
    def unresolved(self) -> tuple[Finding, ...]:
        """Problems not repaired: every problem without repair; with repair,
        those it skipped because the job changed meanwhile."""
        return tuple(f for f in self.problems if f.repair in (Repair.NONE, Repair.SKIPPED))

    @property
    def ok(self) -> bool:
        """True when no problem is left unrepaired."""
        return not self.unresolved


# Public as ``chronos_trio.store.<name>``, loaded on first use (the package
# names them lazily): they report that module however they were first reached.
fixup_module_metadata(
    "chronos_trio.store",
    {
        "Problem": Problem,
        "Repair": Repair,
        "Finding": Finding,
        "finding_order": finding_order,
        "CheckReport": CheckReport,
    },
)
