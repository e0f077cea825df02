#!/usr/bin/env bash
# Runs the whole test suite (unit, integration and doc tests) after making
# sure redis-server is installed. Extra arguments go to `cargo test`,
# e.g. `scripts/test.sh -p rmq` or `scripts/test.sh -- --nocapture`.
# With -p/--package only those packages are tested (--workspace would
# otherwise override the selection).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/ensure-deps.sh

scope=(--workspace)
for arg in "$@"; do
    case "$arg" in
        --) break ;;
        -p | --package | -p* | --package=*) scope=() ;;
    esac
done
cargo test "${scope[@]}" --locked "$@"
