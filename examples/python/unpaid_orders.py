#!/usr/bin/env python3
"""Close unpaid orders after 30 minutes; cancel the timer when an order is paid.

Each order placed sends a fixed-time message keyed by the order id, due in 30
minutes; paying the order cancels that key. A worker closes the orders whose
message comes due. Against a running `rmq serve`:

    pip install clients/python
    RMQ_URL=http://127.0.0.1:8080 RMQ_TOKEN=$(cat token) python3 examples/python/unpaid_orders.py

UNPAID_AFTER_MS shortens the 30 minutes for a try; STOP_AFTER=N stops the
worker after N closed orders (else it runs until Ctrl-C).
"""
import asyncio
import os
import signal

from rmq_client import Client

UNPAID_AFTER_MS = int(os.environ.get("UNPAID_AFTER_MS", 30 * 60_000))
STOP_AFTER = int(os.environ.get("STOP_AFTER", 0))


async def main() -> None:
    url = os.environ.get("RMQ_URL", "http://127.0.0.1:8080")
    async with Client(url, os.environ.get("RMQ_TOKEN")) as rmq:
        # Creating a topic that exists with the same definition is a no-op.
        await rmq.create_topic("unpaid-orders", "fixed-time", slots=16)
        timers = rmq.topic("unpaid-orders")

        # Three orders are placed: each is closed in 30 minutes unless paid.
        for order in ("order-1", "order-2", "order-3"):
            await timers.send(order, key=order, delay_ms=UNPAID_AFTER_MS)
        # order-1 is paid: its timer goes.
        await timers.cancel("order-1")

        closed = 0

        async def close_unpaid(delivery):
            nonlocal closed
            print(f"closing unpaid {delivery.key} (attempt {delivery.attempt})", flush=True)
            closed += 1  # returning acks it; raising retries it later
            if closed == STOP_AFTER:
                worker.stop()

        worker = timers.worker(close_unpaid, concurrency=8)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, worker.stop)
        report = await worker.run()
        print(f"closed {report.acked} orders", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
