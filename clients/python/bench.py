"""Consume rate of the Python client's worker: N messages sent to a fresh
priority topic of 16 slots, then consumed with a handler that does nothing
at the given concurrency; prints one JSON line. Used by
scripts/client-bench.sh (see BENCHMARKS.md)."""

import asyncio
import json
import sys
import time
import uuid

from rmq_client import Client, Message


async def main(url: str, token: str, n: int, concurrency: int) -> None:
    async with Client(url, token) as rmq:
        name = "bench-py-" + uuid.uuid4().hex[:8]
        await rmq.create_topic(name, "priority", slots=16)
        t = rmq.topic(name)
        for start in range(0, n, 1000):
            await t.send_batch([Message("x", key=f"k{i}", priority=1) for i in range(start, min(n, start + 1000))])
        done = 0

        async def handle(d):
            nonlocal done
            done += 1
            if done == n:
                worker.stop()

        worker = t.worker(handle, concurrency=concurrency, wait_ms=1000)
        t0 = time.perf_counter()
        report = await worker.run()
        took = time.perf_counter() - t0
        assert report.acked == n, report
        print(json.dumps({"client": "python", "concurrency": concurrency, "messages": n, "secs": round(took, 3),
                          "rate": round(n / took)}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
