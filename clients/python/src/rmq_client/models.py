"""What the server answers, as typed values. Each keeps the whole JSON
object it was read from in ``raw``, for fields a newer server adds."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Union

from .errors import RmqError, from_answer

Payload = Union[str, bytes]


def _text_or_bytes(obj: Dict[str, Any], name: str) -> Optional[Payload]:
    """A field sent as text when UTF-8, else as ``<name>_base64``."""
    if obj.get(name) is not None:
        return obj[name]
    b64 = obj.get(f"{name}_base64")
    return base64.b64decode(b64) if b64 is not None else None


@dataclass(frozen=True)
class Message:
    """A message to send. Give at most one of ``at_ms`` (Unix ms),
    ``delay_ms`` (fixed-time and range-merge topics) or ``priority``
    (priority topics); ``range_ms`` is a range-merge topic's window;
    ``slot_basis`` steers the slot by another key than ``key``."""

    payload: Payload
    key: Optional[str] = None
    priority: Optional[int] = None
    at_ms: Optional[int] = None
    delay_ms: Optional[int] = None
    range_ms: Optional[int] = None
    slot_basis: Optional[str] = None

    def to_json(self) -> Dict[str, Any]:
        payload = self.payload
        if isinstance(payload, bytes):
            try:
                payload = payload.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError("payloads are sent as UTF-8 text over HTTP") from e
        body: Dict[str, Any] = {"payload": payload}
        for name, value in (
            ("key", self.key),
            ("priority", self.priority),
            ("at", self.at_ms),
            ("delay", self.delay_ms),
            ("range", self.range_ms),
            ("slot_basis", self.slot_basis),
        ):
            if value is not None:
                body[name] = value
        return body


@dataclass(frozen=True)
class Sent:
    """What a send did: ``merged`` into a message already pending (its
    duplicate), where it went, and the order Redis now holds it in. In a
    batch, a message refused on its own (its due time past, a full
    topic) has ``error`` set and nothing else."""

    slot: Optional[int]
    merged: bool
    behind_in_flight: bool
    priority: Optional[int]
    due_ms: Optional[int]
    server_ms: Optional[int]
    error: Optional[RmqError]
    raw: Dict[str, Any] = field(repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.error is None

    @classmethod
    def of(cls, obj: Dict[str, Any]) -> "Sent":
        err = obj.get("error")
        return cls(
            slot=obj.get("slot"),
            merged=obj.get("merged", False),
            behind_in_flight=obj.get("behind_in_flight", False),
            priority=obj.get("priority"),
            due_ms=obj.get("due_ms"),
            server_ms=obj.get("server_ms"),
            error=from_answer(400, obj) if isinstance(err, dict) else None,
            raw=obj,
        )


@dataclass(frozen=True)
class MessageInfo:
    """A message looked up by key: its ``state`` is ``pending``,
    ``in-flight``, ``retry-waiting``, ``dead`` or ``absent``."""

    key: Optional[Payload]
    state: str
    slot: int
    payload: Optional[Payload]
    attempts: int
    priority: Optional[int]
    due_ms: Optional[int]
    #: The last attempt's error (retry-waiting and dead messages).
    error: Optional[str]
    #: When a retry-waiting message is due again (Unix ms, server clock).
    next_attempt_ms: Optional[int]
    raw: Dict[str, Any] = field(repr=False, compare=False)

    @property
    def exists(self) -> bool:
        return self.state != "absent"

    @classmethod
    def of(cls, obj: Dict[str, Any]) -> "MessageInfo":
        return cls(
            key=_text_or_bytes(obj, "key"),
            state=obj["state"],
            slot=obj.get("slot", 0),
            payload=_text_or_bytes(obj, "payload"),
            attempts=obj.get("attempts", 0),
            priority=obj.get("priority"),
            due_ms=obj.get("due_ms"),
            error=obj.get("error"),
            next_attempt_ms=obj.get("next_attempt_ms"),
            raw=obj,
        )


@dataclass(frozen=True)
class Delivery:
    """A message taken: settle it by ``receipt`` before ``lease_until_ms``
    (ack, nack, dead, or extend its lease), or it comes back as a failed
    attempt. ``message_id`` is the same for every delivery of one message;
    ``fence`` (serial mode) only grows: pass it to downstream writes."""

    topic: str
    receipt: str
    key: Optional[Payload]
    payload: Optional[Payload]
    attempt: int
    slot: int
    priority: Optional[int]
    due_ms: Optional[int]
    taken_ms: int
    lease_until_ms: int
    message_id: str
    fence: Optional[int]
    raw: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def of(cls, topic: str, obj: Dict[str, Any]) -> "Delivery":
        return cls(
            topic=topic,
            receipt=obj["receipt"],
            key=_text_or_bytes(obj, "key"),
            payload=_text_or_bytes(obj, "payload"),
            attempt=obj["attempt"],
            slot=obj["slot"],
            priority=obj.get("priority"),
            due_ms=obj.get("due_ms"),
            taken_ms=obj["taken_ms"],
            lease_until_ms=obj["lease_until_ms"],
            message_id=obj["message_id"],
            fence=obj.get("fence"),
            raw=obj,
        )


@dataclass(frozen=True)
class Cancelled:
    """What a cancel did: ``cancelled`` when a pending (or in-flight)
    message was removed; ``outcome`` says more (``absent`` for none)."""

    key: Optional[Payload]
    cancelled: bool
    outcome: str
    state: str
    raw: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def of(cls, obj: Dict[str, Any]) -> "Cancelled":
        return cls(
            key=_text_or_bytes(obj, "key"),
            cancelled=obj.get("cancelled", False),
            outcome=obj.get("outcome", ""),
            state=obj.get("state", ""),
            raw=obj,
        )


@dataclass(frozen=True)
class Rescheduled:
    """What a reschedule did: ``rescheduled`` when the message was found
    and moved; its new ``due_ms`` or ``priority``."""

    key: Optional[Payload]
    rescheduled: bool
    due_ms: Optional[int]
    priority: Optional[int]
    raw: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def of(cls, obj: Dict[str, Any]) -> "Rescheduled":
        return cls(
            key=_text_or_bytes(obj, "key"),
            rescheduled=obj.get("rescheduled", False),
            due_ms=obj.get("due_ms"),
            priority=obj.get("priority"),
            raw=obj,
        )


@dataclass(frozen=True)
class Settlement:
    """One receipt's answer: ``acked``, ``retrying``, ``dead``,
    ``extended``, ``released``, ``superseded``, ``cancelled``, ``stale``
    (its lease ran out, or it was settled already: nothing changed),
    ``fenced`` (serial mode: the slot moved on), ``invalid`` or
    ``unknown`` (Redis failed: ``error`` says why; settle again)."""

    outcome: str
    error: Optional[str] = None

    @property
    def done(self) -> bool:
        """The receipt was settled as asked (or the message ended anyway)."""
        return self.outcome not in ("stale", "fenced", "invalid", "unknown")

    @classmethod
    def of(cls, obj: Dict[str, Any]) -> "Settlement":
        err = obj.get("error")
        message = err.get("message") if isinstance(err, dict) else err
        return cls(outcome=obj.get("outcome", "unknown"), error=message)
