// An rmq worker: `rmq consume TOPIC --worker 'node examples/worker.mjs' --workers 4 --worker-concurrency 8`.
// One JSON line per delivery on stdin; one JSON line per result on stdout, in any
// order (several deliveries are in hand at once). Logs go to stderr.
import { createInterface } from "node:readline";

async function handle(payload, msg) {
  console.error(`handling ${msg.key} attempt ${msg.attempt}`);
  if (payload.toString() === "poison") throw Object.assign(new Error("cannot handle this payload"), { dead: true });
  await new Promise((r) => setTimeout(r, 10)); // the work
}

const answer = (result) => process.stdout.write(JSON.stringify(result) + "\n");
for await (const line of createInterface({ input: process.stdin })) {
  const msg = JSON.parse(line);
  const payload = msg.payload_base64 !== undefined ? Buffer.from(msg.payload_base64, "base64") : Buffer.from(msg.payload);
  handle(payload, msg).then(
    () => answer({ id: msg.id, outcome: "ack" }),
    (e) => answer(e.dead ? { id: msg.id, outcome: "dead", error: e.message }
                         : { id: msg.id, outcome: "retry", error: String(e), retry_after_ms: 5000 }),
  );
}
