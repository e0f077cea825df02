#!/usr/bin/env bash
# The official clients' consume rates (BENCHMARKS.md, "Clients"): a
# throwaway redis-server and a release `rmq serve` on free loopback ports,
# then for each client (Python, TypeScript, Go), ROUNDS times interleaved,
# N messages consumed at concurrency 1 and 16 by a worker whose handler does
# nothing; then the library's own consume rate at the same concurrencies
# (rmq-bench, its own throwaway Redis). One JSON line per run.
#   scripts/client-bench.sh            # N1=2000 N16=10000 ROUNDS=3
# Needs `cargo build --release -p rmq-cli -p rmq-bench` and the clients'
# tools (scripts/ensure-deps.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
N1=${N1:-2000}
N16=${N16:-10000}
ROUNDS=${ROUNDS:-3}
rmq=target/release/rmq

dir=$(mktemp -d /tmp/rmq-client-bench.XXXXXX)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
rport=$(port)
hport=$(port)
redis-server --port "$rport" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no >/dev/null &
redis_pid=$!
token=client-bench-token-0123456789
echo "$token" >"$dir/token"
trap 'kill $serve_pid $redis_pid 2>/dev/null; rm -rf "$dir"' EXIT
sleep 0.3
"$rmq" serve --redis "redis://127.0.0.1:$rport" --listen "127.0.0.1:$hport" --token-file "$dir/token" \
    >"$dir/serve.log" 2>&1 &
serve_pid=$!
url=http://127.0.0.1:$hport
for _ in $(seq 100); do curl -sf "$url/api/v1/server" >/dev/null && break; sleep 0.1; done

npm run build --prefix clients/typescript --silent
(cd clients/go && go build -o "$dir/go-bench" ./bench)
for _ in $(seq "$ROUNDS"); do
    for c in 1 16; do
        n=$N1
        [[ $c == 16 ]] && n=$N16
        PYTHONPATH=clients/python/src target/pyclient/bin/python clients/python/bench.py "$url" "$token" "$n" "$c"
        node clients/typescript/bench.mjs "$url" "$token" "$n" "$c"
        "$dir/go-bench" "$url" "$token" "$n" "$c"
    done
done
echo "the library (rmq-bench, scale 0.1: 20,000 messages):" >&2
target/release/rmq-bench --scale 0.1 --only "consume concurrency=1 batch=1,consume concurrency=16 batch=16" 2>&1 \
    | grep -E 'consume' || true
