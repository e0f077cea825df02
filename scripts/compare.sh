#!/usr/bin/env bash
# Side-by-side comparison of rmq with BullMQ (Node) and bullmq-official (Rust),
# plus Redis' own ceilings for the bare operations rmq's scripts perform.
# Not part of CI: a manual, one-command benchmark.
#
#   scripts/compare.sh                    # 3 rounds, ~3-4 min per round on 2 cores
#   ROUNDS=1 RMQ_SCALE=0.1 scripts/compare.sh
#
# What it does:
#   1. starts ONE throwaway redis-server on a free loopback port (never 6379),
#      --save "" --appendonly no, in a temp dir; stopped by PID on exit;
#   2. on first use installs the peers into .bench/ (git-ignored):
#      .bench/bullmq      <- $SHARED_DIR/anchors/bullmq/{package.json,package-lock.json,*.js}, npm ci
#      .bench/rust-peers  <- $SHARED_DIR/anchors/rust-peers/{Cargo.toml,Cargo.lock,src/},
#                            cargo build --release (target dir .bench/rust-peers/target, ~3 min)
#   3. ROUNDS rounds, one program at a time (the peers FLUSHALL the server, so
#      nothing runs concurrently): rmq-bench (send_batch, consume, latency),
#      BullMQ node scripts (produce plain/priority/delay, consume c=1/10/50,
#      latency delayed), bullmq-rs-bench (produce, consume c=1/10/50, delayed;
#      1 rep), redis-benchmark ceilings (ZADD / ZPOPMAX / EVALSHA return 1 /
#      EVALSHA ZPOPMAX+HSET, all -P 64);
#      (rmq-bench's --only matches by substring, so "consume" also runs its
#      consume_mode cases; the summary ignores them);
#   4. writes everything to .bench/results/<UTC timestamp>/ and prints the
#      markdown table of scripts/compare_summary.py.
#
# Environment:
#   ROUNDS=3            rounds
#   RMQ_SCALE=0.25      rmq-bench --scale; the peers get the same message counts
#                       (200000*scale for send/consume, 2000*scale for latency)
#   CEILING_SCALE=1     multiplies the redis-benchmark request counts
#   PEERS="node rust"   which peers to run (subset of: node rust)
#   SKIP_CEILINGS=1     do not run redis-benchmark
#   NO_BUILD=1          use target/release/rmq-bench as it is (default: cargo build it)
#   WAIT_QUIET=<s>      before each step wait up to s seconds for the machine to be
#                       quiet (others' builds/tests skew a 2-core box); default 0.
#                       The summary shows how much CPU others used in each step.
#   SHARED_DIR          where anchors/ lives (default: <parent of repo>/shared)
#   REDIS_SERVER, REDIS_CLI, REDIS_BENCHMARK   binaries (default: on PATH)
# A peer that fails to install or run is reported (in the output and in
# status.txt of the result dir) and the summary is made from what there is.
set -euo pipefail

# The exact command, with the settings given in the environment, for the record.
SET_ENV=""
for v in ROUNDS RMQ_SCALE CEILING_SCALE PEERS SKIP_CEILINGS NO_BUILD WAIT_QUIET SHARED_DIR REDIS_SERVER REDIS_CLI REDIS_BENCHMARK; do
  if [[ -n "${!v+x}" ]]; then SET_ENV+="$v=$(printf '%q' "${!v}") "; fi
done
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SHARED_DIR=${SHARED_DIR:-}
if [[ -z "$SHARED_DIR" ]]; then
  SHARED_DIR="$(dirname "$REPO")/shared"
fi
ANCHORS="$SHARED_DIR/anchors"
ROUNDS=${ROUNDS:-3}
RMQ_SCALE=${RMQ_SCALE:-0.25}
CEILING_SCALE=${CEILING_SCALE:-1}
PEERS=${PEERS:-node rust}
REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}
REDIS_BENCHMARK=${REDIS_BENCHMARK:-redis-benchmark}
BENCH="$REPO/.bench"
CMDLINE="$SET_ENV$0${*:+ $*}"

case "${1:-}" in
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS must be a positive integer" >&2; exit 2; }

log() { echo "[compare $(date -u +%H:%M:%S)] $*" >&2; }

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT="$BENCH/results/$STAMP"
mkdir -p "$OUT"
STATUS="$OUT/status.txt"
: >"$STATUS"
# status lines: "<OK|WARN|FAIL|SKIP> <component> <free text>", read by compare_summary.py
status() {
  echo "$*" >>"$STATUS"
  case $1 in FAIL) log "PROBLEM: ${*:2}" ;; WARN) log "WARNING: ${*:2}" ;; *) log "${*:2}" ;; esac
}

grep -qxF '/.bench/' "$REPO/.gitignore" 2>/dev/null || grep -qxF '.bench/' "$REPO/.gitignore" 2>/dev/null ||
  log "warning: .bench/ is not in $REPO/.gitignore"

# Message counts, the same for rmq-bench and the peers.
N=$(awk -v s="$RMQ_SCALE" 'BEGIN{n=int(200000*s+0.5); if(n<1)n=1; print n}')
LAT_N=$(awk -v s="$RMQ_SCALE" 'BEGIN{n=int(2000*s+0.5); if(n<1)n=1; print n}')
LAT_SPREAD_MS=2000 # rmq-bench's latency spread (non-smoke)
cn() { awk -v n="$1" -v s="$CEILING_SCALE" 'BEGIN{n=int(n*s); if(n<1000)n=1000; print n}'; }

# ------------------------------------------------------------------ redis
for b in "$REDIS_SERVER" "$REDIS_CLI"; do
  command -v "$b" >/dev/null || { echo "$b not found (apt-get install redis-server redis-tools)" >&2; exit 1; }
done
RDIR=$(mktemp -d /tmp/rmq-compare-redis.XXXXXX)
RPID=""
cleanup() {
  if [[ -n "$RPID" ]] && kill -0 "$RPID" 2>/dev/null; then
    kill "$RPID" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$RPID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$RPID" 2>/dev/null || true
  fi
  rm -rf "$RDIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}
PORT=""
for _ in 1 2 3 4 5; do
  p=$(free_port)
  [[ "$p" == 6379 ]] && continue
  "$REDIS_SERVER" --bind 127.0.0.1 --port "$p" --save "" --appendonly no --dir "$RDIR" \
    --logfile "$RDIR/redis.log" --daemonize no &
  RPID=$!
  for _ in $(seq 100); do
    # answering, and it is the server we started (not something that took the port)
    if [[ "$("$REDIS_CLI" -p "$p" info server 2>/dev/null | sed -n 's/^process_id://p' | tr -d '\r')" == "$RPID" ]]; then
      PORT=$p; break
    fi
    kill -0 "$RPID" 2>/dev/null || break
    sleep 0.05
  done
  [[ -n "$PORT" ]] && break
  kill "$RPID" 2>/dev/null || true
  wait "$RPID" 2>/dev/null || true
  RPID=""
done
[[ -n "$PORT" ]] || { echo "could not start redis-server (log: $(tail -3 "$RDIR/redis.log" 2>/dev/null))" >&2; exit 1; }
URL="redis://127.0.0.1:$PORT"
R=("$REDIS_CLI" -h 127.0.0.1 -p "$PORT")
REDIS_VERSION=$("${R[@]}" info server | sed -n 's/^redis_version://p' | tr -d '\r')
log "redis-server $REDIS_VERSION pid $RPID on $URL (dir $RDIR)"

# ------------------------------------------------------------------ meta
CMDLINE="$CMDLINE" REPO="$REPO" STAMP="$STAMP" ROUNDS="$ROUNDS" RMQ_SCALE="$RMQ_SCALE" \
  CEILING_SCALE="$CEILING_SCALE" PEERS="$PEERS" REDIS_VERSION="$REDIS_VERSION" \
  N="$N" LAT_N="$LAT_N" LAT_SPREAD_MS="$LAT_SPREAD_MS" python3 - "$OUT/meta.json" <<'PY'
import json, os, subprocess, sys
e = os.environ
def git(*a):
    try:
        return subprocess.run(["git", "-C", e["REPO"], *a], capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""
json.dump({
  "date_utc": e["STAMP"],
  "command": e["CMDLINE"],
  "settings": {k: e.get(k, "") for k in ("ROUNDS", "RMQ_SCALE", "CEILING_SCALE", "PEERS", "SKIP_CEILINGS", "WAIT_QUIET")},
  "nproc": os.cpu_count(),
  "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
  "redis_version": e["REDIS_VERSION"],
  "loadavg_start": open("/proc/loadavg").read().split()[:3],
  "n": int(e["N"]), "latency_n": int(e["LAT_N"]), "latency_spread_ms": int(e["LAT_SPREAD_MS"]),
  "git": git("rev-parse", "--short", "HEAD") + (" (dirty)" if git("status", "--porcelain") else ""),
}, open(sys.argv[1], "w"), indent=1)
PY

# ------------------------------------------------------------------ builds / installs
RMQ_BENCH="$REPO/target/release/rmq-bench"
HAVE_RMQ=1
if [[ -z "${NO_BUILD:-}" ]]; then
  log "cargo build --release -p rmq-bench"
  if ! (cd "$REPO" && cargo build --release -p rmq-bench) >"$OUT/rmq-build.log" 2>&1; then
    if [[ -x "$RMQ_BENCH" ]]; then
      status FAIL rmq "build of rmq-bench failed (see rmq-build.log); using the existing, possibly stale, $RMQ_BENCH"
    else
      status FAIL rmq "build of rmq-bench failed (see rmq-build.log); rmq not measured"
      HAVE_RMQ=0
    fi
  fi
elif [[ ! -x "$RMQ_BENCH" ]]; then
  status FAIL rmq "NO_BUILD set but $RMQ_BENCH does not exist; rmq not measured"
  HAVE_RMQ=0
fi

# src_hash DIR FILES...: one hash of the listed files / dirs (names and contents)
src_hash() {
  local dir=$1; shift
  (cd "$dir" && find "$@" -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
}

HAVE_NODE=0
install_node() { # prints one line: what happened, or why it failed (return 1)
  local src="$ANCHORS/bullmq" dst="$BENCH/bullmq" f h ver
  command -v node >/dev/null && command -v npm >/dev/null || { echo "node/npm not on PATH"; return 1; }
  if [[ ! -f "$src/package.json" || ! -f "$src/package-lock.json" ]]; then
    if [[ -f "$dst/node_modules/bullmq/package.json" ]]; then
      echo "no $src/package.json; fell back to the earlier install in $dst ($(sed 's/.*; bullmq/bullmq/' "$dst/.install-note" 2>/dev/null))"
      return 0
    fi
    echo "no $src/package.json / package-lock.json"; return 1
  fi
  local files=(package.json package-lock.json)
  for f in "$src"/*.js; do files+=("$(basename "$f")"); done
  h=$(src_hash "$src" "${files[@]}")
  if [[ -f "$dst/node_modules/bullmq/package.json" && "$(cat "$dst/.source.sha256" 2>/dev/null)" == "$h" ]]; then
    echo "already installed: $(cat "$dst/.install-note" 2>/dev/null)"
    return 0
  fi
  rm -rf "$dst" && mkdir -p "$dst"
  for f in "${files[@]}"; do cp -p "$src/$f" "$dst/$f" || return 1; done
  local note
  if (cd "$dst" && npm ci --no-audit --no-fund) >"$OUT/node-install.log" 2>&1; then
    note="npm ci"
  else
    # npm ci refuses a lock file that is out of sync with package.json (the
    # shared one lacks the other platforms' optional msgpackr-extract entries,
    # which npm >= 10 wants). npm install with the same lock keeps every
    # version it pins and only adds the missing entries.
    local why
    why=$( { grep -m1 'npm error `npm ci`' "$OUT/node-install.log" || grep -m1 'npm error code' "$OUT/node-install.log" || echo "see node-install.log"; } |
      sed 's/^npm error //' | cut -c1-120)
    local missing
    missing=$(grep -c 'npm error Missing:' "$OUT/node-install.log" || true)
    ((missing > 0)) && why="$why; $missing packages missing from the lock file"
    cp -p "$src/package-lock.json" "$dst/package-lock.json"
    if (cd "$dst" && npm install --no-audit --no-fund) >>"$OUT/node-install.log" 2>&1; then
      note="npm ci failed ($why); fell back to npm install with the shared lock file"
    else
      echo "npm ci and npm install failed (see node-install.log: $why)"; return 1
    fi
  fi
  ver=$(cd "$dst" && node -p "require('bullmq/package.json').version" 2>/dev/null) || { echo "bullmq not loadable after install"; return 1; }
  local locked
  locked=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["packages"]["node_modules/bullmq"]["version"])' "$src/package-lock.json" 2>/dev/null || echo "?")
  note="$note; bullmq $ver (lock file: $locked)"
  [[ "$ver" == "$locked" ]] || note="$note -- VERSION DIFFERS FROM THE LOCK FILE"
  echo "$note" >"$dst/.install-note"
  echo "$h" >"$dst/.source.sha256"
  echo "installed: $note"
}

HAVE_RUST=0
RS_BIN="$BENCH/rust-peers/target/release/bullmq-rs-bench"
install_rust() { # prints one line: what happened, or why it failed (return 1)
  local src="$ANCHORS/rust-peers" dst="$BENCH/rust-peers" h
  command -v cargo >/dev/null || { echo "cargo not on PATH"; return 1; }
  if [[ ! -f "$src/Cargo.toml" || ! -f "$src/Cargo.lock" || ! -d "$src/src" ]]; then
    if [[ -x "$RS_BIN" ]]; then
      echo "no $src/Cargo.toml; fell back to the earlier build $RS_BIN"
      return 0
    fi
    echo "no $src/Cargo.toml / Cargo.lock / src"; return 1
  fi
  h=$(src_hash "$src" Cargo.toml Cargo.lock src)
  if [[ "$(cat "$dst/.source.sha256" 2>/dev/null)" != "$h" ]]; then
    mkdir -p "$dst"
    rm -rf "$dst/src" "$dst/.source.sha256"
    cp -p "$src/Cargo.lock" "$dst/" && cp -rp "$src/src" "$dst/src" || return 1
    # The copy lives inside this repo's workspace: give it its own [workspace]
    # table so that cargo does not attach it to ours.
    { cat "$src/Cargo.toml"; printf '\n[workspace]\n'; } >"$dst/Cargo.toml"
    [[ -f "$src/README.md" ]] && cp -p "$src/README.md" "$dst/"
  fi
  log "cargo build --release in .bench/rust-peers (~3 min the first time)"
  (cd "$dst" && CARGO_TARGET_DIR="$dst/target" cargo build --release --locked --bin bullmq-rs-bench) \
    >"$OUT/rust-install.log" 2>&1 ||
    { echo "cargo build failed (see rust-install.log: $(grep -m2 -E '^error' "$OUT/rust-install.log" | tr '\n' ' ' | cut -c1-200))"; return 1; }
  [[ -x "$RS_BIN" ]] || { echo "no $RS_BIN after the build"; return 1; }
  echo "$h" >"$dst/.source.sha256"
  echo "built $RS_BIN ($(grep -m1 -A1 'name = "bullmq-official"' "$dst/Cargo.lock" | sed -n 's/^version = //p' | tr -d '"'))"
}

for peer in $PEERS; do
  case $peer in
    node)
      log "installing BullMQ (node) into .bench/bullmq"
      if msg=$(install_node); then
        HAVE_NODE=1
        if [[ "$msg" == *"fell back"* || "$msg" == *DIFFERS* ]]; then status WARN node "BullMQ (node): $msg"
        else status OK node "BullMQ (node): $msg"; fi
      else status FAIL node "BullMQ (node) install failed: $msg"; fi ;;
    rust)
      log "installing bullmq-official (rust) into .bench/rust-peers"
      if msg=$(install_rust); then
        HAVE_RUST=1
        if [[ "$msg" == *"fell back"* ]]; then status WARN rust "bullmq-official (rust): $msg"
        else status OK rust "bullmq-official (rust): $msg"; fi
      else status FAIL rust "bullmq-official (rust) install failed: $msg"; fi ;;
    *) log "unknown peer '$peer' in PEERS (known: node rust)" ;;
  esac
done
[[ " $PEERS " == *" node "* ]] || status SKIP node "BullMQ (node) not in PEERS"
[[ " $PEERS " == *" rust "* ]] || status SKIP rust "bullmq-official (rust) not in PEERS"

HAVE_CEIL=0
if [[ -n "${SKIP_CEILINGS:-}" ]]; then
  status SKIP ceilings "redis-benchmark skipped (SKIP_CEILINGS)"
elif command -v "$REDIS_BENCHMARK" >/dev/null; then
  HAVE_CEIL=1
else
  status FAIL ceilings "redis-benchmark not found (apt-get install redis-tools); no ceilings"
fi

# ------------------------------------------------------------------ runners
# Each runner appends JSON lines to its own file in $OUT; stderr goes to a log.
# A failure is recorded in status.txt and the run goes on.

run_rmq() { # round
  local r=$1 rc=0
  log "round $r: rmq-bench --scale $RMQ_SCALE --only send_batch,consume,latency"
  timeout 1200 "$RMQ_BENCH" --redis "$URL" --scale "$RMQ_SCALE" --only send_batch,consume,latency \
    >"$OUT/rmq-r$r.jsonl" 2>"$OUT/rmq-r$r.stderr" || rc=$?
  if ((rc != 0)); then
    status FAIL rmq "round $r: rmq-bench exited $rc ($(grep -m1 -E 'ERROR|error|panicked' "$OUT/rmq-r$r.stderr" | cut -c1-200))"
  fi
}

node_one() { # round args...
  local r=$1 rc=0 line; shift
  local err="$OUT/.node-step.stderr"
  line=$(cd "$BENCH/bullmq" && REDIS_PORT=$PORT timeout 300 node "$@" 2>"$err") || rc=$?
  { echo "+ node $*"; cat "$err"; } >>"$OUT/bullmq-node-r$r.stderr"
  if ((rc != 0)) || [[ -z "$line" ]]; then
    local why
    why=$(grep -m1 -E 'Error|error' "$err" || tail -1 "$err")
    ((rc == 124)) && why="timed out after 300 s"
    status FAIL node "round $r: node $* exited $rc (${why:0:200})"
    rm -f "$err"
    return 0
  fi
  rm -f "$err"
  # tag the JSON line with the round
  if ! printf '%s\n' "$line" | python3 -c 'import json,sys
n = 0
for l in sys.stdin:
    l = l.strip()
    if l.startswith("{"):
        d = json.loads(l); d["round"] = int(sys.argv[1]); print(json.dumps(d)); n += 1
sys.exit(0 if n else 1)' "$r" >>"$OUT/bullmq-node-r$r.jsonl"; then
    status FAIL node "round $r: node $* printed no JSON line: $(printf '%s' "$line" | head -c 200)"
  fi
}

run_node() { # round
  local r=$1 m c
  log "round $r: BullMQ node produce/consume/latency (n=$N, latency n=$LAT_N)"
  for m in plain priority delay; do node_one "$r" produce.js --mode=$m --n="$N" --batch=1000; done
  for c in 1 10 50; do node_one "$r" consume.js --n="$N" --concurrency=$c; done
  node_one "$r" latency.js --mode=delayed --n="$LAT_N" --spread-ms="$LAT_SPREAD_MS"
}

run_rust() { # round
  local r=$1 rc=0
  log "round $r: bullmq-rs-bench produce,consume,delayed (1 rep)"
  NO_COLOR=1 timeout 900 "$RS_BIN" --reps=1 --scenarios=produce,consume,delayed \
    --produce-n="$N" --consume-n="$N" --concurrency=1,10,50 \
    --delayed-n="$LAT_N" --delayed-spread-ms="$LAT_SPREAD_MS" --batch=1000 "$URL" \
    >"$OUT/bullmq-rs-r$r.jsonl" 2>"$OUT/bullmq-rs-r$r.stderr" || rc=$?
  if ((rc != 0)); then
    status FAIL rust "round $r: bullmq-rs-bench exited $rc ($(tail -1 "$OUT/bullmq-rs-r$r.stderr" | cut -c1-200))"
  fi
  if grep -q '"error"' "$OUT/bullmq-rs-r$r.jsonl" 2>/dev/null; then
    status FAIL rust "round $r: bullmq-rs-bench reported errors: $(grep -m1 '"error"' "$OUT/bullmq-rs-r$r.jsonl" | cut -c1-200)"
  fi
}

# Fill KEYS[1] with ARGV[2] members job:<ARGV[1]+i>, 1000 per ZADD (as anchors/redis-limits.sh).
FILL_LUA="local b=tonumber(ARGV[1]) local n=tonumber(ARGV[2]) local t={} local k=0
for i=b+1,b+n do t[#t+1]=i t[#t+1]='job:'..i k=k+1
  if k==1000 then redis.call('ZADD',KEYS[1],unpack(t)) t={} k=0 end end
if k>0 then redis.call('ZADD',KEYS[1],unpack(t)) end
return redis.call('ZCARD',KEYS[1])"
fill() { # key total
  local key=$1 total=$2 b=0 m
  while ((b < total)); do
    m=$((total - b < 500000 ? total - b : 500000))
    "${R[@]}" eval "$FILL_LUA" 1 "$key" "$b" "$m" >/dev/null
    b=$((b + m))
  done
}
TRIVIAL_LUA="return 1"
# One-message move, the core of a pop: take the best member, record it in flight.
MOVE_LUA="local r=redis.call('ZPOPMAX',KEYS[1])
if #r==0 then return false end
redis.call('HSET',KEYS[2],r[1],ARGV[1])
return r[1]"

ceiling_one() { # round test n cardkey -- redis-benchmark command...
  local r=$1 test=$2 n=$3 cardkey=$4 line t0 t1 card=""; shift 5
  t0=$(date +%s.%N)
  line=$(timeout 300 "$REDIS_BENCHMARK" -h 127.0.0.1 -p "$PORT" -c 50 -P 64 -n "$n" --csv "$@" 2>>"$OUT/redis-benchmark-r$r.stderr" |
    tr '\r' '\n' | grep -v '^"test"' | grep -v '^$' | tail -1) || true
  t1=$(date +%s.%N)
  [[ -n "$cardkey" ]] && card=$("${R[@]}" zcard "$cardkey")
  if [[ -z "$line" ]]; then
    status FAIL ceilings "round $r: redis-benchmark $test gave no result"
    return 0
  fi
  # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
  python3 - "$r" "$test" "$n" "$line" "$t0" "$t1" "$card" >>"$OUT/redis-benchmark-r$r.jsonl" <<'EOF'
import csv, json, sys
r, test, n, line, t0, t1, card = sys.argv[1:]
f = next(csv.reader([line]))
print(json.dumps({"round": int(r), "test": test, "pipeline": 64, "clients": 50, "n": int(n),
                  "rps": float(f[1]), "p50_ms": float(f[4]), "p99_ms": float(f[6]),
                  "secs": round(float(t1) - float(t0), 2), "zcard_after": int(card) if card else None}))
EOF
}

run_ceilings() { # round
  local r=$1 n sha
  log "round $r: redis-benchmark ceilings (-c 50 -P 64)"
  n=$(cn 1000000)
  "${R[@]}" flushall >/dev/null
  ceiling_one "$r" zadd "$n" zq -- -r 100000000 ZADD zq __rand_int__ m:__rand_int__
  n=$(cn 2000000)
  "${R[@]}" flushall >/dev/null
  fill zq $((n + 500000))
  ceiling_one "$r" zpopmax "$n" zq -- ZPOPMAX zq
  n=$(cn 2000000)
  "${R[@]}" flushall >/dev/null
  sha=$("${R[@]}" script load "$TRIVIAL_LUA")
  ceiling_one "$r" evalsha_return1 "$n" "" -- EVALSHA "$sha" 0
  n=$(cn 1000000)
  "${R[@]}" flushall >/dev/null
  sha=$("${R[@]}" script load "$MOVE_LUA")
  fill src $((n + 500000))
  ceiling_one "$r" evalsha_zpopmax_hset "$n" src -- -r 1000000000 EVALSHA "$sha" 2 src inflight __rand_int__
  "${R[@]}" flushall >/dev/null
}

# ------------------------------------------------------------------ rounds
log "results: $OUT  (rounds $ROUNDS, n $N, latency n $LAT_N)"
# CPU used by processes that are not ours during each step (on 2 cores a
# build or tests running beside the benchmarks skew them; the summary shows it).
# ours = this script and its waited-for children + the redis-server.
cpu_snap() {
  python3 - "$$" "$RPID" <<'PY'
import sys, time
def proc(pid, kids):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return sum(int(x) for x in (f[11:15] if kids else f[11:13]))  # utime stime [cutime cstime]
c = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
busy = c[0] + c[1] + c[2] + c[5] + c[6] + c[7]
print(f"{time.time():.3f} {busy} {proc(sys.argv[1], True) + proc(sys.argv[2], False)}")
PY
}
STEP_SNAP=""
# With WAIT_QUIET=<s>, wait up to s seconds before each step until the machine
# has been quiet (< 0.25 cores busy) for two 5-second windows in a row.
wait_quiet() {
  local limit=${WAIT_QUIET:-0} waited=0 quiet=0 a b
  ((limit > 0)) || return 0
  while ((waited < limit)); do
    a=$(cpu_snap); sleep 5; b=$(cpu_snap); waited=$((waited + 5))
    if awk -v a="$a" -v b="$b" -v hz="$(getconf CLK_TCK)" 'BEGIN{split(a,x," "); split(b,y," ");
         exit !((y[2]-x[2])/hz/(y[1]-x[1]) < 0.25)}'; then
      quiet=$((quiet + 1)); ((quiet >= 2)) && return 0
    else
      ((quiet == 0 && waited == 5)) && log "waiting for a quiet machine (up to ${limit}s)"
      quiet=0
    fi
  done
  log "machine still busy after ${limit}s; going on"
}
step_begin() { wait_quiet; STEP_SNAP=$(cpu_snap); }
step_end() { # round step -> cpu.txt: round step secs all_cores_busy others_cores_busy
  local now
  now=$(cpu_snap)
  awk -v r="$1" -v s="$2" -v a="$STEP_SNAP" -v b="$now" -v hz="$(getconf CLK_TCK)" 'BEGIN{
    split(a, x, " "); split(b, y, " "); wall = y[1] - x[1]; if (wall <= 0) wall = 1e-9
    printf "%s %s %.1f %.2f %.2f\n", r, s, wall, (y[2]-x[2])/hz/wall, ((y[2]-x[2])-(y[3]-x[3]))/hz/wall }' >>"$OUT/cpu.txt"
}
for r in $(seq 1 "$ROUNDS"); do
  # (a runner's own failures are recorded by it; "||" also keeps a surprise
  # in one runner from ending the whole comparison)
  if ((HAVE_RMQ)); then step_begin; run_rmq "$r" || status FAIL rmq "round $r: runner error"; step_end "$r" rmq; fi
  if ((HAVE_NODE)); then step_begin; run_node "$r" || status FAIL node "round $r: runner error"; step_end "$r" node; fi
  if ((HAVE_RUST)); then step_begin; run_rust "$r" || status FAIL rust "round $r: runner error"; step_end "$r" rust; fi
  if ((HAVE_CEIL)); then step_begin; run_ceilings "$r" || status FAIL ceilings "round $r: runner error"; step_end "$r" ceilings; fi
  if ! "${R[@]}" ping >/dev/null 2>&1; then
    status FAIL redis "redis-server stopped answering after round $r; stopping"
    break
  fi
done

# ------------------------------------------------------------------ summary
python3 "$REPO/scripts/compare_summary.py" "$OUT" | tee "$OUT/summary.md"
log "results in $OUT (summary.md)"
if grep -q '^FAIL' "$STATUS"; then
  log "some parts failed; see 'Problems' above and $STATUS"
fi
