/**
 * Typed errors: one class per kind of answer, each with the server's `kind`
 * (the library's `ErrorKind`, or `Unauthorized`, `ReadOnly`, `NotFound`, ...)
 * and its message for people.
 */

/** Anything that went wrong talking to `rmq serve`. */
export class RmqError extends Error {
  readonly kind: string;
  readonly status: number | undefined;

  constructor(message: string, kind = "Error", status?: number) {
    super(status ? `${kind}: ${message} (HTTP ${status})` : `${kind}: ${message}`);
    this.name = new.target.name;
    this.kind = kind;
    this.status = status;
  }
}

/** 400: the request was refused as it is; nothing was done. */
export class BadRequest extends RmqError {}
/** 401: the bearer token is missing or wrong. */
export class Unauthorized extends RmqError {}
/** 403: the server is read-only. */
export class Forbidden extends RmqError {}
/** 404: no such topic (or route). */
export class NotFound extends RmqError {}
/** 409: the request conflicts with the topic as it is. */
export class Conflict extends RmqError {}
/** 429: too many expensive readings at once; try again later. */
export class TooManyRequests extends RmqError {}
/** 503: Redis is unreachable, or a bounded topic is full (kind `Full`). */
export class Unavailable extends RmqError {}
/** The server could not be reached, or the connection broke. */
export class ConnectionFailed extends RmqError {}

const BY_STATUS: Record<number, typeof RmqError> = {
  400: BadRequest,
  401: Unauthorized,
  403: Forbidden,
  404: NotFound,
  409: Conflict,
  413: BadRequest,
  429: TooManyRequests,
  503: Unavailable,
};

/** The error an answer with this status and JSON body stands for. */
export function fromAnswer(status: number, body: unknown): RmqError {
  let kind = "Error";
  let message = `HTTP ${status}`;
  const err = (body as { error?: { kind?: unknown; message?: unknown } } | null)?.error;
  if (err && typeof err === "object") {
    kind = String(err.kind ?? kind);
    message = String(err.message ?? message);
  }
  const Cls = BY_STATUS[status] ?? RmqError;
  return new Cls(message, kind, status);
}
