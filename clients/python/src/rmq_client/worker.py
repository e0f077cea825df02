"""A worker: runs a handler per message of one topic with a chosen
concurrency, long-polling ``take`` in batches, and ends each delivery by
what the handler did.

- It returns (any value): the message is acked.
- It raises :class:`DeadLetter` (or returns :class:`Dead`): straight to
  the dead letters, with the message as the error.
- It raises :class:`Retry` (or returns one): retried after ``after_ms``.
- It raises anything else: retried after ``retry_delay_ms`` (the topic's
  backoff when unset), with the exception as the error; dead after the
  topic's last attempt.
- It runs past ``handler_timeout``: cancelled, and retried as a failure.

While a handler runs, its lease is extended every third of it; a lease
that cannot be extended any more (it ran out, or in serial mode the slot
moved to another member) cancels the handler, whose end would be refused.
Acks and releases of many handlers go out together, one request per kind
of end. :meth:`Worker.stop` stops taking, waits up to ``shutdown_grace``
for running handlers, cancels those still running, and gives back
(``release``: no attempt counted) whatever did not finish.

A plain (not ``async``) handler runs in a thread; a thread cannot be
cancelled, so past its timeout (or the grace) its end is recorded while
the thread runs on."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import random
import re
import socket
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Dict, List, Optional, Protocol, Sequence, Set, Tuple, Union

from .errors import BadRequest, Forbidden, NotFound, RmqError, Unauthorized
from .models import Delivery, Settlement

log = logging.getLogger("rmq_client")


class WorkerTopic(Protocol):
    """What a worker needs of a topic (a :class:`rmq_client.Topic` has it)."""

    name: str

    async def take(
        self,
        max: int = 1,
        *,
        wait_ms: int = 0,
        lease_ms: Optional[int] = None,
        group: Optional[str] = None,
        member: Optional[str] = None,
        member_timeout_ms: Optional[int] = None,
    ) -> List[Delivery]: ...

    async def extend(self, receipts: Sequence[Union[str, Delivery]], *, lease_ms: int) -> List[Settlement]: ...

    async def _settle(self, op: str, receipts: Sequence[Union[str, Delivery]], extra: Dict[str, Any]) -> List[Settlement]: ...

Handler = Callable[[Delivery], Union[Awaitable[Any], Any]]


class DeadLetter(Exception):
    """Raised by a handler: the message goes straight to the dead letters."""


class Retry(Exception):
    """Raised (or returned) by a handler: the message is retried after
    ``after_ms`` (the worker's or topic's delay when None)."""

    def __init__(self, error: str = "retry asked by the handler", after_ms: Optional[int] = None):
        super().__init__(error)
        self.error = error
        self.after_ms = after_ms


@dataclass(frozen=True)
class Dead:
    """Returned by a handler: the message goes to the dead letters."""

    error: str = "dead-lettered by the handler"


@dataclass
class Report:
    """How the worker's deliveries ended."""

    acked: int = 0
    retried: int = 0
    dead: int = 0
    released: int = 0
    cancelled: int = 0
    #: A duplicate sent while it was in flight took its place.
    superseded: int = 0
    #: A lease lost while the handler ran: the message comes back to
    #: whoever holds it now (nothing was settled).
    lost: int = 0
    #: The settle was refused as ``stale`` (the lease had run out) or
    #: could not be made (the server stayed unreachable): the message
    #: comes back after its lease.
    not_settled: int = 0
    outcomes: Dict[str, int] = field(default_factory=dict)

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        attr = {
            "acked": "acked",
            "retrying": "retried",
            "dead": "dead",
            "released": "released",
            "cancelled": "cancelled",
            "superseded": "superseded",
        }.get(outcome, "not_settled")
        setattr(self, attr, getattr(self, attr) + 1)


# Errors that will not go away by asking again.
_FATAL = (Unauthorized, Forbidden, NotFound, BadRequest)


class Worker:
    """Runs ``handler`` on every message of ``topic``; see the module docs.

    ``concurrency``: handlers running at once (default 16). ``batch``:
    messages one take asks for at most (default: the free room).
    ``wait_ms``: how long one take waits for work (default 20 s).
    ``lease_ms``: each delivery's lease (default: the topic's).
    ``handler_timeout``: seconds a handler may run (default: no limit).
    ``retry_delay_ms``: the delay of a failure's retry (default: the
    topic's backoff). ``group`` and ``member``: serial mode (the server
    hands this member at most one message per slot at a time, the slots
    it holds the lease of); ``member`` defaults to host-pid-random.
    ``shutdown_grace``: seconds :meth:`stop` waits for running handlers.
    """

    def __init__(
        self,
        topic: WorkerTopic,
        handler: Handler,
        *,
        concurrency: int = 16,
        batch: Optional[int] = None,
        wait_ms: int = 20_000,
        lease_ms: Optional[int] = None,
        handler_timeout: Optional[float] = None,
        retry_delay_ms: Optional[int] = None,
        group: Optional[str] = None,
        member: Optional[str] = None,
        member_timeout_ms: Optional[int] = None,
        shutdown_grace: float = 30.0,
        settle_retry_for: float = 30.0,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if member is not None and group is None:
            raise ValueError("a member needs a group (serial mode)")
        self.topic = topic
        self.handler = handler
        self.concurrency = concurrency
        self.batch = batch
        self.wait_ms = wait_ms
        self.lease_ms = lease_ms
        self.handler_timeout = handler_timeout
        self.retry_delay_ms = retry_delay_ms
        self.group = group
        self.member = member if member is not None or group is None else default_member()
        self.member_timeout_ms = member_timeout_ms
        self.shutdown_grace = shutdown_grace
        self.report = Report()
        self._settler = _Settler(topic, settle_retry_for)
        self._stop: Optional[asyncio.Event] = None
        self._jobs: Set["_Job"] = set()
        self._room: Optional[asyncio.Event] = None

    def stop(self) -> None:
        """Stops taking; :meth:`run` returns once running handlers ended
        (or the grace ran out) and everything unfinished was given back.
        Safe to call from a signal handler of the worker's event loop."""
        if self._stop is not None:
            self._stop.set()

    async def run(self) -> Report:
        """Takes and handles messages until :meth:`stop`; the counts.
        Raises a typed error when taking cannot work (a wrong token, a
        topic that does not exist), after giving back what it holds."""
        self._stop = asyncio.Event()
        self._room = asyncio.Event()
        settling = asyncio.ensure_future(self._settler.run())
        try:
            await self._take_until_stopped()
        finally:
            await self._finish_running()
            await self._settler.close()
            await settling
        return self.report

    # Taking ------------------------------------------------------------

    async def _take_until_stopped(self) -> None:
        assert self._stop is not None and self._room is not None
        pause = 0.05
        while not self._stop.is_set():
            free = self.concurrency - len(self._jobs)
            if free <= 0:
                self._room.clear()
                await _first(self._room.wait(), self._stop.wait())
                continue
            want = min(free, self.batch or free, 1000)
            try:
                taken = await _first(self._take(want), self._stop.wait())
            except _FATAL:
                raise
            except RmqError as e:
                log.warning("taking from %s failed, trying again in %.2fs: %s", self.topic.name, pause, e)
                await _first(asyncio.sleep(pause), self._stop.wait())
                pause = min(pause * 2, 5.0)
                continue
            pause = 0.05
            if not isinstance(taken, list):
                break  # stopped while waiting (the server gives back what it took for us)
            if self._stop.is_set():
                await self._give_back(taken)
                break
            for d in taken:
                self._start(d)

    async def _take(self, want: int) -> List[Delivery]:
        return await self.topic.take(
            want,
            wait_ms=self.wait_ms,
            lease_ms=self.lease_ms,
            group=self.group,
            member=self.member,
            member_timeout_ms=self.member_timeout_ms,
        )

    async def _give_back(self, deliveries: List[Delivery]) -> None:
        for s in await asyncio.gather(*(self._settler.settle("release", d.receipt, ()) for d in deliveries)):
            self.report.count(s.outcome)

    # Handling ----------------------------------------------------------

    def _start(self, d: Delivery) -> None:
        job = _Job(d)
        self._jobs.add(job)
        job.task = asyncio.ensure_future(self._handle(job))
        job.task.add_done_callback(lambda _: self._ended(job))

    def _ended(self, job: "_Job") -> None:
        self._jobs.discard(job)
        if self._room is not None:
            self._room.set()

    async def _handle(self, job: "_Job") -> None:
        d = job.delivery
        job.work = asyncio.ensure_future(self._call(d))
        keeper = asyncio.ensure_future(self._keep_lease(job))
        try:
            ending = await self._outcome(job)
        finally:
            keeper.cancel()
            with suppress(asyncio.CancelledError):
                await keeper
        if ending is None:
            self.report.lost += 1
            return
        op, extra = ending
        settled = await self._settler.settle(op, d.receipt, extra)
        self.report.count(settled.outcome)
        if not settled.done:
            log.warning("%s of %r on %s: %s %s", op, d.key, d.topic, settled.outcome, settled.error or "")

    async def _call(self, d: Delivery) -> Any:
        if inspect.iscoroutinefunction(self.handler):
            return await self.handler(d)
        result = await asyncio.to_thread(self.handler, d)
        if inspect.isawaitable(result):
            return await result
        return result

    async def _outcome(self, job: "_Job") -> Optional[Tuple[str, Tuple[Tuple[str, Any], ...]]]:
        """How the delivery ends: (op, extra), or None when its lease was
        lost (nothing to settle)."""
        assert job.work is not None
        try:
            result = await asyncio.wait_for(asyncio.shield(job.work), self.handler_timeout)
        except asyncio.TimeoutError:
            job.work.cancel()
            return self._nack(f"handler timed out after {self.handler_timeout}s", None)
        except asyncio.CancelledError:
            if job.lost:
                return None
            if job.abandoned:
                return ("release", ())
            raise
        except DeadLetter as e:
            return ("dead", (("error", str(e) or "dead-lettered by the handler"),))
        except Retry as e:
            return self._nack(e.error, e.after_ms)
        except Exception as e:  # the handler's failure is the message's
            return self._nack(f"{type(e).__name__}: {e}", None)
        if job.lost:
            return None
        if isinstance(result, Dead):
            return ("dead", (("error", result.error),))
        if isinstance(result, Retry):
            return self._nack(result.error, result.after_ms)
        return ("ack", ())

    def _nack(self, error: str, after_ms: Optional[int]) -> Tuple[str, Tuple[Tuple[str, Any], ...]]:
        extra: Tuple[Tuple[str, Any], ...] = (("error", error[:4096]),)
        delay = after_ms if after_ms is not None else self.retry_delay_ms
        if delay is not None:
            extra += (("retry_after_ms", delay),)
        return ("nack", extra)

    async def _keep_lease(self, job: "_Job") -> None:
        """Extends the lease every third of it while the handler runs; a
        lease that is not this delivery's any more cancels the handler."""
        d = job.delivery
        lease_ms = max(d.lease_until_ms - d.taken_ms, 1)
        while True:
            await asyncio.sleep(max(lease_ms / 3000, 0.05))
            try:
                [s] = await self.topic.extend([d.receipt], lease_ms=lease_ms)
            except RmqError as e:
                log.debug("extending a lease failed (tries again): %s", e)
                continue
            if s.outcome in ("stale", "fenced"):
                job.lost = True
                if job.work is not None:
                    job.work.cancel()
                return

    async def _finish_running(self) -> None:
        """Waits up to the grace for running handlers, then cancels those
        still running (their messages are given back)."""
        jobs = [j.task for j in list(self._jobs) if j.task is not None]
        if not jobs:
            return
        _, late = await asyncio.wait(jobs, timeout=self.shutdown_grace)
        for job in list(self._jobs):
            if job.task in late:
                job.abandoned = True
                if job.work is not None:
                    job.work.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)


class _Job:
    """One delivery being handled."""

    def __init__(self, delivery: Delivery) -> None:
        self.delivery = delivery
        self.task: Optional["asyncio.Future[None]"] = None
        self.work: Optional["asyncio.Future[Any]"] = None
        #: The lease is not this delivery's any more.
        self.lost = False
        #: Cancelled at stop, past the grace: given back.
        self.abandoned = False


class _Settler:
    """Ends of many handlers, sent together: what queued up while a
    request was out goes in the next, one request per kind of end (same
    operation, same error and delay). A request that fails for want of
    the server is tried again for ``retry_for`` seconds (a settle is
    answered per receipt: one applied before a lost answer says
    ``stale`` the second time, and nothing changes)."""

    def __init__(self, topic: WorkerTopic, retry_for: float) -> None:
        self.topic = topic
        self.retry_for = retry_for
        self.queue: "asyncio.Queue[Optional[Tuple[str, Tuple[Tuple[str, Any], ...], str, asyncio.Future[Settlement]]]]" = (
            asyncio.Queue()
        )

    async def settle(self, op: str, receipt: str, extra: Tuple[Tuple[str, Any], ...]) -> Settlement:
        fut: "asyncio.Future[Settlement]" = asyncio.get_running_loop().create_future()
        await self.queue.put((op, extra, receipt, fut))
        return await fut

    async def close(self) -> None:
        await self.queue.put(None)

    async def run(self) -> None:
        closing = False
        while not closing:
            first = await self.queue.get()
            if first is None:
                break
            batch = [first]
            while not self.queue.empty() and len(batch) < 1000:
                item = self.queue.get_nowait()
                if item is None:
                    closing = True
                    break
                batch.append(item)
            groups: Dict[Tuple[str, Tuple[Tuple[str, Any], ...]], List[Tuple[str, "asyncio.Future[Settlement]"]]] = {}
            for op, extra, receipt, fut in batch:
                groups.setdefault((op, extra), []).append((receipt, fut))
            await asyncio.gather(*(self._send(op, extra, items) for (op, extra), items in groups.items()))

    async def _send(
        self,
        op: str,
        extra: Tuple[Tuple[str, Any], ...],
        items: List[Tuple[str, "asyncio.Future[Settlement]"]],
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry_for
        pause = 0.05
        pending = items
        while pending:
            try:
                answers = await self.topic._settle(op, [r for r, _ in pending], dict(extra))
            except RmqError as e:
                if isinstance(e, _FATAL) or loop.time() >= deadline:
                    for _, fut in pending:
                        if not fut.done():
                            fut.set_result(Settlement("unknown", str(e)))
                    return
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)
                continue
            again = []
            for (receipt, fut), s in zip(pending, answers):
                if s.outcome == "unknown" and loop.time() < deadline:
                    again.append((receipt, fut))
                elif not fut.done():
                    fut.set_result(s)
            pending = again
            if pending:
                await asyncio.sleep(pause)


async def _first(work: Awaitable[Any], stop: Awaitable[Any]) -> Any:
    """``work``'s result, or None (``work`` cancelled) if ``stop`` ends first."""
    w = asyncio.ensure_future(work)
    s = asyncio.ensure_future(stop)
    try:
        done, _ = await asyncio.wait({w, s}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        w.cancel()
        s.cancel()
        raise
    s.cancel()
    if w in done:
        return w.result()
    w.cancel()
    with suppress(asyncio.CancelledError, Exception):
        await w
    return None


def default_member() -> str:
    """``host-pid-random``, in the characters a member id may hold."""
    raw = f"{socket.gethostname()}-{os.getpid()}-{random.getrandbits(32):08x}"
    return re.sub(r"[^A-Za-z0-9_.-]", "-", raw)[-100:]
