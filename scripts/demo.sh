#!/usr/bin/env bash
# The main job: a short demo of merging, priority order, a timed message and
# a retry ending in the dead letters. Uses $REDIS_URL when set, else starts
# (and stops) a throwaway redis-server on a free loopback port.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/ensure-deps.sh --demo
exec cargo run -q --release -p rmq-cli -- demo "$@"
