// Real servers for the client's tests: a throwaway redis-server and an
// `rmq serve` (the workspace's debug build, or $RMQ_BIN) on free loopback
// ports, with temp dirs, stopped by PID. Nothing here touches a server the
// tests did not start.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync, openSync, closeSync, accessSync, constants } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";

import { Client } from "../dist/index.js";

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
export const TOKEN = "typescript-client-test-token";

export function rmqBin() {
  const bin = process.env.RMQ_BIN || path.join(REPO, "target", "debug", "rmq");
  try {
    accessSync(bin, constants.X_OK);
  } catch {
    throw new Error(`no rmq binary at ${bin}: build it (cargo build -p rmq-cli) or set RMQ_BIN`);
  }
  return bin;
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(check, what, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      if (await check()) return;
    } catch {
      // not up yet
    }
    await sleep(50);
  }
  throw new Error(`${what} did not come up within ${timeoutMs} ms`);
}

function ping(port) {
  return new Promise((resolve) => {
    const c = net.connect(port, "127.0.0.1", () => c.write("PING\r\n"));
    c.on("data", (d) => {
      c.destroy();
      resolve(d.toString().startsWith("+PONG"));
    });
    c.on("error", () => resolve(false));
  });
}

export class Redis {
  static async start() {
    const r = new Redis();
    r.dir = mkdtempSync(path.join(tmpdir(), "rmq-ts-redis-"));
    r.port = await freePort();
    r.proc = spawn(
      "redis-server",
      ["--port", String(r.port), "--bind", "127.0.0.1", "--dir", r.dir, "--save", "", "--appendonly", "no"],
      { stdio: "ignore" },
    );
    await waitFor(() => ping(r.port), "redis-server");
    return r;
  }
  get url() {
    return `redis://127.0.0.1:${this.port}`;
  }
  async stop() {
    await kill(this.proc);
    rmSync(this.dir, { recursive: true, force: true });
  }
}

function kill(proc) {
  return new Promise((resolve) => {
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return resolve();
    proc.once("exit", () => resolve());
    proc.kill("SIGKILL");
  });
}

/** `rmq serve` on a free port; restart() keeps its port. */
export class Server {
  static async start(redis) {
    const s = new Server();
    s.redis = redis;
    s.dir = mkdtempSync(path.join(tmpdir(), "rmq-ts-serve-"));
    s.tokenFile = path.join(s.dir, "token");
    writeFileSync(s.tokenFile, TOKEN + "\n");
    s.port = await freePort();
    await s.launch();
    return s;
  }
  get url() {
    return `http://127.0.0.1:${this.port}`;
  }
  async launch() {
    const log = openSync(path.join(this.dir, "serve.log"), "a");
    this.proc = spawn(
      rmqBin(),
      ["serve", "--redis", this.redis.url, "--listen", `127.0.0.1:${this.port}`, "--token-file", this.tokenFile,
        "--shutdown-grace", "500"],
      { stdio: ["ignore", log, log] },
    );
    closeSync(log);
    await waitFor(async () => (await fetch(`${this.url}/api/v1/server`)).status === 200, "rmq serve");
  }
  async restart() {
    await kill(this.proc);
    await this.launch();
  }
  async stop() {
    await kill(this.proc);
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** A client of `server` and a fresh topic of `kind` with `settings`. */
export async function freshTopic(server, kind, settings, options = {}) {
  const rmq = new Client(server.url, { token: TOKEN, ...options });
  const name = topicName();
  await rmq.createTopic(name, kind, settings);
  return { rmq, t: rmq.topic(name) };
}

/** A topic name of its own for each test. */
export function topicName() {
  return "t" + randomBytes(6).toString("hex");
}

export { sleep };
