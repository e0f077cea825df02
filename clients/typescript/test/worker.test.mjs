// The worker against a real server: every message handled once at
// concurrency 16, retries and dead letters by what the handler does, a
// handler past its timeout retried, a long handler kept by its lease, a stop
// that gives back what did not finish, serial mode one message of an entity
// at a time and in order across two workers, and a server restart in the
// middle of a run with nothing lost.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";

import { Dead, DeadLetter, Retry } from "../dist/index.js";
import { Redis, Server, freshTopic, sleep } from "./harness.mjs";

let redis, server;
before(async () => {
  redis = await Redis.start();
  server = await Server.start(redis);
});
after(async () => {
  await server?.stop();
  await redis?.stop();
});

async function stats(rmq, name) {
  return (await rmq.request("GET", `/topics/${name}/stats`)).total;
}

async function fill(t, n, opts) {
  for (let start = 0; start < n; start += 1000) {
    const batch = [];
    for (let i = start; i < Math.min(n, start + 1000); i++) batch.push({ payload: `m${i}`, key: `k${i}`, ...opts });
    await t.sendBatch(batch);
  }
}

async function until(check, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

test("5,000 messages at concurrency 16 are each handled once", async () => {
  const { rmq, t } = await freshTopic(server, "priority", { slots: 16 });
  await fill(t, 5000, { priority: 1 });
  const seen = new Map();
  let running = 0;
  let peak = 0;
  const worker = t.worker(
    async (d) => {
      running++;
      peak = Math.max(peak, running);
      await sleep(1);
      running--;
      seen.set(d.key, (seen.get(d.key) ?? 0) + 1);
      if (seen.size === 5000) worker.stop();
    },
    { concurrency: 16, waitMs: 1000 },
  );
  const report = await worker.run();
  assert.equal(report.acked, 5000, JSON.stringify(report));
  assert.equal(seen.size, 5000);
  assert.ok([...seen.values()].every((n) => n === 1), "each message handled once");
  assert.ok(peak > 1 && peak <= 16, `peak ${peak}`);
  const s = await stats(rmq, t.name);
  assert.deepEqual([s.pending, s.in_flight], [0, 0]);
});

test("failures retry and dead-letter by what the handler does", async () => {
  const { rmq, t } = await freshTopic(server, "priority", { slots: 2, max_attempts: 3, backoff_ms: 10, backoff_max_ms: 20 });
  for (const key of ["flaky", "poison", "returned-dead", "always-fails", "later"]) await t.send(key, { key, priority: 1 });
  const attempts = new Map();
  const ended = new Set();
  const worker = t.worker(
    async (d) => {
      attempts.set(d.key, (attempts.get(d.key) ?? 0) + 1);
      if (d.key === "flaky" && d.attempt < 2) throw new Error("not yet");
      if (d.key === "poison") throw new DeadLetter("cannot parse");
      if (d.key === "returned-dead") return new Dead("refused");
      if (d.key === "always-fails") throw new TypeError(`attempt ${d.attempt} failed`);
      if (d.key === "later" && d.attempt === 1) return new Retry("come back", 10);
      ended.add(d.key);
    },
    { concurrency: 4, waitMs: 200 },
  );
  const run = worker.run();
  await until(() => ended.has("flaky") && ended.has("later") && attempts.get("always-fails") === 3, 20_000, "the ends");
  await sleep(200);
  worker.stop();
  const report = await run;
  assert.deepEqual(["flaky", "later", "poison"].map((k) => attempts.get(k)), [2, 2, 1]);
  assert.equal(attempts.get("always-fails"), 3, "retried up to the topic's last attempt");
  assert.deepEqual([report.acked, report.dead], [2, 3], JSON.stringify(report));
  const letters = (await rmq.request("GET", `/topics/${t.name}/dead`)).dead;
  const errors = Object.fromEntries(letters.map((l) => [l.key, l.error]));
  assert.equal(errors.poison, "cannot parse");
  assert.equal(errors["returned-dead"], "refused");
  assert.equal(errors["always-fails"], "TypeError: attempt 3 failed");
});

test("a handler past its timeout is aborted and its message retried", async () => {
  const { rmq, t } = await freshTopic(server, "priority", { slots: 1, backoff_ms: 60_000 });
  await t.send("slow", { key: "slow", priority: 1 });
  let aborted = false;
  const worker = t.worker(
    (d, { signal }) =>
      new Promise((resolve) => {
        const timer = setTimeout(resolve, 30_000);
        signal.addEventListener("abort", () => {
          aborted = true;
          clearTimeout(timer);
          resolve();
        });
      }),
    { concurrency: 1, handlerTimeoutMs: 300, waitMs: 200 },
  );
  const run = worker.run();
  await until(() => aborted, 10_000, "the abort");
  await sleep(300);
  worker.stop();
  const report = await run;
  assert.equal(report.retried, 1, JSON.stringify(report));
  const info = await t.get("slow");
  assert.equal(info.state, "retry-waiting");
  assert.equal(info.error, "handler timed out after 300 ms");
});

test("a long handler keeps its delivery by extending the lease", async () => {
  const { rmq, t } = await freshTopic(server, "priority", { slots: 1 });
  await t.send("long", { key: "long", priority: 1 });
  const handled = [];
  const worker = t.worker(
    async (d) => {
      handled.push(d.attempt);
      await sleep(2000); // over three leases of 600 ms
      worker.stop();
    },
    { concurrency: 2, leaseMs: 600, waitMs: 200 },
  );
  const report = await worker.run();
  assert.deepEqual(handled, [1], "never taken again while held");
  assert.equal(report.acked, 1);
});

test("stop waits for running handlers and gives back the rest untouched", async () => {
  const { rmq, t } = await freshTopic(server, "priority", { slots: 4 });
  await fill(t, 6, { priority: 1 });
  const started = [];
  const worker = t.worker(
    async (d, { signal }) => {
      started.push(d.key);
      if (started.length === 1) return sleep(300); // finishes within the grace
      await new Promise((resolve) => signal.addEventListener("abort", resolve)); // does not
    },
    { concurrency: 3, shutdownGraceMs: 1000, waitMs: 200 },
  );
  const run = worker.run();
  await until(() => started.length >= 3, 10_000, "three handlers");
  worker.stop();
  const t0 = Date.now();
  const report = await run;
  assert.ok(Date.now() - t0 < 3000, "the grace bounds the stop");
  assert.deepEqual([report.acked, report.released], [1, 2], JSON.stringify(report));
  const s = await stats(rmq, t.name);
  assert.deepEqual([s.pending, s.in_flight, s.retry_waiting], [5, 0, 0]);
  const again = await t.take(5);
  assert.deepEqual(again.map((d) => d.attempt), [1, 1, 1, 1, 1], "a release counts no attempt");
});

test("serial mode handles one message of an entity at a time, in order, across two workers", async () => {
  const { rmq, t } = await freshTopic(server, "fixed-time", { slots: 8, past_tolerance_ms: 600_000 });
  const entities = 6;
  const per = 25;
  const base = Date.now() - 60_000;
  const batch = [];
  for (let i = 0; i < per; i++) {
    for (let e = 0; e < entities; e++) {
      batch.push({ payload: `${e}:${i}`, key: `e${e}-${i}`, atMs: base + i, slotBasis: `entity-${e}` });
    }
  }
  assert.ok((await t.sendBatch(batch)).every((s) => !s.error));
  const log = [];
  const handler = (w) => async (d) => {
    const [e, i] = d.payload.split(":").map(Number);
    const start = performance.now();
    await sleep(2);
    log.push({ e, i, start, end: performance.now(), w });
  };
  const workers = [1, 2].map((w) =>
    t.worker(handler(w), { concurrency: 8, group: "g", member: `w${w}`, waitMs: 200, memberTimeoutMs: 2000 }),
  );
  const runs = workers.map((w) => w.run());
  await until(() => log.length === entities * per, 60_000, "every message");
  workers.forEach((w) => w.stop());
  const reports = await Promise.all(runs);
  assert.equal(reports.reduce((n, r) => n + r.acked, 0), entities * per);
  for (let e = 0; e < entities; e++) {
    const mine = log.filter((x) => x.e === e).sort((a, b) => a.start - b.start);
    assert.deepEqual(mine.map((x) => x.i), Array.from({ length: per }, (_, i) => i), `entity ${e} out of order`);
    for (let k = 1; k < mine.length; k++) assert.ok(mine[k - 1].end <= mine[k].start, `entity ${e} overlaps`);
  }
  assert.deepEqual(new Set(log.map((x) => x.w)), new Set([1, 2]), "both members worked");
});

test("a server restart in the middle of a run loses nothing", async () => {
  const { rmq, t } = await freshTopic(server, "priority", { slots: 8, lease_ms: 3000 }, { timeoutMs: 5000 });
  const n = 2000;
  await fill(t, n, { priority: 1 });
  const seen = new Map();
  const worker = t.worker(
    async (d) => {
      await sleep(1);
      seen.set(d.key, (seen.get(d.key) ?? 0) + 1);
    },
    { concurrency: 16, waitMs: 500 },
  );
  const run = worker.run();
  await until(() => seen.size >= n / 3, 30_000, "a third");
  await server.restart();
  await until(async () => {
    if (seen.size < n) return false;
    const s = await stats(rmq, t.name);
    return s.pending === 0 && s.in_flight === 0;
  }, 60_000, "every message");
  worker.stop();
  await run;
  assert.equal(seen.size, n, `${n - seen.size} never handled`);
  const s = await stats(rmq, t.name);
  assert.deepEqual([s.pending, s.in_flight, s.dead], [0, 0, 0]);
  const total = [...seen.values()].reduce((a, b) => a + b, 0);
  assert.ok(total - n <= 32, `handled ${total - n} extra`);
});
