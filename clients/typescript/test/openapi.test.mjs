// The client against the server's OpenAPI document: every request the
// client makes (its method, route and every body field and query parameter
// it can send, with every option set) is one the document declares, and
// every field the client reads from a delivery is one the document
// promises. A route renamed or a field dropped on either side fails here.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";

import { Client } from "../dist/index.js";
import { Redis, Server, TOKEN } from "./harness.mjs";

let redis, server, doc;
before(async () => {
  redis = await Redis.start();
  server = await Server.start(redis);
  doc = await (await fetch(`${server.url}/api/v1/openapi.json`)).json();
});
after(async () => {
  await server?.stop();
  await redis?.stop();
});

/** Records each request; answers with a body shaped enough for the client to read. */
function recorder() {
  const requests = [];
  const fetchFn = async (url, init) => {
    const u = new URL(url);
    const body = init.body ? JSON.parse(init.body) : null;
    requests.push({ method: init.method, path: u.pathname, query: Object.fromEntries(u.searchParams), body });
    let answer;
    if (u.pathname.endsWith("/take")) answer = { deliveries: [] };
    else if (/\/(ack|nack|dead|extend|release|cancel)$/.test(u.pathname)) {
      const n = (body?.receipts ?? body?.keys ?? []).length;
      answer = { results: Array(n).fill({ outcome: "acked", cancelled: true, state: "pending" }) };
    } else if (u.pathname.endsWith("/messages") && body?.messages) answer = { results: body.messages.map(() => ({ slot: 0 })) };
    else if (u.pathname.endsWith("/topics") && init.method === "GET") answer = { topics: [] };
    else answer = { slot: 0, state: "absent", key: "k" };
    return new Response(JSON.stringify(answer), { status: 200, headers: { "content-type": "application/json" } });
  };
  return { requests, fetchFn };
}

async function everyCall(rmq) {
  const t = rmq.topic("p");
  await rmq.topics();
  await rmq.createTopic("p", "priority", { slots: 4 });
  await t.send("v", { key: "k", priority: 1, slotBasis: "b" });
  await t.send("v", { key: "k", atMs: 1, rangeMs: 2, delayMs: 3 });
  await t.sendBatch([{ payload: "v", key: "k", priority: 1, atMs: 1, delayMs: 2, rangeMs: 3, slotBasis: "b" }]);
  await t.get("k", { slotBasis: "b" });
  await t.cancel("k", { slotBasis: "b" });
  await t.cancelMany(["k"], { slotBasis: "b" });
  await t.reschedule("k", { atMs: 1, delayMs: 2, priority: 3, slotBasis: "b" });
  await t.take(5, { waitMs: 10, leaseMs: 100, group: "g", member: "m", memberTimeoutMs: 5000 });
  await t.ack(["r"]);
  await t.nack(["r"], { error: "e", retryAfterMs: 5 });
  await t.dead(["r"], { error: "e" });
  await t.extend(["r"], 100);
  await t.release(["r"]);
}

function operation(method, path) {
  for (const [template, ops] of Object.entries(doc.paths)) {
    const pattern = new RegExp("^" + template.replace(/\{[^}]+\}/g, "[^/]+") + "$");
    if (pattern.test(path) && ops[method.toLowerCase()]) return ops[method.toLowerCase()];
  }
  return null;
}

/** Every property a schema allows (through refs, allOf, oneOf), and the required ones. */
function fields(schema) {
  if (schema.$ref) return fields(doc.components.schemas[schema.$ref.split("/").pop()]);
  const props = { ...(schema.properties ?? {}) };
  const required = new Set(schema.required ?? []);
  for (const part of schema.allOf ?? []) {
    const f = fields(part);
    Object.assign(props, f.props);
    f.required.forEach((r) => required.add(r));
  }
  for (const part of [...(schema.oneOf ?? []), ...(schema.anyOf ?? [])]) Object.assign(props, fields(part).props);
  return { props, required };
}

test("every request the client makes is one the document declares", async () => {
  const { requests, fetchFn } = recorder();
  await everyCall(new Client("http://rmq.test", { token: TOKEN, fetch: fetchFn }));
  assert.equal(requests.length, 15);
  for (const { method, path, query, body } of requests) {
    const op = operation(method, path);
    assert.ok(op, `${method} ${path}: no such operation in the document`);
    const declared = new Set((op.parameters ?? []).filter((p) => p.in === "query").map((p) => p.name));
    for (const q of Object.keys(query)) assert.ok(declared.has(q), `${method} ${path}: query ${q} undeclared`);
    if (body === null) continue;
    let { props, required } = fields(op.requestBody.content["application/json"].schema);
    let bodies = [body];
    if (body.messages && props.messages) {
      ({ props, required } = fields(props.messages.items));
      bodies = body.messages;
    }
    for (const b of bodies) {
      for (const k of Object.keys(b)) assert.ok(k in props, `${method} ${path}: field ${k} undeclared`);
      for (const r of required) assert.ok(r in b, `${method} ${path}: required ${r} missing`);
    }
  }
});

test("every delivery field the client reads is one the document promises", () => {
  const { props, required } = fields(doc.components.schemas.DeliveryJson);
  for (const f of ["receipt", "attempt", "slot", "taken_ms", "lease_until_ms", "message_id"]) assert.ok(required.has(f), f);
  for (const f of ["key", "key_base64", "payload", "payload_base64", "priority", "due_ms", "fence"]) assert.ok(f in props, f);
  assert.ok(doc.components.schemas.Settlements.required.includes("results"));
});
