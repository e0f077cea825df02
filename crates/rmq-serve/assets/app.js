// rmq dashboard: one script, no framework, no build step. It calls this
// server's JSON API (/api/v1) and draws with the DOM: every key, payload
// and error goes through text nodes (h() below), never through HTML.
"use strict";

const API = "/api/v1";
let server = { access: "read-only", actions: false };
let refreshTimer = null;

// ---- small helpers ---------------------------------------------------------

/** An element: h("td", {class: "num"}, "text", child, ...). Strings become text nodes. */
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    // Through the CSSOM: the page's CSP refuses style attributes.
    else if (k === "style") Object.assign(el.style, v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function svg(tag, attrs) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  return el;
}

/** The largest of many numbers (no spread: 65,536 slots exceed some engines' argument limits). */
function maxOf(values, floor) {
  let m = floor;
  for (const v of values) if (v > m) m = v;
  return m;
}

const fmt = new Intl.NumberFormat("en");
const num = (n) => (n === undefined || n === null ? "" : fmt.format(n));
const enc = encodeURIComponent;
// A key or payload comes as text (`key`, `payload`), or as base64 when it
// is not UTF-8 (`key_base64`, `payload_base64`): shown with a "base64:"
// mark, and a key given back to the API the way it came.
const bytesText = (o, f) => (o[f] !== undefined ? o[f] : o[`${f}_base64`] !== undefined ? `base64:${o[`${f}_base64`]}` : undefined);
const keyText = (o) => bytesText(o, "key");
const keyParam = (o) => (o.key !== undefined ? `key=${enc(o.key)}` : `key_base64=${enc(o.key_base64)}`);
const keyBody = (o) => (o.key !== undefined ? { key: o.key } : { key_base64: o.key_base64 });
const lookupHref = (name, o) => `#/topic/${enc(name)}/${o.key !== undefined ? `lookup/${enc(o.key)}` : `lookup64/${enc(o.key_base64)}`}`;
// A key travels in the query, never as a path segment: the browser would
// resolve the keys "." and ".." (even percent-encoded) as dot segments.
const keyPath = (name, o) => `/topics/${enc(name)}/key?${keyParam(o)}`;

function ago(ms) {
  if (ms === undefined || ms === null) return "";
  const s = Math.abs(ms) / 1000;
  const t = s < 1 ? `${Math.round(Math.abs(ms))} ms` : s < 120 ? `${s.toFixed(1)} s` : s < 7200 ? `${(s / 60).toFixed(1)} min` : `${(s / 3600).toFixed(1)} h`;
  return ms < 0 ? `in ${t}` : `${t} ago`;
}

function when(ms, now) {
  if (!ms) return "";
  const d = new Date(ms).toISOString().replace("T", " ").replace("Z", " UTC");
  return now ? `${d} (${ago(now - ms)})` : d;
}

function say(text, isError) {
  const s = document.getElementById("status");
  s.replaceChildren(text);
  s.className = text ? (isError ? "show error" : "show") : "";
}

class ApiError extends Error {
  constructor(status, kind, message) { super(message); this.status = status; this.kind = kind; }
}

async function api(method, path, body, retries = 3) {
  const headers = {};
  const token = sessionStorage.getItem("rmq-token");
  if (method !== "GET" && token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(API + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  let v = null;
  try { v = await r.json(); } catch (_) { /* an empty body */ }
  // Too many expensive readings at once on the server: a reading is
  // retried after the time it asks for (an action never is).
  if (r.status === 429 && method === "GET" && retries > 0) {
    const secs = Number(r.headers.get("Retry-After")) || 1;
    await new Promise((ok) => setTimeout(ok, secs * 1000));
    return api(method, path, body, retries - 1);
  }
  if (!r.ok) {
    const e = (v && v.error) || {};
    throw new ApiError(r.status, e.kind || String(r.status), e.message || r.statusText);
  }
  return v;
}

/** Runs an action; says what happened; refreshes the view. */
async function act(label, fn) {
  try {
    const r = await fn();
    say(`${label}: ${typeof r === "string" ? r : "done"}`);
    route();
  } catch (e) {
    say(`${label} failed: ${e.message}`, true);
  }
}

/** An action button, present only when the server allows actions. */
function actionButton(text, onclick, cls) {
  if (!server.actions) return null;
  return h("button", { class: cls, onclick, dataset: { action: text } }, text);
}

function table(headers, rows, attrs) {
  return h("table", attrs || {},
    h("thead", {}, h("tr", {}, headers.map((x) => (Array.isArray(x) ? h("th", { class: x[1] }, x[0]) : h("th", {}, x))))),
    h("tbody", {}, rows));
}

// ---- charts (SVG, drawn here) ---------------------------------------------

const COLORS = { due_now: "#2f6fde", scheduled: "#9db8ee", retry_waiting: "#e8a33d", in_flight: "#2faa6b", parked: "#9b6ad6", dead: "#d64545", send: "#2f6fde", ack: "#2faa6b", age: "#e8a33d" };

/** A line chart of series [{name, color, values}] over xs (ms). */
function lineChart(title, xs, series, unit) {
  const W = 600, H = 170, L = 48, B = 20, T = 8;
  const el = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title });
  const max = series.reduce((m, s) => maxOf(s.values, m), 1);
  const x0 = xs[0] || 0, x1 = xs[xs.length - 1] || 1;
  const X = (x) => L + ((x - x0) / Math.max(1, x1 - x0)) * (W - L - 6);
  const Y = (y) => T + (1 - y / max) * (H - T - B);
  for (let i = 0; i <= 4; i++) {
    const v = (max * i) / 4;
    el.append(svg("line", { x1: L, x2: W - 6, y1: Y(v), y2: Y(v), stroke: "#e3e6eb" }));
    const t = svg("text", { x: L - 6, y: Y(v) + 4, "text-anchor": "end", "font-size": 10, fill: "#6b7280" });
    t.textContent = max >= 10 ? num(Math.round(v)) : v.toFixed(2);
    el.append(t);
  }
  const span = svg("text", { x: W - 6, y: H - 4, "text-anchor": "end", "font-size": 10, fill: "#6b7280" });
  span.textContent = xs.length > 1 ? `last ${ago(x1 - x0).replace(" ago", "")}` : "collecting samples…";
  el.append(span);
  for (const s of series) {
    if (xs.length === 0) continue;
    const d = s.values.map((v, i) => `${i ? "L" : "M"}${X(xs[i]).toFixed(1)},${Y(v).toFixed(1)}`).join("");
    el.append(svg("path", { d, fill: "none", stroke: s.color, "stroke-width": 1.8 }));
  }
  return h("div", { class: "panel chart" },
    h("h2", {}, title, unit ? h("span", { class: "muted" }, ` (${unit})`) : null),
    el,
    h("div", { class: "legend" }, series.map((s) => h("span", {}, h("i", { style: { background: s.color } }), s.name))));
}

function sparkline(values) {
  const W = 120, H = 24;
  const el = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "spark", "aria-hidden": "true" });
  if (values.length > 1) {
    const max = maxOf(values, 1);
    const d = values.map((v, i) => `${i ? "L" : "M"}${((i / (values.length - 1)) * (W - 2) + 1).toFixed(1)},${(H - 2 - (v / max) * (H - 4)).toFixed(1)}`).join("");
    el.append(svg("path", { d, fill: "none", stroke: "#2f6fde", "stroke-width": 1.5 }));
  }
  return el;
}

/** Per-second rates of a counter, each over the last few readings (sends
 * come in bursts: a rate between two close readings would only show them). */
function rates(points, field) {
  const W = 5;
  return points.map((p, i) => {
    const q = points[Math.max(0, i - W)];
    const secs = (p.at_ms - q.at_ms) / 1000;
    return secs > 0 ? Math.max(0, p[field] - q[field]) / secs : 0;
  });
}

// ---- overview ---------------------------------------------------------------

async function overview(main) {
  const v = await api("GET", "/overview");
  const topics = v.topics;
  const sum = (f) => topics.reduce((a, t) => a + t.last[f], 0);
  const filter = h("input", { type: "search", placeholder: "filter topics", "aria-label": "Filter topics", value: sessionStorage.getItem("rmq-filter") || "" });
  const body = h("tbody", {});
  const draw = () => {
    const q = filter.value.trim().toLowerCase();
    sessionStorage.setItem("rmq-filter", filter.value);
    const shown = topics.filter((t) => t.name.toLowerCase().includes(q));
    body.replaceChildren(...shown.slice(0, 500).map((t) => h("tr", { dataset: { topic: t.name } },
      h("td", {}, h("a", { href: `#/topic/${enc(t.name)}` }, t.name), t.paused ? h("span", { class: "badge paused" }, " paused") : null),
      h("td", {}, t.kind),
      h("td", { class: "num" }, num(t.slots)),
      h("td", { class: "num", dataset: { col: "due_now" } }, num(t.last.due_now)),
      h("td", { class: "num" }, num(t.last.scheduled)),
      h("td", { class: "num" }, num(t.last.retry_waiting)),
      h("td", { class: "num" }, num(t.last.in_flight)),
      h("td", { class: "num" }, num(t.last.parked)),
      h("td", { class: "num" }, num(t.last.dead)),
      h("td", { class: "num" }, t.kind === "priority" ? "" : ago(t.last.oldest_due_age_ms).replace(" ago", "")),
      h("td", { class: "num" }, t.send_rate.toFixed(1)),
      h("td", { class: "num" }, t.ack_rate.toFixed(1)))));
    if (shown.length > 500) body.append(h("tr", {}, h("td", { colspan: 12, class: "muted" }, `${shown.length - 500} more: filter to find them`)));
  };
  filter.addEventListener("input", draw);
  draw();
  main.replaceChildren(...[
    h("h1", {}, "Topics"),
    v.error ? h("div", { class: "warn" }, `The last reading failed: ${v.error}`) : null,
    h("div", { class: "cards" },
      card("topics", topics.length, "topics"),
      card("due now", sum("due_now"), "due"),
      card("scheduled", sum("scheduled")),
      card("in flight", sum("in_flight")),
      card("dead letters", sum("dead")),
      card("send / s", topics.reduce((a, t) => a + t.send_rate, 0).toFixed(1)),
      card("ack / s", topics.reduce((a, t) => a + t.ack_rate, 0).toFixed(1))),
    h("div", { class: "row" }, filter, h("span", { class: "muted" }, v.at_ms ? `read ${ago(Date.now() - v.at_ms)}; the server samples every ${server.sample_every_ms / 1000} s` : "no reading yet")),
    h("div", { class: "panel" }, table(
      ["topic", "kind", ["slots", "num"], ["due now", "num"], ["scheduled", "num"], ["retry", "num"], ["in flight", "num"], ["parked", "num"], ["dead", "num"], ["oldest due", "num"], ["send/s", "num"], ["ack/s", "num"]],
      [], { "data-testid": "topics" }))].filter(Boolean));
  main.querySelector("[data-testid=topics] tbody").replaceWith(body);
}

function card(label, n, id) {
  return h("div", { class: "card", dataset: { card: id || label } }, h("div", { class: "n" }, typeof n === "number" ? num(n) : n), h("div", { class: "l" }, label));
}

// ---- one topic --------------------------------------------------------------

const TABS = [["charts", "Charts"], ["slots", "Slots"], ["pending", "Pending"], ["lookup", "Look up a key"], ["dead", "Dead letters"], ["groups", "Serial groups"]];

async function topicPage(main, name, tab, arg) {
  const t = await api("GET", `/topics/${enc(name)}`);
  const spec = t.definition, s = t.stats;
  const base = `#/topic/${enc(name)}`;
  const pane = h("div", { id: "pane" });
  main.replaceChildren(
    h("h1", {}, name, h("span", { class: "badge" }, spec.kind), h("span", { class: "badge" }, `${num(spec.slots)} slots`),
      spec.rate_per_sec ? h("span", { class: "badge", "data-testid": "rate" }, `≤ ${num(spec.rate_per_sec)}/s, bursts of ${num(spec.rate_burst)}`) : null,
      spec.max_in_flight ? h("span", { class: "badge", "data-testid": "cap" }, `≤ ${num(spec.max_in_flight)} in flight`) : null,
      spec.max_pending ? h("span", { class: "badge", "data-testid": "bound" }, `${num(t.bound_held ?? 0)} of ${num(spec.max_pending)} held`) : null,
      t.paused ? h("span", { class: "badge paused", "data-testid": "paused" }, "paused") : null,
      t.paused
        ? actionButton("Resume", () => act("resume", async () => { await api("POST", `/topics/${enc(name)}/resume`); return "consumers start again"; }))
        : actionButton("Pause", () => act("pause", async () => { await api("POST", `/topics/${enc(name)}/pause`); return "no new deliveries start"; }))),
    h("div", { class: "cards" },
      card("due now", s.due_now, "due"), card("scheduled", s.scheduled), card("retry waiting", s.retry_waiting),
      card("in flight", s.in_flight), card("parked", s.behind_in_flight), card("dead letters", s.dead, "dead"),
      card("sent", s.sent), card("acked", s.acked), card("cancelled", s.cancelled)),
    h("nav", { class: "tabs" }, TABS.map(([id, label]) => h("a", { href: `${base}/${id}`, class: id === tab || (id === "lookup" && tab === "lookup64") ? "on" : "" }, label))),
    pane);
  const lookup64 = (p, n, sp, k) => lookup(p, n, sp, k, true);
  const tabs = { charts, slots, pending, lookup, lookup64, dead, groups };
  await (tabs[tab] || charts)(pane, name, spec, arg);
}

async function charts(pane, name, spec) {
  const v = await api("GET", `/topics/${enc(name)}/history`);
  const p = v.points;
  const xs = p.map((x) => x.at_ms);
  const states = ["due_now", "scheduled", "retry_waiting", "in_flight", "parked", "dead"];
  const panels = [
    lineChart("Depth by state", xs, states.map((f) => ({ name: f.replace("_", " "), color: COLORS[f], values: p.map((x) => x[f]) })), "messages"),
    lineChart("Send and ack rates", xs, [{ name: "sent", color: COLORS.send, values: rates(p, "sent") }, { name: "acked", color: COLORS.ack, values: rates(p, "acked") }, { name: "dead-lettered", color: COLORS.dead, values: rates(p, "dead_lettered") }], "per second"),
  ];
  if (spec.kind !== "priority") panels.push(lineChart("Lateness: age of the oldest due message", xs, [{ name: "oldest due", color: COLORS.age, values: p.map((x) => x.oldest_due_age_ms / 1000) }], "seconds"));
  pane.replaceChildren(h("div", { class: "charts" }, panels), h("p", { class: "muted" }, `${p.length} samples, one every ${v.every_ms / 1000} s, taken by the server (an hour is kept).`));
}

async function slots(pane, name) {
  const v = await api("GET", `/topics/${enc(name)}/slots`);
  const n = v.due_now.length;
  const depth = v.due_now.map((d, i) => d + v.scheduled[i] + v.retry_waiting[i] + v.in_flight[i] + v.parked[i]);
  // A grid of cells: one row for a few slots, 256 columns for 65,536.
  const cols = n <= 16 ? n : n <= 1024 ? 32 : n <= 16384 ? 128 : 256;
  const rows = Math.ceil(n / cols);
  const cell = Math.max(2, Math.floor(512 / cols));
  const gap = cell >= 6 ? 1 : 0;
  const canvas = h("canvas", { class: "heat", width: cols * cell, height: rows * cell, "aria-label": `depth of ${n} slots` });
  canvas.style.width = `${cols * cell}px`;
  const ctx = canvas.getContext("2d");
  const max = maxOf(depth, 1);
  for (let i = 0; i < n; i++) {
    const a = 0.15 + 0.85 * (depth[i] / max);
    ctx.fillStyle = depth[i] ? `rgba(47,111,222,${a.toFixed(3)})` : "#e6e9ee";
    ctx.fillRect((i % cols) * cell, Math.floor(i / cols) * cell, cell - gap, cell - gap);
  }
  const order = [...depth.keys()].sort((a, b) => depth[b] - depth[a] || v.dead[b] - v.dead[a] || a - b).slice(0, 100);
  pane.replaceChildren(
    h("div", { class: "panel" }, h("h2", {}, `Depth per slot (${num(n)} slots, row by row from slot 0; darker is deeper, max ${num(max)})`), canvas),
    h("div", { class: "panel" }, h("h2", {}, n > 100 ? "The 100 deepest slots" : "Every slot"), table(
      [["slot", "num"], ["due now", "num"], ["scheduled", "num"], ["retry", "num"], ["in flight", "num"], ["parked", "num"], ["dead", "num"], "serial owner", ["epoch", "num"]],
      order.map((i) => h("tr", {},
        h("td", { class: "num" }, i), h("td", { class: "num" }, num(v.due_now[i])), h("td", { class: "num" }, num(v.scheduled[i])),
        h("td", { class: "num" }, num(v.retry_waiting[i])), h("td", { class: "num" }, num(v.in_flight[i])), h("td", { class: "num" }, num(v.parked[i])),
        h("td", { class: "num" }, num(v.dead[i])), h("td", { class: "text" }, v.owner[i] >= 0 ? v.owners[v.owner[i]] : ""), h("td", { class: "num" }, v.epoch[i] || ""))))));
}

async function pending(pane, name, spec) {
  const v = await api("GET", `/topics/${enc(name)}/peek?limit=50`);
  pane.replaceChildren(h("div", { class: "panel" }, h("h2", {}, "The next 50 messages, in consumption order"), table(
    ["key", "payload", spec.kind === "priority" ? "priority" : "due", ["attempts", "num"], ["slot", "num"]],
    v.messages.map((m) => h("tr", {},
      h("td", { class: "text" }, h("a", { href: lookupHref(name, m) }, keyText(m))),
      h("td", { class: "text" }, bytesText(m, "payload")),
      h("td", {}, spec.kind === "priority" ? String(m.priority) : when(m.due_ms, Date.now())),
      h("td", { class: "num" }, m.attempts), h("td", { class: "num" }, m.slot))),
    { "data-testid": "pending" })));
}

async function lookup(pane, name, spec, key, base64) {
  const input = h("input", { type: "search", placeholder: "merge key", "aria-label": "Key", value: key || "", "data-testid": "lookup-key" });
  const b64 = h("input", { type: "checkbox", "aria-label": "The key is base64", "data-testid": "lookup-base64" });
  b64.checked = !!base64;
  const basis = h("input", { type: "text", placeholder: "slot basis (if it differs)", "aria-label": "Slot basis" });
  const out = h("div", { "data-testid": "lookup-result" });
  const go = async (ev) => {
    if (ev) ev.preventDefault();
    if (!input.value) return;
    const q = basis.value ? `&slot_basis=${enc(basis.value)}` : "";
    try {
      const given = b64.checked ? { key_base64: input.value } : { key: input.value };
      const l = await api("GET", `${keyPath(name, given)}${q}`);
      out.replaceChildren(lookupView(name, spec, l, basis.value));
    } catch (e) {
      out.replaceChildren(h("div", { class: "warn" }, e.message));
    }
  };
  pane.replaceChildren(h("div", { class: "panel" },
    h("form", { class: "row", onsubmit: go }, input, h("label", {}, b64, " base64"), basis, h("button", { class: "primary", type: "submit" }, "Look up")), out));
  if (key) await go();
}

function lookupView(name, spec, l, basis) {
  const now = l.server_ms;
  const rows = [
    ["state", h("span", { class: `state ${l.state}`, "data-testid": "state" }, l.state + (l.cancelled ? " (cancelled: ends at its settle)" : ""))],
    ["slot", l.slot],
    ["payload", bytesText(l, "payload")],
    ["attempts", l.attempts],
    ["priority", l.priority],
    ["due", when(l.due_ms, now)],
    ["next attempt", when(l.next_attempt_ms, now)],
    ["lease until", when(l.lease_until_ms, now)],
    ["fence (epoch)", l.fence],
    ["error", l.error],
  ];
  if (l.parked) rows.push(["parked duplicate", `${bytesText(l.parked, "payload")}${l.parked.due_ms ? ` — due ${when(l.parked.due_ms, now)}` : ""}${l.parked.priority !== undefined ? ` — priority ${l.parked.priority}` : ""}`]);
  if (l.dead) rows.push(["dead letter", `${bytesText(l.dead, "payload")} — ${l.dead.error} — after ${l.dead.attempts} attempts, ${when(l.dead.dead_at_ms, now)}`]);
  const dl = h("dl", { class: "kv" }, rows.filter(([, v]) => v !== undefined && v !== null && v !== "").map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
  const q = basis ? `&slot_basis=${enc(basis)}` : "";
  const path = keyPath(name, l);
  const acts = h("div", { class: "row" });
  if (server.actions && l.state !== "absent" && l.state !== "dead") {
    acts.append(actionButton("Cancel", () => {
      if (!confirm(`Cancel every message of key ${JSON.stringify(keyText(l))}?`)) return;
      act(`cancel ${keyText(l)}`, async () => { const r = await api("DELETE", path + q); return r.outcome; });
    }, "danger"));
  }
  if (server.actions && (l.state === "pending" || l.state === "retry-waiting")) {
    const field = spec.kind === "priority" ? "priority" : "delay";
    const val = h("input", { type: "number", min: 0, placeholder: field === "priority" ? "new priority" : "new delay in ms", "aria-label": field, "data-testid": "reschedule-value" });
    acts.append(val, actionButton("Reschedule", () => act(`reschedule ${keyText(l)}`, async () => {
      if (val.value.trim() === "") throw new Error(`give the new ${field === "priority" ? "priority" : "delay in ms"}`);
      const body = { [field]: Number(val.value) };
      if (basis) body.slot_basis = basis;
      const r = await api("POST", `/topics/${enc(name)}/key/reschedule?${keyParam(l)}`, body);
      return r.due_ms ? `due ${when(r.due_ms)}` : `priority ${r.priority}`;
    })));
  }
  return h("div", {}, h("h2", {}, "Key ", h("code", {}, keyText(l))), dl, acts);
}

async function dead(pane, name, spec, page) {
  const per = 50, p = Math.max(0, Number(page) || 0);
  const v = await api("GET", `/topics/${enc(name)}/dead?limit=${per}&offset=${p * per}`);
  const base = `#/topic/${enc(name)}/dead/`;
  const requeue = (body, label) => act(label, async () => { const r = await api("POST", `/topics/${enc(name)}/dead/requeue`, body); return `${r.requeued} requeued`; });
  const purge = (body, label) => act(label, async () => { const r = await api("POST", `/topics/${enc(name)}/dead/purge`, body); return `${r.purged} purged`; });
  pane.replaceChildren(h("div", { class: "panel" },
    h("div", { class: "row" },
      h("h2", {}, v.dead.length ? `Dead letters ${p * per + 1}–${p * per + v.dead.length}, oldest death first` : "No dead letters"),
      actionButton("Requeue all", () => { if (confirm("Requeue every dead letter of this topic?")) requeue({ all: true }, "requeue all"); }),
      actionButton("Purge all", () => { if (confirm("Delete every dead letter of this topic? This cannot be undone.")) purge({ all: true }, "purge all"); }, "danger")),
    table(["key", "payload", "error", ["attempts", "num"], "died", ["deaths", "num"], ["slot", "num"], ""],
      v.dead.map((d) => h("tr", { dataset: { key: keyText(d) } },
        h("td", { class: "text" }, h("a", { href: lookupHref(name, d) }, keyText(d))),
        h("td", { class: "text" }, bytesText(d, "payload")), h("td", { class: "text" }, d.error),
        h("td", { class: "num" }, d.attempts), h("td", {}, when(d.dead_at_ms, Date.now())), h("td", { class: "num" }, d.deaths), h("td", { class: "num" }, d.slot),
        h("td", {}, actionButton("Requeue", () => requeue(keyBody(d), `requeue ${keyText(d)}`)), " ",
          actionButton("Purge", () => { if (confirm(`Delete the dead letter of ${JSON.stringify(keyText(d))}?`)) purge(keyBody(d), `purge ${keyText(d)}`); }, "danger")))),
      { "data-testid": "dead" }),
    h("div", { class: "row" },
      p > 0 ? h("a", { href: base + (p - 1) }, "← earlier deaths") : null,
      v.dead.length === per ? h("a", { href: base + (p + 1) }, "later deaths →") : null)));
}

async function groups(pane, name) {
  const v = await api("GET", `/topics/${enc(name)}/groups`);
  const now = v.server_ms;
  const unowned = v.unowned_slots;
  const parts = [h("div", { class: "cards" }, card("consumer processes", v.consumers), card("serial groups", v.groups.length), card("slots without a lease", unowned))];
  if (v.groups.length === 0) parts.push(h("p", { class: "muted" }, "No serial consumer group has run on this topic."));
  for (const g of v.groups) {
    parts.push(h("div", { class: "panel" }, h("h2", {}, `Group ${g.name}`), table(
      ["member", "alive", "heartbeat deadline", ["slots owned", "num"], "slots", "epochs"],
      g.members.map((m) => h("tr", {},
        h("td", { class: "text" }, m.id), h("td", {}, m.alive ? "yes" : "no (to be forgotten)"),
        h("td", {}, ago(now - m.deadline_ms)), h("td", { class: "num" }, m.slots_owned),
        h("td", { class: "text" }, m.slots_owned > 40 ? `${m.slots.slice(0, 40).join(", ")}, …` : m.slots.join(", ")),
        h("td", { class: "text" }, m.slots.slice(0, 40).map((s) => `${s}:${v.leases[s - v.slot_offset].epoch}`).join(" ")))))));
  }
  pane.replaceChildren(...parts);
}

// ---- routing ----------------------------------------------------------------

let routeSeq = 0;

async function route() {
  const seq = ++routeSeq;
  clearTimeout(refreshTimer);
  // Drawn off-page, shown only if no newer route started meanwhile.
  const view = h("main", { id: "main" });
  let onOverview = false;
  try {
    const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
    if (parts[0] === "topic" && parts[1]) {
      await topicPage(view, parts[1], parts[2] || "charts", parts[3]);
    } else {
      onOverview = true;
      await overview(view);
    }
  } catch (e) {
    view.replaceChildren(h("div", { class: "warn" }, e.message));
  }
  if (seq !== routeSeq) return;
  document.getElementById("main").replaceWith(view);
  // The overview follows the server's samples (after a failure too), but
  // never under a user's typing.
  if (onOverview) {
    refreshTimer = setTimeout(function again() {
      const typing = document.activeElement && document.activeElement.matches("main input");
      if (typing) refreshTimer = setTimeout(again, 2000);
      else route();
    }, Math.max(2000, server.sample_every_ms || 10000));
  }
}

async function start() {
  try { server = await api("GET", "/server"); } catch (e) { say(`the server cannot be read: ${e.message}`, true); }
  const badge = document.getElementById("access");
  badge.textContent = { "read-only": "read-only", token: "actions need a token", open: "actions open to anyone" }[server.access] || server.access;
  if (server.access === "read-only") badge.classList.add("ro");
  const form = document.getElementById("token-form");
  if (server.access === "token") {
    form.hidden = false;
    if (sessionStorage.getItem("rmq-token")) document.getElementById("token").placeholder = "token set (this tab)";
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const t = document.getElementById("token");
      sessionStorage.setItem("rmq-token", t.value);
      t.value = "";
      t.placeholder = "token set (this tab)";
      say("token kept for this tab");
    });
  }
  window.addEventListener("hashchange", () => { say(""); route(); });
  await route();
}

start();
