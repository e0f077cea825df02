"""Typed errors: one class per kind of answer, each with the server's
``kind`` (the library's ``ErrorKind``, or ``Unauthorized``, ``ReadOnly``,
``NotFound``, ...) and its message for people."""

from __future__ import annotations

from typing import Optional


class RmqError(Exception):
    """Anything that went wrong talking to ``rmq serve``."""

    def __init__(self, message: str, *, kind: str = "Error", status: Optional[int] = None):
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.status = status

    def __str__(self) -> str:
        where = f" (HTTP {self.status})" if self.status else ""
        return f"{self.kind}: {self.message}{where}"


class BadRequest(RmqError):
    """400: the request was refused as it is; nothing was done."""


class Unauthorized(RmqError):
    """401: the bearer token is missing or wrong."""


class Forbidden(RmqError):
    """403: the server is read-only."""


class NotFound(RmqError):
    """404: no such topic (or route)."""


class Conflict(RmqError):
    """409: the request conflicts with the topic as it is (e.g. paused)."""


class TooManyRequests(RmqError):
    """429: too many expensive readings at once; try again later."""


class Unavailable(RmqError):
    """503: Redis is unreachable, or a bounded topic is full (kind ``Full``)."""


class ConnectionFailed(RmqError):
    """The server could not be reached, or the connection broke."""


_BY_STATUS = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: BadRequest,
    429: TooManyRequests,
    503: Unavailable,
}


def from_answer(status: int, body: object) -> RmqError:
    """The error an answer with this status and JSON body stands for."""
    kind, message = "Error", f"HTTP {status}"
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        kind = str(body["error"].get("kind", kind))
        message = str(body["error"].get("message", message))
    cls = _BY_STATUS.get(status, RmqError)
    return cls(message, kind=kind, status=status)
