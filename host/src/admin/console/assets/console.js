// The idem console. Plain JavaScript served as is: no build step.
//
// Every text that comes from the host (handler names, failure reasons,
// payloads, headers: much of it written by guests or producers) goes into
// the page as a text node (`el` below); nothing here parses HTML.
"use strict";

const main = document.getElementById("main");
const session = { scope: null, csrf: null };
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
  return el("table", attrs,
    el("thead", {}, el("tr", {}, headings.map((h, i) => el("th", { class: numeric(i) ? "num" : null }, h)))),
    el("tbody", {}, rows));
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
function show(gen, ...nodes) {
  if (gen !== generation) return;
  main.replaceChildren(...nodes.filter((n) => n !== null && n !== undefined));
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
  const response = await fetch("/console/api" + path, { method: opts.method, headers, body: opts.body, credentials: "same-origin", cache: "no-store" });
  const text = await response.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (_) { body = { error: text }; }
  if (!response.ok) {
    if (response.status === 401 && !path.startsWith("/login")) { loginPage("Your session ended: log in again."); }
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
      loggedIn();
    } catch (e) {
      error.replaceChildren(message(e.message, true));
    }
  });
  show(generation, form);
  token.focus();
}

function loggedIn() {
  document.getElementById("who").textContent = "scope: " + session.scope;
  document.getElementById("logout").hidden = false;
  route();
}

function navFor(name) {
  const here = location.hash;
  const link = (href, text) => el("a", { href, class: here === href ? "here" : null }, text);
  const items = [link("#/", "Overview")];
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

async function overviewPage(gen) {
  const data = await api("/overview");
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
    el("td", { "data-field": "failures" }, failuresText(h.failures))));
  const partitions = data.handlers.flatMap((h) => h.partitions.map((p) => el("tr", { "data-partition": h.name + "/" + p.topic + "/" + p.partition },
    el("td", {}, h.name), el("td", {}, p.topic), num(p.partition), num(p.lag, { "data-field": "lag" }),
    el("td", {}, spark(p.lag_history, "lag")), el("td", {}, p.assigned ? (p.paused ? "paused" : "assigned") : "revoked"))));
  show(gen,
    el("h1", {}, "Handlers"),
    el("p", { class: "muted" }, "Rates over the last 5 s; lag and throughput over the last 2 minutes; latency from a record's timestamp to its commit, p50 / p99 over the last 10 s. Updated every second."),
    table(["Handler", "Module", "Readiness", "processed/s", "duplicates/s", "failed/s", "dead-lettered/s", "retries/s", "lag", "lag, 2 min", "processed/s, 2 min", "latency p50 / p99", "failures (total)"], rows, { id: "handlers" }),
    el("h2", {}, "Consumer lag per partition"),
    table(["Handler", "Topic", "Partition", "lag", "lag, 2 min", "State"], partitions, { id: "partitions" }),
    el("p", { class: "muted", id: "updated" }, "Updated " + new Date(data.at || Date.now()).toLocaleTimeString()));
}

function card(label, value, attrs) {
  return el("div", Object.assign({ class: "card" }, attrs || {}), el("div", { class: "value" }, value), el("div", { class: "label" }, label));
}

async function handlerPage(name, gen) {
  const data = await api("/handlers/" + enc(name));
  if (gen !== generation) return;
  navFor(name);
  const s = data.summary;
  const d = data.detail;
  const partitions = s.partitions.map((p) => el("tr", {},
    el("td", {}, p.topic), num(p.partition), el("td", {}, p.assigned ? "yes" : "no (revoked)"), el("td", {}, p.paused ? "paused" : "–"),
    num(p.position), num(p.end), num(p.lag, { "data-field": "lag" }), num(p.queued), el("td", {}, spark(p.lag_history, "lag"))));
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
      card("mean batch", fmt(d.batches.mean) + " events")),
    el("h2", {}, "Partitions"),
    table(["Topic", "Partition", "Assigned", "Paused", "Committed offset", "End", "lag", "Queued", "lag, 2 min"], partitions, { id: "partitions" }),
    el("h2", {}, "Recent failures"),
    failures.length ? table(["At", "Class", "Record", "attempts", "Reason"], failures, { id: "failures" }) : el("p", { class: "muted" }, "None since this host started."),
    el("h2", {}, "Events per module version (this host)"),
    table(["Version", "processed", "duplicates", "failed"], versions, { id: "versions" }),
    el("h2", {}, "Batch sizes (events per transaction)"),
    batches.length ? table(["Size", "transactions"], batches) : el("p", { class: "muted" }, "No transaction yet."),
    el("h2", {}, "HTTP calls by host and status class"),
    http.length ? table(["Host", "Status", "requests"], http, { id: "http" }) : el("p", { class: "muted" }, "No request yet."),
    retries.length ? el("div", {}, el("h2", {}, "HTTP requests re-sent by the host"), table(["Host", "Reason", "retries"], retries)) : null);
}

async function modulesPage(name, gen, notice) {
  const data = await api("/handlers/" + enc(name) + "/modules");
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
      el("td", {}, "v" + v.version, " ", v.active ? el("span", { class: "pill active" }, "active") : null),
      el("td", { class: "sha", title: v.sha256 }, v.sha256.slice(0, 16) + "…"),
      num(v.size), el("td", {}, new Date(v.uploaded_at).toLocaleString()), el("td", {}, v.uploaded_by), el("td", {}, v.note || ""),
      num(counts.processed, { "data-field": "processed" }), num(counts.duplicates), num(counts.failed), action);
  });
  const parts = [
    el("h1", {}, "Modules of ", name),
    el("p", { class: "muted" }, "Running here: ", data.running_version === null ? "native" : "v" + data.running_version, ". Events per version are this host's since it started."),
    out,
    table(["Version", "sha256", "size (bytes)", "Uploaded", "By", "Note", "processed", "duplicates", "failed", ""], rows, { id: "versions" }),
  ];
  if (operate()) parts.push(uploadForm(name, gen, out));
  else parts.push(el("p", { class: "muted" }, "Read-only session: uploads and activations need a token of scope operate."));
  show(gen, ...parts);
}

function uploadForm(name, gen, out) {
  const file = el("input", { type: "file", id: "module-file", accept: ".wasm,application/wasm", required: true });
  const note = el("input", { type: "text", id: "module-note", maxlength: 200, placeholder: "what changed" });
  const form = el("form", { class: "inline", id: "upload" },
    el("label", {}, "Component (.wasm)", file), el("label", {}, "Note", note),
    el("button", { class: "primary", type: "submit" }, "Upload and activate"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const chosen = file.files[0];
    if (!chosen) return;
    out.replaceChildren(message("Uploading and validating " + chosen.name + "…"));
    try {
      const query = note.value ? "?note=" + enc(note.value) : "";
      const answer = await api("/handlers/" + enc(name) + "/module" + query, { method: "PUT", body: chosen });
      await modulesPage(name, gen, message(answer.message));
    } catch (e) {
      out.replaceChildren(message("Refused (" + e.status + "): " + e.message, true));
    }
  });
  return el("div", {}, el("h2", {}, "Deploy a version"), form);
}

// The dead-letter page keeps its filters and selection while open.
const dlq = { name: null, filters: {}, before: null, page: null, selected: new Set(), open: null };

function isoOf(localValue) {
  return localValue ? new Date(localValue).toISOString() : "";
}

async function deadLettersPage(name, gen) {
  if (dlq.name !== name) Object.assign(dlq, { name, filters: {}, before: null, page: null, selected: new Set(), open: null });
  const since = el("input", { type: "datetime-local", id: "since", step: 1, value: dlq.filters.sinceLocal || "" });
  const until = el("input", { type: "datetime-local", id: "until", step: 1, value: dlq.filters.untilLocal || "" });
  const cls = el("select", { id: "class" }, ["", "invalid", "permanent", "retryable", "conflicting", "unavailable", "fatal"].map((c) =>
    el("option", { value: c, selected: (dlq.filters.class || "") === c }, c || "any class")));
  const filters = el("form", { class: "inline", id: "filters" }, el("label", {}, "Failed since", since), el("label", {}, "Failed before", until),
    el("label", {}, "Class", cls), el("button", { type: "submit" }, "Show"));
  filters.addEventListener("submit", (event) => {
    event.preventDefault();
    dlq.filters = { sinceLocal: since.value, untilLocal: until.value, since: isoOf(since.value), until: isoOf(until.value), class: cls.value };
    dlq.before = null;
    dlq.selected.clear();
    const again = ++generation;
    deadLettersPage(name, again).catch((e) => failed(e, again));
  });
  const query = new URLSearchParams();
  if (dlq.filters.since) query.set("since", dlq.filters.since);
  if (dlq.filters.until) query.set("until", dlq.filters.until);
  if (dlq.filters.class) query.set("class", dlq.filters.class);
  if (dlq.before) query.set("before", dlq.before);
  const page = await api("/handlers/" + enc(name) + "/dead-letters?" + query.toString());
  if (gen !== generation) return;
  navFor(name);
  dlq.page = page;
  const outcome = el("div", { id: "replay-outcome" });
  const detail = el("div", { id: "record-detail" });
  const rows = page.records.map((r) => {
    const key = r.partition + ":" + r.offset;
    const box = el("input", { type: "checkbox", "data-select": key, checked: dlq.selected.has(key), disabled: r.authenticity !== "sealed" });
    box.addEventListener("change", () => { if (box.checked) dlq.selected.add(key); else dlq.selected.delete(key); });
    const open = el("button", { type: "button", "data-open": key }, "Open");
    open.addEventListener("click", () => { dlq.open = key; detail.replaceChildren(recordDetail(r)); });
    return el("tr", { "data-record": key },
      el("td", {}, box), el("td", {}, r.failed_at ? new Date(r.failed_at).toLocaleString() : "–"),
      el("td", {}, r.class || ""), el("td", { class: "reason" }, r.reason || ""), num(r.attempts === null ? null : Number(r.attempts)), num(r.replays),
      el("td", {}, r.original_topic ? r.original_topic + "/" + r.original_partition + "@" + r.original_offset : "–"),
      el("td", {}, key), el("td", {}, el("span", { class: "pill " + r.authenticity }, r.authenticity), r.envelope ? " envelope" : ""), el("td", {}, open));
  });
  const act = (label, dry, range, cls) => {
    const b = el("button", { type: "button", class: cls || null, "data-action": (dry ? "dry-" : "") + (range ? "range" : "selected") }, label);
    b.addEventListener("click", () => replay(name, dry, range, outcome));
    return b;
  };
  const actions = operate()
    ? el("p", { class: "inline" }, act("Dry run selected", true, false), " ", act("Replay selected", false, false, "primary"), " ",
      act("Dry run range", true, true), " ", act("Replay range", false, true, "danger"),
      el("span", { class: "muted" }, "  The range is the filters above (at most 200 records)."))
    : el("p", { class: "muted" }, "Read-only session: replays need a token of scope operate.");
  const older = page.older ? el("button", { type: "button", id: "older" }, "Older records") : null;
  if (older) older.addEventListener("click", () => {
    dlq.before = Object.entries(page.older).map(([p, o]) => p + ":" + o).join(",");
    const again = ++generation;
    deadLettersPage(name, again).catch((e) => failed(e, again));
  });
  show(gen,
    el("h1", {}, "Dead letters of ", name),
    el("p", { class: "muted" }, page.topic + ": " + page.records.length + " shown of " + page.scanned + " read, newest failure first. Only sealed records (written by idem) show their failure and may be replayed."),
    page.note ? message(page.note) : null,
    filters, actions, outcome,
    table(["", "Failed at", "Class", "Reason", "attempts", "replays", "Original record", "DLQ position", "Seal", ""], rows, { id: "dead-letters" }),
    older, detail);
  if (dlq.open) {
    const r = page.records.find((x) => x.partition + ":" + x.offset === dlq.open);
    if (r) detail.replaceChildren(recordDetail(r));
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

async function replay(name, dry, range, outcome) {
  const body = { dry_run: dry };
  if (range) {
    if (!dlq.filters.since && !dlq.filters.until) { outcome.replaceChildren(message("Set “failed since” or “failed before” for a range.", true)); return; }
    if (dlq.filters.since) body.since = dlq.filters.since;
    if (dlq.filters.until) body.until = dlq.filters.until;
    if (dlq.filters.class) body.class = dlq.filters.class;
  } else {
    if (!dlq.selected.size) { outcome.replaceChildren(message("Select records first.", true)); return; }
    body.records = [...dlq.selected].map((k) => k.split(":").map(Number));
  }
  outcome.replaceChildren(message(dry ? "Dry run…" : "Replaying…"));
  try {
    const r = await api("/handlers/" + enc(name) + "/dead-letters/replay", { method: "POST", json: body });
    const verb = r.dry_run ? "would apply" : "applied";
    const summary = r.read + " read: " + verb + " " + r.applied + ", " + r.duplicates + " already processed, " + r.failed_again + " failed again" +
      (r.stale ? ", " + r.stale + " older than the dedup retention (left)" : "") + (r.unauthenticated ? ", " + r.unauthenticated + " unauthenticated (left)" : "") +
      (r.superseded ? ", " + r.superseded + " superseded by a later copy" : "") + (r.envelopes ? ", " + r.envelopes + " envelopes (left)" : "");
    const rows = r.outcomes.map((o) => el("tr", { "data-outcome": o.partition + ":" + o.offset }, el("td", {}, o.partition + ":" + o.offset),
      el("td", { "data-field": "outcome" }, r.dry_run && o.outcome === "applied" ? "would apply" : o.outcome.replace("_", " ")), el("td", { class: "reason" }, o.reason || "")));
    outcome.replaceChildren(message((r.dry_run ? "Dry run: " : "Replay: ") + summary), table(["DLQ position", "Outcome", "Reason"], rows, { id: "outcomes" }));
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
  const [page, name] = location.hash.replace(/^#\/?/, "").split("/").map(decoded);
  refresh = null;
  const fail = (e) => failed(e, gen);
  if (page === "modules" && name) { modulesPage(name, gen).catch(fail); return; }
  if (page === "dead-letters" && name) { deadLettersPage(name, gen).catch(fail); return; }
  const run = page === "handler" && name ? () => handlerPage(name, gen) : () => overviewPage(gen);
  refresh = run;
  run().catch(fail);
}

setInterval(async () => {
  if (!refresh || refreshing || document.hidden) return;
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
    loggedIn();
  } catch (e) {
    loginPage();
  }
})();
