#!/usr/bin/env bash
# Installs what rmq's tests and demo need on Debian 12 (Rust assumed present):
# - redis-server, plus redis-cli and redis-benchmark (package redis-tools);
# - faketime (the chaos suite's clock-skew scenario);
# - promtool (package prometheus: the metrics tests check the scrape with
#   it; no Prometheus server is started);
# - Node.js, npm and Chromium (Debian's packages) and the dashboard tests'
#   npm packages (playwright-core, from crates/rmq-serve/e2e/package-lock.json;
#   it drives Debian's Chromium and never downloads a browser);
# - schemathesis (PyPI; the OpenAPI property tests), in a virtualenv under
#   target/ so nothing is installed into the system's Python;
# - Go (package golang-go: the Go client and its example use the standard
#   library only, so nothing is fetched from a module proxy);
# - the TypeScript client's build tools (typescript and @types/node from
#   npm, as its package-lock.json pins them);
# - the Python client's test tools (httpx, pytest and setuptools, which
#   builds it as pip install does, from PyPI), in their
#   own virtualenv under target/pyclient;
# - valgrind (rmq-bench --instructions counts Redis instructions with
#   callgrind; its smoke test runs it);
# - nats-server and rabbitmq-server (the forwarder's tests start their own
#   servers on free loopback ports; the machine's brokers are not used);
# - ZooKeeper 3.8 and a Java runtime (package zookeeper: the ZooKeeper
#   coordinator's tests run /usr/share/java/zookeeper.jar as their own
#   standalone servers and ensembles; no ZooKeeper service is started);
# - PostgreSQL (package postgresql: the message store's tests run initdb
#   and postgres from /usr/lib/postgresql/*/bin in temp dirs on free
#   loopback ports; the machine's own PostgreSQL is not used).
# With --demo, only what the demo needs (redis-server).
# Idempotent and silent when all is present. It never starts a service:
# tests run their own throwaway servers on free loopback ports.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

demo=false
[[ ${1:-} == --demo ]] && demo=true

if $demo; then
    tools=(redis-server redis-cli)
else
    tools=(redis-server redis-cli redis-benchmark faketime promtool node npm chromium valgrind callgrind_control
           nats-server rabbitmq-server go)
    # Debian's python3 makes virtualenvs only with python3-venv.
    python3 -c 'import ensurepip, venv' 2>/dev/null || tools+=(python3-venv-missing)
    # ZooKeeper has no command on the PATH: its jar (and java) tell.
    [[ -f /usr/share/java/zookeeper.jar ]] && command -v java >/dev/null 2>&1 \
        || tools+=(zookeeper-missing)
    # PostgreSQL's server programs are not on the PATH either.
    compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || tools+=(postgresql-missing)
fi

# The package that brings each tool. Only missing tools' packages are
# installed: a machine whose Node.js comes from elsewhere (NodeSource's
# nodejs bundles npm and conflicts with Debian's npm) keeps it.
declare -A package_of=(
    [redis-server]=redis-server [redis-cli]=redis-tools [redis-benchmark]=redis-tools
    [faketime]=faketime [promtool]=prometheus [node]=nodejs [npm]=npm
    [chromium]=chromium [python3-venv-missing]=python3-venv
    [valgrind]=valgrind [callgrind_control]=valgrind
    [nats-server]=nats-server [rabbitmq-server]=rabbitmq-server
    [zookeeper-missing]=zookeeper [postgresql-missing]=postgresql [go]=golang-go
)
missing=()
for tool in "${tools[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
packages=()
for tool in "${missing[@]}"; do
    p=${package_of[$tool]}
    [[ " ${packages[*]} " == *" $p "* ]] || packages+=("$p")
done

if [[ ${#missing[@]} -gt 0 ]]; then
    echo "ensure-deps: missing ${missing[*]}; installing ${packages[*]}" >&2
    if [[ $(id -u) -eq 0 ]]; then
        sudo=()
    elif command -v sudo >/dev/null 2>&1; then
        sudo=(sudo)
    else
        echo "ensure-deps: not root and no sudo; install ${packages[*]} by hand" >&2
        exit 1
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "ensure-deps: apt-get not found; install ${packages[*]} by hand" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y -qq "${packages[@]}" >/dev/null
    for tool in "${tools[@]}"; do
        [[ $tool == python3-venv-missing || $tool == zookeeper-missing || $tool == postgresql-missing ]] && continue
        if ! command -v "$tool" >/dev/null 2>&1; then
            echo "ensure-deps: $tool still missing after install" >&2
            exit 1
        fi
    done
    if [[ ! -f /usr/share/java/zookeeper.jar ]] && ! $demo; then
        echo "ensure-deps: /usr/share/java/zookeeper.jar still missing after install" >&2
        exit 1
    fi
    echo "ensure-deps: $(redis-server --version)" >&2
fi

$demo && exit 0

e2e=crates/rmq-serve/e2e
if [[ ! -d $e2e/node_modules/playwright-core ]]; then
    echo "ensure-deps: installing the dashboard tests' npm packages" >&2
    npm ci --prefix "$e2e" --no-audit --no-fund --loglevel=error >/dev/null
fi

ts=clients/typescript
if [[ ! -d $ts/node_modules/typescript ]]; then
    echo "ensure-deps: installing the TypeScript client's build tools (typescript, @types/node)" >&2
    npm ci --prefix "$ts" --no-audit --no-fund --loglevel=error >/dev/null
fi

venv=target/schemathesis
if [[ ! -x $venv/bin/schemathesis ]]; then
    echo "ensure-deps: installing schemathesis into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==4.32.5" >&2
fi

venv=target/pyclient
if [[ ! -x $venv/bin/pytest ]]; then
    echo "ensure-deps: installing the Python client's test tools into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "httpx==0.28.1" "pytest==9.2.0" \
        "setuptools==80.9.0" >&2
fi
