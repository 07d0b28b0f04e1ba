"""The README's example, runnable: ``python examples/quickstart.py``.

Uses the in-memory store unless CHRONOS_URL is set (e.g. redis://127.0.0.1:6379/0).
"""

from __future__ import annotations

import os

import attrs
import trio

import chronos_trio


@attrs.frozen
class SendEmail:
    to: str
    subject: str


app = chronos_trio.App(os.environ.get("CHRONOS_URL"))


@app.task("email.send", max_retries=3, timeout=15)
async def send_email(args: SendEmail, job: chronos_trio.JobContext) -> None:
    print(f"attempt {job.attempt}: mail to {args.to} ({args.subject})")


@app.on_dead_letter
async def alert(job: chronos_trio.Job) -> None:
    print(f"dead: {job.id} {job.last_error.splitlines()[0]}")


async def main() -> None:
    async with app.open_worker(concurrency=64) as worker:
        await send_email.enqueue(SendEmail("a@example.com", "hi"))
        await send_email.enqueue(SendEmail("b@example.com", "later"), delay=2)
        await send_email.enqueue_many([SendEmail(f"{i}@example.com", "bulk") for i in range(5)])
        await worker.wait_idle()
    print(worker.statistics())


if __name__ == "__main__":
    trio.run(main)
