"""What a workflow hands its failure callbacks and the steps after a group
that may partly fail (see docs/workflows.md): plain attrs records, encoded as
JSON payloads like any other."""

from typing import Any

import attrs

from ._attrs_methods import fields_eq, fields_hash, fields_repr

#: The error a workflow step deleted before it ended (scheduled, ready or
#: retry_wait) fails with, when its flow handles failures: the stores put it
#: in the outbox as a failed end in the deleting step (see docs/workflows.md).
DELETED_ERROR = "deleted: the job was deleted before it ended"

#: What the error of a workflow step discarded (a ``discard_dead`` task's job
#: that failed for good: deleted, not kept dead) starts with, when its flow
#: handles failures: the stores put it in the outbox as a failed end, with
#: this prefix before the error it failed with, in the discarding settle. An
#: aborted step fails its flow with its abort's error (``aborted: <reason>``).
DISCARDED_PREFIX = "discarded: "


def discarded_error(error: str) -> str:
    """The error a discarded workflow step fails its flow with (see
    :data:`DISCARDED_PREFIX`). Never raises."""
    return DISCARDED_PREFIX + error


@attrs.frozen
class StepFailure:
    """The payload of an ``on_failure`` callback: the step of the flow that
    failed for good (dead: retries spent, a non-retryable error, or its
    lease lost on its last attempt). ``error`` is the text the store
    recorded, ``attempts`` how many it made."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    workflow_id: str
    job_id: str
    kind: str
    error: str
    attempts: int


@attrs.frozen
class MemberOutcome:
    """How one member of a ``group(..., allow_failures=True)`` ended:
    ``ok`` with its ``result`` (the member's result as JSON data: dicts and
    lists for attrs records; ``Workflow.result()`` gives it decoded by the
    step's result type), or not ``ok`` with the ``error`` of the step that
    failed. ``job_id``: the member's last job (a member that is a group: the
    group's ID; a failure: the job that failed)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    ok: bool
    result: Any = None
    error: str | None = None
    job_id: str = ""


@attrs.frozen
class BatchSummary:
    """The payload of a batch's ``on_complete`` callback, made once every
    member finished (succeeded or failed for good): the counts, and the IDs
    of the members that failed, in member order."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    batch_id: str
    total: int
    succeeded: int
    failed: int
    failed_job_ids: list[str] = attrs.Factory(list)
