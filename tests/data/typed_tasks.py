"""Checked by tests/test_typing.py under mypy --strict (not imported by the suite)."""

from typing import reveal_type

import attrs

import chronos_trio
from chronos_trio import JobContext

app = chronos_trio.App()


@attrs.frozen
class Email:
    to: str


@app.task("a")
async def payload_then_job(args: Email, job: JobContext) -> None: ...


@app.task("b")
async def job_then_payload(job: JobContext, args: int) -> None: ...


@app.task("c")
def payload_only(args: list[str]) -> None: ...


@app.task("d")
async def untyped(args, job):  # type: ignore[no-untyped-def]
    ...


reveal_type(payload_then_job)
reveal_type(job_then_payload)
reveal_type(payload_only)
reveal_type(untyped)


async def main() -> None:
    await payload_then_job.enqueue(Email("x"))
    await payload_then_job.enqueue(3)
    await payload_only.enqueue_many([["a"], ["b"]])
