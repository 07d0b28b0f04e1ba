"""Keeping running workflows' records alive (see ``records._flow_keep`` and
docs/workflows.md, "How long a workflow is kept").

A continuer that makes a flow's next jobs or records its group arrivals
keeps its record at least :data:`~chronos_trio.records._workflow.
WORKFLOW_KEEP` more (plus the delay of a delayed job it makes) with
``WorkflowRole.keep_workflows``. Each process asks for a workflow at most
once per :data:`KEEP_EVERY` unless a delayed job needs more, so a flow of
short steps costs one call per process in all (batched with the others of
the continuer's pass), and a record is kept alive while any step of its
flow advances at least once a day. A group's arrival record is kept as long
as its workflow's record (what :meth:`FlowKeeper.group_ttl` gives), so a
member that waits days still finds its group.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping

import trio

from ..records._workflow import WORKFLOW_KEEP
from ..store import WorkflowRole

#: A process asks again for a workflow it kept this long ago (s).
KEEP_EVERY = 3600.0
#: Workflows remembered per store at most (all are forgotten past it).
REMEMBERED = 100_000


class FlowKeeper:
    """What this process last did for each workflow: when it kept its
    record, and until when (its clock: ``trio.current_time``)."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[float, float]] = {}

    def due(self, wants: Mapping[str, float], now: float) -> dict[str, float]:
        """Of ``wants`` (workflow ID -> seconds its record must last from
        ``now``), those to ask for: not kept by this process within
        :data:`KEEP_EVERY`, or kept for too short a time."""
        out: dict[str, float] = {}
        for wid, ttl in wants.items():
            entry = self._kept.get(wid)
            if entry is None or now - entry[0] >= KEEP_EVERY or entry[1] < now + ttl - KEEP_EVERY:
                out[wid] = ttl
        return out

    def kept(self, asked: Mapping[str, float], lasts: Mapping[str, float], now: float) -> None:
        """Remember the answer ``lasts`` of a keep of ``asked`` made at ``now``
        (a workflow without a record is not asked for again for a while)."""
        if len(self._kept) + len(asked) > REMEMBERED:
            self._kept.clear()
        for wid, ttl in asked.items():
            self._kept[wid] = (now, now + lasts.get(wid, ttl))

    def group_ttl(self, workflows: Iterable[str], now: float) -> float:
        """How long group arrivals of ``workflows`` are kept: as long as the
        longest of their records as last known, at least WORKFLOW_KEEP."""
        ttl = WORKFLOW_KEEP
        for wid in workflows:
            entry = self._kept.get(wid)
            if entry is not None:
                ttl = max(ttl, entry[1] - now)
        return ttl

    async def keep(self, store: object, wants: Mapping[str, float]) -> None:
        """Keep the records of ``wants`` that are due (one store call, none
        when none is due or ``store`` keeps no records). Raises StoreError."""
        if not wants or not isinstance(store, WorkflowRole):
            return
        now = trio.current_time()
        asked = self.due(wants, now)
        if asked:
            self.kept(asked, await store.keep_workflows(asked), now)


_keepers: weakref.WeakKeyDictionary[object, FlowKeeper] = weakref.WeakKeyDictionary()


def keeper_of(store: object) -> FlowKeeper:
    """The process's :class:`FlowKeeper` of ``store``."""
    found = _keepers.get(store)
    if found is None:
        found = _keepers[store] = FlowKeeper()
    return found
