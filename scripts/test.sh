#!/usr/bin/env bash
# Runs the whole test suite (unit, integration and doc tests) after making
# sure redis-server is installed, then the core semantics tests again on a
# throwaway Redis Cluster (RMQ_TEST_CLUSTER=1), as a least-privilege ACL
# user (RMQ_TEST_ACL=1) and as an FCALL-only user (RMQ_TEST_ACL=functions);
# then each official client's own suite against a real `rmq serve` (the
# Python client: pytest; the TypeScript client: node --test; the Go
# client: go test); the extra passes are skipped when arguments
# narrow the run. Extra arguments go to `cargo test`,
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

if [[ $# -eq 0 ]]; then
    echo "== the Python client (clients/python), installed as pip installs it, against rmq serve ==" >&2
    target/pyclient/bin/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
        --force-reinstall ./clients/python >&2
    rm -rf clients/python/build clients/python/src/*.egg-info
    RMQ_BIN="$PWD/target/debug/rmq" target/pyclient/bin/python -m pytest -q -p no:cacheprovider clients/python/tests
    echo "== the TypeScript client (clients/typescript), built and tested against rmq serve ==" >&2
    RMQ_BIN="$PWD/target/debug/rmq" npm test --prefix clients/typescript --silent
    echo "== the Go client (clients/go): gofmt, go vet, go test against rmq serve ==" >&2
    # Its caches under target/, and no module proxy: the standard library only.
    export GOCACHE="${GOCACHE:-$PWD/target/go-cache}" GOPATH="${GOPATH:-$PWD/target/go}" GOPROXY=off
    unformatted=$(gofmt -l clients/go examples/go)
    [[ -z $unformatted ]] || { echo "gofmt would change: $unformatted" >&2; exit 1; }
    (bin="$PWD/target/debug/rmq"; cd clients/go && go vet ./... && RMQ_BIN="$bin" go test -count=1 ./...)
    (cd examples/go && go vet ./...)
    echo "== the core semantics tests again, on a 3-master Redis Cluster ==" >&2
    RMQ_TEST_CLUSTER=1 cargo test -p rmq --locked \
        --test merge --test ordering --test lifecycle --test in_flight \
        --test consumer_run --test serial --test faults --test model --test payloads --test control --test topic_life --test flow --test pool --test bound \
        --test large_topics --test take_on_settle --test head_index --test affinity --test pending_buckets --test pending_layout --test on_demand
    echo "== again, as a least-privilege ACL user, and as an FCALL-only user (locked-down mode) ==" >&2
    for mode in 1 functions; do
        RMQ_TEST_ACL=$mode cargo test -p rmq --locked \
            --test merge --test ordering --test lifecycle --test in_flight \
            --test consumer_run --test serial --test model --test payloads --test flow --test pool --test bound \
            --test head_index --test herd --test large_topics --test take_on_settle --test pending_buckets --test pending_layout --test on_demand
    done
fi
