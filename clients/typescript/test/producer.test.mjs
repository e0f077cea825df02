// Producing and steering by key against a real server: each option of each
// kind reaches Redis, a lookup tells the state, cancel and reschedule act on
// one key, and bad input or a bad token is a typed error that changes nothing.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";

import { BadRequest, Client, NotFound, Unauthorized } from "../dist/index.js";
import { Redis, Server, freshTopic } from "./harness.mjs";

let redis, server;
before(async () => {
  redis = await Redis.start();
  server = await Server.start(redis);
});
after(async () => {
  await server?.stop();
  await redis?.stop();
});

test("fixed-time messages merge by key and are steered by key", async () => {
  const { rmq, t } = await freshTopic(server, "fixed-time", { slots: 4 });
  const first = await t.send("unpaid", { key: "order-1", delayMs: 60_000 });
  assert.equal(first.merged, false);
  const again = await t.send("unpaid, again", { key: "order-1", delayMs: 120_000 });
  assert.equal(again.merged, true, "a second send of a pending key merges");
  const info = await t.get("order-1");
  assert.deepEqual([info.state, info.payload, info.dueMs], ["pending", "unpaid, again", again.dueMs]);
  const moved = await t.reschedule("order-1", { delayMs: 5_000 });
  assert.ok(moved.rescheduled && moved.dueMs < again.dueMs);
  assert.equal((await t.cancel("order-1")).cancelled, true);
  assert.equal((await t.get("order-1")).exists, false);
  assert.equal((await t.cancel("order-1")).cancelled, false, "nothing left to cancel");
});

test("a batch sends every option, and steering by slot basis keeps one slot", async () => {
  const { rmq, t } = await freshTopic(server, "priority", { slots: 2 });
  const sent = await t.sendBatch(Array.from({ length: 100 }, (_, i) => ({ payload: `m${i}`, key: `k${i}`, priority: i })));
  assert.deepEqual(sent.map((s) => s.priority), Array.from({ length: 100 }, (_, i) => i));
  assert.ok(sent.every((s) => !s.merged && !s.error));
  const info = await t.get("k7");
  assert.deepEqual([info.state, info.priority], ["pending", 7]);
  const cancelled = await t.cancelMany(["k1", "k2", "nope"]);
  assert.deepEqual(cancelled.map((c) => c.cancelled), [true, true, false]);
  const a = await t.send("x", { key: "a", priority: 1, slotBasis: "entity-9" });
  const b = await t.send("y", { key: "b", priority: 1, slotBasis: "entity-9" });
  assert.equal(a.slot, b.slot, "one slot basis, one slot");
  assert.equal((await t.get("a", { slotBasis: "entity-9" })).exists, true);
});

test("a batch reports a message refused on its own and sends the rest", async () => {
  const { rmq, t } = await freshTopic(server, "fixed-time", { slots: 1 });
  const sent = await t.sendBatch([
    { payload: "ok", key: "a", delayMs: 1000 },
    { payload: "late", key: "b", atMs: Date.now() - 3_600_000 },
  ]);
  assert.equal(sent[0].error, undefined);
  assert.equal(sent[1].error?.kind, "PastDue");
  assert.equal((await t.get("a")).exists, true);
  assert.equal((await t.get("b")).exists, false);
});

test("range-merge keeps the first due time and the newest payload", async () => {
  const { rmq, t } = await freshTopic(server, "range-merge", { slots: 1 });
  const a = await t.send("v1", { key: "r", rangeMs: 60_000 });
  const b = await t.send("v2", { key: "r", rangeMs: 60_000 });
  assert.ok(b.merged && b.dueMs === a.dueMs);
  assert.equal((await t.get("r")).payload, "v2");
});

test("bad input and a bad token are typed errors that change nothing", async () => {
  const { rmq, t } = await freshTopic(server, "priority", { slots: 1 });
  await assert.rejects(t.send("x", { delayMs: 10 }), (e) => e instanceof BadRequest && e.status === 400);
  await assert.rejects(rmq.topic("no-such-topic").send("x", { priority: 1 }), NotFound);
  await assert.rejects(t.take(0), BadRequest);
  const stats = await rmq.request("GET", `/topics/${t.name}/stats`);
  assert.equal(stats.total.pending, 0);
  const bad = new Client(server.url, { token: "wrong-token-wrong-token" });
  await assert.rejects(bad.topic(t.name).send("x", { priority: 1 }), (e) => e instanceof Unauthorized && e.kind === "Unauthorized");
  await assert.rejects(bad.topic(t.name).take(1), Unauthorized);
});
