#!/usr/bin/env bash
# Installs what rmq's tests and demo need on Debian 12 (Rust assumed present):
# redis-server, plus redis-cli and redis-benchmark (package redis-tools,
# pulled in by redis-server), faketime (the chaos suite's clock-skew
# scenario) and promtool (package prometheus: the metrics tests check the
# scrape with it; no Prometheus server is started). Idempotent and silent
# when all is present.
# It never starts a Redis service itself; tests run their own throwaway
# servers on free loopback ports and never use 6379.
set -euo pipefail

missing=()
for tool in redis-server redis-cli redis-benchmark faketime promtool; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "ensure-deps: missing ${missing[*]}; installing redis-server, redis-tools, faketime, prometheus" >&2

if [[ $(id -u) -eq 0 ]]; then
    sudo=()
elif command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
else
    echo "ensure-deps: not root and no sudo; install redis-server manually" >&2
    exit 1
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-deps: apt-get not found; install redis-server manually" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq redis-server redis-tools faketime prometheus >/dev/null

for tool in redis-server redis-cli redis-benchmark faketime promtool; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "ensure-deps: $tool still missing after install" >&2
        exit 1
    fi
done
echo "ensure-deps: $(redis-server --version)" >&2
