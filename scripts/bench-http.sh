#!/usr/bin/env bash
# Consuming over HTTP (rmq serve: take, then ack by receipt) against the
# library's batched consume, on this machine, one after the other in one
# run: clients in Python (standard library only) and Node take batches of
# 100 over 8 connections and ack each batch in one request. Each side
# drains N messages (default 50,000) of a 16-slot priority topic on a
# throwaway redis-server (a free loopback port, stopped at the end).
# Needs release builds: cargo build --release -p rmq-cli -p rmq-bench.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
N=${N:-50000}
RMQ=target/release/rmq
BENCH=target/release/rmq-bench
for b in $RMQ $BENCH; do
    [[ -x $b ]] || { echo "build it first: cargo build --release -p rmq-cli -p rmq-bench" >&2; exit 1; }
done
dir=$(mktemp -d)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
http_port=$(free_port)
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
    --pidfile "$dir/redis.pid" --daemonize yes >/dev/null
serve_pid=
trap 'kill $serve_pid 2>/dev/null; kill "$(cat "$dir/redis.pid")" 2>/dev/null; rm -rf "$dir"' EXIT
sleep 0.3
export REDIS_URL=redis://127.0.0.1:$port
head -c 24 /dev/urandom | base64 | tr -d '/+=' > "$dir/token"
chmod 600 "$dir/token"
$RMQ serve --listen "127.0.0.1:$http_port" --token-file "$dir/token" 2>/dev/null &
serve_pid=$!
$RMQ topic create b --kind priority --slots 16 >/dev/null
sleep 0.5

cat > "$dir/client.py" <<'PY'
import http.client, json, sys, threading, time
port, token, n = int(sys.argv[1]), open(sys.argv[2]).read().strip(), int(sys.argv[3])
head = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
done, lock = [0], threading.Lock()
def worker():
    c = http.client.HTTPConnection("127.0.0.1", port)
    while True:
        c.request("POST", "/api/v1/topics/b/take", json.dumps({"max": 100, "wait_ms": 1000}), head)
        got = json.loads(c.getresponse().read())["deliveries"]
        if not got:
            return
        c.request("POST", "/api/v1/topics/b/ack", json.dumps({"receipts": [d["receipt"] for d in got]}), head)
        assert all(r["outcome"] == "acked" for r in json.loads(c.getresponse().read())["results"])
        with lock:
            done[0] += len(got)
t0 = time.time()
ts = [threading.Thread(target=worker) for _ in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
assert done[0] == n, done[0]
print(time.time() - t0 - 1.0)  # the last empty long-poll waited 1 s
PY
cat > "$dir/client.mjs" <<'JS'
const [port, tokenFile, n] = process.argv.slice(2);
const token = (await import('node:fs')).readFileSync(tokenFile, 'utf8').trim();
const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
const post = async (path, body) =>
  (await fetch(`http://127.0.0.1:${port}/api/v1/topics/b/${path}`, { method: 'POST', headers, body: JSON.stringify(body) })).json();
let done = 0;
async function worker() {
  for (;;) {
    const { deliveries } = await post('take', { max: 100, wait_ms: 1000 });
    if (deliveries.length === 0) return;
    const { results } = await post('ack', { receipts: deliveries.map((d) => d.receipt) });
    if (!results.every((r) => r.outcome === 'acked')) throw new Error('not acked');
    done += deliveries.length;
  }
}
const t0 = performance.now();
await Promise.all(Array.from({ length: 8 }, worker));
if (done !== Number(n)) throw new Error(`drained ${done}`);
console.log((performance.now() - t0) / 1000 - 1.0); // the last empty long-poll waited 1 s
JS
fill() {
    python3 -c "
for i in range($N): print('{\"payload\":\"p%d\",\"key\":\"k%d\"}' % (i, i))" | $RMQ send b --batch >/dev/null
}
report() { python3 -c "print('%-46s %6d msgs %7.2f s %8.0f msg/s' % ('$1', $N, $2, $N / $2))"; }
scale=$(python3 -c "print($N / 200000)")
for round in 1 2; do
    echo "== round $round"
    lib=$(env -u REDIS_URL $BENCH --scale "$scale" --only "consume concurrency=128 batch=64" 2>/dev/null \
        | python3 -c "import json, sys; print(json.loads(sys.stdin.readline())['msgs_per_sec'])")
    report "library, consume c=128 batch=64 (rmq-bench)" "$(python3 -c "print($N / $lib)")"
    fill; report "HTTP, Python, 8 connections, take 100 + ack" "$(python3 "$dir/client.py" "$http_port" "$dir/token" "$N")"
    fill; report "HTTP, Node, 8 connections, take 100 + ack" "$(node "$dir/client.mjs" "$http_port" "$dir/token" "$N")"
done
