/**
 * What the server answers, as typed values. Each keeps the JSON object it was
 * read from in `raw`, for fields a newer server adds.
 */
import { fromAnswer, RmqError } from "./errors.js";

type Json = Record<string, unknown>;

/** A message to send; give at most one of `atMs`, `delayMs` or `priority`. */
export interface Message {
  payload: string;
  key?: string;
  /** Priority topics: higher first. */
  priority?: number;
  /** Fixed-time and range-merge topics: due at this Unix time (ms). */
  atMs?: number;
  /** Fixed-time and range-merge topics: due this long from now (ms). */
  delayMs?: number;
  /** Range-merge topics: the window (ms). */
  rangeMs?: number;
  /** Steer the slot by this instead of the key (e.g. an entity id). */
  slotBasis?: string;
}

/** The request body of one message. */
export function messageJson(m: Message): Json {
  const body: Json = { payload: m.payload };
  const fields: [string, unknown][] = [
    ["key", m.key],
    ["priority", m.priority],
    ["at", m.atMs],
    ["delay", m.delayMs],
    ["range", m.rangeMs],
    ["slot_basis", m.slotBasis],
  ];
  for (const [name, value] of fields) {
    if (value !== undefined) body[name] = value;
  }
  return body;
}

/**
 * What a send did. In a batch, a message refused on its own (a due time in
 * the past, a full topic) has `error` set and nothing else.
 */
export interface Sent {
  slot?: number;
  merged: boolean;
  behindInFlight: boolean;
  priority?: number;
  dueMs?: number;
  serverMs?: number;
  error?: RmqError;
  raw: Json;
}

export function sentOf(o: Json): Sent {
  return {
    slot: o.slot as number | undefined,
    merged: Boolean(o.merged),
    behindInFlight: Boolean(o.behind_in_flight),
    priority: (o.priority ?? undefined) as number | undefined,
    dueMs: (o.due_ms ?? undefined) as number | undefined,
    serverMs: (o.server_ms ?? undefined) as number | undefined,
    error: o.error ? fromAnswer(400, o) : undefined,
    raw: o,
  };
}

/** A field sent as text when UTF-8, else as `<name>_base64`. */
function textOrBytes(o: Json, name: string): string | Buffer | undefined {
  if (o[name] !== undefined && o[name] !== null) return o[name] as string;
  const b64 = o[`${name}_base64`];
  return typeof b64 === "string" ? Buffer.from(b64, "base64") : undefined;
}

/** A message looked up by key. */
export interface MessageInfo {
  key?: string | Buffer;
  /** `pending`, `in-flight`, `retry-waiting`, `dead` or `absent`. */
  state: string;
  exists: boolean;
  slot: number;
  payload?: string | Buffer;
  attempts: number;
  priority?: number;
  dueMs?: number;
  /** The last attempt's error (retry-waiting and dead messages). */
  error?: string;
  nextAttemptMs?: number;
  raw: Json;
}

export function messageInfoOf(o: Json): MessageInfo {
  return {
    key: textOrBytes(o, "key"),
    state: String(o.state),
    exists: o.state !== "absent",
    slot: Number(o.slot ?? 0),
    payload: textOrBytes(o, "payload"),
    attempts: Number(o.attempts ?? 0),
    priority: (o.priority ?? undefined) as number | undefined,
    dueMs: (o.due_ms ?? undefined) as number | undefined,
    error: (o.error ?? undefined) as string | undefined,
    nextAttemptMs: (o.next_attempt_ms ?? undefined) as number | undefined,
    raw: o,
  };
}

/**
 * A message taken: settle it by `receipt` before `leaseUntilMs`, or it comes
 * back as a failed attempt. `messageId` is the same for every delivery of one
 * message; `fence` (serial mode) only grows: pass it to downstream writes.
 */
export interface Delivery {
  topic: string;
  receipt: string;
  key?: string | Buffer;
  payload?: string | Buffer;
  attempt: number;
  slot: number;
  priority?: number;
  dueMs?: number;
  takenMs: number;
  leaseUntilMs: number;
  messageId: string;
  fence?: number;
  raw: Json;
}

export function deliveryOf(topic: string, o: Json): Delivery {
  return {
    topic,
    receipt: String(o.receipt),
    key: textOrBytes(o, "key"),
    payload: textOrBytes(o, "payload"),
    attempt: Number(o.attempt),
    slot: Number(o.slot),
    priority: (o.priority ?? undefined) as number | undefined,
    dueMs: (o.due_ms ?? undefined) as number | undefined,
    takenMs: Number(o.taken_ms),
    leaseUntilMs: Number(o.lease_until_ms),
    messageId: String(o.message_id),
    fence: (o.fence ?? undefined) as number | undefined,
    raw: o,
  };
}

/** What a cancel did (`outcome` `absent`: there was nothing to cancel). */
export interface Cancelled {
  key?: string | Buffer;
  cancelled: boolean;
  outcome: string;
  state: string;
  raw: Json;
}

export function cancelledOf(o: Json): Cancelled {
  return {
    key: textOrBytes(o, "key"),
    cancelled: Boolean(o.cancelled),
    outcome: String(o.outcome ?? ""),
    state: String(o.state ?? ""),
    raw: o,
  };
}

/** What a reschedule did. */
export interface Rescheduled {
  key?: string | Buffer;
  rescheduled: boolean;
  dueMs?: number;
  priority?: number;
  raw: Json;
}

export function rescheduledOf(o: Json): Rescheduled {
  return {
    key: textOrBytes(o, "key"),
    rescheduled: Boolean(o.rescheduled),
    dueMs: (o.due_ms ?? undefined) as number | undefined,
    priority: (o.priority ?? undefined) as number | undefined,
    raw: o,
  };
}

/**
 * One receipt's answer: `acked`, `retrying`, `dead`, `extended`, `released`,
 * `superseded`, `cancelled`, `stale` (its lease ran out, or it was settled
 * already: nothing changed), `fenced` (serial mode: the slot moved on),
 * `invalid` or `unknown` (Redis failed; settle again).
 */
export interface Settlement {
  outcome: string;
  error?: string;
}

export function settlementOf(o: Json): Settlement {
  const err = o.error as { message?: string } | string | undefined;
  return {
    outcome: String(o.outcome ?? "unknown"),
    error: typeof err === "object" ? err?.message : err,
  };
}

/** Whether a receipt was settled as asked (or the message ended anyway). */
export function settledDone(s: Settlement): boolean {
  return !["stale", "fenced", "invalid", "unknown"].includes(s.outcome);
}
