/**
 * The client: a connection to `rmq serve` (base URL and bearer token) and a
 * handle per topic that sends, looks up, cancels, reschedules, takes and
 * settles. Every call is one HTTP request (the built-in `fetch`); errors come
 * back as the typed errors of `errors.ts`.
 */
import { ConnectionFailed, fromAnswer, RmqError } from "./errors.js";
import {
  cancelledOf,
  deliveryOf,
  messageInfoOf,
  messageJson,
  rescheduledOf,
  sentOf,
  settlementOf,
  type Cancelled,
  type Delivery,
  type Message,
  type MessageInfo,
  type Rescheduled,
  type Sent,
  type Settlement,
} from "./models.js";
import { Worker, type Handler, type WorkerOptions } from "./worker.js";

/** Messages one batch send takes at most (the server's limit). */
export const MAX_SEND_BATCH = 10_000;
/** Deliveries one take answers at most, receipts one settle takes at most. */
export const MAX_TAKE = 1_000;
/** The longest a take waits for a first message (the server's limit). */
export const MAX_WAIT_MS = 30_000;

export interface ClientOptions {
  /** The bearer token actions need. */
  token?: string;
  /** How long one request may take, in ms (a take adds its wait); default 10 s. */
  timeoutMs?: number;
  /** Another `fetch` (tests, proxies). */
  fetch?: typeof fetch;
}

type Json = Record<string, unknown>;
type Query = Record<string, string | undefined>;

/** A connection to `rmq serve`. */
export class Client {
  readonly baseUrl: string;
  private readonly headers: Record<string, string>;
  private readonly timeoutMs: number;
  private readonly fetchFn: typeof fetch;

  constructor(baseUrl: string, options: ClientOptions = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "") + "/api/v1";
    this.headers = { "content-type": "application/json" };
    if (options.token) this.headers.authorization = `Bearer ${options.token}`;
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.fetchFn = options.fetch ?? fetch;
  }

  /** A handle on topic `name` (nothing is asked of the server yet). */
  topic(name: string): Topic {
    return new Topic(this, name);
  }

  /** Every topic with its definition and counts. */
  async topics(): Promise<Json[]> {
    return ((await this.request("GET", "/topics")) as { topics: Json[] }).topics;
  }

  /**
   * Creates topic `name` of `kind` (`priority`, `fixed-time` or `range-merge`)
   * with any settings that differ from the defaults (`slots`, `lease_ms`,
   * `max_attempts`, `backoff_ms`, ...). Alike to an existing one: a no-op.
   */
  async createTopic(name: string, kind: string, settings: Json = {}): Promise<Json> {
    return (await this.request("POST", "/topics", { body: { name, kind, ...settings } })) as Json;
  }

  /** One API call; its JSON answer, or a typed error. */
  async request(
    method: string,
    path: string,
    opts: { body?: unknown; query?: Query; timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<unknown> {
    const url = new URL(this.baseUrl + path);
    for (const [k, v] of Object.entries(opts.query ?? {})) {
      if (v !== undefined) url.searchParams.set(k, v);
    }
    // Aborted by the time limit or by the caller's signal, whichever first.
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(new Error("timed out")), opts.timeoutMs ?? this.timeoutMs);
    const onAbort = () => abort.abort(opts.signal?.reason);
    opts.signal?.addEventListener("abort", onAbort, { once: true });
    if (opts.signal?.aborted) onAbort();
    let r: Response;
    let body: unknown = null;
    try {
      r = await this.fetchFn(url, {
        method,
        headers: this.headers,
        body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
        signal: abort.signal,
      });
      try {
        body = await r.json();
      } catch {
        body = null;
      }
    } catch (e) {
      if (opts.signal?.aborted) throw e;
      throw new ConnectionFailed(`${method} ${path}: ${describe(e)}`, "ConnectionFailed");
    } finally {
      clearTimeout(timer);
      opts.signal?.removeEventListener("abort", onAbort);
    }
    if (r.status >= 400) throw fromAnswer(r.status, body);
    if (body === null) throw new RmqError(`${method} ${path}: the answer is not JSON`, "Error", r.status);
    return body;
  }
}

function describe(e: unknown): string {
  if (e instanceof Error) {
    const cause = (e as { cause?: unknown }).cause;
    return cause instanceof Error ? `${e.message} (${cause.message})` : e.message;
  }
  return String(e);
}

/** Options of a take. */
export interface TakeOptions {
  /** How long to wait for a first message (0..=30000 ms; default 0). */
  waitMs?: number;
  /** Each delivery's lease (default: the topic's). */
  leaseMs?: number;
  /** Serial mode: the consumer group (with `member`). */
  group?: string;
  /** Serial mode: this client's member id in the group. */
  member?: string;
  /** Serial mode: a member silent this long is gone (ms; default 30000). */
  memberTimeoutMs?: number;
  /** Gives the take up (the server gives back what it took for it). */
  signal?: AbortSignal;
}

type Receipts = readonly (string | Delivery)[];

/** One topic of a {@link Client}. */
export class Topic {
  readonly client: Client;
  readonly name: string;
  private readonly path: string;

  constructor(client: Client, name: string) {
    this.client = client;
    this.name = name;
    this.path = `/topics/${encodeURIComponent(name)}`;
  }

  /** Sends one message. */
  async send(payload: string, options: Omit<Message, "payload"> = {}): Promise<Sent> {
    const body = messageJson({ payload, ...options });
    return sentOf((await this.client.request("POST", `${this.path}/messages`, { body })) as Json);
  }

  /**
   * Sends up to 10,000 messages in one request, one result each in order. A
   * malformed message refuses the whole batch (a typed error, nothing sent);
   * one that Redis refuses on its own has its result's `error` set.
   */
  async sendBatch(messages: readonly Message[]): Promise<Sent[]> {
    if (messages.length < 1 || messages.length > MAX_SEND_BATCH) {
      throw new RangeError(`send 1..=${MAX_SEND_BATCH} messages at once (got ${messages.length})`);
    }
    const body = { messages: messages.map(messageJson) };
    const answer = (await this.client.request("POST", `${this.path}/messages`, { body })) as { results: Json[] };
    return answer.results.map(sentOf);
  }

  /** The message of `key` as it is now (`state` `absent` when there is none). */
  async get(key: string, options: { slotBasis?: string } = {}): Promise<MessageInfo> {
    const query = { key, slot_basis: options.slotBasis };
    return messageInfoOf((await this.client.request("GET", `${this.path}/key`, { query })) as Json);
  }

  /** Cancels the message of `key` (pending, or in flight). */
  async cancel(key: string, options: { slotBasis?: string } = {}): Promise<Cancelled> {
    const query = { key, slot_basis: options.slotBasis };
    return cancelledOf((await this.client.request("DELETE", `${this.path}/key`, { query })) as Json);
  }

  /** Cancels up to 10,000 keys in one request, one result each. */
  async cancelMany(keys: readonly string[], options: { slotBasis?: string } = {}): Promise<Cancelled[]> {
    const body: Json = { keys };
    if (options.slotBasis !== undefined) body.slot_basis = options.slotBasis;
    const answer = (await this.client.request("POST", `${this.path}/cancel`, { body })) as { results: Json[] };
    return answer.results.map(cancelledOf);
  }

  /** Moves the pending message of `key` to a new due time or priority. */
  async reschedule(
    key: string,
    options: { atMs?: number; delayMs?: number; priority?: number; slotBasis?: string },
  ): Promise<Rescheduled> {
    const body: Json = {};
    if (options.atMs !== undefined) body.at = options.atMs;
    if (options.delayMs !== undefined) body.delay = options.delayMs;
    if (options.priority !== undefined) body.priority = options.priority;
    if (options.slotBasis !== undefined) body.slot_basis = options.slotBasis;
    const answer = await this.client.request("POST", `${this.path}/key/reschedule`, { body, query: { key } });
    return rescheduledOf(answer as Json);
  }

  /** Takes up to `max` due messages, waiting up to `waitMs` for a first one. */
  async take(max = 1, options: TakeOptions = {}): Promise<Delivery[]> {
    const body: Json = { max, wait_ms: options.waitMs ?? 0 };
    if (options.leaseMs !== undefined) body.lease_ms = options.leaseMs;
    if (options.group !== undefined) body.group = options.group;
    if (options.member !== undefined) body.member = options.member;
    if (options.memberTimeoutMs !== undefined) body.member_timeout_ms = options.memberTimeoutMs;
    const answer = (await this.client.request("POST", `${this.path}/take`, {
      body,
      timeoutMs: 10_000 + (options.waitMs ?? 0),
      signal: options.signal,
    })) as { deliveries: Json[] };
    return answer.deliveries.map((d) => deliveryOf(this.name, d));
  }

  /** Done: the messages are removed. */
  ack(receipts: Receipts): Promise<Settlement[]> {
    return this.settle("ack", receipts, {});
  }

  /** Failed: retried after `retryAfterMs` (the topic's backoff when absent). */
  nack(receipts: Receipts, options: { error?: string; retryAfterMs?: number } = {}): Promise<Settlement[]> {
    const extra: Json = {};
    if (options.error !== undefined) extra.error = options.error;
    if (options.retryAfterMs !== undefined) extra.retry_after_ms = options.retryAfterMs;
    return this.settle("nack", receipts, extra);
  }

  /** Failed for good: straight to the dead letters. */
  dead(receipts: Receipts, options: { error?: string } = {}): Promise<Settlement[]> {
    return this.settle("dead", receipts, options.error === undefined ? {} : { error: options.error });
  }

  /** The leases now end `leaseMs` from now. */
  extend(receipts: Receipts, leaseMs: number): Promise<Settlement[]> {
    return this.settle("extend", receipts, { lease_ms: leaseMs });
  }

  /** Given back untouched: due again at once, no attempt counted. */
  release(receipts: Receipts): Promise<Settlement[]> {
    return this.settle("release", receipts, {});
  }

  /** One settle request (used by the worker's batches too). */
  async settle(op: string, receipts: Receipts, extra: Json): Promise<Settlement[]> {
    if (receipts.length < 1 || receipts.length > MAX_TAKE) {
      throw new RangeError(`settle 1..=${MAX_TAKE} receipts at once (got ${receipts.length})`);
    }
    const body = { receipts: receipts.map((r) => (typeof r === "string" ? r : r.receipt)), ...extra };
    const answer = (await this.client.request("POST", `${this.path}/${op}`, { body })) as { results: Json[] };
    return answer.results.map(settlementOf);
  }

  /** A {@link Worker} running `handler` on this topic's messages. */
  worker(handler: Handler, options: WorkerOptions = {}): Worker {
    return new Worker(this, handler, options);
  }
}
