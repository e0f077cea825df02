"""The asynchronous client: a connection to ``rmq serve`` (base URL and
bearer token) and a handle per topic that sends, looks up, cancels,
reschedules, takes and settles. Every call is one HTTP request; errors
come back as the typed exceptions of :mod:`rmq_client.errors`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Union
from urllib.parse import quote

import httpx

from .errors import ConnectionFailed, RmqError, from_answer
from .models import Cancelled, Delivery, Message, MessageInfo, Payload, Rescheduled, Sent, Settlement

if TYPE_CHECKING:
    from .worker import Worker

#: Messages one batch send takes at most (the server's limit).
MAX_SEND_BATCH = 10_000
#: Deliveries one take answers at most, receipts one settle takes at most.
MAX_TAKE = 1_000
#: The longest a take waits for a first message (the server's limit).
MAX_WAIT_MS = 30_000


class Client:
    """A connection to ``rmq serve``. Use it as an async context manager,
    or call :meth:`close` when done::

        async with Client("http://127.0.0.1:8080", token=TOKEN) as rmq:
            await rmq.topic("orders").send("pay me", key="order-42", delay_ms=30 * 60_000)
    """

    def __init__(
        self,
        base_url: str,
        token: Optional[str] = None,
        *,
        timeout: float = 10.0,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> None:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._timeout = timeout
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/") + "/api/v1",
            headers=headers,
            timeout=timeout,
            transport=transport,
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    def topic(self, name: str) -> "Topic":
        """A handle on topic ``name`` (nothing is asked of the server yet)."""
        return Topic(self, name)

    async def topics(self) -> List[Dict[str, Any]]:
        """Every topic with its definition and counts."""
        return (await self.request("GET", "/topics"))["topics"]

    async def create_topic(self, name: str, kind: str, **settings: Any) -> Dict[str, Any]:
        """Creates topic ``name`` of ``kind`` (``priority``, ``fixed-time``
        or ``range-merge``) with any settings that differ from the defaults
        (``slots``, ``lease_ms``, ``max_attempts``, ``backoff_ms``, ...)."""
        body = {"name": name, "kind": kind, **settings}
        return await self.request("POST", "/topics", json=body)

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Optional[Any] = None,
        params: Optional[Dict[str, Any]] = None,
        timeout: Optional[float] = None,
    ) -> Any:
        """One API call; its JSON answer, or a typed error."""
        try:
            r = await self._http.request(
                method,
                path,
                json=json,
                params=params,
                timeout=self._timeout if timeout is None else timeout,
            )
        except httpx.HTTPError as e:
            raise ConnectionFailed(f"{method} {path}: {e!r}", kind="ConnectionFailed") from e
        try:
            body = r.json()
        except ValueError:
            body = None
        if r.status_code >= 400:
            raise from_answer(r.status_code, body)
        if body is None:
            raise RmqError(f"{method} {path}: the answer is not JSON", status=r.status_code)
        return body


class Topic:
    """One topic of a :class:`Client`."""

    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = name
        self._path = f"/topics/{quote(name, safe='')}"

    def __repr__(self) -> str:
        return f"Topic({self.name!r})"

    # Producing ---------------------------------------------------------

    async def send(
        self,
        payload: Payload,
        *,
        key: Optional[str] = None,
        priority: Optional[int] = None,
        at_ms: Optional[int] = None,
        delay_ms: Optional[int] = None,
        range_ms: Optional[int] = None,
        slot_basis: Optional[str] = None,
    ) -> Sent:
        """Sends one message (see :class:`Message` for the options)."""
        m = Message(payload, key, priority, at_ms, delay_ms, range_ms, slot_basis)
        return Sent.of(await self.client.request("POST", f"{self._path}/messages", json=m.to_json()))

    async def send_batch(self, messages: Sequence[Message]) -> List[Sent]:
        """Sends up to 10,000 messages in one request, one result each in
        order. A malformed message refuses the whole batch (a typed error,
        nothing sent); one that Redis refuses on its own (a due time in
        the past, a full topic) has its result's ``error`` set while the
        others are sent."""
        if not 1 <= len(messages) <= MAX_SEND_BATCH:
            raise ValueError(f"send 1..={MAX_SEND_BATCH} messages at once (got {len(messages)})")
        body = {"messages": [m.to_json() for m in messages]}
        answer = await self.client.request("POST", f"{self._path}/messages", json=body)
        return [Sent.of(r) for r in answer["results"]]

    # Steering by key ---------------------------------------------------

    async def get(self, key: str, *, slot_basis: Optional[str] = None) -> MessageInfo:
        """The message of ``key`` as it is now (``state`` ``absent`` when
        there is none)."""
        params = _key_params(key, slot_basis)
        return MessageInfo.of(await self.client.request("GET", f"{self._path}/key", params=params))

    async def cancel(self, key: str, *, slot_basis: Optional[str] = None) -> Cancelled:
        """Cancels the message of ``key`` (pending, or in flight: its
        delivery then ends as cancelled)."""
        params = _key_params(key, slot_basis)
        return Cancelled.of(await self.client.request("DELETE", f"{self._path}/key", params=params))

    async def cancel_many(self, keys: Iterable[str], *, slot_basis: Optional[str] = None) -> List[Cancelled]:
        """Cancels up to 10,000 keys in one request, one result each."""
        body: Dict[str, Any] = {"keys": list(keys)}
        if slot_basis is not None:
            body["slot_basis"] = slot_basis
        answer = await self.client.request("POST", f"{self._path}/cancel", json=body)
        return [Cancelled.of(r) for r in answer["results"]]

    async def reschedule(
        self,
        key: str,
        *,
        at_ms: Optional[int] = None,
        delay_ms: Optional[int] = None,
        priority: Optional[int] = None,
        slot_basis: Optional[str] = None,
    ) -> Rescheduled:
        """Moves the pending message of ``key`` to a new due time (``at_ms``
        or ``delay_ms``) or a new ``priority``."""
        body: Dict[str, Any] = {}
        for name, value in (("at", at_ms), ("delay", delay_ms), ("priority", priority), ("slot_basis", slot_basis)):
            if value is not None:
                body[name] = value
        params = _key_params(key, None)
        answer = await self.client.request("POST", f"{self._path}/key/reschedule", json=body, params=params)
        return Rescheduled.of(answer)

    # Consuming ---------------------------------------------------------

    async def take(
        self,
        max: int = 1,
        *,
        wait_ms: int = 0,
        lease_ms: Optional[int] = None,
        group: Optional[str] = None,
        member: Optional[str] = None,
        member_timeout_ms: Optional[int] = None,
    ) -> List[Delivery]:
        """Takes up to ``max`` due messages, waiting up to ``wait_ms`` for a
        first one (long-poll). Serial mode: give ``group`` and ``member``."""
        body: Dict[str, Any] = {"max": max, "wait_ms": wait_ms}
        for name, value in (
            ("lease_ms", lease_ms),
            ("group", group),
            ("member", member),
            ("member_timeout_ms", member_timeout_ms),
        ):
            if value is not None:
                body[name] = value
        # The request may wait as long as the take does.
        timeout = self.client._timeout + wait_ms / 1000
        answer = await self.client.request("POST", f"{self._path}/take", json=body, timeout=timeout)
        return [Delivery.of(self.name, d) for d in answer["deliveries"]]

    async def ack(self, receipts: Sequence[Union[str, Delivery]]) -> List[Settlement]:
        """Done: the messages are removed."""
        return await self._settle("ack", receipts, {})

    async def nack(
        self,
        receipts: Sequence[Union[str, Delivery]],
        *,
        error: Optional[str] = None,
        retry_after_ms: Optional[int] = None,
    ) -> List[Settlement]:
        """Failed: retried after ``retry_after_ms`` (the topic's backoff when
        absent); dead after the last attempt, with ``error``."""
        extra: Dict[str, Any] = {}
        if error is not None:
            extra["error"] = error
        if retry_after_ms is not None:
            extra["retry_after_ms"] = retry_after_ms
        return await self._settle("nack", receipts, extra)

    async def dead(self, receipts: Sequence[Union[str, Delivery]], *, error: Optional[str] = None) -> List[Settlement]:
        """Failed for good: straight to the dead letters."""
        return await self._settle("dead", receipts, {} if error is None else {"error": error})

    async def extend(self, receipts: Sequence[Union[str, Delivery]], *, lease_ms: int) -> List[Settlement]:
        """The leases now end ``lease_ms`` from now."""
        return await self._settle("extend", receipts, {"lease_ms": lease_ms})

    async def release(self, receipts: Sequence[Union[str, Delivery]]) -> List[Settlement]:
        """Given back untouched: due again at once, no attempt counted."""
        return await self._settle("release", receipts, {})

    async def _settle(self, op: str, receipts: Sequence[Union[str, Delivery]], extra: Dict[str, Any]) -> List[Settlement]:
        if not 1 <= len(receipts) <= MAX_TAKE:
            raise ValueError(f"settle 1..={MAX_TAKE} receipts at once (got {len(receipts)})")
        body = {"receipts": [r.receipt if isinstance(r, Delivery) else r for r in receipts], **extra}
        answer = await self.client.request("POST", f"{self._path}/{op}", json=body)
        return [Settlement.of(r) for r in answer["results"]]

    def worker(self, handler: Any, **options: Any) -> "Worker":
        """A :class:`~rmq_client.Worker` running ``handler`` on this topic's
        messages (see its options)."""
        from .worker import Worker

        return Worker(self, handler, **options)


def _key_params(key: str, slot_basis: Optional[str]) -> Dict[str, str]:
    params = {"key": key}
    if slot_basis is not None:
        params["slot_basis"] = slot_basis
    return params

