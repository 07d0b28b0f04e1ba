"""Encoding between Python objects and what the Lua scripts store and return."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence

from ...records._jobs import Job, JobState, NewJob
from .._roles import QueueVersion, VersionState

#: Job hash fields, in the order every full read (HMGET) uses.
JOB_FIELDS = (
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
)

_STATES = {s.value.encode(): s for s in JobState}


def text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else value


def opt_float(value: bytes | str | None) -> float | None:
    """A stored time, where '' (or an absent field) means None."""
    return float(value) if value not in (None, b"", "") else None  # type: ignore[arg-type]


def job_from_fields(
    job_id: str, queue: str, version: int, partition: int, f: Sequence[bytes | None]
) -> Job:
    """A Job from the 13 values of :data:`JOB_FIELDS` (absent fields are None)."""
    return Job(
        id=job_id,
        queue=queue,
        kind=text(f[0]),
        payload=f[1] or b"",
        run_at=float(f[2] or 0.0),
        state=_STATES[f[3] or b"scheduled"],
        attempts=int(f[4] or 0),
        max_retries=int(f[5] or 0),
        timeout=float(f[6] or 0.0),
        lease_token=text(f[7]),
        lease_owner=text(f[8]),
        lease_expires_at=opt_float(f[9]),
        queue_version=version,
        partition=partition,
        last_error=text(f[10]),
        created_at=float(f[11] or 0.0),
        finished_at=opt_float(f[12]),
    )


# -- topology ------------------------------------------------------------------------
def encode_topology(versions: Sequence[QueueVersion]) -> str:
    """``version:partitions:a|d,...`` (the format topology_*.lua parse)."""
    return ",".join(
        f"{v.version}:{v.partitions}:{'a' if v.state is VersionState.ACTIVE else 'd'}"
        for v in versions
    )


def decode_topology(encoded: bytes | str) -> tuple[QueueVersion, ...]:
    out = []
    for item in text(encoded).split(","):
        if not item:
            continue
        version, partitions, state = item.split(":")
        out.append(
            QueueVersion(
                int(version),
                int(partitions),
                VersionState.ACTIVE if state == "a" else VersionState.DRAINING,
            )
        )
    return tuple(out)


# -- pending schedule triggers (JSON, never pickle) ----------------------------------------
def encode_new_job(job: NewJob) -> bytes:
    return json.dumps(
        {
            "id": job.id,
            "queue": job.queue,
            "kind": job.kind,
            "payload": base64.b64encode(job.payload).decode(),
            "run_at": job.run_at,
            "delay": job.delay,
            "max_retries": job.max_retries,
            "timeout": job.timeout,
        },
        separators=(",", ":"),
    ).encode()


def decode_new_job(data: bytes) -> NewJob:
    d = json.loads(data)
    return NewJob(
        id=d["id"],
        queue=d["queue"],
        kind=d["kind"],
        payload=base64.b64decode(d["payload"]),
        run_at=d["run_at"],
        delay=d["delay"],
        max_retries=d["max_retries"],
        timeout=d["timeout"],
    )
