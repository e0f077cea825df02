#!/usr/bin/env bash
# rmq consume --worker against --exec with trivial handlers, on one
# throwaway redis-server (a free loopback port, stopped at the end):
# messages a second for each, two rounds. Needs a release build
# (cargo build --release -p rmq-cli) and python3.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RMQ=target/release/rmq
[[ -x $RMQ ]] || { echo "build it first: cargo build --release -p rmq-cli" >&2; exit 1; }
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
    --pidfile "$dir/redis.pid" --daemonize yes >/dev/null
trap 'kill "$(cat "$dir/redis.pid")" 2>/dev/null; rm -rf "$dir"' EXIT
sleep 0.3
export REDIS_URL=redis://127.0.0.1:$port
cat > "$dir/ack.py" <<'PY'
import json, sys
for line in sys.stdin:
    sys.stdout.write('{"id":"%s","outcome":"ack"}\n' % json.loads(line)["id"])
    sys.stdout.flush()
PY
$RMQ topic create b --kind priority --slots 16 >/dev/null
fill() {
    python3 -c "
for i in range($1): print('{\"payload\":\"p%d\",\"key\":\"k%d\"}' % (i, i))" | $RMQ send b --batch >/dev/null
}
bench() {
    local n=$1 what=$2; shift 2
    fill "$n"
    local s e
    s=$(date +%s.%N)
    "$@" --max "$n" >/dev/null 2>&1
    e=$(date +%s.%N)
    WHAT=$what python3 -c "import os; print('%-44s %6d msgs %7.2f s %8.0f msg/s' % (os.environ['WHAT'], $n, $e - $s, $n / ($e - $s)))"
}
for round in 1 2; do
    echo "== round $round"
    bench 2000 "--exec 'cat >/dev/null' -c 8" $RMQ consume b --exec 'cat >/dev/null' --concurrency 8
    bench 500 "--exec 'python3 -c ...' -c 8" $RMQ consume b --exec 'python3 -c "import sys; sys.stdin.buffer.read()"' --concurrency 8
    bench 20000 "--worker ack.py --workers 4 -k 16" $RMQ consume b --worker "python3 $dir/ack.py" --workers 4 --worker-concurrency 16
    bench 20000 "--worker ack.py --workers 8 -k 1" $RMQ consume b --worker "python3 $dir/ack.py" --workers 8 --worker-concurrency 1
done
