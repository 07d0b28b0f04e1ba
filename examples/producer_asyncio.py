"""Producers outside Trio, asyncio: the shape of a FastAPI (or aiohttp) app.

    CHRONOS_URL=redis://127.0.0.1:6379/0 python examples/producer_asyncio.py

One ``AsyncioProducer`` per event loop, opened in the app's lifespan and
shared by every request. The endpoints below are plain coroutines; in
FastAPI they would carry ``@api.post("/orders")`` and the lifespan would be
``FastAPI(lifespan=lifespan)``. The handlers run in a chronos_trio worker
process, started here for the demo.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from shop_tasks import Order, Receipt, app, checkout, worker_process

from chronos_trio import JobAborted, JobFailed, JobNotFound, ResultTimeout
from chronos_trio.producers import AsyncioProducer

producer: AsyncioProducer  # opened by the lifespan


@asynccontextmanager
async def lifespan(api: object) -> AsyncIterator[None]:
    global producer
    async with AsyncioProducer(app=app) as producer:
        yield


# -- endpoints -------------------------------------------------------------------------
async def create_order(body: dict[str, Any]) -> dict[str, Any]:
    """POST /orders (202): enqueue the checkout, answer at once."""
    handle = await producer.enqueue(checkout, Order(body["id"], tuple(body["items"])))
    return {"job_id": handle.job_id}


async def order_receipt(job_id: str) -> dict[str, Any]:
    """GET /orders/{job_id}/receipt: a long poll of at most 10 s (a client
    that goes away cancels the wait, and nothing is left behind). In
    FastAPI the errors would be ``raise HTTPException(404, ...)`` and
    ``raise HTTPException(422, ...)``, not a 500 with a traceback."""
    try:
        receipt: Receipt = await producer.job(job_id).result(timeout=10)
    except ResultTimeout:
        return {"state": "pending"}
    except JobNotFound:  # a wrong ID, or a job finished and no longer kept: 404
        return {"error": "no such order", "status": 404}
    except (JobFailed, JobAborted) as exc:  # it ran and failed, or was stopped: 422
        return {"error": exc.last_error.splitlines()[0], "status": 422}
    return {"order": receipt.order_id, "total_cents": receipt.total_cents}


async def order_status(job_id: str) -> dict[str, Any]:
    """GET /orders/{job_id}/status"""
    try:
        status = await producer.job(job_id).status()
    except JobNotFound:
        return {"error": "no such order", "status": 404}
    return {"state": status.state.value, "attempts": status.attempts}


async def upload_images(images: list[bytes]) -> dict[str, Any]:
    """POST /images: many jobs in one round trip (by kind name)."""
    handles = await producer.enqueue_many("shop.thumbnail", images)
    return {"thumbnails": await asyncio.gather(*(h.result(timeout=10) for h in handles))}


async def client(n: int) -> str:
    items = [f"item-{i}" for i in range(n % 4)]  # every fourth order is empty
    created = await create_order({"id": f"order-{n}", "items": items})
    return str(await order_receipt(created["job_id"]))


async def main() -> None:
    async with lifespan(None):
        for line in await asyncio.gather(*(client(n) for n in range(12))):
            print(line)
        answer = await upload_images([b"image-%d-pixels" % i for i in range(20)])
        print(f"thumbnails {len(answer['thumbnails'])} {answer['thumbnails'][0]!r}")
        created = await create_order({"id": "order-last", "items": ["book"]})
        await order_receipt(created["job_id"])
        print("status", await order_status(created["job_id"]))
        unknown = "no-such-order"
        print("unknown", await order_receipt(unknown), await order_status(unknown))
        print("waited through", producer.statistics().subscriptions, "subscription")


if __name__ == "__main__":
    with worker_process():
        asyncio.run(main())
