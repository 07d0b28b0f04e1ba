"""The MemoryStore's workflow records (``WorkflowRole``): a dict by
workflow ID, each entry kept until its expiry (store clock)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from ...records._flow_control import WorkflowRecord


class WorkflowRecords:
    """Workflow ID -> (expiry, record); an expired entry counts as none."""

    def __init__(self) -> None:
        self._records: dict[str, tuple[float, WorkflowRecord]] = {}

    def _live(self, workflow_id: str, now: float) -> WorkflowRecord | None:
        entry = self._records.get(workflow_id)
        if entry is None:
            return None
        if entry[0] <= now:
            del self._records[workflow_id]
            return None
        return entry[1]

    def save(self, record: WorkflowRecord, ttl: float, now: float) -> bool:
        if self._live(record.id, now) is not None:
            return False
        self._records[record.id] = (now + ttl, record)
        return True

    def get(self, workflow_id: str, now: float) -> WorkflowRecord | None:
        return self._live(workflow_id, now)

    def cancel(self, workflow_id: str, now: float) -> WorkflowRecord | None:
        record = self._live(workflow_id, now)
        if record is None or record.cancelled is not None:
            return record
        marked = attrs.evolve(record, cancelled=now)
        self._records[workflow_id] = (self._records[workflow_id][0], marked)
        return marked

    def cancelled(self, workflow_ids: Sequence[str], now: float) -> set[str]:
        out: set[str] = set()
        for wid in workflow_ids:
            record = self._live(wid, now)
            if record is not None and record.cancelled is not None:
                out.add(wid)
        return out

    def keep(self, keeps: Mapping[str, float], now: float) -> dict[str, float]:
        """Each live record of ``keeps`` kept at least its seconds from
        ``now``; how long each found lasts then."""
        out: dict[str, float] = {}
        for wid, ttl in keeps.items():
            record = self._live(wid, now)
            if record is None:
                continue
            until = max(self._records[wid][0], now + ttl)
            self._records[wid] = (until, record)
            out[wid] = until - now
        return out
