/**
 * A worker: runs a handler per message of one topic with a chosen
 * concurrency, long-polling `take` in batches, and ends each delivery by what
 * the handler did.
 *
 * - It resolves (any value): the message is acked.
 * - It throws {@link DeadLetter} (or resolves to a {@link Dead}): straight to
 *   the dead letters, with the message as the error.
 * - It throws {@link Retry} (or resolves to one): retried after `afterMs`.
 * - It throws anything else: retried after `retryDelayMs` (the topic's
 *   backoff when unset), with the error as the message's; dead after the
 *   topic's last attempt.
 * - It runs past `handlerTimeoutMs`: retried as a failure.
 *
 * While a handler runs its lease is extended every third of it; a lease that
 * cannot be extended any more (it ran out, or in serial mode the slot moved
 * to another member) ends the delivery's handling with nothing settled.
 * JavaScript cannot stop a running function: the handler's `signal` is
 * aborted on a timeout, a lost lease and a stop past the grace, and a
 * handler that ignores it runs on while its end is recorded. Acks and
 * releases of many handlers go out together, one request per kind of end.
 * {@link Worker.stop} stops taking, waits up to `shutdownGraceMs` for running
 * handlers, and gives back (`release`: no attempt counted) whatever did not
 * finish.
 */
import { hostname } from "node:os";

import { BadRequest, Forbidden, NotFound, RmqError, Unauthorized } from "./errors.js";
import { settledDone, type Delivery, type Settlement } from "./models.js";

/** What a worker needs of a topic (a `Topic` of the client has it). */
export interface WorkerTopic {
  readonly name: string;
  take(
    max: number,
    options: {
      waitMs?: number;
      leaseMs?: number;
      group?: string;
      member?: string;
      memberTimeoutMs?: number;
      signal?: AbortSignal;
    },
  ): Promise<Delivery[]>;
  extend(receipts: readonly string[], leaseMs: number): Promise<Settlement[]>;
  settle(op: string, receipts: readonly string[], extra: Record<string, unknown>): Promise<Settlement[]>;
}

/** Thrown by a handler: the message goes straight to the dead letters. */
export class DeadLetter extends Error {
  constructor(message = "dead-lettered by the handler") {
    super(message);
    this.name = "DeadLetter";
  }
}

/** Thrown (or returned) by a handler: retried after `afterMs`. */
export class Retry extends Error {
  readonly afterMs: number | undefined;
  constructor(message = "retry asked by the handler", afterMs?: number) {
    super(message);
    this.name = "Retry";
    this.afterMs = afterMs;
  }
}

/** Returned by a handler: the message goes to the dead letters. */
export class Dead {
  constructor(readonly error = "dead-lettered by the handler") {}
}

/** What a handler gets beside its delivery. */
export interface HandlerContext {
  /** Aborted when the handler should stop: its timeout, a lost lease, a stop past the grace. */
  signal: AbortSignal;
}

export type Handler = (delivery: Delivery, context: HandlerContext) => unknown;

export interface WorkerOptions {
  /** Handlers running at once (default 16). */
  concurrency?: number;
  /** Messages one take asks for at most (default: the free room). */
  batch?: number;
  /** How long one take waits for work (ms, default 20000). */
  waitMs?: number;
  /** Each delivery's lease (ms, default: the topic's). */
  leaseMs?: number;
  /** How long a handler may run (ms, default: no limit). */
  handlerTimeoutMs?: number;
  /** The delay of a failure's retry (ms, default: the topic's backoff). */
  retryDelayMs?: number;
  /** Serial mode: the consumer group. */
  group?: string;
  /** Serial mode: this worker's member id (default host-pid-random). */
  member?: string;
  /** Serial mode: a member silent this long is gone (ms). */
  memberTimeoutMs?: number;
  /** How long {@link Worker.stop} waits for running handlers (ms, default 30000). */
  shutdownGraceMs?: number;
  /** How long a settle is tried again while the server is away (ms, default 30000). */
  settleRetryForMs?: number;
}

/** How the worker's deliveries ended. */
export interface Report {
  acked: number;
  retried: number;
  dead: number;
  released: number;
  cancelled: number;
  /** A duplicate sent while it was in flight took its place. */
  superseded: number;
  /** The lease was lost while the handler ran (nothing settled). */
  lost: number;
  /** Refused as stale, or the server stayed away: it comes back after its lease. */
  notSettled: number;
  outcomes: Record<string, number>;
}

const COUNTED: Record<string, keyof Omit<Report, "outcomes">> = {
  acked: "acked",
  retrying: "retried",
  dead: "dead",
  released: "released",
  cancelled: "cancelled",
  superseded: "superseded",
};

type Ending = { op: string; extra: Record<string, unknown> } | null;

/** Errors that will not go away by asking again. */
function fatal(e: unknown): boolean {
  return e instanceof Unauthorized || e instanceof Forbidden || e instanceof NotFound || e instanceof BadRequest;
}

/** Sleeps `ms`, or less when `signal` aborts. */
const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const onAbort = () => {
      clearTimeout(t);
      resolve();
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });

/** Runs `handler` on every message of `topic`; see the module docs. */
export class Worker {
  readonly topic: WorkerTopic;
  readonly report: Report = {
    acked: 0,
    retried: 0,
    dead: 0,
    released: 0,
    cancelled: 0,
    superseded: 0,
    lost: 0,
    notSettled: 0,
    outcomes: {},
  };
  private readonly handler: Handler;
  private readonly opts: Required<Omit<WorkerOptions, "batch" | "leaseMs" | "handlerTimeoutMs" | "retryDelayMs" | "group" | "member" | "memberTimeoutMs">> &
    WorkerOptions;
  private readonly settler: Settler;
  private readonly stopping = new AbortController();
  private readonly jobs = new Set<Job>();
  private roomFreed: (() => void) | null = null;

  constructor(topic: WorkerTopic, handler: Handler, options: WorkerOptions = {}) {
    const concurrency = options.concurrency ?? 16;
    if (!(concurrency >= 1)) throw new RangeError("concurrency must be at least 1");
    if (options.member !== undefined && options.group === undefined) {
      throw new RangeError("a member needs a group (serial mode)");
    }
    this.topic = topic;
    this.handler = handler;
    this.opts = {
      ...options,
      concurrency,
      waitMs: options.waitMs ?? 20_000,
      shutdownGraceMs: options.shutdownGraceMs ?? 30_000,
      settleRetryForMs: options.settleRetryForMs ?? 30_000,
      member: options.member ?? (options.group !== undefined ? defaultMember() : undefined),
    };
    this.settler = new Settler(topic, this.opts.settleRetryForMs);
  }

  /** Stops taking; {@link run} resolves once running handlers ended (or the grace ran out). */
  stop(): void {
    this.stopping.abort();
    this.roomFreed?.();
  }

  /**
   * Takes and handles messages until {@link stop}; the counts. Rejects with a
   * typed error when taking cannot work (a wrong token, no such topic), after
   * giving back what it holds.
   */
  async run(): Promise<Report> {
    const settling = this.settler.run();
    try {
      await this.takeUntilStopped();
    } finally {
      await this.finishRunning();
      this.settler.close();
      await settling;
    }
    return this.report;
  }

  private async takeUntilStopped(): Promise<void> {
    const stop = this.stopping.signal;
    let pause = 50;
    while (!stop.aborted) {
      const free = this.opts.concurrency - this.jobs.size;
      if (free <= 0) {
        await new Promise<void>((resolve) => (this.roomFreed = resolve));
        this.roomFreed = null;
        continue;
      }
      const want = Math.min(free, this.opts.batch ?? free, 1000);
      let taken: Delivery[];
      try {
        taken = await this.topic.take(want, {
          waitMs: this.opts.waitMs,
          leaseMs: this.opts.leaseMs,
          group: this.opts.group,
          member: this.opts.member,
          memberTimeoutMs: this.opts.memberTimeoutMs,
          signal: stop,
        });
      } catch (e) {
        if (stop.aborted) break; // the server gives back what it took for us
        if (fatal(e) || !(e instanceof RmqError)) throw e;
        await sleep(pause, stop);
        pause = Math.min(pause * 2, 5_000);
        continue;
      }
      pause = 50;
      if (stop.aborted) {
        await Promise.all(taken.map((d) => this.end(d, { op: "release", extra: {} })));
        break;
      }
      for (const d of taken) this.start(d);
    }
  }

  private start(d: Delivery): void {
    const job = new Job(d);
    this.jobs.add(job);
    job.done = this.handle(job).finally(() => {
      this.jobs.delete(job);
      this.roomFreed?.();
    });
  }

  private async handle(job: Job): Promise<void> {
    const keeper = this.keepLease(job);
    let ending: Ending;
    try {
      ending = await this.outcome(job);
    } finally {
      job.finished.abort();
      await keeper;
    }
    if (ending === null) {
      this.report.lost += 1;
      return;
    }
    await this.end(job.delivery, ending);
  }

  private async end(d: Delivery, ending: { op: string; extra: Record<string, unknown> }): Promise<void> {
    const s = await this.settler.settle(ending.op, d.receipt, ending.extra);
    this.count(s);
    if (!settledDone(s)) {
      process.emitWarning(`${ending.op} of ${String(d.key)} on ${d.topic}: ${s.outcome} ${s.error ?? ""}`);
    }
  }

  private count(s: Settlement): void {
    this.report.outcomes[s.outcome] = (this.report.outcomes[s.outcome] ?? 0) + 1;
    this.report[COUNTED[s.outcome] ?? "notSettled"] += 1;
  }

  /** How the delivery ends: a settle, or null when its lease was lost. */
  private async outcome(job: Job): Promise<Ending> {
    const timeoutMs = this.opts.handlerTimeoutMs;
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<"timeout">((resolve) => {
      if (timeoutMs !== undefined) timer = setTimeout(() => resolve("timeout"), timeoutMs);
    });
    const interrupted = new Promise<"interrupted">((resolve) =>
      job.interrupt.signal.addEventListener("abort", () => resolve("interrupted")),
    );
    const work = (async () => this.handler(job.delivery, { signal: job.interrupt.signal }))().then(
      (value) => ({ value }),
      (error: unknown) => ({ error }),
    );
    const first = await Promise.race([work, timedOut, interrupted]);
    clearTimeout(timer);
    if (first === "timeout") {
      job.interrupt.abort(new Error("handler timed out"));
      return this.nack(`handler timed out after ${timeoutMs} ms`, undefined);
    }
    if (first === "interrupted") {
      return job.lost ? null : { op: "release", extra: {} };
    }
    if (job.lost) return null;
    if ("error" in first) {
      const e = first.error;
      if (e instanceof DeadLetter) return { op: "dead", extra: { error: e.message } };
      if (e instanceof Retry) return this.nack(e.message, e.afterMs);
      const name = e instanceof Error ? e.name : "Error";
      const message = e instanceof Error ? e.message : String(e);
      return this.nack(`${name}: ${message}`, undefined);
    }
    const v = first.value;
    if (v instanceof Dead) return { op: "dead", extra: { error: v.error } };
    if (v instanceof Retry) return this.nack(v.message, v.afterMs);
    return { op: "ack", extra: {} };
  }

  private nack(error: string, afterMs: number | undefined): Ending {
    const extra: Record<string, unknown> = { error: error.slice(0, 4096) };
    const delay = afterMs ?? this.opts.retryDelayMs;
    if (delay !== undefined) extra.retry_after_ms = delay;
    return { op: "nack", extra };
  }

  /** Extends the lease every third of it while the handler runs. */
  private async keepLease(job: Job): Promise<void> {
    const d = job.delivery;
    const leaseMs = Math.max(d.leaseUntilMs - d.takenMs, 1);
    const done = job.finished.signal;
    while (!done.aborted) {
      await sleep(Math.max(leaseMs / 3, 50), done);
      if (done.aborted) return;
      let s: Settlement;
      try {
        [s] = await this.topic.extend([d.receipt], leaseMs);
      } catch {
        continue; // tries again at the next tick
      }
      if (s.outcome === "stale" || s.outcome === "fenced") {
        job.lost = true;
        job.interrupt.abort(new Error("lease lost"));
        return;
      }
    }
  }

  /** Waits up to the grace for running handlers; the rest are given back. */
  private async finishRunning(): Promise<void> {
    const running = [...this.jobs];
    if (running.length === 0) return;
    let timer: NodeJS.Timeout | undefined;
    const grace = new Promise<void>((resolve) => (timer = setTimeout(resolve, this.opts.shutdownGraceMs)));
    await Promise.race([Promise.all(running.map((j) => j.done)), grace]);
    clearTimeout(timer);
    for (const job of this.jobs) job.interrupt.abort(new Error("the worker stopped"));
    await Promise.all(running.map((j) => j.done));
  }
}

/** One delivery being handled. */
class Job {
  readonly interrupt = new AbortController();
  readonly finished = new AbortController();
  lost = false;
  done: Promise<void> = Promise.resolve();
  constructor(readonly delivery: Delivery) {}
}

interface Queued {
  op: string;
  extra: Record<string, unknown>;
  receipt: string;
  resolve: (s: Settlement) => void;
}

/**
 * Ends of many handlers, sent together: what queued up while a request was
 * out goes in the next, one request per kind of end (same operation, error
 * and delay). A request that fails for want of the server is tried again
 * for `retryForMs` (a receipt settled before a lost answer says `stale` the
 * second time, and nothing changes).
 */
class Settler {
  private queue: Queued[] = [];
  private wake: (() => void) | null = null;
  private closed = false;

  constructor(
    private readonly topic: WorkerTopic,
    private readonly retryForMs: number,
  ) {}

  settle(op: string, receipt: string, extra: Record<string, unknown>): Promise<Settlement> {
    return new Promise((resolve) => {
      this.queue.push({ op, extra, receipt, resolve });
      this.wake?.();
    });
  }

  close(): void {
    this.closed = true;
    this.wake?.();
  }

  async run(): Promise<void> {
    for (;;) {
      if (this.queue.length === 0) {
        if (this.closed) return;
        await new Promise<void>((resolve) => (this.wake = resolve));
        this.wake = null;
        continue;
      }
      const batch = this.queue;
      this.queue = [];
      const groups = new Map<string, Queued[]>();
      for (const q of batch) {
        const k = q.op + JSON.stringify(q.extra);
        const g = groups.get(k);
        if (g) g.push(q);
        else groups.set(k, [q]);
      }
      const sends: Promise<void>[] = [];
      for (const g of groups.values()) {
        for (let i = 0; i < g.length; i += 1000) sends.push(this.send(g.slice(i, i + 1000)));
      }
      await Promise.all(sends);
    }
  }

  private async send(items: Queued[]): Promise<void> {
    const deadline = Date.now() + this.retryForMs;
    const { op, extra } = items[0];
    let pending = items;
    let pause = 50;
    while (pending.length > 0) {
      let answers: Settlement[];
      try {
        answers = await this.topic.settle(op, pending.map((q) => q.receipt), extra);
      } catch (e) {
        if (fatal(e) || !(e instanceof RmqError) || Date.now() >= deadline) {
          for (const q of pending) q.resolve({ outcome: "unknown", error: String(e) });
          return;
        }
        await sleep(pause);
        pause = Math.min(pause * 2, 2_000);
        continue;
      }
      const again: Queued[] = [];
      pending.forEach((q, i) => {
        const s = answers[i];
        if (s.outcome === "unknown" && Date.now() < deadline) again.push(q);
        else q.resolve(s);
      });
      pending = again;
      if (pending.length > 0) await sleep(pause);
    }
  }
}

/** `host-pid-random`, in the characters a member id may hold. */
export function defaultMember(): string {
  const raw = `${hostname()}-${process.pid}-${Math.floor(Math.random() * 2 ** 32).toString(16).padStart(8, "0")}`;
  return raw.replace(/[^A-Za-z0-9_.-]/g, "-").slice(-100);
}
