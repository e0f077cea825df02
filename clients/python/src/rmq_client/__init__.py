"""Python client for ``rmq serve``: send, look up, cancel and reschedule
messages, take and settle them by receipt, and a :class:`Worker` that runs
a handler per message with a concurrency, retries, dead letters, lease
extension, a handler timeout and a graceful stop. Asynchronous
(:class:`Client`) or blocking (:class:`SyncClient`)."""

from .client import MAX_SEND_BATCH, MAX_TAKE, MAX_WAIT_MS, Client, Topic
from .errors import (
    BadRequest,
    Conflict,
    ConnectionFailed,
    Forbidden,
    NotFound,
    RmqError,
    TooManyRequests,
    Unauthorized,
    Unavailable,
)
from .models import Cancelled, Delivery, Message, MessageInfo, Rescheduled, Sent, Settlement
from .sync import SyncClient, SyncTopic, SyncWorker
from .worker import Dead, DeadLetter, Report, Retry, Worker

__all__ = [
    "BadRequest",
    "Cancelled",
    "Client",
    "Conflict",
    "ConnectionFailed",
    "Dead",
    "DeadLetter",
    "Delivery",
    "Forbidden",
    "MAX_SEND_BATCH",
    "MAX_TAKE",
    "MAX_WAIT_MS",
    "Message",
    "MessageInfo",
    "NotFound",
    "Report",
    "Rescheduled",
    "Retry",
    "RmqError",
    "Sent",
    "Settlement",
    "SyncClient",
    "SyncTopic",
    "SyncWorker",
    "Topic",
    "TooManyRequests",
    "Unauthorized",
    "Unavailable",
    "Worker",
]
