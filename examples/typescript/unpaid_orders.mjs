#!/usr/bin/env node
// Close unpaid orders after 30 minutes; cancel the timer when an order is paid.
//
// Each order placed sends a fixed-time message keyed by the order id, due in
// 30 minutes; paying the order cancels that key. A worker closes the orders
// whose message comes due. Against a running `rmq serve`:
//
//     npm install ./clients/typescript
//     RMQ_URL=http://127.0.0.1:8080 RMQ_TOKEN=$(cat token) node examples/typescript/unpaid_orders.mjs
//
// UNPAID_AFTER_MS shortens the 30 minutes for a try; STOP_AFTER=N stops the
// worker after N closed orders (else it runs until Ctrl-C).
import { Client } from "rmq-client";

const UNPAID_AFTER_MS = Number(process.env.UNPAID_AFTER_MS ?? 30 * 60_000);
const STOP_AFTER = Number(process.env.STOP_AFTER ?? 0);

const rmq = new Client(process.env.RMQ_URL ?? "http://127.0.0.1:8080", { token: process.env.RMQ_TOKEN });
// Creating a topic that exists with the same definition is a no-op.
await rmq.createTopic("unpaid-orders", "fixed-time", { slots: 16 });
const timers = rmq.topic("unpaid-orders");

// Three orders are placed: each is closed in 30 minutes unless paid.
for (const order of ["order-1", "order-2", "order-3"]) {
  await timers.send(order, { key: order, delayMs: UNPAID_AFTER_MS });
}
// order-1 is paid: its timer goes.
await timers.cancel("order-1");

let closed = 0;
const worker = timers.worker(
  async (delivery) => {
    console.log(`closing unpaid ${delivery.key} (attempt ${delivery.attempt})`);
    closed += 1; // resolving acks it; throwing retries it later
    if (closed === STOP_AFTER) worker.stop();
  },
  { concurrency: 8 },
);
process.on("SIGINT", () => worker.stop());
process.on("SIGTERM", () => worker.stop());
const report = await worker.run();
console.log(`closed ${report.acked} orders`);
