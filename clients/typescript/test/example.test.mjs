// The example in examples/typescript does what its comments say, against a
// real server: the paid order is never closed, the two unpaid ones are. It
// imports "rmq-client" as an installed package would be.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";

import { REPO, Redis, Server, TOKEN } from "./harness.mjs";

let redis, server, dir;
before(async () => {
  redis = await Redis.start();
  server = await Server.start(redis);
  dir = mkdtempSync(path.join(tmpdir(), "rmq-ts-example-"));
  mkdirSync(path.join(dir, "node_modules"));
  symlinkSync(path.join(REPO, "clients", "typescript"), path.join(dir, "node_modules", "rmq-client"));
  copyFileSync(path.join(REPO, "examples", "typescript", "unpaid_orders.mjs"), path.join(dir, "unpaid_orders.mjs"));
});
after(async () => {
  await server?.stop();
  await redis?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("the unpaid orders example closes only the unpaid orders", async () => {
  const env = { ...process.env, RMQ_URL: server.url, RMQ_TOKEN: TOKEN, UNPAID_AFTER_MS: "300", STOP_AFTER: "2" };
  const { stdout } = await promisify(execFile)(process.execPath, [path.join(dir, "unpaid_orders.mjs")], {
    env,
    timeout: 60_000,
  });
  const closed = stdout
    .split("\n")
    .filter((l) => l.startsWith("closing"))
    .map((l) => l.split(" ")[2])
    .sort();
  assert.deepEqual(closed, ["order-2", "order-3"], stdout);
  assert.match(stdout, /closed 2 orders/);
});
