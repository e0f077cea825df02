#!/usr/bin/env bash
# A local Redis Cluster to try rmq on: 3 masters + 3 replicas on loopback.
#
#   scripts/cluster.sh start    # nodes on 127.0.0.1:30001..30006, data in .cluster/
#   scripts/cluster.sh stop     # stops the nodes this script started (by PID) and deletes .cluster/
#
# Then:  cargo run -q -p rmq-cli -- --cluster --redis redis://127.0.0.1:30001 demo
# PORT=40001 scripts/cluster.sh start  picks other ports (PORT..PORT+5, bus ports +100).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/ensure-deps.sh

base=${PORT:-30001}
dir=.cluster

case "${1:-}" in
start)
    mkdir -p "$dir"
    nodes=()
    for i in 0 1 2 3 4 5; do
        port=$((base + i))
        mkdir -p "$dir/$port"
        redis-server --port "$port" --bind 127.0.0.1 --dir "$dir/$port" \
            --cluster-enabled yes --cluster-port $((port + 100)) \
            --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
            --appendonly yes --save "" --repl-diskless-sync-delay 0 \
            --logfile redis.log --daemonize yes --pidfile "$PWD/$dir/$port/redis.pid"
        nodes+=("127.0.0.1:$port")
    done
    for _ in $(seq 50); do
        redis-cli -p $((base + 5)) PING >/dev/null 2>&1 && break
        sleep 0.1
    done
    redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >/dev/null
    for _ in $(seq 100); do
        redis-cli -p "$base" CLUSTER INFO | grep -q cluster_state:ok && break
        sleep 0.1
    done
    echo "cluster up: redis://127.0.0.1:$base .. $((base + 5)) (masters and replicas); stop with: $0 stop"
    ;;
stop)
    for pidfile in "$dir"/*/redis.pid; do
        [[ -f $pidfile ]] && kill "$(cat "$pidfile")" 2>/dev/null || true
    done
    sleep 0.5
    rm -rf "$dir"
    echo "cluster stopped"
    ;;
*)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
