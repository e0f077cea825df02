#!/usr/bin/env python3
"""Markdown summary of one scripts/compare.sh result directory.

    python3 scripts/compare_summary.py .bench/results/<timestamp>

Reads (any may be missing; whatever is there is summarised):
  meta.json                 date, command, machine, counts
  status.txt                "<OK|FAIL|SKIP> <component> <text>" lines
  rmq-r<k>.jsonl            rmq-bench lines (scenario, kind, params, msgs_per_sec, lateness_*_ms, ...)
  bullmq-node-r<k>.jsonl    anchors/bullmq produce.js / consume.js / latency.js lines
  bullmq-rs-r<k>.jsonl      bullmq-rs-bench run lines (summary lines are ignored)
  redis-benchmark-r<k>.jsonl  one line per ceiling test
Prints the medians over rounds. Stdlib only.
"""

import glob
import json
import os
import re
import statistics
import sys


def load(dirpath, prefix):
    """JSON objects of <prefix>-r<k>.jsonl, each tagged with its round k."""
    rows = []
    for path in sorted(glob.glob(os.path.join(dirpath, prefix + "-r*.jsonl"))):
        m = re.search(r"-r(\d+)\.jsonl$", path)
        rnd = int(m.group(1)) if m else 0
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                if isinstance(d, dict):
                    d.setdefault("round", rnd)
                    rows.append(d)
    return rows


def num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


class Series:
    """Values of one measurement over the rounds."""

    def __init__(self, values):
        self.values = [v for v in values if v is not None]

    def median(self):
        return statistics.median(self.values) if self.values else None


def fmt(v, unit):
    if v is None:
        return "—"
    if unit == "ms":
        return f"{v:.1f}" if v < 100 else f"{v:.0f}"
    return f"{v:,.0f}"


def cell(series, unit):
    m = series.median()
    if m is None:
        return "—"
    s = fmt(m, unit)
    if len(series.values) > 1:
        s += f" ({fmt(min(series.values), unit)}–{fmt(max(series.values), unit)})"
    return s


def ratio(a, b):
    if a is None or b is None or b == 0:
        return "—"
    return f"{a / b:.2f}"


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    d = sys.argv[1]
    meta = {}
    try:
        with open(os.path.join(d, "meta.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        pass
    status = []
    try:
        with open(os.path.join(d, "status.txt")) as f:
            status = [l.rstrip("\n").split(" ", 2) for l in f if l.strip()]
    except OSError:
        pass

    rmq = load(d, "rmq")
    node = load(d, "bullmq-node")
    rs = [r for r in load(d, "bullmq-rs") if not r.get("summary")]
    ceil = load(d, "redis-benchmark")
    problems = [f"**{s[1]}**: {s[2] if len(s) > 2 else ''}" for s in status if s[0] == "FAIL"]
    skipped = [f"{s[1]}: {s[2] if len(s) > 2 else ''}" for s in status if s[0] == "SKIP"]
    warnings = [f"{s[1]}: {s[2] if len(s) > 2 else ''}" for s in status if s[0] == "WARN"]

    # ---------------------------------------------------------------- selectors
    def p(row, key):
        params = row.get("params")
        return params.get(key) if isinstance(params, dict) else None

    def rmq_vals(pred, field):
        out = []
        for r in rmq:
            if "error" in r or not pred(r):
                continue
            v = r
            for k in field:
                v = v.get(k) if isinstance(v, dict) else None
            out.append(num(v))
        return Series(out)

    def rmq_send(kind):
        return rmq_vals(lambda r: r.get("scenario") == "send_batch" and r.get("kind") == kind
                        and p(r, "batch") == 1000, ["msgs_per_sec"])

    def rmq_consume(c, b):
        return rmq_vals(lambda r: r.get("scenario") == "consume" and p(r, "concurrency") == c
                        and p(r, "batch") == b, ["msgs_per_sec"])

    def rmq_lat(bg, q):
        return rmq_vals(lambda r: r.get("scenario") == "latency" and p(r, "background") is bg,
                        ["lateness_local_ms", q])

    def node_vals(bench, pred, field):
        return Series([num(r.get(field)) for r in node
                       if r.get("bench") == bench and pred(r) and not r.get("timed_out")])

    def rs_vals(scenario, pred, field):
        return Series([num(r.get(field)) for r in rs
                       if r.get("scenario") == scenario and "error" not in r and pred(r)])

    def ceiling(test):
        return Series([num(r.get("rps")) for r in ceil if r.get("test") == test]).median()

    none = Series([])
    zadd, zpop = ceiling("zadd"), ceiling("zpopmax")
    ev1, evmove = ceiling("evalsha_return1"), ceiling("evalsha_zpopmax_hset")

    # ---------------------------------------------------------------- rows
    # (label, rmq case, node case, rust case, unit, rmq, node, rust, ceilings)
    # ceilings: list of (name, rps)
    send_ceil = [("ZADD -P64", zadd)]
    cons_ceil = [("EVALSHA `return 1` -P64", ev1), ("EVALSHA ZPOPMAX+HSET -P64", evmove)]
    rows = [
        ("batch send, priority", "send_batch priority, batch 1000",
         "produce.js --mode=priority (addBulk 1000)", "— (no priority mode)", "msgs/s",
         rmq_send("priority"),
         node_vals("bullmq.produce", lambda r: r.get("mode") == "priority", "jobs_per_s"), none,
         send_ceil),
        ("batch send, timed", "send_batch fixed-time, batch 1000 (due now)",
         "produce.js --mode=delay (delay 1–60 s)", "— (no delay mode)", "msgs/s",
         rmq_send("fixed-time"),
         node_vals("bullmq.produce", lambda r: r.get("mode") == "delay", "jobs_per_s"), none,
         send_ceil),
        ("batch send, FIFO-like", "send_batch range-merge, batch 1000 (range 1 ms)",
         "produce.js --mode=plain", "produce (plain add_bulk 1000)", "msgs/s",
         rmq_send("range-merge"),
         node_vals("bullmq.produce", lambda r: r.get("mode") == "plain", "jobs_per_s"),
         rs_vals("produce", lambda r: True, "jobs_per_s"),
         send_ceil),
    ]
    for (c, b, pc, label) in [(1, 1, 1, "consume, concurrency 1"),
                              (16, 16, 10, "consume, concurrency ~16 vs 10"),
                              (128, 64, 50, "consume, concurrency ~128 vs 50"),
                              (128, 1, 50, "consume, c 128 unbatched vs 50")]:
        rows.append((label, f"consume priority c={c} batch={b}", f"consume.js --concurrency={pc}",
                     f"consume c={pc}", "msgs/s", rmq_consume(c, b),
                     node_vals("bullmq.consume", lambda r, pc=pc: r.get("concurrency") == pc, "jobs_per_s"),
                     rs_vals("consume", lambda r, pc=pc: r.get("concurrency") == pc, "jobs_per_s"),
                     cons_ceil))
    for q in ("p50", "p99"):
        rows.append((f"delayed: due → handler {q}", "latency fixed-time, no background",
                     "latency.js --mode=delayed (c=10)", "delayed (c=10)", "ms",
                     rmq_lat(False, q),
                     node_vals("bullmq.latency", lambda r: r.get("mode") == "delayed", f"{q}_ms"),
                     rs_vals("delayed", lambda r: True, f"{q}_ms"), []))
    for q in ("p50", "p99"):
        rows.append((f"delayed under load {q} (rmq only)",
                     "latency fixed-time, background send+consume", "—", "—", "ms",
                     rmq_lat(True, q), none, none, []))

    # ---------------------------------------------------------------- output
    out = []
    w = out.append
    rounds = sorted({r["round"] for r in rmq + node + rs + ceil})
    w("# rmq vs BullMQ (Node) vs bullmq-official (Rust), with Redis ceilings")
    w("")
    env = meta.get("settings", {})
    date = meta.get("date_utc", "?")
    m = re.match(r"(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)Z$", date)
    if m:
        date = "{}-{}-{} {}:{}:{} UTC".format(*m.groups())
    w(f"- date: {date}; results: .bench/results/{os.path.basename(os.path.abspath(d))}; machine: {meta.get('nproc', '?')} cores "
      f"({meta.get('cpu', '?')}); redis-server {meta.get('redis_version', '?')} on loopback, "
      f"`--save \"\" --appendonly no`, one server shared by everything, one program at a time; "
      f"load average at start {' '.join(meta.get('loadavg_start', ['?']))}")
    cmd = meta.get("command", "scripts/compare.sh")
    sets = ", ".join(f"{k}={v}" for k, v in env.items() if v)
    w(f"- command: `{cmd}` (settings: {sets}); rmq git {meta.get('git', '?')}")
    vers = []
    nv = {r.get("bullmq") for r in node if r.get("bullmq")}
    if nv:
        vers.append(f"BullMQ {', '.join(sorted(nv))} (Node {', '.join(sorted({r.get('node', '?') for r in node}))})")
    rv = {r.get("lib_version") for r in rs if r.get("lib_version")}
    if rv:
        vers.append(f"bullmq-official {', '.join(sorted(rv))}")
    if vers:
        w(f"- peers: {'; '.join(vers)}")
    w(f"- rounds with data: {len(rounds)} ({', '.join(map(str, rounds)) or 'none'}); messages per "
      f"send/consume case: {meta.get('n', '?')}; delayed messages: {meta.get('latency_n', '?')} "
      f"over {meta.get('latency_spread_ms', '?')} ms")
    try:
        with open(os.path.join(d, "cpu.txt")) as f:
            marks = [l.split() for l in f if len(l.split()) == 5]
    except OSError:
        marks = []
    if marks:
        peak = max(float(m[4]) for m in marks)
        w("- CPU used by other processes during each step, in cores of "
          f"{meta.get('nproc', '?')}: "
          + ", ".join(f"round {m[0]} {m[1]} {m[4]}" for m in marks)
          + (" -- **something else was using the CPU: numbers of those steps are skewed**"
             if peak > 0.15 else " (quiet machine)"))
    w("- cells: median over rounds, (min–max) when there is more than one round; "
      "ratios are of the medians. Throughput: higher is better, rmq/peer > 1 means rmq is faster. "
      "Latency (ms): lower is better, rmq/peer < 1 means rmq is more punctual.")
    w("")
    w("| comparison | rmq case | BullMQ (Node) case | bullmq-official case | unit | rmq | BullMQ (Node) "
      "| bullmq-official | rmq / BullMQ | rmq / bullmq-official | Redis ceiling (req/s) | rmq / ceiling |")
    w("|---|---|---|---|---|---:|---:|---:|---:|---:|---|---:|")
    for (label, rc, nc, sc, unit, r, n, s, ceils) in rows:
        rm = r.median()
        ceils = [(name, v) for name, v in ceils if v is not None]
        cname = " · ".join(f"{name}: {fmt(v, '')}" for name, v in ceils) or "—"
        cfrac = " · ".join(ratio(rm, v) for _, v in ceils) or "—"
        w(f"| {label} | {rc} | {nc} | {sc} | {unit} | {cell(r, unit)} | {cell(n, unit)} | "
          f"{cell(s, unit)} | {ratio(rm, n.median())} | {ratio(rm, s.median())} | {cname} | {cfrac} |")
    w("")
    w("**Note: the matched scenarios are not identical workloads.** rmq messages have a 16-byte "
      "merge key and a 64-byte payload; BullMQ jobs carry a 100-byte JSON payload. rmq consume "
      "drains a *priority* topic (16 slots, pops/acks batched per slot), BullMQ consumes *plain* "
      "waiting jobs, keeps completed jobs (removeOnComplete off) and emits events; rmq's "
      "concurrency 16/128 is matched to BullMQ's 10/50 (the concurrencies each benchmark "
      "has). Batch send: rmq priority ↔ BullMQ priority; rmq fixed-time (due now) ↔ BullMQ delay "
      "(jobs land in the delayed set); rmq range-merge (due in 1 ms, merged by key) ↔ BullMQ "
      "plain and bullmq-official plain (its only produce mode). rmq consume time is to the "
      "n-th ack (polled every 20 ms); BullMQ's to the n-th completed event. Delayed latency: rmq "
      "sends one message at a time over 2 s with due = send + 50–250 ms, 16 consumers, whole-ms "
      "clock; BullMQ/bullmq-official add all jobs at once (addBulk) with delay uniform in "
      "[0, 2 s), worker concurrency 10, due = client clock at add + delay. Ceilings are "
      "redis-benchmark -c 50 -P 64 on the same server and cores (redis-benchmark takes one core "
      "too). Batch send is set against single-member ZADDs while rmq writes up to 1000 messages "
      "per script call (so that fraction can pass 1); consume against bare EVALSHAs, while rmq "
      "pops and acks up to `batch` messages per script call and needs a few calls per message "
      "unbatched (see redis_cmds_per_msg in rmq-r*.jsonl). A fraction says how far rmq is from "
      "a bare pipelined command, not how efficient it is.")
    w("")
    if ceil:
        w("## Redis ceilings (redis-benchmark -c 50 -P 64)")
        w("")
        w("| test | command | requests/s | p50 ms per pipeline of 64 | runs |")
        w("|---|---|---:|---:|---:|")
        cmds = {
            "zadd": "ZADD zq <rand> m:<rand> (zset grows)",
            "zpopmax": "ZPOPMAX zq (prefilled n + 500k)",
            "evalsha_return1": "EVALSHA of `return 1`, 0 keys",
            "evalsha_zpopmax_hset": "EVALSHA: ZPOPMAX src; HSET inflight member token (src prefilled)",
        }
        for t, c in cmds.items():
            rr = [r for r in ceil if r.get("test") == t]
            rps = Series([num(r.get("rps")) for r in rr])
            p50 = Series([num(r.get("p50_ms")) for r in rr]).median()
            w(f"| {t} | {c} | {cell(rps, '')} | {'—' if p50 is None else f'{p50:.2f}'} | {len(rps.values)} |")
        w("")

    # problems: recorded failures, error lines, missing data
    for r in rmq:
        if "error" in r:
            problems.append(f"**rmq** round {r['round']}: {r.get('scenario')} {r.get('kind', '')} "
                            f"{r.get('params', '')}: {str(r['error'])[:200]}")
    for r in rs:
        if "error" in r:
            problems.append(f"**rust** round {r['round']}: {r.get('case')}: {str(r['error'])[:200]}")
    for r in node:
        if r.get("timed_out"):
            problems.append(f"**node** round {r['round']}: latency.js timed out "
                            f"({r.get('received')} of {r.get('n')} received); left out")
        if r.get("bench") == "bullmq.consume" and r.get("failed"):
            problems.append(f"**node** round {r['round']}: consume.js c={r.get('concurrency')}: "
                            f"{r.get('failed')} failed jobs")
    missing = [lbl for (lbl, _, _, _, _, r, *_rest) in rows if r.median() is None]
    if not rmq:
        problems.append("**rmq**: no rmq-bench results")
    elif missing:
        problems.append(f"**rmq**: no data for: {', '.join(missing)}")
    if not node and not any(s[1] == "node" and s[0] != "OK" for s in status):
        problems.append("**node**: no BullMQ (Node) results")
    if not rs and not any(s[1] == "rust" and s[0] != "OK" for s in status):
        problems.append("**rust**: no bullmq-official results")
    if problems or skipped or warnings:
        w("## Problems and warnings")
        w("")
        for x in problems:
            w(f"- {x}")
        for x in warnings:
            w(f"- warning: {x}")
        for x in skipped:
            w(f"- skipped: {x}")
        w("")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
