"""A synchronous facade over the asynchronous client, for code without
an event loop: each call runs on a private event loop in a background
thread and waits for its answer. The surface is the same::

    rmq = SyncClient("http://127.0.0.1:8080", token=TOKEN)
    rmq.topic("orders").send("pay me", key="order-42", delay_ms=30 * 60_000)
    worker = rmq.topic("orders").worker(handle, concurrency=8)
    worker.run()            # until worker.stop() from another thread
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Awaitable, Callable, List, Optional, TypeVar

from .client import Client, Topic
from .models import Delivery
from .worker import Report, Worker

T = TypeVar("T")


class SyncClient:
    """:class:`~rmq_client.Client`, blocking."""

    def __init__(self, base_url: str, token: Optional[str] = None, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rmq-client", daemon=True)
        self._thread.start()
        self._client: Client = self._call(_make(base_url, token, options))

    def _call(self, coro: Awaitable[T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()  # type: ignore[arg-type]

    def __enter__(self) -> "SyncClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._loop.is_running():
            self._call(self._client.close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()

    def topic(self, name: str) -> "SyncTopic":
        return SyncTopic(self, self._client.topic(name))

    def topics(self) -> List[Any]:
        return self._call(self._client.topics())

    def create_topic(self, name: str, kind: str, **settings: Any) -> Any:
        return self._call(self._client.create_topic(name, kind, **settings))


class SyncTopic:
    """:class:`~rmq_client.Topic`, blocking: every method of it, with the
    same arguments and answers."""

    def __init__(self, client: SyncClient, topic: Topic) -> None:
        self._client = client
        self.topic = topic
        self.name = topic.name

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.topic, name)
        if not asyncio.iscoroutinefunction(method):
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._client._call(method(*args, **kwargs))

        return call

    def worker(self, handler: Callable[[Delivery], Any], **options: Any) -> "SyncWorker":
        """A worker whose :meth:`SyncWorker.run` blocks until
        :meth:`SyncWorker.stop` (from another thread or a signal handler)."""
        return SyncWorker(self._client, Worker(self.topic, handler, **options))


class SyncWorker:
    """:class:`~rmq_client.Worker`, blocking."""

    def __init__(self, client: SyncClient, worker: Worker) -> None:
        self._client = client
        self.worker = worker
        self._started = threading.Event()

    def run(self) -> Report:
        async def run() -> Report:
            task = asyncio.ensure_future(self.worker.run())
            self._started.set()
            return await task

        return self._client._call(run())

    def stop(self) -> None:
        """Stops the worker (see :meth:`Worker.stop`); safe from any thread."""
        self._started.wait()
        self._client._loop.call_soon_threadsafe(self.worker.stop)

    @property
    def report(self) -> Report:
        return self.worker.report


async def _make(base_url: str, token: Optional[str], options: Any) -> Client:
    # Made on the loop that will use it (httpx binds its pool to a loop).
    return Client(base_url, token, **options)
