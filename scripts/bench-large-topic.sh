#!/usr/bin/env bash
# The tools on a topic of 65,536 slots, two rmq binaries side by side:
# `rmq stats`, `rmq peek --limit 20` and `rmq dead list --limit 20` on an
# empty topic and on one holding 100,000 messages, each run interleaved
# (A, B, B, A, ...) against one throwaway redis-server. Per run it prints
# the wall time of the command, the script calls it made and the Redis CPU
# it cost (INFO commandstats and INFO cpu before and after), as JSON lines.
#
#   scripts/bench-large-topic.sh OLD_RMQ NEW_RMQ [ROUNDS]
#
# e.g. with the release binary of an older checkout:
#   git worktree add /tmp/old <commit>
#   (cd /tmp/old && CARGO_TARGET_DIR=/tmp/old-target cargo build --release -p rmq-cli)
#   cargo build --release -p rmq-cli
#   scripts/bench-large-topic.sh /tmp/old-target/release/rmq target/release/rmq 4
set -euo pipefail

a=${1:?the first rmq binary}
b=${2:?the second rmq binary}
rounds=${3:-4}
slots=65536

dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
    --daemonize no >"$dir/redis.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
url="redis://127.0.0.1:$port"
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.1; done

# Script calls and Redis CPU (ms) so far.
calls() {
    redis-cli -p "$port" info commandstats |
        awk -F'[=,:]' '/^cmdstat_(evalsha|fcall):/ { n += $3 } END { print n + 0 }'
}
cpu_ms() {
    redis-cli -p "$port" info cpu |
        awk -F: '/^used_cpu_(sys|user):/ { s += $2 } END { printf "%d\n", s * 1000 }'
}

"$b" --redis "$url" topic create empty --kind priority --slots "$slots" >/dev/null
"$b" --redis "$url" topic create full --kind priority --slots "$slots" >/dev/null
python3 -c '
import json
for i in range(100_000):
    print(json.dumps({"payload": f"payload-{i:06d}-" + "x" * 40, "key": f"k{i}", "priority": i % 1000}))
' | "$b" --redis "$url" send full --batch >/dev/null

run() { # label binary topic args...
    local label=$1 bin=$2 topic=$3
    shift 3
    local c0 u0 t0 t1 c1 u1
    c0=$(calls)
    u0=$(cpu_ms)
    t0=$(date +%s%N)
    "$bin" --redis "$url" "$@" >/dev/null
    t1=$(date +%s%N)
    c1=$(calls)
    u1=$(cpu_ms)
    # The two INFO calls and redis-cli itself are not script calls.
    printf '{"binary":"%s","topic":"%s","command":"%s","wall_ms":%d,"script_calls":%d,"redis_cpu_ms":%d}\n' \
        "$label" "$topic" "$*" $(((t1 - t0) / 1000000)) $((c1 - c0)) $((u1 - u0))
}

for ((r = 0; r < rounds; r++)); do
    if ((r % 2 == 0)); then order=("A $a" "B $b"); else order=("B $b" "A $a"); fi
    for topic in empty full; do
        for pair in "${order[@]}"; do
            read -r label bin <<<"$pair"
            run "$label" "$bin" "$topic" stats "$topic"
            run "$label" "$bin" "$topic" peek "$topic" --limit 20
            run "$label" "$bin" "$topic" dead list "$topic" --limit 20
        done
    done
done
