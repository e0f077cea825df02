// Consume rate of the TypeScript client's worker: N messages sent to a fresh
// priority topic of 16 slots, then consumed with a handler that does nothing
// at the given concurrency; prints one JSON line. Used by
// scripts/client-bench.sh (see BENCHMARKS.md). Run after `npm run build`.
import { randomBytes } from "node:crypto";
import { Client } from "./dist/index.js";

const [url, token, nArg, cArg] = process.argv.slice(2);
const n = Number(nArg);
const concurrency = Number(cArg);
const rmq = new Client(url, { token });
const name = "bench-ts-" + randomBytes(4).toString("hex");
await rmq.createTopic(name, "priority", { slots: 16 });
const t = rmq.topic(name);
for (let start = 0; start < n; start += 1000) {
  const batch = [];
  for (let i = start; i < Math.min(n, start + 1000); i++) batch.push({ payload: "x", key: `k${i}`, priority: 1 });
  await t.sendBatch(batch);
}
let done = 0;
const worker = t.worker(
  async () => {
    done += 1;
    if (done === n) worker.stop();
  },
  { concurrency, waitMs: 1000 },
);
const t0 = performance.now();
const report = await worker.run();
const secs = (performance.now() - t0) / 1000;
if (report.acked !== n) throw new Error(JSON.stringify(report));
console.log(JSON.stringify({ client: "typescript", concurrency, messages: n, secs: Number(secs.toFixed(3)), rate: Math.round(n / secs) }));
