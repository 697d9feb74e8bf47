// The operator console in a real browser: Debian's Chromium, driven by
// Playwright. tests/tests/admin/console.rs starts the host (Apache Kafka,
// PostgreSQL, the billing handler) and runs this script; the two talk over
// stdin/stdout: this script prints `need <step>` when it wants the test to
// act (produce a stream, dead-letter a record, ...) and the test answers
// `done <step> <json>`. Any failed check exits non-zero naming it.
//
// Screenshots of each page, with the run's data, go to $SHOTS.

import assert from "node:assert/strict";
import http from "node:http";
import readline from "node:readline";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { chromium } from "playwright-core";

// axe-core, injected into each page by a context that may (bypassCSP): the
// console's own CSP allows no script but its own.
const axeSource = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");

const url = process.env.CONSOLE_URL; // http://localhost:PORT
const operateToken = process.env.OPERATE_TOKEN;
const readToken = process.env.READ_TOKEN;
const shots = process.env.SHOTS;
const handler = "billing";

const answers = readline.createInterface({ input: process.stdin });
const pending = [];
answers.on("line", (line) => pending.shift()?.(line));

// Asks the test to do `step`; resolves with its JSON answer.
function need(step) {
  return new Promise((resolve, reject) => {
    pending.push((line) => {
      const [word, name, ...rest] = line.split(" ");
      if (word !== "done" || name !== step) reject(new Error(`asked for ${step}, got: ${line}`));
      else resolve(JSON.parse(rest.join(" ") || "null"));
    });
    process.stdout.write(`need ${step}\n`);
  });
}

function log(text) {
  process.stderr.write(`console.mjs: ${text}\n`);
}

async function shot(page, name) {
  await page.screenshot({ path: `${shots}/${name}.png`, fullPage: true });
  log(`screenshot ${name}.png`);
}

// Waits until `probe()` returns a truthy value (polling), naming `what`.
async function until(what, probe, seconds = 60) {
  const end = Date.now() + seconds * 1000;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > end) throw new Error(`not within ${seconds} s: ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

const number = (text) => (text === null || text.trim() === "–" ? null : Number(text.replace(/[^0-9.]/g, "")));

// One raw request to the console, with chosen headers (a browser cannot
// forge Host; an attacker's client can).
function raw(method, path, headers) {
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    const request = http.request({ host: "127.0.0.1", port: target.port, method, path, headers }, (response) => {
      let body = "";
      response.on("data", (c) => (body += c));
      response.on("end", () => resolve({ status: response.statusCode, body }));
    });
    request.on("error", reject);
    request.end();
  });
}

async function login(page, token) {
  await page.goto(`${url}/console/`);
  await page.locator("#token").fill(token);
  await page.locator("#login button[type=submit]").click();
  await page.locator("#logout").waitFor({ state: "visible" });
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"],
});
try {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  const page = await context.newPage();
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") pageErrors.push(m.text()); });

  // ---- login ----
  await page.goto(`${url}/console/`);
  await page.locator("#token").fill("not-the-token");
  await page.locator("#login button[type=submit]").click();
  await page.locator("#login-error").getByText("wrong token").waitFor();
  await shot(page, "login");
  // More wrong tries from this address than the limit (every browser
  // behind a proxy shares one address): they are slowed, and the right
  // token is still let in at once.
  for (let i = 0; i < 10; i++) {
    await page.locator("#token").fill(`wrong-guess-${i}`);
    await Promise.all([
      page.waitForResponse((r) => r.url().endsWith("/console/api/login")),
      page.locator("#login button[type=submit]").click(),
    ]);
  }
  await page.locator("#login-error").getByText("too many wrong tokens").waitFor();
  pageErrors.length = 0; // the 401s and 429 above are logged by Chromium as failed resources
  await login(page, operateToken);
  const cookies = await context.cookies();
  const session = cookies.find((c) => c.name === "idem_console");
  assert.ok(session, "a session cookie");
  assert.equal(session.httpOnly, true, "the session cookie is HttpOnly");
  assert.equal(session.sameSite, "Strict", "the session cookie is SameSite=Strict");
  assert.equal(await page.evaluate(() => document.cookie), "", "the page's script cannot read the session cookie");

  // ---- overview: lag rises with a stream, then falls to 0 ----
  await page.locator("#handlers").waitFor();
  const lagCell = page.locator(`#handlers tr[data-handler=${handler}] td[data-field=lag]`);
  const stream = need("stream"); // the test produces while the browser watches
  const peak = await until("lag above 0 on the overview", async () => {
    const lag = number(await lagCell.textContent());
    return lag > 0 ? lag : null;
  }, 120);
  log(`lag seen at ${peak}`);
  await shot(page, "overview-draining");
  await stream;
  await until("lag back to 0 on the overview", async () => number(await lagCell.textContent()) === 0, 180);
  await page.waitForTimeout(2500); // the sparklines show the fall
  await shot(page, "overview");

  // ---- a dead-lettered record whose payload holds markup ----
  const poison = await need("poison");
  await page.goto(`${url}/console/#/handler/${handler}`);
  await page.locator("#failures").getByText("HTTP 422").first().waitFor({ timeout: 30000 });
  await page.locator("#http").getByText("2xx").waitFor();

  // ---- history: axes, a value under the pointer, ranges, time to drain ----
  const lagChart = page.locator('#history svg[data-chart="lag"]');
  await lagChart.waitFor();
  assert.equal(await lagChart.locator('text[data-axis="y"]').count(), 3, "0, half and the top on the y axis");
  assert.equal(await lagChart.locator('text[data-axis="x"]').count(), 3, "first, middle and last time on the x axis");
  const history = await page.evaluate(async (h) => (await fetch(`/console/api/handlers/${h}/history?range=10m`)).json(), handler);
  const lagPeak = Math.max(...history.points.map((p) => p.lag || 0));
  assert.ok(lagPeak > 0, "the drain of 6,000 orders is in the lag's history: " + JSON.stringify(history.points.slice(-5)));
  // The history is drawn again as new points come: a chart replaced while
  // it is measured has no box for that moment.
  const box = await until("the lag chart laid out", () => lagChart.boundingBox(), 10);
  await page.mouse.move(box.x + box.width * 0.6, box.y + box.height / 2);
  const read = await page.locator('[data-readout="lag"]').textContent();
  assert.match(read, /— lag \(records\): [0-9,]+$/, read);
  const readValue = Number(read.split(": ").pop().replace(/,/g, ""));
  assert.ok(readValue <= lagPeak, `${readValue} is a point of the chart (peak ${lagPeak})`);
  await lagChart.focus();
  await page.keyboard.press("ArrowLeft");
  assert.match(await page.locator('[data-readout="lag"]').textContent(), /— lag \(records\): /, "the arrows read points too");
  assert.match(await page.locator("#drain").textContent(), /Caught up|drains in about|Not draining|not known yet/);
  await page.locator('#history button[data-range="1h"]').click();
  await page.locator('#history svg[data-chart="lag"][data-range="1h"]').waitFor();
  assert.equal(await page.locator('#history button[data-range="1h"]').getAttribute("aria-pressed"), "true");
  const ranged = await page.evaluate(async (h) => (await fetch(`/console/api/handlers/${h}/history?range=9y`)).status, handler);
  assert.equal(ranged, 400, "an unknown range is refused");
  await page.locator('#history button[data-range="10m"]').click();
  await page.locator('#history svg[data-chart="lag"][data-range="10m"]').waitFor();
  await page.mouse.move(box.x + box.width * 0.6, box.y + box.height / 2);
  await shot(page, "handler");
  // The ledger audit's badge: swept or not yet, never unaccounted on a healthy run.
  assert.match(await page.locator('.card[data-field="audit"]').textContent(), /(clean at|not swept yet)ledger audit/);

  // ---- a pause of the handler: confirmed, shown on every partition, resumed ----
  await page.locator("#pause-reason").fill("browser test");
  await page.locator('button[data-action="pause-handler"]').click();
  await page.locator('button[data-confirm="pause"]').click();
  await page.locator('#pause-list tr[data-pause="*/*"]').waitFor({ timeout: 15000 });
  assert.match(await page.locator("#pauses").textContent(), /browser test/, "the reason is shown with the pause");
  const pausedCells = async () => page.locator('#partitions td[data-field="paused"]').allTextContents();
  await until("every partition paused by an operator", async () => {
    const cells = await pausedCells();
    return cells.length > 0 && cells.every((c) => c === "paused by an operator");
  }, 30);
  await shot(page, "handler-paused");
  await page.locator('#pause-list button[data-resume="*/*"]').click();
  await page.locator("#pauses").getByText("Not paused.").waitFor({ timeout: 15000 });
  await until("every partition runs again", async () => (await pausedCells()).every((c) => c !== "paused by an operator"), 30);

  // ---- one partition paused from its row (at once), the others running ----
  const firstRow = page.locator("#partitions tr[data-partition]").first();
  const which = await firstRow.getAttribute("data-partition");
  await page.locator(`button[data-pause-partition="${which}"]`).click();
  const heldCell = page.locator(`#partitions tr[data-partition="${which}"] td[data-field="paused"]`);
  await until("the partition paused by an operator", async () => (await heldCell.textContent()) === "paused by an operator", 30);
  assert.equal((await pausedCells()).filter((c) => c === "paused by an operator").length, 1, "only that partition");
  await page.locator(`button[data-resume-partition="${which}"]`).click();
  await until("the partition runs again", async () => (await heldCell.textContent()) !== "paused by an operator", 30);

  // ---- a rewind: counted first, asked only as counted, then applied ----
  const summary = await page.evaluate(async (h) => (await (await fetch(`/console/api/handlers/${h}`)).json()).summary, handler);
  // Not partition 0: its last record is the dead-lettered poison.
  const back = summary.partitions.find((p) => p.assigned && p.partition !== 0 && p.position >= 3);
  assert.ok(back, "a partition with records to rewind: " + JSON.stringify(summary.partitions));
  const rewindButton = page.locator('button[data-action="rewind"]');
  await page.locator("#rewind-to").fill(String(back.position - 3));
  await page.locator("#rewind-partition").fill(String(back.partition));
  assert.equal(await rewindButton.isDisabled(), true, "nothing to rewind before the window is counted");
  await page.locator('button[data-action="rewind-count"]').click();
  await page.locator(`#rewind-counts tr[data-rewind-partition="${back.partition}"]`).waitFor({ timeout: 30000 });
  assert.match(await page.locator("#rewind-result").textContent(), /3 record\(s\) in the window, 3 of them applied already/);
  assert.equal(await rewindButton.isDisabled(), false);
  await page.locator("#rewind-reason").fill("browser test");
  assert.equal(await rewindButton.isDisabled(), true, "a changed input withdraws what was counted");
  await page.locator('button[data-action="rewind-count"]').click();
  await until("counted again", async () => !(await rewindButton.isDisabled()), 30);
  await rewindButton.click();
  await page.locator("#rewind-result").getByText(/rewind \d+ asked/).waitFor({ timeout: 30000 });
  await until("the rewind applied by the partition's owner", async () => {
    const cell = page.locator('#rewind-list td[data-field="rewound"]').first();
    return (await cell.count()) > 0 && (await cell.textContent()) === "1 of 1 partitions";
  }, 30);
  await shot(page, "handler-rewound");

  // ---- a quarantined key: listed with its failure, released after a confirmation ----
  const parked = await need("quarantine");
  await page.goto(`${url}/console/#/handler/${handler}`);
  const parkedRow = page.locator(`#parked-keys tr[data-parked-key="${parked.key_base64}"]`);
  // (The page may have drawn the key while it was still retrying.)
  await until("the parked key shown held", async () =>
    (await parkedRow.count()) > 0 && (await parkedRow.locator('td[data-field="state"]').textContent()) === "held", 30);
  assert.equal(await parkedRow.locator('td[data-field="events"]').textContent(), String(parked.events));
  assert.match(await parkedRow.textContent(), /503/, "the failure that parked it is shown");
  await parkedRow.locator('button[data-quarantine-action="release"]').click();
  await parkedRow.locator('button[data-confirm="release"]').waitFor();
  const question = await parkedRow.textContent();
  assert.match(question, new RegExp(`Run the ${parked.events} parked event\\(s\\) of key ${parked.key} again, in order\\?`), question);
  await shot(page, "handler-quarantine");
  await parkedRow.locator('button[data-confirm="release"]').click();
  await page.locator("#quarantine").getByText(/released key/).waitFor({ timeout: 15000 });
  await until("the released key is let go", async () => {
    await page.reload();
    await page.locator("#quarantine").waitFor();
    return (await page.locator(`#parked-keys tr[data-parked-key="${parked.key_base64}"]`).count()) === 0;
  }, 60);
  await need("released");

  // ---- a throttle: set at run time, shown in force, back to the config's ----
  await page.locator("#throttle-target").fill("events");
  await page.locator("#throttle-rate").fill("500");
  await page.locator("#throttle-reason").fill("browser test");
  await page.locator('button[data-action="throttle-set"]').click();
  await page.locator("#throttles").getByText(/events: 500 a second/).waitFor({ timeout: 15000 });
  await until("the rate in force", async () =>
    (await page.locator('#throttle-list tr[data-throttle="events"] td[data-field="in-force"]').textContent().catch(() => "")).startsWith("500/s"), 15);
  await shot(page, "handler-throttled");
  await page.locator('button[data-action="throttle-reset"]').click();
  await page.locator("#throttles").getByText(/back to the configured rate/).waitFor({ timeout: 15000 });

  // ---- modules: a refused upload, a v2, events moving to it, a rollback ----
  const files = await need("modules");
  await page.goto(`${url}/console/#/modules/${handler}`);
  await page.locator("#module-file").setInputFiles(files.garbage);
  await page.locator("#upload button[type=submit]").click();
  // Nothing is sent before the operator confirms what, how big, and where.
  const confirmation = await page.locator("#outcome .confirm").textContent();
  assert.match(confirmation, new RegExp(`Upload notes\\.wasm \\(1 KiB\\) as the next version of ${handler} and activate it on every host`), confirmation);
  await page.locator('#outcome button[data-confirm="upload"]').click();
  const refused = page.locator("#outcome .message.error");
  await refused.waitFor();
  const refusal = await refused.textContent();
  assert.match(refusal, /Refused \(422\)/, refusal);
  assert.match(refusal, /not a WebAssembly component|component/i, refusal);
  await page.locator("#module-file").setInputFiles(files.v2);
  await page.locator("#module-note").fill("v2 from the console test");
  await page.locator("#upload button[type=submit]").click();
  await page.locator('#outcome button[data-confirm="upload"]').click();
  await page.locator("#outcome").getByText("stored as version 2 and activated").waitFor();
  await page.locator('#versions tr[data-version="2"] .pill.active').waitFor();
  await need("stream-v2");
  await until("events processed by v2 on the modules page", async () => {
    await page.reload();
    await page.locator('#versions tr[data-version="2"]').waitFor();
    return number(await page.locator('#versions tr[data-version="2"] td[data-field=processed]').textContent()) > 0;
  });
  await shot(page, "modules");
  await page.locator('#versions tr[data-version="1"] button[data-activate="1"]').click();
  await page.locator('#versions tr[data-version="1"] button[data-confirm="1"]').click();
  await page.locator("#outcome").getByText("version 1 is active").waitFor();
  await page.locator('#versions tr[data-version="1"] .pill.active').waitFor();
  assert.equal((await need("active")).version, 1, "the rollback reached the store");

  // ---- a shadow: v2 beside v1 on live events, agreeing; then stopped ----
  await page.locator("#module-file").setInputFiles(files.v2);
  await page.locator("#module-shadow").check();
  await page.locator("#upload button[type=submit]").click();
  const asked = await page.locator("#outcome .confirm").textContent();
  assert.match(asked, /and run it as a shadow beside the active version on every host\?/, asked);
  await page.locator('#outcome button[data-confirm="upload"]').click();
  await page.locator("#outcome").getByText("runs as a shadow beside version 1").waitFor();
  await page.locator('#versions tr[data-version="2"] .pill.shadow').waitFor();
  await need("stream-shadow");
  const shadowCount = async (field) => number(await page.locator(`#shadow .card[data-field="${field}"] .value`).textContent().catch(() => "0"));
  await until("the shadow report counts agreeing events", async () => {
    await page.reload();
    await page.locator("#shadow").waitFor();
    return (await shadowCount("agree")) > 0;
  });
  assert.equal(await shadowCount("differ"), 0, "the same code agrees on every event it ran");
  assert.ok(await page.locator('#shadow-types tr[data-type="order.confirmed.v1"]').count(), "the event type has its row");
  await shot(page, "modules-shadow");
  await page.locator('button[data-action="shadow-stop"]').click();
  await page.locator('#outcome button[data-confirm="shadow-stop"]').click();
  await page.locator("#outcome").getByText("no longer runs as a shadow").waitFor();
  await page.locator("#shadow").getByText("No shadow version").waitFor();
  assert.equal((await need("active")).version, 1, "stopping the shadow activates nothing");

  // ---- a canary: v2 on half the keys, then aborted by hand ----
  await page.locator("#module-file").setInputFiles(files.v2);
  await page.locator("#module-canary").fill("50");
  await page.locator("#upload button[type=submit]").click();
  const askedCanary = await page.locator("#outcome .confirm").textContent();
  assert.match(askedCanary, /and run it on 50% of the keys on every host\?/, askedCanary);
  await page.locator('#outcome button[data-confirm="upload"]').click();
  await page.locator("#outcome").getByText("it runs 50% of the keys; the rest stay on version 1").waitFor();
  await page.locator("#canary").getByText("Canary: v2 on 50% of the keys").waitFor();
  await page.locator('button[data-action="canary-abort"]').click();
  await page.locator('#outcome button[data-confirm="canary-abort"]').click();
  await page.locator("#outcome").getByText("no longer runs as a canary").waitFor();
  await page.locator('#canary-verdicts tr[data-verdict="aborted"]').waitFor();
  assert.equal((await need("active")).version, 1, "aborting the canary activates nothing");

  // ---- captured events (every one here): listed, redacted, downloadable ----
  await until("the modules page lists captured events", async () => {
    await page.reload();
    await page.locator("#captures").waitFor();
    return (await page.locator("#captures-list tr[data-capture]").count()) > 0;
  });
  assert.match(await page.locator("#captures-list tr[data-capture]").first().textContent(), /order\.confirmed\.v1/);
  const rawCaptures = await page.evaluate(async (h) => (await fetch(`/console/api/handlers/${h}/captures?limit=50`)).text(), handler);
  assert.ok(rawCaptures.includes("[redacted]"), "the configured path is redacted");
  assert.ok(!/customerId\\":\s*\d/.test(rawCaptures), "no customer id is kept: " + rawCaptures.slice(0, 400));
  await page.locator("#captures-download").click();
  await page.locator("#outcome").getByText(/captures downloaded: idem test --handler/).waitFor();
  await shot(page, "modules-captures");

  // ---- dead letters: the markup is text; a dry run, a replay, once ----
  await page.goto(`${url}/console/#/dead-letters/${handler}`);
  const key = `${poison.partition}:${poison.offset}`;
  const row = page.locator(`#dead-letters tr[data-record="${key}"]`);
  await row.waitFor();
  assert.match(await row.textContent(), /permanent/);
  assert.match(await row.textContent(), /HTTP 422/);
  await row.locator("button[data-open]").click();
  const payload = page.locator("#payload");
  await payload.waitFor();
  const shown = await payload.textContent();
  assert.ok(shown.includes(poison.markup), `the payload shows the markup as text: ${shown}`);
  assert.equal(await page.locator("#payload *").count(), 0, "no element was made from the payload");
  assert.equal(await page.evaluate(() => window.__pwned), undefined, "the payload's script did not run");
  await shot(page, "dead-letters");

  // The filters are the address: a search by reason narrows to the record,
  // Back returns to the search before; a selection never outlives the
  // rows it was made on, and nothing can be acted on while a page loads.
  await row.locator("input[data-select]").check();
  assert.equal(await page.locator("#selected-count").textContent(), "1 selected");
  await page.locator("#f-reason").fill("422");
  await page.locator("#filters button[type=submit]").click();
  // The new page: its form says the search it shows, its table is done.
  await page.waitForFunction(() => location.hash.includes("reason=422") &&
    document.querySelector("#f-reason")?.getAttribute("value") === "422" &&
    document.querySelector("#dead-letters")?.getAttribute("aria-busy") === "false");
  await row.waitFor();
  assert.equal(await page.locator("#total").textContent(), "1", "one dead letter's reason has 422");
  assert.equal(await page.locator("#selected-count").textContent(), "0 selected", "the selection went with the rows");
  assert.ok(await page.locator("button[data-action=selected]").isDisabled(), "nothing selected: nothing to replay");
  await page.goBack();
  await page.waitForFunction(() => !location.hash.includes("reason=") &&
    document.querySelector("#f-reason")?.getAttribute("value") === "" &&
    document.querySelector("#dead-letters")?.getAttribute("aria-busy") === "false");
  await row.waitFor();

  await row.locator("input[data-select]").check();
  await page.locator("button[data-action=dry-selected]").click();
  const outcome = page.locator(`#outcomes tr[data-outcome="${key}"] td[data-field=outcome]`);
  await until("the dry run's outcome", async () => (await outcome.count()) && (await outcome.textContent()) === "would apply");
  assert.equal((await need("charges")).charges, 0, "a dry run charges nothing");
  await page.locator("button[data-action=selected]").click();
  await until("the replay's outcome", async () => (await outcome.count()) && (await outcome.textContent()) === "applied");
  // The original says what became of it, on the page shown again.
  await until("the original marked", async () => (await row.locator("td[data-field=replayed]").textContent()) === "applied");
  await shot(page, "dead-letters-replayed");
  assert.equal(await page.locator("#selected-count").textContent(), "0 selected", "the rows changed: the selection is cleared");
  await row.locator("input[data-select]").check();
  await page.locator("button[data-action=selected]").click();
  await until("the second replay's outcome", async () => (await outcome.count()) && (await outcome.textContent()) === "duplicate");
  assert.equal((await need("charges")).charges, 1, "replayed twice, charged once");
  // Discarded, a record is never replayed again (the topic keeps it).
  await row.locator("input[data-select]").check();
  await page.locator("button[data-action=discard-selected]").click();
  await until("the original marked discarded", async () => (await row.locator("td[data-field=replayed]").textContent()) === "discarded");
  await page.locator("#discard-outcome").getByText("1 discarded").waitFor();
  await row.locator("input[data-select]").check();
  await page.locator("button[data-action=selected]").click();
  await until("the replay leaves it alone", async () => (await outcome.count()) && (await outcome.textContent()) === "discarded");
  assert.equal((await need("charges")).charges, 1, "a discarded record is not run");
  assert.equal(await page.evaluate(() => window.__pwned), undefined, "the payload's script never ran");

  // ---- attacks ----
  // A form on another site posting to the console: its page is served here,
  // at 127.0.0.1 (another site than localhost), with a script of its own.
  const attacker = http.createServer((req, res) => {
    res.setHeader("content-type", "text/html");
    res.end(`<form id=f method=POST action="${url}/console/api/handlers/${handler}/activate?version=2"></form>` +
      `<script>document.getElementById("f").submit()</script>`);
  });
  await new Promise((r) => attacker.listen(0, "127.0.0.1", r));
  const evil = await context.newPage();
  await evil.goto(`http://127.0.0.1:${attacker.address().port}/`);
  await evil.waitForURL(`${url}/console/api/**`);
  const evilBody = await evil.locator("body").textContent();
  assert.match(evilBody, /accepted only from the console's own pages/, evilBody);
  attacker.close();
  assert.equal((await need("active")).version, 1, "the cross-site post changed nothing");
  // A request naming another host (DNS rebinding), even with the cookie.
  const rebound = await raw("GET", "/console/api/overview", { Host: `evil.example:${new URL(url).port}`, Cookie: `idem_console=${session.value}` });
  assert.equal(rebound.status, 403, rebound.body);
  assert.match(rebound.body, /is not a name of this console/);
  // A change without the CSRF token, from the console's own origin.
  const noCsrf = await page.evaluate(async (h) => (await fetch(`/console/api/handlers/${h}/activate?version=2`, { method: "POST" })).status, handler);
  assert.equal(noCsrf, 403, "a change without the CSRF token");

  // ---- a read token sees every page and changes nothing ----
  const reader = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  const readPage = await reader.newPage();
  await login(readPage, readToken);
  await readPage.locator("#who").getByText("scope: read").waitFor();
  await readPage.goto(`${url}/console/#/modules/${handler}`);
  await readPage.locator("#versions").waitFor();
  assert.equal(await readPage.locator("#upload").count(), 0, "no upload form for a read session");
  assert.equal(await readPage.locator("button[data-activate]").count(), 0, "no activate button for a read session");
  await readPage.goto(`${url}/console/#/handler/${handler}`);
  await readPage.locator("#pauses").waitFor();
  assert.equal(await readPage.locator('#pauses button, #partitions button').count(), 0, "no pause or resume for a read session");
  await readPage.locator("#rewinds").waitFor();
  assert.equal(await readPage.locator("#rewind-form").count(), 0, "no rewind for a read session");
  await readPage.goto(`${url}/console/#/modules/${handler}`);
  await readPage.locator("#versions").waitFor();
  const deploy = await readPage.evaluate(async (h) => {
    const s = await (await fetch("/console/api/session")).json();
    const r = await fetch(`/console/api/handlers/${h}/activate?version=2`, { method: "POST", headers: { "X-CSRF-Token": s.csrf } });
    return { status: r.status, body: await r.text() };
  }, handler);
  assert.equal(deploy.status, 403, deploy.body);
  assert.match(deploy.body, /scope `read`/);
  await readPage.goto(`${url}/console/#/dead-letters/${handler}`);
  await readPage.locator("#dead-letters").waitFor();
  assert.equal(await readPage.locator("button[data-action]").count(), 0, "no replay buttons for a read session");
  assert.equal((await need("active")).version, 1, "the read session changed nothing");

  // ---- the audit trail: what the operator did, in the host token's name;
  // the read session's refused change is no change ----
  await readPage.goto(`${url}/console/#/audit`);
  await readPage.locator("#audit tr[data-audit]").first().waitFor();
  const trail = await readPage.locator("#audit tr[data-audit]").evaluateAll((rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
  const upload = trail.find((cells) => cells[3].startsWith(`PUT /console/api/handlers/${handler}/module`));
  assert.ok(upload, "the console upload is in the trail: " + JSON.stringify(trail));
  assert.deepEqual([upload[1], upload[2], upload[4]], ["$IDEM_ADMIN_TOKEN", "console", handler], JSON.stringify(upload));
  assert.ok(trail.some((cells) => cells[3] === "POST /console/api/login"), "logins are in the trail");
  assert.ok(!trail.some((cells) => cells[1] === "$IDEM_ADMIN_READ_TOKEN" && cells[3].includes("/activate")), "a refused change is not a change");
  await readPage.locator(`#audit a[href="#/audit?handler=${handler}"]`).first().click();
  await readPage.waitForFunction((h) => location.hash === `#/audit?handler=${h}` && document.querySelector("#audit"), handler);
  await shot(readPage, "audit");

  // ---- every page: axe-core finds nothing, light and dark, and at 390 px
  // nothing but a table scrolls sideways; a keyboard walk survives the
  // live page's refresh ----
  const violations = [];
  for (const [scheme, width] of [["light", 1400], ["dark", 1400], ["light", 390]]) {
    const a11y = await browser.newContext({ bypassCSP: true, colorScheme: scheme, viewport: { width, height: 900 } });
    const p = await a11y.newPage();
    const check = async (name) => {
      await p.addScriptTag({ content: axeSource });
      const result = await p.evaluate(async () => await window.axe.run(document, { resultTypes: ["violations"] }));
      for (const v of result.violations) {
        violations.push(`${name} (${scheme}, ${width} px): ${v.id} (${v.impact}) ${v.help}: ${v.nodes.length} element(s), e.g. ${v.nodes[0].target.join(" ")}`);
      }
      const wide = await p.evaluate(() => document.documentElement.scrollWidth);
      if (wide > width + 1) {
        // What sticks out, outside the tables (which scroll inside the page).
        const out = await p.evaluate((w) => [...document.querySelectorAll("body *")]
          .filter((e) => !e.closest("table") && e.getBoundingClientRect().right > w + 1)
          .slice(-3).map((e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.className ? "." + e.className : "")), width);
        violations.push(`${name} (${scheme}, ${width} px): the page is ${wide} px wide (${out.join(", ")})`);
      }
      log(`axe ${name} ${scheme} ${width} px: ${result.violations.length} violation(s), ${wide} px wide`);
    };
    await p.goto(`${url}/console/`);
    await p.locator("#token").waitFor();
    await check("login");
    await login(p, operateToken);
    await p.locator("#handlers").waitFor();
    await p.locator("#fleet").waitFor();
    await check("overview");
    await p.goto(`${url}/console/#/handler/${handler}`);
    await p.locator("#partitions").waitFor();
    await check("handler");
    await p.goto(`${url}/console/#/modules/${handler}`);
    await p.locator("#versions").waitFor();
    await check("modules");
    await p.goto(`${url}/console/#/dead-letters/${handler}`);
    await p.locator("#dead-letters tr[data-record]").first().waitFor();
    await p.locator("#dead-letters button[data-open]").first().click();
    await p.locator("#payload").waitFor();
    await check("dead letters");
    await p.goto(`${url}/console/#/audit`);
    await p.locator("#audit").waitFor();
    await check("audit");
    await p.goto(`${url}/console/#/outbox`);
    await p.locator("#outbox-reload").waitFor();
    await check("outbox");
    await a11y.close();
  }
  assert.deepEqual(violations, [], "accessibility:\n" + violations.join("\n"));
  // A keyboard walk: Tab to the first handler's link, then let the page
  // refresh twice; the focus stays on it, and Enter follows it.
  await page.goto(`${url}/console/#/`);
  await page.locator("#handlers").waitFor();
  // The overview counts the dead letters and links to them.
  const dead = page.locator(`#handlers tr[data-handler=${handler}] td[data-field=dead-lettered] a`);
  assert.equal(await dead.textContent(), "1", "the poison record, dead-lettered once");
  assert.equal(await dead.getAttribute("href"), `#/dead-letters/${handler}`);
  await page.locator("#logout").focus();
  let walked = null;
  for (let i = 0; i < 12 && walked !== `#/handler/${handler}`; i++) {
    await page.keyboard.press("Tab");
    walked = await page.evaluate(() => document.activeElement && document.activeElement.getAttribute("href"));
  }
  assert.equal(walked, `#/handler/${handler}`, "Tab reaches the handler's link");
  await page.waitForTimeout(2500);
  const stays = await page.evaluate(() => document.activeElement && document.activeElement.getAttribute("href"));
  assert.equal(stays, `#/handler/${handler}`, "the focus survived two refreshes");
  await page.keyboard.press("Enter");
  await page.waitForURL(new RegExp(`#/handler/${handler}$`));

  // ---- logout ends the session on the host ----
  await page.locator("#logout").click();
  await page.locator("#token").waitFor();
  const after = await raw("GET", "/console/api/overview", { Host: new URL(url).host, Cookie: `idem_console=${session.value}` });
  assert.equal(after.status, 401, "the session ended with the logout");

  // Refused requests (the tests above provoke 401, 403, 422) are logged by
  // Chromium as failed resources; anything else is a script error.
  const errors = pageErrors.filter((e) => !/^Failed to load resource: the server responded with a status of 4\d\d/.test(e));
  assert.deepEqual(errors, [], "no script errors on the console's pages");
  process.stdout.write("pass\n");
} finally {
  await browser.close();
  answers.close();
}
