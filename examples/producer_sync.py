"""Producers outside Trio, synchronous: the shape of a Flask or Django app.

    CHRONOS_URL=redis://127.0.0.1:6379/0 python examples/producer_sync.py

One ``SyncProducer`` per process, made at start-up (Flask: with the app;
Django: in an ``AppConfig.ready``), shared by every request thread. The
handlers run in a chronos_trio worker process, started here for the demo.
The view functions below are plain functions; in Flask they would carry
``@bp.post("/orders")``, in Django they would take a ``request``.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from shop_tasks import Order, Receipt, app, checkout, worker_process

from chronos_trio import JobAborted, JobFailed, JobNotFound, ResultTimeout
from chronos_trio.producers import SyncProducer

# app=: jobs are checked and encoded by the registered tasks, results decode
# to their return types; the URL is the app's ($CHRONOS_URL here).
producer = SyncProducer(app=app)


# -- views -----------------------------------------------------------------------------
def create_order(body: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """POST /orders: enqueue the checkout, answer at once (202 Accepted)."""
    handle = producer.enqueue(checkout, Order(body["id"], tuple(body["items"])))
    return {"job_id": handle.job_id}, 202


def order_status(job_id: str) -> tuple[dict[str, Any], int]:
    """GET /orders/<job_id>/status"""
    try:
        status = producer.job(job_id).status()
    except JobNotFound:  # never enqueued, or finished and no longer kept
        return {"error": "no such order"}, 404
    return {"state": status.state.value, "attempts": status.attempts}, 200


def order_receipt(job_id: str) -> tuple[dict[str, Any], int]:
    """GET /orders/<job_id>/receipt: a long poll of at most 10 s."""
    try:
        receipt: Receipt = producer.job(job_id).result(timeout=10)
    except ResultTimeout:
        return {"state": "pending"}, 202
    except JobNotFound:  # a wrong ID, or a job finished and no longer kept
        return {"error": "no such order"}, 404
    except (JobFailed, JobAborted) as exc:  # it ran and failed, or was stopped
        return {"error": exc.last_error.splitlines()[0]}, 422
    return {"order": receipt.order_id, "total_cents": receipt.total_cents}, 200


def upload_images(images: list[bytes]) -> tuple[dict[str, Any], int]:
    """POST /images: many jobs in one round trip (by kind name)."""
    handles = producer.enqueue_many("shop.thumbnail", images)
    return {"thumbnails": [h.result(timeout=10) for h in handles]}, 200


def request(n: int) -> str:
    """One client: create an order, then long-poll its receipt."""
    items = [f"item-{i}" for i in range(n % 4)]  # every fourth order is empty
    created, _ = create_order({"id": f"order-{n}", "items": items})
    answer, code = order_receipt(created["job_id"])
    return f"{code} {answer}"


if __name__ == "__main__":
    with worker_process(), producer:
        # a threaded server: 8 requests at a time
        with ThreadPoolExecutor(8) as pool:
            for line in pool.map(request, range(12)):
                print(line)
        answer, _ = upload_images([b"image-%d-pixels" % i for i in range(20)])
        print(f"thumbnails {len(answer['thumbnails'])} {answer['thumbnails'][0]!r}")
        created, _ = create_order({"id": "order-last", "items": ["book"]})
        order_receipt(created["job_id"])
        print("status", order_status(created["job_id"])[0])
        print("unknown", order_receipt("no-such-order"), order_status("no-such-order"))
        print("waited through", producer.statistics().subscriptions, "subscription")
