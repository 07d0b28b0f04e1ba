"""Results, job handles and headers: enqueue, wait for the typed result.

python examples/results.py                     # embedded store, one process
CHRONOS_URL=redis://127.0.0.1:6379/0 python examples/results.py
"""

from __future__ import annotations

import os

import attrs
import trio

import chronos_trio
from chronos_trio import JobContext, JobFailed


@attrs.frozen
class Resize:
    url: str
    width: int


@attrs.frozen
class Thumbnail:
    url: str
    bytes_: int


app = chronos_trio.App(os.environ.get("CHRONOS_URL"))


@app.producer_hook
def tag_request(kind: str, headers: dict[str, str]) -> None:
    headers.setdefault("request-id", "req-42")  # e.g. from the web request


@app.task("image.resize", result_ttl=600)  # the result is kept 10 minutes
async def resize(args: Resize, job: JobContext) -> Thumbnail:
    await trio.sleep(0.01)  # the real work
    print(f"resizing {args.url} for {job.headers['request-id']}")
    return Thumbnail(f"{args.url}?w={args.width}", args.width * 10)


@app.task("image.fetch", max_retries=0)
def fetch(url: str, job: JobContext) -> bytes:  # a plain def runs in a thread
    raise ConnectionError(f"{url} is unreachable")


async def main() -> None:
    async with app.open_worker(concurrency=8):
        handle = await resize.enqueue(Resize("https://img/cat.png", 64))
        thumb = await handle.result(timeout=10)  # woken by the store, no polling
        print(f"thumbnail: {thumb}")

        # a handle from the ID alone, e.g. in another process or request
        again = app.job(handle.job_id)
        status = await again.status()
        print(f"status: {status.state}, same result: {await again.result() == thumb}")

        failing = await fetch.enqueue("https://down.example")
        try:
            await failing.result(timeout=10)
        except JobFailed as exc:
            print(f"failed after {exc.attempts} attempt(s): {exc.last_error.splitlines()[0]}")


if __name__ == "__main__":
    trio.run(main)
