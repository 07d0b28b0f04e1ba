"""A nested workflow with results passed along: fetch an order, work out
its subtotal, shipping and discount in parallel (a group, each member gets
the order), add them up (the chord's callback), then send the invoice.
Starting it again under the same workflow ID is the same run, and a unique
job is not stored twice while one is pending.

python examples/workflow.py                     # embedded store, one process
CHRONOS_URL=redis://127.0.0.1:6379/0 python examples/workflow.py
"""

from __future__ import annotations

import os

import attrs
import trio

import chronos_trio
from chronos_trio import JobContext, Unique, chain, group


@attrs.frozen
class Line:
    sku: str
    qty: int


@attrs.frozen
class Order:
    id: int
    lines: list[Line]


PRICES = {"apple": 30, "pear": 45, "fig": 120}

app = chronos_trio.App(os.environ.get("CHRONOS_URL"))


@app.task("orders.fetch")
async def fetch(order_id: int, job: JobContext) -> Order:
    await trio.sleep(0.01)  # a database read
    return Order(order_id, [Line("apple", 3), Line("pear", 2), Line("fig", 1)])


@app.task("orders.subtotal")
async def subtotal(order: Order, job: JobContext) -> int:
    return sum(PRICES[line.sku] * line.qty for line in order.lines)


@app.task("orders.shipping")
async def shipping(order: Order, job: JobContext) -> int:
    return 500 if sum(line.qty for line in order.lines) > 5 else 300


@app.task("orders.discount")
async def discount(order: Order, job: JobContext) -> int:
    return -50 if any(line.sku == "fig" for line in order.lines) else 0


@app.task("orders.total")
async def total(prices: list[int], job: JobContext) -> int:
    print(f"subtotal, shipping, discount (member order): {prices}")
    return sum(prices)


@app.task("orders.invoice", unique=True)
async def invoice(amount: int, job: JobContext) -> str:
    print(f"invoice for {amount} cents")
    return f"INV-{amount}"


async def main() -> None:
    flow = chain(
        fetch.s(7),
        group(subtotal.s(), shipping.s(), discount.s()),  # each gets the order
        total.s(),
        invoice.s(),
    )
    async with app.open_worker(poll_interval=0.2):
        started = await app.enqueue_workflow(flow, workflow_id="order-7")
        again = await app.enqueue_workflow(flow, workflow_id="order-7")  # a second click
        print(f"workflow {started.id}: {await started.result(timeout=30)}")
        print(f"the second start is the same run: {await again.result(timeout=5)}")
        # a unique job: while one invoice for a key is pending, another is not stored
        first = await invoice.enqueue(99, unique=Unique(key="invoice-99"), delay=5)
        second = await invoice.enqueue(99, unique=Unique(key="invoice-99"), delay=5)
        print(f"unique: second stored={second.created}, same job={second.job_id == first.job_id}")


if __name__ == "__main__":
    trio.run(main)
