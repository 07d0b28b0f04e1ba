"""A registered task as the runtime sees it: the handler and its job defaults."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from ._context import JobContext

#: ``async def handler(payload, job_context)``.
Handler = Callable[[Any, JobContext], Awaitable[object]]


@attrs.frozen
class TaskSpec:
    """One registered handler and its job defaults (the App's ``Task`` wraps
    it for producers)."""

    kind: str
    fn: Handler
    payload_type: Any
    queue: str
    max_retries: int
    timeout: float
