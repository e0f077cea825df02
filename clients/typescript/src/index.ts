/**
 * TypeScript client for `rmq serve`: send, look up, cancel and reschedule
 * messages, take and settle them by receipt, and a {@link Worker} that runs
 * a handler per message with a concurrency, retries, dead letters, lease
 * extension, a handler timeout and a graceful stop. Node 18+, the built-in
 * `fetch`, no dependencies.
 */
export { Client, Topic, MAX_SEND_BATCH, MAX_TAKE, MAX_WAIT_MS } from "./client.js";
export type { ClientOptions, TakeOptions } from "./client.js";
export {
  BadRequest,
  Conflict,
  ConnectionFailed,
  Forbidden,
  NotFound,
  RmqError,
  TooManyRequests,
  Unauthorized,
  Unavailable,
} from "./errors.js";
export { settledDone } from "./models.js";
export type { Cancelled, Delivery, Message, MessageInfo, Rescheduled, Sent, Settlement } from "./models.js";
export { Dead, DeadLetter, Retry, Worker, defaultMember } from "./worker.js";
export type { Handler, HandlerContext, Report, WorkerOptions, WorkerTopic } from "./worker.js";
