#!/usr/bin/env bash
# What a /metrics scrape and the dashboard's sampling cost Redis: N topics
# (default 100) of S slots (default 16), each holding a few messages, on a
# throwaway redis-server; then `rmq serve --scrape-cache 0` is scraped R
# times (default 10). Prints each scrape's wall time and the Redis CPU
# (INFO cpu, user + sys) one scrape costs on average.
#   usage: scripts/scrape-cost.sh [TOPICS] [SLOTS] [SCRAPES]
# Uses target/release/rmq (built if missing), or $RMQ_BIN.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
topics=${1:-100} slots=${2:-16} scrapes=${3:-10}
bin=${RMQ_BIN:-target/release/rmq}
[[ -x $bin ]] || cargo build -q --release -p rmq-cli

dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
http=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
    --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
serve_pid=
cleanup() {
    [[ -n $serve_pid ]] && kill "$serve_pid" 2>/dev/null || true
    kill "$(cat "$dir/redis.pid")" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT
export REDIS_URL=redis://127.0.0.1:$port
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done

for i in $(seq -w 1 "$topics"); do
    "$bin" topic create "t$i" --kind fixed-time --slots "$slots" >/dev/null
    for k in 1 2 3 4 5; do echo "{\"payload\":\"v\",\"key\":\"k$k\",\"delay\":60000}"; done |
        "$bin" send "t$i" --batch >/dev/null
done
# A long sample interval: only the scrapes read Redis during the measure.
"$bin" serve --listen "127.0.0.1:$http" --read-only --scrape-cache 0 --sample-every 3600000 \
    >/dev/null 2>&1 &
serve_pid=$!
until curl -sf "http://127.0.0.1:$http/api/v1/server" >/dev/null; do sleep 0.05; done
sleep 1

cpu() { redis-cli -p "$port" info cpu | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f", s}'; }
before=$(cpu)
for r in $(seq 1 "$scrapes"); do
    curl -s -o /dev/null -w "scrape $r: %{time_total} s, %{size_download} bytes\n" \
        "http://127.0.0.1:$http/metrics"
done
after=$(cpu)
python3 -c "print('Redis CPU per scrape of $topics topics x $slots slots: %.1f ms' % (($after - $before) * 1000 / $scrapes))"
