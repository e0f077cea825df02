#!/usr/bin/env bash
# The CLI against the library at the same settings, interleaved, on a
# throwaway redis-server (free loopback port, temp dir, stopped by PID):
# - consume: `rmq --json consume T --concurrency 128 --max N | wc -l` on a
#   pre-filled priority topic (16 slots) vs rmq-bench's
#   "consume concurrency=128 batch=64";
# - send: `rmq send T --batch` of N JSON lines vs rmq-bench's send_batch
#   (priority, 1000 per call).
# Usage: scripts/cli-vs-lib.sh [ROUNDS] (N=100000 by default; OLD=path/to/rmq
# adds an older CLI binary to the consume rounds).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds=${1:-3}
n=${N:-100000}
cargo build --release -q -p rmq-cli -p rmq-bench
rmq=target/release/rmq
bench=target/release/rmq-bench
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
    --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
trap 'kill "$(cat "$dir/redis.pid")" 2>/dev/null; rm -rf "$dir"' EXIT
url=redis://127.0.0.1:$port
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
python3 - "$n" > "$dir/lines" <<'PY'
import json, sys
for i in range(int(sys.argv[1])):
    print(json.dumps({"payload": "%064d" % i, "key": "k%015d" % i, "priority": i % 10}))
PY
scale=$(python3 -c "print($n / 200000)")
rate() { python3 -c "import sys; print(round($1 / ($3 - $2)))"; }
lib() { # scenario case -> msgs/s of the priority case
    "$bench" --redis "$url" --only "$1" --scale "$scale" 2>/dev/null | python3 -c "
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    if r['kind'] == 'priority' and '$2' in json.dumps(r['params']):
        print(round(r['msgs_per_sec']))"
}
for r in $(seq "$rounds"); do
    for cli in "$rmq" ${OLD:-}; do
        t=c$r$RANDOM
        "$rmq" --redis "$url" topic create "$t" --kind priority --slots 16 >/dev/null
        "$rmq" --redis "$url" send "$t" --batch < "$dir/lines" >/dev/null
        s=$(date +%s.%N)
        got=$("$cli" --redis "$url" --json consume "$t" --concurrency 128 --max "$n" | wc -l)
        e=$(date +%s.%N)
        echo "round $r consume  cli $(rate "$got" "$s" "$e") msg/s ($cli)"
    done
    echo "round $r consume  lib $(lib "consume concurrency=128 batch=64" '"batch": 64') msg/s"
    t=s$r$RANDOM
    "$rmq" --redis "$url" topic create "$t" --kind priority --slots 16 >/dev/null
    s=$(date +%s.%N)
    "$rmq" --redis "$url" send "$t" --batch < "$dir/lines" >/dev/null
    e=$(date +%s.%N)
    echo "round $r send     cli $(rate "$n" "$s" "$e") msg/s"
    echo "round $r send     lib $(lib send_batch '"batch": 1000') msg/s"
    redis-cli -p "$port" flushall >/dev/null
done
