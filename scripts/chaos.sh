#!/usr/bin/env bash
# Runs every chaos scenario (the CI ones and the longer ones) one after the
# other and collects the verdicts: one JSON object per scenario in
# reliability-results/latest.jsonl, one summary line each in
# reliability-results/latest.txt. Exit status 1 if any scenario failed.
#
#   scripts/chaos.sh                 # all scenarios, seed 1
#   SEED=7 scripts/chaos.sh chaos    # some scenarios, another seed
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/ensure-deps.sh
cargo build --release -q -p rmq-chaos
bin=target/release/rmq-chaos
mkdir -p reliability-results
scenarios=("$@")
if [[ ${#scenarios[@]} -eq 0 ]]; then
    mapfile -t scenarios < <("$bin" list | awk '{print $1}')
fi
: > reliability-results/latest.jsonl
: > reliability-results/latest.txt
failed=0
for s in "${scenarios[@]}"; do
    echo "== $s" >&2
    if ! "$bin" run "$s" --seed "${SEED:-1}" >> reliability-results/latest.jsonl \
        2> >(tee -a reliability-results/latest.txt >&2); then
        failed=1
    fi
done
exit $failed
