// The idem console. Plain JavaScript served as is: no build step.
//
// Every text that comes from the host (handler names, failure reasons,
// payloads, headers: much of it written by guests or producers) goes into
// the page as a text node (`el` below); nothing here parses HTML.
"use strict";

const main = document.getElementById("main");
const session = { scope: null, csrf: null, actor: null };
let refresh = null; // the live page's refresher, called every second
let refreshing = false;
let generation = 0; // one more at every navigation: an answer for an older page is dropped

// ---- building the page -------------------------------------------------

// An element with attributes and children; strings become text nodes.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === false || value === null || value === undefined) continue;
    if (name.startsWith("on")) throw new Error("no inline handlers");
    node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// A table; a column whose first cell is a number (`num`) is aligned right,
// its heading too.
function table(headings, rows, attrs) {
  const first = rows.length ? rows[0].children : [];
  const numeric = (i) => first[i] !== undefined && first[i].classList.contains("num");
  const body = el("table", attrs,
    el("thead", {}, el("tr", {}, headings.map((h, i) => el("th", { class: numeric(i) ? "num" : null, scope: "col" }, heading(h))))),
    el("tbody", {}, rows));
  // On a narrow screen a table scrolls sideways inside the page, in a box a
  // keyboard user can focus (and so scroll) too.
  const named = (attrs && attrs.id ? attrs.id.replace(/-/g, " ") : "table") + ", scrolls sideways";
  return el("div", { class: "scroll", tabindex: 0, role: "region", "aria-label": named }, body);
}

// A column heading: `~Name` is a column of controls whose name only screen
// readers need (an empty heading cell is an accessibility fault).
function heading(h) {
  return typeof h === "string" && h.startsWith("~") ? el("span", { class: "sr-only" }, h.slice(1)) : h;
}

function num(value, attrs) {
  return el("td", Object.assign({ class: "num" }, attrs || {}), value === null || value === undefined ? "–" : fmt(value));
}

function fmt(n) {
  if (typeof n !== "number") return String(n);
  return Number.isInteger(n) ? n.toLocaleString("en-US") : n.toLocaleString("en-US", { maximumFractionDigits: 1 });
}

// A sparkline of `values` (nulls skipped) as an SVG polyline.
function spark(values, kind) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "spark " + (kind || ""));
  svg.setAttribute("viewBox", "0 0 160 28");
  svg.setAttribute("preserveAspectRatio", "none");
  const known = values.filter((v) => typeof v === "number");
  const max = Math.max(1, ...known);
  const step = values.length > 1 ? 160 / (values.length - 1) : 0;
  const points = [];
  values.forEach((v, i) => {
    if (typeof v === "number") points.push((i * step).toFixed(1) + "," + (26 - (v / max) * 24).toFixed(1));
  });
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", points.join(" "));
  svg.append(line);
  return svg;
}

function message(text, error) {
  return el("div", { class: error ? "message error" : "message", role: error ? "alert" : "status" }, text);
}

// Shows the page built for navigation `gen` (dropped if the user has
// moved on since it was asked for).
// A live page is built again every second: the element that had the
// keyboard's focus gets it back on the new page (found by what names it),
// so a keyboard walk survives the refresh.
function show(gen, ...nodes) {
  if (gen !== generation) return;
  const focused = focusKey(document.activeElement);
  main.replaceChildren(...nodes.filter((n) => n !== null && n !== undefined));
  if (focused) {
    const again = main.querySelector(focused);
    if (again) again.focus({ preventScroll: true });
  }
}

// A selector for `node` on the next rendering of the page, if it has a
// name that survives one.
function focusKey(node) {
  if (!node || !main.contains(node) || node === main) return null;
  const names = ["id", "href", "name", "data-select", "data-open", "data-activate", "data-confirm", "data-action", "data-chart", "data-range"]
    .filter((a) => node.hasAttribute(a))
    .map((a) => "[" + a + '="' + CSS.escape(node.getAttribute(a)) + '"]');
  return names.length ? node.tagName.toLowerCase() + names.join("") : null;
}

// ---- talking to the host ----------------------------------------------

class Refused extends Error {
  constructor(status, text) { super(text); this.status = status; }
}

async function api(path, options) {
  const opts = Object.assign({ method: "GET" }, options || {});
  const headers = {};
  if (opts.method !== "GET") headers["X-CSRF-Token"] = session.csrf || "";
  if (opts.json !== undefined) { headers["Content-Type"] = "application/json"; opts.body = JSON.stringify(opts.json); }
  let response;
  try {
    response = await fetch("/console/api" + path, { method: opts.method, headers, body: opts.body, credentials: "same-origin", cache: "no-store" });
  } catch (e) {
    // No answer at all: the host is down or restarting (a restart also ends
    // every session, which the next answer will say).
    throw new Refused(0, "The host does not answer (" + e.message + "): it may be restarting. Live pages retry every second; reload this page once it is back.");
  }
  const text = await response.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (_) { body = { error: text }; }
  if (!response.ok) {
    if (response.status === 401 && !path.startsWith("/login")) {
      loginPage("Your session ended (" + ((body && body.error) || "401") + "). Log in again; a host restart ends every session.");
    }
    throw new Refused(response.status, (body && body.error) || response.status + " " + response.statusText);
  }
  return body;
}

const operate = () => session.scope === "operate";
const enc = encodeURIComponent;

// ---- pages -------------------------------------------------------------

function loginPage(notice) {
  refresh = null;
  session.scope = null;
  session.csrf = null;
  document.getElementById("who").textContent = "";
  document.getElementById("logout").hidden = true;
  document.getElementById("nav").replaceChildren();
  const token = el("input", { id: "token", type: "password", autocomplete: "current-password", required: true });
  const error = el("div", { id: "login-error" });
  const form = el("form", { class: "login", id: "login" },
    el("h1", {}, "idem console"),
    el("p", { class: "muted" }, "Log in with an admin token of this host (scope read or operate)."),
    notice ? message(notice) : null,
    el("label", {}, "Token", token),
    el("p", {}, el("button", { class: "primary", type: "submit" }, "Log in")),
    error);
  generation += 1;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const answer = await api("/login", { method: "POST", json: { token: token.value } });
      session.scope = answer.scope;
      session.csrf = answer.csrf;
      session.actor = answer.actor;
      loggedIn();
    } catch (e) {
      error.replaceChildren(message(e.message, true));
    }
  });
  show(generation, form);
  token.focus();
}

function loggedIn() {
  document.getElementById("who").textContent = (session.actor || "") + " · scope: " + session.scope;
  document.getElementById("logout").hidden = false;
  route();
}

function navFor(name) {
  const here = location.hash.split("?")[0];
  const link = (href, text) => el("a", { href, class: here === href ? "here" : null }, text);
  const items = [link("#/", "Overview"), link("#/outbox", "Outbox"), link("#/audit", "Audit")];
  if (name) {
    items.push(link("#/handler/" + enc(name), name), link("#/modules/" + enc(name), "Modules"), link("#/dead-letters/" + enc(name), "Dead letters"));
  }
  document.getElementById("nav").replaceChildren(...items);
}

function latency(l) {
  const ms = (v) => (v === null || v === undefined ? "–" : v >= 1000 ? v / 1000 + " s" : v + " ms");
  return "≤ " + ms(l.p50) + " / ≤ " + ms(l.p99);
}

function failuresText(failures) {
  const parts = Object.entries(failures || {}).filter(([, n]) => n > 0).map(([c, n]) => c + " " + fmt(n));
  return parts.length ? parts.join(", ") : "none";
}

// The whole group, as every host records it in PostgreSQL: the hosts and
// which of them owns each partition.
function fleetSection(fleet) {
  const ago = (t) => Math.max(0, Math.round((Date.now() - new Date(t).getTime()) / 1000)) + " s ago";
  const hosts = fleet.hosts.map((h) => el("tr", { "data-host": h.host },
    el("td", {}, h.host), el("td", {}, h.version), el("td", {}, h.admin || "–"),
    el("td", {}, new Date(h.started_at).toLocaleString()), el("td", {}, ago(h.seen_at)),
    el("td", {}, !h.alive ? el("span", { class: "pill notready" }, "gone") : h.not_ready.length ? el("span", { class: "pill notready", title: h.not_ready.join("; ") }, "not ready") : el("span", { class: "pill ready" }, "ready"))));
  const owners = fleet.partitions.map((p) => el("tr", { "data-owned": p.handler + "/" + p.topic + "/" + p.partition },
    el("td", {}, p.handler), el("td", {}, p.topic), num(p.partition), el("td", { "data-field": "host" }, p.owned ? p.host : "none (last: " + p.host + ")"),
    num(p.committed), num(p.lag), el("td", {}, p.held ? "paused by an operator" : p.paused ? "paused (queue full)" : "")));
  return el("section", { id: "fleet", "aria-label": "Fleet" },
    el("h2", {}, "Fleet: " + fleet.hosts.filter((h) => h.alive).length + " host(s)"),
    table(["Host", "idem", "Admin listener", "Started", "Last seen", "State"], hosts, { id: "fleet-hosts" }),
    table(["Handler", "Topic", "Partition", "Owned by", "committed", "lag", "~State"], owners, { id: "fleet-partitions" }));
}

async function overviewPage(gen) {
  const [data, fleet] = await Promise.all([api("/overview"), api("/fleet").catch(() => null)]);
  if (gen !== generation) return;
  navFor(null);
  const rows = data.handlers.map((h) => el("tr", { "data-handler": h.name },
    el("td", {}, el("a", { href: "#/handler/" + enc(h.name) }, h.name)),
    el("td", {}, h.version === null ? "native" : "v" + h.version),
    el("td", {}, el("span", { class: "pill " + (h.ready ? "ready" : "notready") }, h.ready ? "ready" : "not ready")),
    num(h.rates.processed, { "data-field": "processed-rate" }),
    num(h.rates.duplicates), num(h.rates.failed), num(h.rates.dead_lettered), num(h.rates.retries),
    num(h.lag, { "data-field": "lag" }),
    el("td", {}, spark(h.lag_history, "lag")),
    el("td", {}, spark(h.processed_history)),
    el("td", {}, latency(h.latency_ms)),
    el("td", { "data-field": "failures" }, failuresText(h.failures)),
    el("td", { class: "num", "data-field": "dead-lettered" },
      el("a", { href: "#/dead-letters/" + enc(h.name) }, h.totals ? fmt(h.totals.dead_lettered) : "–"))));
  const partitions = data.handlers.flatMap((h) => h.partitions.map((p) => el("tr", { "data-partition": h.name + "/" + p.topic + "/" + p.partition },
    el("td", {}, h.name), el("td", {}, p.topic), num(p.partition), num(p.lag, { "data-field": "lag" }),
    el("td", {}, spark(p.lag_history, "lag")), el("td", {}, p.assigned ? (p.held ? "paused by an operator" : p.paused ? "paused (queue full)" : "assigned") : "revoked"))));
  show(gen,
    el("h1", {}, "Handlers"),
    el("p", { class: "muted" }, "Rates over the last 5 s; lag and throughput over the last 2 minutes; latency from a record's timestamp to its commit, p50 / p99 over the last 10 s. Updated every second."),
    table(["Handler", "Module", "Readiness", "processed/s", "duplicates/s", "failed/s", "dead-lettered/s", "retries/s", "lag", "lag, 2 min", "processed/s, 2 min", "latency p50 / p99", "failures (total, by class)", "dead letters (total)"], rows, { id: "handlers" }),
    el("h2", {}, "Consumer lag per partition, this host"),
    table(["Handler", "Topic", "Partition", "lag", "lag, 2 min", "State"], partitions, { id: "partitions" }),
    fleet ? fleetSection(fleet) : message("The fleet is not available (the database did not answer).", true),
    el("p", { class: "muted", id: "updated" }, "Updated " + new Date(data.at || Date.now()).toLocaleTimeString()));
}

// ---- charts --------------------------------------------------------------

// The range the handler page's charts show, and the point a pointer or the
// arrow keys picked on each (by its time, so a refresh keeps it).
const charts = { range: "10m", picked: {} };
const RANGES = [["10m", "10 min"], ["1h", "1 hour"], ["24h", "24 hours"]];

function svgEl(tag, attrs, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

function clock(ms, range) {
  const d = new Date(ms);
  return range === "24h" ? d.toLocaleString([], { weekday: "short", hour: "2-digit", minute: "2-digit" }) : d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: range === "10m" ? "2-digit" : undefined });
}

// A line chart of `key` ("lag" or "rate") of `points`, with a y axis
// (0, half, top), an x axis (first, middle, last time) and a readout of
// the picked point; the chart takes the keyboard's arrows too.
function lineChart(kind, title, points, range) {
  const W = 640, H = 180, L = 64, R = 12, T = 10, B = 26;
  const key = kind === "lag" ? "lag" : "rate";
  const known = points.filter((p) => typeof p[key] === "number");
  const top = Math.max(1, ...known.map((p) => p[key]));
  const t0 = points.length ? points[0].at : 0, t1 = points.length ? points[points.length - 1].at : 1;
  const x = (t) => L + ((t - t0) / Math.max(1, t1 - t0)) * (W - L - R);
  const y = (v) => T + (1 - v / top) * (H - T - B);
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart " + kind, "data-chart": kind, "data-range": range, tabindex: 0, role: "img",
    "aria-label": title + " over the last " + RANGES.find(([r]) => r === range)[1] + ": " + (known.length ? "highest " + fmt(top) + ", latest " + fmt(known[known.length - 1][key]) : "no data yet") + ". Arrow keys read the points." });
  for (const v of [0, top / 2, top]) {
    svg.append(svgEl("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid" }),
      svgEl("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end", class: "axis", "data-axis": "y" }, fmt(Math.round(v * 10) / 10)));
  }
  if (points.length) {
    for (const [t, anchor] of [[t0, "start"], [(t0 + t1) / 2, "middle"], [t1, "end"]]) {
      svg.append(svgEl("text", { x: x(t), y: H - 8, "text-anchor": anchor, class: "axis", "data-axis": "x" }, clock(t, range)));
    }
  }
  // A gap where the value was not known, not a line across it.
  let d = "";
  let pen = false;
  for (const p of points) {
    if (typeof p[key] !== "number") { pen = false; continue; }
    d += (pen ? "L" : "M") + x(p.at).toFixed(1) + "," + y(p[key]).toFixed(1);
    pen = true;
  }
  svg.append(svgEl("path", { d, class: "line" }));
  const marker = svgEl("line", { y1: T, y2: H - B, class: "marker", visibility: "hidden" });
  const dot = svgEl("circle", { r: 4, class: "dot", visibility: "hidden" });
  svg.append(marker, dot);
  const readout = el("p", { class: "readout", "data-readout": kind }, known.length ? "Point at a time to read its value." : "No data yet: the host keeps a point a second from its start.");
  const pick = (i) => {
    const p = points[i];
    if (!p) return;
    charts.picked[kind] = p.at;
    marker.setAttribute("x1", x(p.at)); marker.setAttribute("x2", x(p.at)); marker.setAttribute("visibility", "visible");
    const value = typeof p[key] === "number" ? p[key] : null;
    if (value !== null) { dot.setAttribute("cx", x(p.at)); dot.setAttribute("cy", y(value)); dot.setAttribute("visibility", "visible"); } else dot.setAttribute("visibility", "hidden");
    readout.textContent = clock(p.at, range) + " — " + title + ": " + (value === null ? "not known" : fmt(value));
  };
  const nearest = (t) => points.reduce((best, p, i) => (Math.abs(p.at - t) < Math.abs(points[best].at - t) ? i : best), 0);
  svg.addEventListener("pointermove", (event) => {
    const box = svg.getBoundingClientRect();
    const vx = ((event.clientX - box.left) / box.width) * W;
    if (points.length) pick(nearest(t0 + ((vx - L) / (W - L - R)) * (t1 - t0)));
  });
  svg.addEventListener("keydown", (event) => {
    if (!points.length || (event.key !== "ArrowLeft" && event.key !== "ArrowRight")) return;
    event.preventDefault();
    const at = charts.picked[kind];
    const i = at === undefined ? points.length - 1 : nearest(at) + (event.key === "ArrowLeft" ? -1 : 1);
    pick(Math.max(0, Math.min(points.length - 1, i)));
  });
  if (charts.picked[kind] !== undefined && points.length) pick(nearest(charts.picked[kind]));
  return el("figure", { class: "chart" }, el("figcaption", {}, title), svg, readout);
}

function drainText(drain) {
  const span = (s) => (s < 90 ? s + " s" : s < 5400 ? Math.round(s / 60) + " min" : (s / 3600).toFixed(1) + " h");
  switch (drain.state) {
    case "caught_up": return "Caught up: no lag.";
    case "draining": return "The lag drains in about " + span(drain.seconds) + " at the last minute's pace (" + fmt(drain.per_second) + " records/s less each second).";
    case "not_draining": return "Not draining: the lag " + (drain.growing_per_second > 0 ? "grows by " + fmt(drain.growing_per_second) + " records/s" : "holds steady") + " over the last minute.";
    default: return "Time to drain: not known yet (a minute of lag is needed).";
  }
}

// The handler page's history: range buttons, when the lag drains, and the
// lag and throughput charts.
async function historySection(name) {
  const chart = await api("/handlers/" + enc(name) + "/history?range=" + charts.range);
  const buttons = RANGES.map(([r, label]) => {
    const b = el("button", { type: "button", "data-range": r, "aria-pressed": r === charts.range ? "true" : "false" }, label);
    b.addEventListener("click", () => { charts.range = r; charts.picked = {}; route(); });
    return b;
  });
  return el("section", { id: "history", "aria-label": "History" },
    el("h2", {}, "History"),
    el("div", { class: "ranges", role: "group", "aria-label": "Range" }, buttons),
    el("p", { id: "drain", "data-state": chart.drain.state }, drainText(chart.drain)),
    el("div", { class: "charts" },
      lineChart("lag", "lag (records)", chart.points, chart.range),
      lineChart("rate", "processed/s", chart.points, chart.range)),
    el("p", { class: "muted" }, "Kept by this host since it started: a point a second for 10 minutes, one every 10 s for 24 hours; each point drawn is the highest lag and the mean rate of its " + (chart.step_s || 1) + " s."));
}

// The audit trail: every change through the API or the console, newest
// first, with who made it and how it was answered.
async function auditPage(gen, query) {
  const params = new URLSearchParams(query || "");
  const asked = new URLSearchParams();
  for (const k of ["handler", "actor", "before"]) if (params.get(k)) asked.set(k, params.get(k));
  const trail = await api("/audit?" + asked.toString());
  if (gen !== generation) return;
  navFor(null);
  const filter = (k, v) => { const p = new URLSearchParams(); p.set(k, v); return "#/audit?" + p.toString(); };
  const rows = trail.entries.map((e) => el("tr", { "data-audit": String(e.id) },
    el("td", {}, new Date(e.at).toLocaleString()),
    el("td", {}, el("a", { href: filter("actor", e.actor) }, e.actor)),
    el("td", {}, e.via),
    el("td", { class: "wrap" }, e.action),
    el("td", {}, e.handler ? el("a", { href: filter("handler", e.handler) }, e.handler) : "–"),
    el("td", { class: "num" + (e.status >= 400 ? " bad" : "") }, String(e.status)),
    el("td", { class: "wrap" }, e.detail === null ? "" : JSON.stringify(e.detail)),
    el("td", {}, e.host), el("td", {}, e.peer || "–")));
  const narrowed = [...asked.entries()].filter(([k]) => k !== "before").map(([k, v]) => k + " = " + v).join(", ");
  const older = trail.next === null ? null : (() => { const p = new URLSearchParams(asked); p.set("before", String(trail.next)); return el("a", { href: "#/audit?" + p.toString(), id: "audit-older" }, "Older changes"); })();
  show(gen,
    el("h1", {}, "Audit trail"),
    el("p", { class: "muted" }, "Every change made through the admin API or this console — deploys, activations, replays, logins, tokens issued and revoked — with who made it. Reads are not recorded." + (narrowed ? " Showing " + narrowed + "." : "")),
    narrowed ? el("p", {}, el("a", { href: "#/audit" }, "Show every change")) : null,
    rows.length ? table(["When", "Who", "Via", "Action", "Handler", "Status", "Detail", "Host", "From"], rows, { id: "audit" }) : message("No changes recorded" + (narrowed ? " that match." : " yet.")),
    older);
}

// The outbox, as every host of the group shares it in PostgreSQL: per
// producer what waits for the relay, what failed for good, who relays;
// failed rows made pending again once their cause is fixed.
async function outboxPage(gen) {
  const outbox = await api("/outbox");
  if (gen !== generation) return;
  navFor(null);
  const age = (s) => (s === null || s === undefined ? "–" : s < 120 ? fmt(s) + " s" : s < 7200 ? fmt(s / 60) + " min" : fmt(s / 3600) + " h");
  const producers = outbox.producers.map((p) => el("tr", { "data-producer": p.producer },
    el("td", {}, p.producer), num(p.pending), el("td", { class: "num" + (p.oldest_pending_s > 60 ? " bad" : "") }, age(p.oldest_pending_s)),
    num(p.published), el("td", { class: "num" + (p.failed ? " bad" : "") }, fmt(p.failed)),
    el("td", {}, p.holder || (p.pending ? el("strong", { class: "bad" }, "no relay holds the lease") : "no relay"))));
  const selected = new Set();
  const count = el("span", { id: "outbox-selected" }, "0 selected");
  const outcome = el("div", { id: "redrive-outcome", role: "status" });
  const buttons = [];
  const redrive = async (body, button) => {
    if (body.all && button.dataset.confirm !== "1") {
      button.dataset.confirm = "1";
      button.textContent = "Confirm: make every failed row pending again";
      return;
    }
    buttons.forEach((b) => { b.disabled = true; });
    try {
      const r = await api("/outbox/redrive", { method: "POST", json: body });
      outboxNote = fmt(r.redriven) + " failed row(s) made pending again: the relay publishes them next.";
      route();
    } catch (e) {
      outcome.replaceChildren(message("Refused (" + e.status + "): " + e.message, true));
      buttons.forEach((b) => { b.disabled = false; });
    }
  };
  const changed = () => { count.textContent = selected.size + " selected"; if (buttons[0]) buttons[0].disabled = selected.size === 0; };
  const failed = outbox.failed.map((f) => {
    const box = el("input", { type: "checkbox", "data-select": "outbox-" + f.id, "aria-label": "Select failed row " + f.id });
    box.addEventListener("change", () => { if (box.checked) selected.add(f.id); else selected.delete(f.id); changed(); });
    return el("tr", { "data-failed": String(f.id) }, el("td", {}, box), el("td", { class: "num" }, String(f.id)), el("td", {}, f.producer),
      el("td", {}, f.topic), el("td", {}, f.key), el("td", {}, f.event_id), el("td", {}, new Date(f.failed_at).toLocaleString()),
      el("td", { class: "reason" }, f.failure || ""));
  });
  let actions = null;
  if (failed.length && operate()) {
    const one = el("button", { type: "button", class: "primary", "data-action": "redrive-selected" }, "Redrive selected");
    one.addEventListener("click", () => redrive({ ids: [...selected] }, one));
    const all = el("button", { type: "button", class: "danger", "data-action": "redrive-all" }, "Redrive every failed row");
    all.addEventListener("click", () => redrive({ all: true }, all));
    buttons.push(one, all);
    actions = el("p", { class: "inline", id: "outbox-actions" }, count, " ", one, " ", all);
  }
  const note = outboxNote;
  outboxNote = null;
  const reload = el("button", { type: "button", id: "outbox-reload" }, "Read again");
  reload.addEventListener("click", () => route());
  show(gen,
    el("h1", {}, "Outbox"),
    el("p", { class: "muted" }, "Events handlers emit, written in their transaction and published by one relay per producer (the host holding its lease). Read from PostgreSQL at " + new Date().toLocaleTimeString() + ": every host of the group sees the same."),
    note ? message(note) : null,
    producers.length ? table(["Producer", "Pending", "Oldest pending", "Published", "Failed", "Relay"], producers, { id: "producers" }) : message("No handler here emits, and the outbox is empty."),
    el("p", {}, reload),
    el("h2", {}, "Failed rows" + (outbox.failed.length ? " (" + fmt(outbox.failed.length) + (outbox.failed.length >= 100 ? ", the oldest 100" : "") + ")" : "")),
    failed.length ? null : el("p", { class: "muted" }, "None: the broker refused nothing for good."),
    actions, outcome,
    failed.length ? table(["~Select", "Row", "Producer", "Topic", "Key", "Event", "Failed at", "Why"], failed, { id: "outbox-failed" }) : null);
  changed();
}

let outboxNote = null;

// The ledger audit's badge: what nothing accounts for, else the last
// clean sweep (docs/guarantees.md, "The ledger audit").
function auditText(a) {
  if (a.unaccounted > 0) return fmt(a.unaccounted) + " record(s) unaccounted";
  if (a.unpublished > 0) return fmt(a.unpublished) + " emitted row(s) unpublished";
  if (a.clean_at) return "clean at " + new Date(a.clean_at * 1000).toLocaleTimeString();
  return "not swept yet";
}

function card(label, value, attrs) {
  return el("div", Object.assign({ class: "card" }, attrs || {}), el("div", { class: "value" }, value), el("div", { class: "label" }, label));
}

// An operator's pauses (POST /handlers/{name}/pause and /resume): every
// host of the group obeys within seconds. The handler-wide form outlives
// the page's refreshes (its reason is being typed) and asks for a
// confirmation; a partition's button acts at once (a pause is undone by
// its resume, and the outcome says what was done).
let pauseForm = null;
let pauseNote = null;

async function pauseAct(name, action, scope, reason) {
  try {
    const answer = await api("/handlers/" + enc(name) + "/" + action, { method: "POST", json: Object.assign({ reason: reason || "" }, scope) });
    pauseNote = message(answer.message);
  } catch (e) {
    pauseNote = message(e.message, true);
  }
  route();
}

function pauseControls(name) {
  if (pauseForm && pauseForm.dataset.handler === name) return pauseForm;
  const reason = el("input", { type: "text", id: "pause-reason", maxlength: 500, placeholder: "why (kept with the pause)" });
  const button = el("button", { type: "button", class: "danger", "data-action": "pause-handler" }, "Pause the handler");
  const box = el("span", {});
  button.addEventListener("click", () => {
    const yes = el("button", { type: "button", class: "danger", "data-confirm": "pause" }, "Confirm");
    const no = el("button", { type: "button" }, "Cancel");
    no.addEventListener("click", () => box.replaceChildren());
    yes.addEventListener("click", () => { box.replaceChildren(); pauseAct(name, "pause", {}, reason.value); reason.value = ""; });
    box.replaceChildren(" Pause every partition of " + name + " on every host? ", yes, no);
  });
  pauseForm = el("div", { class: "inline", id: "pause-form", "data-handler": name }, el("label", {}, "Reason", reason), button, box);
  return pauseForm;
}

function pausesSection(name, pauses) {
  const rows = pauses.map((p) => el("tr", { "data-pause": (p.topic || "*") + "/" + (p.partition < 0 ? "*" : p.partition) },
    el("td", {}, p.topic || "every topic"), el("td", {}, p.partition < 0 ? "every partition" : String(p.partition)),
    el("td", {}, p.paused_by), el("td", {}, new Date(p.paused_at).toLocaleString()), el("td", { class: "reason" }, p.reason || ""),
    el("td", {}, operate() ? button("Resume", () => pauseAct(name, "resume", p.topic ? { topic: p.topic, partition: p.partition < 0 ? null : p.partition } : {}), { "data-resume": (p.topic || "*") + "/" + (p.partition < 0 ? "*" : p.partition) }) : "")));
  return el("section", { id: "pauses", "aria-label": "Pauses" },
    el("h2", {}, pauses.length ? "Paused by an operator" : "Pauses"),
    pauseNote,
    rows.length ? table(["Topic", "Partition", "By", "Since", "Reason", "~Actions"], rows, { id: "pause-list" }) : el("p", { class: "muted" }, "Not paused."),
    operate() ? pauseControls(name) : el("p", { class: "muted" }, "Read-only session: pausing needs a token of scope operate."));
}

// An operator's rewind (POST /handlers/{name}/rewind): counted before it
// is asked. "Count" shows each partition's window against the dedup
// ledger; "Rewind" asks only with the inputs just counted (changing one
// withdraws it), and the host counts and checks again when asked. The
// form outlives the page's refreshes (it is being filled in).
let rewindForm = null;

function countsTable(counts) {
  const rows = counts.map((c) => el("tr", { "data-rewind-partition": String(c.partition) },
    num(c.partition), el("td", {}, fmt(c.to) + " … " + fmt(c.end)), num(c.records), num(c.applied_before), num(c.not_applied),
    num(c.past_retention), num(c.invalid)));
  return rows.length ? table(["Partition", "Window", "records", "applied already", "to run", "past retention", "invalid"], rows, { id: "rewind-counts" }) : null;
}

function rewindControls(name) {
  if (rewindForm && rewindForm.dataset.handler === name) return rewindForm;
  const to = el("input", { type: "text", id: "rewind-to", placeholder: "earliest, an offset, or 2026-12-04T09:00:00Z" });
  const partition = el("input", { type: "number", id: "rewind-partition", min: 0, placeholder: "every one" });
  const reason = el("input", { type: "text", id: "rewind-reason", maxlength: 500, placeholder: "why (kept with the rewind)" });
  const force = el("input", { type: "checkbox", id: "rewind-force" });
  const out = el("div", { id: "rewind-result", "aria-live": "polite" });
  const count = el("button", { type: "button", "data-action": "rewind-count" }, "Count");
  const go = el("button", { type: "button", class: "danger", "data-action": "rewind", disabled: true }, "Rewind");
  const asked = (dry) => ({ to: to.value.trim(), partition: partition.value === "" ? null : Number(partition.value),
    reason: reason.value, force: force.checked, dry_run: dry });
  let counted = null;
  const withdraw = () => { counted = null; go.disabled = true; };
  for (const input of [to, partition, reason, force]) input.addEventListener("input", () => { withdraw(); out.replaceChildren(); });
  const send = (body) => api("/handlers/" + enc(name) + "/rewind", { method: "POST", json: body });
  count.addEventListener("click", async () => {
    withdraw();
    out.replaceChildren(el("p", { class: "muted" }, "Counting the window…"));
    const body = asked(true);
    try {
      const answer = await send(body);
      out.replaceChildren(countsTable(answer.partitions), message(answer.message));
      if (answer.partitions.length) { counted = JSON.stringify(body); go.disabled = false; }
    } catch (e) {
      out.replaceChildren(message(e.message, true));
    }
  });
  go.addEventListener("click", async () => {
    const body = asked(false);
    // Only what was counted and shown, as it was asked.
    if (counted !== JSON.stringify(Object.assign({}, body, { dry_run: true }))) { withdraw(); return; }
    withdraw();
    try {
      const answer = await send(body);
      out.replaceChildren(countsTable(answer.partitions), message(answer.message));
    } catch (e) {
      out.replaceChildren(message(e.message, true));
    }
    route();
  });
  rewindForm = el("div", { id: "rewind-form", "data-handler": name },
    el("div", { class: "inline" }, el("label", {}, "To", to), el("label", {}, "Partition", partition), el("label", {}, "Reason", reason),
      el("label", {}, force, " past the dedup retention"), count, go),
    out);
  return rewindForm;
}

function rewindsSection(name, rewinds) {
  const rows = rewinds.map((r) => {
    const done = r.partitions.filter((p) => p.applied_at).length;
    return el("tr", { "data-rewind": String(r.id) }, num(r.id), el("td", {}, new Date(r.requested_at).toLocaleString()),
      el("td", {}, r.target), el("td", {}, r.requested_by), el("td", { "data-field": "rewound" }, done + " of " + r.partitions.length + " partitions"),
      el("td", { class: "reason" }, r.reason || ""));
  });
  return el("section", { id: "rewinds", "aria-label": "Rewinds" },
    el("h2", {}, "Rewinds"),
    rows.length ? table(["Id", "Asked", "To", "By", "Rewound", "Reason"], rows, { id: "rewind-list" }) : el("p", { class: "muted" }, "None asked."),
    operate() ? rewindControls(name) : el("p", { class: "muted" }, "Read-only session: rewinding needs a token of scope operate."));
}

// The handler's quarantine (GET /handlers/{name}/quarantine): its parked
// keys, oldest first, with the failure that parked each. Release (its
// events run again, in order) and dead-letter (its events go to the DLQ)
// each ask for a confirmation naming the key and how many events it holds.
let quarantineNote = null;

async function quarantineAct(name, action, k) {
  try {
    const answer = await api("/handlers/" + enc(name) + "/quarantine/" + action, { method: "POST", json: { key_base64: k.key_base64, events: k.events } });
    quarantineNote = message(answer.message);
  } catch (e) {
    quarantineNote = message(e.message, true);
  }
  route();
}

// The handler's rates (GET /handlers/{name}/throttles): its events' and
// its destinations', in force, as configured, and the waits they caused.
// A change (POST /handlers/{name}/throttle) names its target and rate and
// is in force on every host within 2 s; the form outlives the refreshes.
let throttleForm = null;
let throttleNote = null;

function rateText(r) {
  return r ? fmt(r.per_second) + "/s, burst " + fmt(r.burst) : "no limit";
}

function throttleControls(name) {
  if (throttleForm && throttleForm.dataset.handler === name) return throttleForm;
  const target = el("input", { type: "text", id: "throttle-target", placeholder: "events, or a host" });
  const rate = el("input", { type: "number", id: "throttle-rate", min: 0, step: "any", placeholder: "per second (empty: no limit)" });
  const reason = el("input", { type: "text", id: "throttle-reason", maxlength: 500, placeholder: "why" });
  const send = async (body) => {
    try {
      const answer = await api("/handlers/" + enc(name) + "/throttle", { method: "POST", json: body });
      throttleNote = message(answer.message);
    } catch (e) {
      throttleNote = message(e.message, true);
    }
    route();
  };
  const set = el("button", { type: "button", class: "danger", "data-action": "throttle-set" }, "Set");
  set.addEventListener("click", () => send({ target: target.value.trim(), per_second: rate.value === "" ? null : Number(rate.value), reason: reason.value }));
  const reset = el("button", { type: "button", "data-action": "throttle-reset" }, "Back to the config's");
  reset.addEventListener("click", () => send({ target: target.value.trim(), reset: true, reason: reason.value }));
  throttleForm = el("div", { class: "inline", id: "throttle-form", "data-handler": name },
    el("label", {}, "Target", target), el("label", {}, "Rate", rate), el("label", {}, "Reason", reason), set, reset);
  return throttleForm;
}

function throttlesSection(name, t) {
  if (!t) return null;
  const rows = t.throttles.map((r) => el("tr", { "data-throttle": r.target },
    el("td", {}, r.target), el("td", { "data-field": "in-force" }, rateText(r.in_force) + (r.changed ? " (changed)" : "")),
    el("td", {}, rateText(r.configured)), num(r.waited_seconds)));
  return el("section", { id: "throttles", "aria-label": "Throttles" },
    el("h2", {}, "Throttles"),
    throttleNote,
    rows.length ? table(["Target", "In force", "Configured", "waited (s)"], rows, { id: "throttle-list" }) : el("p", { class: "muted" }, "No rate: events and requests are not throttled."),
    operate() ? throttleControls(name) : el("p", { class: "muted" }, "Read-only session: changing a rate needs a token of scope operate."));
}

// The confirmation being asked, kept across the page's refreshes (each
// rebuilds the table): { name, key (base64), action }.
let quarantineAsk = null;

function quarantineActions(name, k) {
  const asking = quarantineAsk && quarantineAsk.name === name && quarantineAsk.key === k.key_base64 ? quarantineAsk.action : null;
  if (asking) {
    const what = asking === "release" ? "Run the " + fmt(k.events) + " parked event(s) of key " + k.key + " again, in order? "
      : "Send the " + fmt(k.events) + " parked event(s) of key " + k.key + " to the dead-letter topic? ";
    const yes = el("button", { type: "button", class: "danger", "data-confirm": asking }, "Confirm");
    const no = el("button", { type: "button" }, "Cancel");
    no.addEventListener("click", () => { quarantineAsk = null; route(); });
    yes.addEventListener("click", () => { quarantineAsk = null; yes.disabled = true; quarantineAct(name, asking, k); });
    return el("span", { class: "confirm" }, what, yes, no);
  }
  const ask = (action, label) => {
    const b = el("button", { type: "button", class: action === "dead-letter" ? "danger" : null, "data-quarantine-action": action }, label);
    b.addEventListener("click", () => { quarantineAsk = { name, key: k.key_base64, action }; route(); });
    return b;
  };
  return el("span", {}, ask("release", "Release"), " ", ask("dead-letter", "Dead-letter"));
}

function quarantineSection(name, q) {
  if (!q || (!q.quarantines && !q.keys.length)) return null;
  const rows = q.keys.map((k) => el("tr", { "data-parked-key": k.key_base64 },
    el("td", { class: "key" }, k.key), el("td", {}, k.topic + "/" + k.partition), el("td", { "data-field": "state" }, k.state),
    num(k.events, { "data-field": "events" }), num(k.first_offset), el("td", {}, new Date(k.parked_at).toLocaleString()),
    el("td", { class: "reason" }, k.first_failure), el("td", { class: "reason" }, k.last_failure),
    el("td", {}, operate() ? quarantineActions(name, k) : "")));
  const t = q.totals;
  return el("section", { id: "quarantine", "aria-label": "Quarantine" },
    el("h2", {}, "Quarantine" + (t.keys ? " (" + fmt(t.keys) + " keys, " + fmt(t.events) + " events)" : "")),
    quarantineNote,
    rows.length ? table(["Key", "Partition", "State", "events", "first offset", "Parked", "First failure", "Latest failure", "~Actions"], rows, { id: "parked-keys" })
      : el("p", { class: "muted" }, "No key parked."),
    operate() ? null : el("p", { class: "muted" }, "Read-only session: releasing needs a token of scope operate."));
}

function button(label, onClick, attrs) {
  const b = el("button", Object.assign({ type: "button" }, attrs || {}), label);
  b.addEventListener("click", () => { b.disabled = true; onClick(); });
  return b;
}

async function handlerPage(name, gen) {
  const [data, history, pauses, rewinds, parked, throttles] = await Promise.all([api("/handlers/" + enc(name)), historySection(name).catch((e) => message(e.message, true)),
    api("/handlers/" + enc(name) + "/pauses").then((r) => r.pauses).catch(() => []),
    api("/handlers/" + enc(name) + "/rewinds").then((r) => r.rewinds).catch(() => []),
    api("/handlers/" + enc(name) + "/quarantine").catch(() => null),
    api("/handlers/" + enc(name) + "/throttles").catch(() => null)]);
  if (gen !== generation) return;
  navFor(name);
  const s = data.summary;
  const d = data.detail;
  const partitions = s.partitions.map((p) => el("tr", { "data-partition": p.topic + "/" + p.partition },
    el("td", {}, p.topic), num(p.partition), el("td", {}, p.assigned ? "yes" : "no (revoked)"),
    el("td", { "data-field": "paused" }, p.held ? "paused by an operator" : p.paused ? "paused (queue full)" : "–"),
    num(p.position), num(p.end), num(p.lag, { "data-field": "lag" }), num(p.queued), el("td", {}, spark(p.lag_history, "lag")),
    el("td", {}, !operate() ? "" : p.held
      ? button("Resume", () => pauseAct(name, "resume", { topic: p.topic, partition: p.partition }), { "data-resume-partition": p.topic + "/" + p.partition })
      : button("Pause", () => pauseAct(name, "pause", { topic: p.topic, partition: p.partition }), { "data-pause-partition": p.topic + "/" + p.partition }))));
  const failures = d.recent_failures.map((f) => el("tr", {},
    el("td", {}, new Date(f.at).toLocaleString()), el("td", {}, f.class), el("td", {}, f.topic + "/" + f.partition + "@" + f.offset),
    num(f.attempts), el("td", { class: "reason" }, f.reason)));
  const batches = d.batches.histogram.filter((b) => b.transactions > 0).map((b) => el("tr", {}, el("td", {}, "≤ " + b.up_to), num(b.transactions)));
  const http = d.http.map((h) => el("tr", {}, el("td", {}, h.host), el("td", {}, h.status), num(h.requests)));
  const retries = d.http_retries.map((h) => el("tr", {}, el("td", {}, h.host), el("td", {}, h.reason), num(h.retries)));
  const versions = d.versions.map((v) => el("tr", {}, el("td", {}, "v" + v.version), num(v.processed), num(v.duplicates), num(v.failed)));
  show(gen,
    el("h1", {}, "Handler ", name),
    el("div", { class: "cards" },
      card("module version running", s.version === null ? "native" : "v" + s.version),
      card("processed/s", fmt(s.rates.processed), { "data-field": "processed-rate" }),
      card("lag", s.lag === null ? "–" : fmt(s.lag), { "data-field": "lag" }),
      card("latency p50 / p99", latency(s.latency_ms)),
      card("failures (total)", failuresText(s.failures)),
      card("ledger audit", auditText(s.audit), { "data-field": "audit", class: s.audit.unaccounted > 0 || s.audit.unpublished > 0 ? "card bad" : "card" }),
      card("mean batch", fmt(d.batches.mean) + " events")),
    history,
    pausesSection(name, pauses),
    el("h2", {}, "Partitions"),
    table(["Topic", "Partition", "Assigned", "Paused", "Committed offset", "End", "lag", "Queued", "lag, 2 min", "~Actions"], partitions, { id: "partitions" }),
    quarantineSection(name, parked),
    throttlesSection(name, throttles),
    rewindsSection(name, rewinds),
    el("h2", {}, "Recent failures"),
    failures.length ? table(["At", "Class", "Record", "attempts", "Reason"], failures, { id: "failures" }) : el("p", { class: "muted" }, "None since this host started."),
    el("h2", {}, "Events per module version (this host)"),
    table(["Version", "processed", "duplicates", "failed"], versions, { id: "versions" }),
    el("h2", {}, "Batch sizes (events per transaction)"),
    batches.length ? table(["Size", "transactions"], batches, { id: "batch-sizes" }) : el("p", { class: "muted" }, "No transaction yet."),
    el("h2", {}, "HTTP calls by host and status class"),
    http.length ? table(["Host", "Status", "requests"], http, { id: "http" }) : el("p", { class: "muted" }, "No request yet."),
    retries.length ? el("div", {}, el("h2", {}, "HTTP requests re-sent by the host"), table(["Host", "Reason", "retries"], retries, { id: "http-resent" })) : null);
}

async function modulesPage(name, gen, notice) {
  const [data, shadow, canary, captured] = await Promise.all([api("/handlers/" + enc(name) + "/modules"),
    api("/handlers/" + enc(name) + "/shadow").then((r) => r.shadow).catch(() => null),
    api("/handlers/" + enc(name) + "/canary").catch(() => null),
    api("/handlers/" + enc(name) + "/captures?limit=20").then((r) => r.captures).catch(() => null)]);
  if (gen !== generation) return;
  navFor(name);
  const active = data.active_version;
  const out = el("div", { id: "outcome" }, notice || null);
  const rows = data.versions.map((v) => {
    const counts = data.counts[String(v.version)] || { processed: 0, duplicates: 0, failed: 0 };
    const action = el("td", {});
    if (operate() && !v.active) {
      const verb = active !== null && v.version < active ? "Roll back to v" + v.version : "Activate v" + v.version;
      const button = el("button", { type: "button", "data-activate": v.version }, verb);
      button.addEventListener("click", () => {
        const yes = el("button", { type: "button", class: "danger", "data-confirm": v.version }, "Confirm");
        const no = el("button", { type: "button" }, "Cancel");
        const box = el("span", { class: "confirm" }, verb + "? ", yes, no);
        no.addEventListener("click", () => action.replaceChildren(button));
        yes.addEventListener("click", async () => {
          yes.disabled = true;
          try {
            const answer = await api("/handlers/" + enc(name) + "/activate?version=" + v.version, { method: "POST" });
            await modulesPage(name, gen, message(answer.message));
          } catch (e) {
            out.replaceChildren(message(e.message, true));
            action.replaceChildren(button);
          }
        });
        action.replaceChildren(box);
      });
      action.append(button);
    }
    return el("tr", { "data-version": v.version, class: v.active ? "selected" : null },
      el("td", {}, "v" + v.version, " ", v.active ? el("span", { class: "pill active" }, "active") : null,
        v.shadow ? el("span", { class: "pill shadow" }, "shadow") : null,
        v.canary_percent ? el("span", { class: "pill shadow" }, "canary " + v.canary_percent + "%") : null),
      el("td", { class: "sha", title: v.sha256 }, v.sha256.slice(0, 16) + "…"),
      num(v.size), el("td", {}, new Date(v.uploaded_at).toLocaleString()), el("td", {}, v.uploaded_by), el("td", {}, v.note || ""),
      num(counts.processed, { "data-field": "processed" }), num(counts.duplicates), num(counts.failed), action);
  });
  const parts = [
    el("h1", {}, "Modules of ", name),
    el("p", { class: "muted" }, "Running here: ", data.running_version === null ? "native" : "v" + data.running_version, ". Events per version are this host's since it started."),
    out,
    table(["Version", "sha256", "size (bytes)", "Uploaded", "By", "Note", "processed", "duplicates", "failed", "~Actions"], rows, { id: "versions" }),
    shadowSection(name, gen, shadow, out),
    canarySection(name, gen, canary, out),
    capturesSection(name, captured, out),
  ];
  if (operate()) parts.push(uploadForm(name, gen, out));
  else parts.push(el("p", { class: "muted" }, "Read-only session: uploads and activations need a token of scope operate."));
  show(gen, ...parts);
}

// A button of the modules page that acts after a confirmation naming what
// it does (`verb`): `method` on the handler's `path`, then the page again.
function confirmed(name, gen, out) {
  return (label, verb, method, path, data) => button(label, () => {
    const yes = el("button", { type: "button", class: "danger", "data-confirm": data }, "Confirm");
    const no = el("button", { type: "button" }, "Cancel");
    no.addEventListener("click", () => out.replaceChildren());
    yes.addEventListener("click", async () => {
      yes.disabled = true;
      try {
        const answer = await api("/handlers/" + enc(name) + path, { method });
        await modulesPage(name, gen, message(answer.message));
      } catch (e) { out.replaceChildren(message(e.message, true)); }
    });
    out.replaceChildren(el("p", { class: "confirm", role: "alert" }, verb + " ", yes, " ", no));
    yes.focus();
  }, { "data-action": data });
}

// The shadow version (docs/shadow.md): the report of where it and the
// active version differ on live events, and the two ways out of it.
function shadowSection(name, gen, r, out) {
  if (!r) return el("div", { id: "shadow" }, el("h2", {}, "Shadow"), el("p", { class: "muted" }, "No shadow version: upload one as a shadow to compare it with the active version on live events before activating it."));
  const t = r.total;
  const types = r.types.map((k) => el("tr", { "data-type": k.event_type }, el("td", {}, k.event_type), num(k.agree), num(k.differ), num(k.skipped)));
  const sides = (side, d) => el("td", { class: "reason" }, ...d.differs.map((f) => el("div", {}, f + ": " + JSON.stringify(d[side][f]))));
  const diffs = r.differences.map((d) => el("tr", { "data-event": d.event_id },
    el("td", {}, d.event_id), el("td", {}, d.topic + "/" + d.partition + "@" + d.offset), el("td", {}, d.differs.join(", ")),
    sides("active", d), sides("shadow", d)));
  const act = confirmed(name, gen, out);
  return el("div", { id: "shadow" },
    el("h2", {}, "Shadow: v" + r.version + " beside the active version"),
    el("p", { class: "muted" }, "Since " + (r.since ? new Date(r.since).toLocaleString() : "–") + ". Each shadowed event ran on both versions in a transaction that was rolled back; the shadow's requests were recorded, never sent."),
    el("div", { class: "cards" },
      card("agree", fmt(t.agree), { "data-field": "agree" }),
      card("differ", fmt(t.differ), { "data-field": "differ", class: t.differ > 0 ? "card bad" : "card" }),
      card("skipped", fmt(t.skipped), { "data-field": "skipped" })),
    types.length ? table(["Event type", "agree", "differ", "skipped"], types, { id: "shadow-types" }) : el("p", { class: "muted" }, "No event shadowed yet."),
    diffs.length ? el("div", {}, el("h3", {}, "First differing events"), table(["Event", "Record", "Differs in", "Active version", "Shadow"], diffs, { id: "shadow-differences" })) : null,
    operate() ? el("p", {}, act("Activate v" + r.version, "Make the shadow v" + r.version + " the active version on every host?", "POST", "/shadow/activate", "shadow-activate"), " ",
      act("Stop the shadow", "Stop running v" + r.version + " as a shadow on every host?", "DELETE", "/shadow", "shadow-stop")) : null);
}

// The canary (docs/canaries.md): its share, this host's executions per
// version, how the last canaries ended, and the two ways out of it.
function canarySection(name, gen, r, out) {
  if (!r) return null;
  const c = r.canary;
  const verdicts = r.verdicts.map((v) => el("tr", { "data-verdict": v.verdict },
    el("td", {}, new Date(v.at).toLocaleString()), el("td", {}, "v" + v.version), num(v.percent), el("td", {}, v.verdict), el("td", { class: "reason" }, v.reason), el("td", {}, v.by)));
  const ran = (v) => { const n = r.counts[String(v)] || { processed: 0, duplicates: 0, failed: 0 }; return n; };
  const act = confirmed(name, gen, out);
  return el("div", { id: "canary" },
    el("h2", {}, c ? "Canary: v" + c.version + " on " + c.percent + "% of the keys" : "Canary"),
    c ? el("div", { class: "cards" },
      card("canary executions (this host)", fmt(ran(c.version).processed + ran(c.version).duplicates + ran(c.version).failed), { "data-field": "canary-ran" }),
      card("canary failed (this host)", fmt(ran(c.version).failed), { "data-field": "canary-failed", class: ran(c.version).failed > 0 ? "card bad" : "card" })) :
      el("p", { class: "muted" }, "No canary: upload a version as a canary to run it on a share of the keys; the hosts roll it back by themselves when it fails more than the active version."),
    c && operate() ? el("p", {}, act("Promote v" + c.version, "Make the canary v" + c.version + " the active version on every host?", "POST", "/canary/promote", "canary-promote"), " ",
      act("Abort the canary", "Move every key back to the active version on every host?", "DELETE", "/canary", "canary-abort")) : null,
    verdicts.length ? table(["At", "Version", "percent", "Verdict", "Why", "By"], verdicts, { id: "canary-verdicts" }) : null);
}

// Captured live events (docs/replay.md): the newest, what each did, and
// the file `idem test --replay` runs a new version against.
function capturesSection(name, captures, out) {
  if (!captures) return null;
  const rows = captures.slice().reverse().map((c) => el("tr", { "data-capture": c.event.id },
    el("td", {}, new Date(c.captured_at).toLocaleString()), el("td", { class: "sha" }, c.event.id),
    el("td", {}, c.event.event_type), el("td", {}, c.version === null ? "file" : "v" + c.version),
    num(c.statements.length), num(c.requests.length), num(c.emits.length),
    el("td", { class: c.outcome.result === "ok" ? null : "reason" }, c.outcome.result)));
  const download = el("button", { type: "button", id: "captures-download" }, "Download the newest 1000 (JSON)");
  download.addEventListener("click", async () => {
    try {
      const answer = await api("/handlers/" + enc(name) + "/captures?limit=1000");
      const link = el("a", { href: URL.createObjectURL(new Blob([JSON.stringify(answer)], { type: "application/json" })), download: name + "-captures.json" });
      link.click();
      out.replaceChildren(message(answer.captures.length + " captures downloaded: idem test --handler " + name + " --component NEW.wasm --replay " + name + "-captures.json"));
    } catch (e) {
      out.replaceChildren(message(e.message, true));
    }
  });
  return el("div", { id: "captures" },
    el("h2", {}, "Captured events (replay tests)"),
    rows.length ? el("div", {}, el("p", { class: "muted" }, "Redacted as [handler.capture] says. Replay them against a new version with no database or network: idem test --replay FILE."),
      table(["Captured", "Event", "Type", "Version", "statements", "requests", "emits", "Outcome"], rows, { id: "captures-list" }), el("p", {}, download))
      : el("p", { class: "muted" }, "No captured event: [handler.capture] sample = 0.01 keeps one live event in 100, with what each statement and request got, for idem test --replay."));
}

function uploadForm(name, gen, out) {
  const file = el("input", { type: "file", id: "module-file", accept: ".wasm,application/wasm", required: true });
  const note = el("input", { type: "text", id: "module-note", maxlength: 200, placeholder: "what changed" });
  const asShadow = el("input", { type: "checkbox", id: "module-shadow" });
  const canaryShare = el("input", { type: "number", id: "module-canary", min: 1, max: 99, placeholder: "%" });
  const form = el("form", { class: "inline", id: "upload" },
    el("label", {}, "Component (.wasm)", file), el("label", {}, "Note", note),
    el("label", {}, asShadow, " as a shadow (compared on live events, never committed)"),
    el("label", {}, "or as a canary on", canaryShare, "% of the keys"),
    el("button", { class: "primary", type: "submit" }, "Upload"));
  // An upload activates on every host: it runs after a confirmation naming
  // the file, its size and the handler.
  const upload = async (chosen) => {
    out.replaceChildren(message("Uploading and validating " + chosen.name + "…"));
    try {
      const asked = new URLSearchParams();
      if (note.value) asked.set("note", note.value);
      if (asShadow.checked) asked.set("shadow", "true");
      if (canaryShare.value) asked.set("canary", canaryShare.value);
      const query = asked.toString() ? "?" + asked.toString() : "";
      const answer = await api("/handlers/" + enc(name) + "/module" + query, { method: "PUT", body: chosen });
      await modulesPage(name, gen, message(answer.message));
    } catch (e) {
      out.replaceChildren(message("Refused (" + e.status + "): " + e.message, true));
    }
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const chosen = file.files[0];
    if (!chosen) return;
    const yes = el("button", { type: "button", class: "danger", "data-confirm": "upload" }, "Confirm upload");
    const no = el("button", { type: "button" }, "Cancel");
    no.addEventListener("click", () => out.replaceChildren());
    yes.addEventListener("click", () => { yes.disabled = true; upload(chosen); });
    out.replaceChildren(el("p", { class: "confirm", role: "alert" },
      "Upload " + chosen.name + " (" + fmt(Math.ceil(chosen.size / 1024)) + " KiB) as the next version of " + name +
      (asShadow.checked ? " and run it as a shadow beside the active version on every host? "
        : canaryShare.value ? " and run it on " + canaryShare.value + "% of the keys on every host? " : " and activate it on every host? "), yes, " ", no));
    yes.focus();
  });
  return el("div", {}, el("h2", {}, "Deploy a version"), form);
}

// The dead-letter explorer. Its filters and page are the URL's query
// (#/dead-letters/NAME?class=…&after=…): Back goes to the previous search,
// a link shares one. The rows come from the dead-letter index; a record's
// full payload and headers from the topic when it is opened. What can be
// acted on is what is on screen: the selection holds rows of the page shown
// and is cleared whenever the rows change; while a page loads, every action
// is disabled.
const FILTERS = ["class", "pattern", "reason", "key", "event_id", "header", "field", "since", "until", "outcome", "order"];
const dlq = { name: null, query: "", selected: new Set(), open: null, outcome: null, busy: false };

function isoOf(localValue) {
  return localValue ? new Date(localValue).toISOString() : "";
}

function localOf(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  if (isNaN(d)) return "";
  return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19);
}

// The explorer's address for `params` (a URLSearchParams).
function explorerHash(name, params) {
  const q = params.toString();
  return "#/dead-letters/" + enc(name) + (q ? "?" + q : "");
}

// Goes to the explorer with `params`, unless it is there already.
function explore(name, params) {
  const hash = explorerHash(name, params);
  if (location.hash === hash) route(); else location.hash = hash;
}

// Disables every action and marks the rows stale while the next page loads.
function loading() {
  dlq.busy = true;
  dlq.selected.clear();
  for (const node of main.querySelectorAll("#dead-letters input, [data-action], [data-open]")) node.disabled = true;
  for (const box of main.querySelectorAll("#dead-letters input[data-select]")) box.checked = false;
  const count = main.querySelector("#selected-count");
  if (count) count.textContent = "0 selected";
  const rows = main.querySelector("#dead-letters");
  if (rows) { rows.setAttribute("aria-busy", "true"); rows.classList.add("stale"); }
  const status = main.querySelector("#explorer-status");
  if (status) status.replaceChildren(message("Loading…"));
}

function filterForm(name, params) {
  const field = (id, label, attrs) => el("label", {}, label, el("input", Object.assign({ id: "f-" + id, name: id, value: params.get(id) || "" }, attrs || {})));
  const cls = el("select", { id: "f-class", name: "class" }, ["", "invalid", "permanent", "retryable", "conflicting", "unavailable", "fatal", "unsealed", "forged"].map((c) =>
    el("option", { value: c, selected: (params.get("class") || "") === c }, c || "any class")));
  const outcome = el("select", { id: "f-outcome", name: "outcome" }, [["", "any"], ["none", "never replayed"], ["applied", "applied"], ["duplicate", "duplicate"], ["failed_again", "failed again"], ["discarded", "discarded"]].map(([v, t]) =>
    el("option", { value: v, selected: (params.get("outcome") || "") === v }, t)));
  const since = el("input", { type: "datetime-local", id: "f-since", step: 1, value: localOf(params.get("since")) });
  const until = el("input", { type: "datetime-local", id: "f-until", step: 1, value: localOf(params.get("until")) });
  const form = el("form", { class: "inline", id: "filters", role: "search" },
    el("label", {}, "Class", cls), field("reason", "Reason contains", { type: "search" }), field("key", "Key"), field("event_id", "Event id"),
    field("header", "Has header"), field("field", "Payload field = value", { placeholder: "customer.id=42" }),
    el("label", {}, "Failed since", since), el("label", {}, "Failed before", until), el("label", {}, "Replayed", outcome),
    el("button", { type: "submit" }, "Search"), " ", el("button", { type: "button", id: "f-clear" }, "Clear"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    for (const input of form.querySelectorAll("input[name], select[name]")) if (input.value) next.set(input.name, input.value);
    if (since.value) next.set("since", isoOf(since.value));
    if (until.value) next.set("until", isoOf(until.value));
    if (params.get("pattern")) next.set("pattern", params.get("pattern"));
    if (params.get("order")) next.set("order", params.get("order"));
    explore(name, next);
  });
  form.querySelector("#f-clear").addEventListener("click", () => explore(name, new URLSearchParams()));
  return form;
}

// The totals: a link per class and per reason pattern that narrows to it.
function totals(name, params, found) {
  const narrowed = (key, value) => { const p = new URLSearchParams(params); p.delete("after"); p.delete("before"); p.set(key, value); return explorerHash(name, p); };
  const classes = Object.entries(found.by_class).map(([c, n]) => el("li", {}, el("a", { href: narrowed("class", c) }, c), " ", fmt(n)));
  const patterns = found.patterns.map(([c, pattern, n]) => el("tr", {}, num(n), el("td", {}, c || "–"),
    el("td", { class: "reason" }, pattern === null ? "(no reason: unsealed)" : el("a", { href: narrowed("pattern", pattern) }, pattern))));
  return el("section", { id: "totals", "aria-label": "Totals" },
    el("p", {}, el("strong", { id: "total" }, fmt(found.total)), " dead letters match", found.took_ms !== undefined ? " (" + fmt(found.took_ms) + " ms)" : "", "."),
    classes.length ? el("ul", { class: "inline", id: "by-class" }, classes) : null,
    patterns.length ? table(["count", "class", "reason pattern (numbers, ids and quoted values masked)"], patterns, { id: "patterns" }) : null);
}

async function deadLettersPage(name, gen, query) {
  const params = new URLSearchParams(query || "");
  if (dlq.name !== name) Object.assign(dlq, { name, outcome: null, open: null });
  if (dlq.query !== params.toString()) { dlq.open = null; }
  dlq.query = params.toString();
  loading();
  const api_query = new URLSearchParams();
  for (const k of [...FILTERS, "after", "before"]) if (params.get(k)) api_query.set(k, params.get(k));
  const found = await api("/handlers/" + enc(name) + "/dead-letters/search?" + api_query.toString());
  if (gen !== generation) return;
  navFor(name);
  dlq.busy = false;
  dlq.selected = new Set();
  const outcome = el("div", { id: "replay-outcome" }, dlq.outcome);
  const detail = el("div", { id: "record-detail" });
  const count = el("span", { id: "selected-count" }, "0 selected");
  const acts = [];
  const act = (label, dry, scope, cls, kind) => {
    const b = el("button", { type: "button", class: cls || null, "data-action": (kind === "discard" ? "discard-" : dry ? "dry-" : "") + scope }, label);
    const run = kind === "discard" ? discard : replay;
    b.addEventListener("click", () => run(name, dry, scope, params, found.total, outcome, b));
    acts.push([b, scope]);
    return b;
  };
  const selectionChanged = () => {
    count.textContent = dlq.selected.size + " selected";
    for (const [b, scope] of acts) b.disabled = dlq.busy || (scope === "selected" ? dlq.selected.size === 0 : found.total === 0);
  };
  const rows = found.rows.map((r) => {
    const key = r.partition + ":" + r.offset;
    const label = "Select the dead letter at " + key;
    const box = el("input", { type: "checkbox", "data-select": key, "aria-label": label, disabled: r.authenticity !== "sealed" });
    box.addEventListener("change", () => { if (box.checked) dlq.selected.add(key); else dlq.selected.delete(key); selectionChanged(); });
    const open = el("button", { type: "button", "data-open": key, "aria-controls": "record-detail" }, "Open");
    open.addEventListener("click", () => openRecord(name, r, detail));
    return el("tr", { "data-record": key },
      el("td", {}, box), el("td", {}, new Date(r.failed_at).toLocaleString()),
      el("td", {}, r.class || ""), el("td", { class: "reason" }, r.reason || ""), num(r.attempts), num(r.replays),
      el("td", {}, r.key === null ? "–" : r.key),
      el("td", {}, r.source_topic ? r.source_topic + "/" + r.source_partition + "@" + r.source_offset : "–"),
      el("td", {}, key), el("td", {}, el("span", { class: "pill " + r.authenticity }, r.authenticity), r.envelope ? " envelope" : ""),
      el("td", { "data-field": "replayed" }, r.outcome ? r.outcome.replace("_", " ") : ""), el("td", {}, open));
  });
  const actions = operate()
    ? el("p", { class: "inline", id: "actions" }, count, " ", act("Dry run selected", true, "selected"), " ", act("Replay selected", false, "selected", "primary"), " ",
      act("Dry run all " + fmt(found.total) + " matching", true, "matching"), " ", act("Replay all " + fmt(found.total) + " matching", false, "matching", "danger"), " ",
      act("Discard selected", false, "selected", null, "discard"), " ", act("Discard all " + fmt(found.total) + " matching", false, "matching", "danger", "discard"),
      el("span", { class: "muted" }, "  A replay runs at most 200 records; a discarded record is never replayed (the topic keeps it); “all matching” asks you to confirm."))
    : el("p", { class: "muted" }, "Read-only session: replays need a token of scope operate.");
  const pager = (label, key, cursor, id) => {
    if (!cursor) return null;
    const p = new URLSearchParams(params); p.delete("after"); p.delete("before"); p.set(key, cursor);
    return el("a", { href: explorerHash(name, p), id, class: "button" }, label);
  };
  const order = new URLSearchParams(params); order.delete("after"); order.delete("before");
  const oldest = params.get("order") === "oldest";
  if (oldest) order.delete("order"); else order.set("order", "oldest");
  show(gen,
    el("h1", {}, "Dead letters of ", name),
    el("p", { class: "muted" }, "From the dead-letter index (the topic is the source of truth: idem dlq reindex). Only sealed records (written by idem) show their failure and may be replayed."),
    filterForm(name, params), totals(name, params, found), actions, el("div", { id: "explorer-status", role: "status" }), outcome,
    el("p", { class: "inline" }, pager("Newer", "before", found.previous, "newer"), " ", pager("Older", "after", found.next, "older"), " ",
      el("a", { href: explorerHash(name, order), id: "order" }, oldest ? "Newest first" : "Oldest first")),
    table(["~Select", "Failed at", "Class", "Reason", "attempts", "replays", "Key", "Original record", "DLQ position", "Seal", "Replayed", "~Details"], rows, { id: "dead-letters", "aria-busy": "false" }),
    detail);
  selectionChanged();
  if (dlq.open) {
    const r = found.rows.find((x) => x.partition + ":" + x.offset === dlq.open);
    if (r) openRecord(name, r, detail);
  }
}

// A record's detail: its headers and payload read from the topic.
async function openRecord(name, r, detail) {
  const key = r.partition + ":" + r.offset;
  dlq.open = key;
  detail.replaceChildren(message("Reading the record from the topic…"));
  try {
    const page = await api("/handlers/" + enc(name) + "/dead-letters?limit=1&before=" + r.partition + ":" + (r.offset + 1));
    const record = page.records.find((x) => x.partition === r.partition && x.offset === r.offset);
    if (dlq.open !== key) return;
    detail.replaceChildren(record ? recordDetail(record) : message("The topic no longer holds this record (retention removed it): idem dlq reindex drops its row.", true));
    const heading = detail.querySelector("h2");
    if (heading) { heading.setAttribute("tabindex", "-1"); heading.focus(); }
  } catch (e) {
    if (dlq.open === key) detail.replaceChildren(message("Refused (" + e.status + "): " + e.message, true));
  }
}

function recordDetail(r) {
  const headers = r.headers.map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", { class: "reason" }, v)));
  return el("div", { class: "detail" },
    el("h2", {}, "Record " + r.partition + ":" + r.offset),
    el("p", {}, "Failure: ", el("strong", {}, r.class || "?"), " after ", r.attempts || "?", " attempt(s)", r.replays ? ", replayed " + r.replays + " time(s)" : ""),
    el("p", { class: "reason", id: "detail-reason" }, r.reason || ""),
    el("p", {}, "Key: ", r.key === null ? "(none)" : r.key),
    headers.length ? table(["Header", "Value"], headers) : el("p", { class: "muted" }, "No headers."),
    el("h2", {}, "Payload (" + fmt(r.payload_bytes) + " bytes" + (r.payload_cut ? ", first 16 KiB shown" : "") + ")"),
    el("pre", { class: "payload", id: "payload" }, r.payload));
}

// What an action on dead letters acts on: the selected rows, or every one
// the filters match; `confirm` (a verb, how many, the button) asks first
// for the latter. Null: nothing to send yet (busy, nothing selected, or
// the button now asks for the confirmation).
function chosen(scope, params, confirm) {
  if (dlq.busy) return null;
  if (scope !== "matching") {
    return dlq.selected.size ? { records: [...dlq.selected].map((k) => k.split(":").map(Number)) } : null;
  }
  if (confirm && confirm.button.dataset.confirm !== "1") {
    confirm.button.dataset.confirm = "1";
    confirm.button.textContent = "Confirm: " + confirm.verb + " " + fmt(confirm.total) + " dead letters";
    return null;
  }
  const search = {};
  for (const k of FILTERS) if (params.get(k)) search[k] = params.get(k);
  return { search };
}

// Replays (or judges, dry) the selected rows, or every dead letter the
// filters match (after a confirmation naming how many).
async function replay(name, dry, scope, params, total, outcome, button) {
  const body = chosen(scope, params, !dry && { verb: "replay", total, button });
  if (!body) return;
  body.dry_run = dry;
  outcome.replaceChildren(message(dry ? "Dry run…" : "Replaying…"));
  try {
    const r = await api("/handlers/" + enc(name) + "/dead-letters/replay", { method: "POST", json: body });
    const verb = r.dry_run ? "would apply" : "applied";
    const summary = r.read + " read: " + verb + " " + r.applied + ", " + r.duplicates + " already processed, " + r.failed_again + " failed again" +
      (r.stale ? ", " + r.stale + " older than the dedup retention (left)" : "") + (r.unauthenticated ? ", " + r.unauthenticated + " unauthenticated (left)" : "") +
      (r.superseded ? ", " + r.superseded + " superseded by a later copy" : "") + (r.envelopes ? ", " + r.envelopes + " envelopes (left)" : "") +
      (r.discarded ? ", " + r.discarded + " discarded (left)" : "");
    const rows = r.outcomes.map((o) => el("tr", { "data-outcome": o.partition + ":" + o.offset }, el("td", {}, o.partition + ":" + o.offset),
      el("td", { "data-field": "outcome" }, r.dry_run && o.outcome === "applied" ? "would apply" : o.outcome.replace("_", " ")), el("td", { class: "reason" }, o.reason || "")));
    dlq.outcome = el("div", {}, message((r.dry_run ? "Dry run: " : "Replay: ") + summary), table(["DLQ position", "Outcome", "Reason"], rows, { id: "outcomes" }));
    if (r.dry_run) { outcome.replaceChildren(dlq.outcome); return; }
    // The originals now say what became of them: the page again, its
    // selection cleared (the rows changed).
    route();
  } catch (e) {
    outcome.replaceChildren(message("Refused (" + e.status + "): " + e.message, true));
  }
}

// Marks the selected rows, or every dead letter the filters match (after a
// confirmation naming how many), discarded: no replay runs them again.
async function discard(name, dry, scope, params, total, outcome, button) {
  const body = chosen(scope, params, { verb: "discard", total, button });
  if (!body) return;
  outcome.replaceChildren(message("Discarding…"));
  try {
    const r = await api("/handlers/" + enc(name) + "/dead-letters/discard", { method: "POST", json: body });
    dlq.outcome = el("div", { id: "discard-outcome" }, message("Discard: " + fmt(r.matched) + " matched, " + fmt(r.changed) + " discarded" +
      (r.matched > r.changed ? ", " + fmt(r.matched - r.changed) + " discarded already" : "") + ". idem dlq discard --restore with the same filters undoes it."));
    route();
  } catch (e) {
    outcome.replaceChildren(message("Refused (" + e.status + "): " + e.message, true));
  }
}

// ---- routing and refresh -------------------------------------------------

// A failed load of the page asked for at navigation `gen`.
function failed(e, gen) {
  if (e instanceof Refused && e.status === 401) return;
  show(gen === undefined ? generation : gen, message(e.message, true));
}

function decoded(part) {
  try { return decodeURIComponent(part); } catch (_) { return part; }
}

function route() {
  if (!session.scope) return;
  const gen = ++generation;
  const [path, query] = location.hash.replace(/^#\/?/, "").split("?");
  const [page, name] = path.split("/").map(decoded);
  refresh = null;
  const fail = (e) => failed(e, gen);
  if (page === "modules" && name) { modulesPage(name, gen).catch(fail); return; }
  if (page === "dead-letters" && name) { deadLettersPage(name, gen, query).catch(fail); return; }
  if (page === "audit") { auditPage(gen, query).catch(fail); return; }
  if (page === "outbox") { outboxPage(gen).catch(fail); return; }
  const run = page === "handler" && name ? () => handlerPage(name, gen) : () => overviewPage(gen);
  refresh = run;
  run().catch(fail);
}

// Every second, the page is read again and drawn anew, unless the
// operator is typing into one of its fields (a reason, a rewind's target):
// drawing moves the field, and a keystroke could land nowhere.
function typing() {
  const a = document.activeElement;
  return a !== null && main.contains(a) && a.matches("input:not([type=checkbox]):not([type=radio]), textarea, select");
}

setInterval(async () => {
  if (!refresh || refreshing || document.hidden || typing()) return;
  refreshing = true;
  const live = refresh;
  try { await live(); } catch (e) { if (refresh === live) failed(e); } finally { refreshing = false; }
}, 1000);

window.addEventListener("hashchange", route);
document.getElementById("logout").addEventListener("click", async () => {
  try { await api("/logout", { method: "POST" }); } catch (_) { /* the session is gone either way */ }
  loginPage("Logged out.");
});

(async () => {
  try {
    const s = await fetch("/console/api/session", { credentials: "same-origin", cache: "no-store" });
    if (!s.ok) { loginPage(); return; }
    const answer = await s.json();
    session.scope = answer.scope;
    session.csrf = answer.csrf;
    session.actor = answer.actor;
    loggedIn();
  } catch (e) {
    loginPage();
  }
})();
