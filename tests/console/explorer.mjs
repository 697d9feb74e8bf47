// The dead-letter explorer at 100,000 dead letters and the fleet view with
// two hosts, in a real browser (Debian's Chromium, Playwright).
// tests/tests/admin/console.rs seeds the index with 100,000 dead letters of
// `billing` and starts two hosts of one group, then runs this script
// against the first:
//
// - the overview's fleet table names both hosts and, for each partition,
//   which of them owns it (each owns one of the two);
// - the explorer: the first page, a class, five pages deeper by cursor, a
//   key, a payload field, oldest first — each as an operator does it (the
//   form, the links), with its total checked and its time printed as
//   `timing <what> <ms>` (from the action to the page's table ready;
//   speed is the benchmark's to judge, not this test's);
// - the selection rule at that size: a ticked row does not survive a page
//   change, and nothing can be acted on while a page loads.
//
// Any failed check exits non-zero naming it; `pass` is printed last.

import assert from "node:assert/strict";
import { chromium } from "playwright-core";

const url = process.env.CONSOLE_URL; // http://localhost:PORT
const handler = "billing";
const hosts = (process.env.HOSTS || "").split(",");

function log(text) {
  process.stderr.write(`explorer.mjs: ${text}\n`);
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
  const page = await (await browser.newContext({ viewport: { width: 1400, height: 900 } })).newPage();
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  await login(page, process.env.OPERATE_TOKEN);

  // ---- the fleet: both hosts, and which owns each partition ----
  for (const host of hosts) await page.locator(`#fleet-hosts tr[data-host="${host}"]`).waitFor({ timeout: 30000 });
  await page.waitForFunction((names) => {
    const owners = [...document.querySelectorAll("#fleet-partitions tr[data-owned]")].map((r) => r.cells[3].textContent);
    return owners.length === 2 && names.every((n) => owners.includes(n));
  }, hosts, { timeout: 60000 });
  const fleet = await page.locator("#fleet h2").textContent();
  assert.equal(fleet, "Fleet: 2 host(s)", fleet);
  log("fleet: " + JSON.stringify(await page.locator("#fleet-partitions tr[data-owned]").evaluateAll((rows) => rows.map((r) => [r.dataset.owned, r.cells[3].textContent]))));

  // ---- the explorer at 100,000 ----
  // Ready: the form shows the search asked for, the table is not busy and
  // the total is the one expected.
  const ready = async (what, total, began) => {
    await page.waitForFunction((t) => document.querySelector("#dead-letters")?.getAttribute("aria-busy") === "false" &&
      document.querySelector("#total")?.textContent === t, total, { timeout: 30000 }).catch(async (e) => {
      throw new Error(`${what}: the page did not show ${total} dead letters; it said: ${(await page.locator("main").innerText()).slice(0, 400)}`, { cause: e });
    });
    const ms = Date.now() - began;
    process.stdout.write(`timing ${what}: ${ms}\n`);
    return ms;
  };
  let began = Date.now();
  await page.goto(`${url}/console/#/dead-letters/${handler}`);
  await ready("the first page of everything", "100,000", began);
  assert.equal(await page.locator("#dead-letters tr[data-record]").count(), 100, "a page of 100 rows");

  // A class, chosen in the form.
  await page.locator("#f-class").selectOption("invalid");
  began = Date.now();
  await page.locator("#filters button[type=submit]").click();
  await page.waitForFunction(() => location.hash.includes("class=invalid"));
  await ready("one class (the form)", "25,000", began);

  // The selection holds the rows on screen only.
  await page.locator("#dead-letters input[data-select]").first().check();
  assert.equal(await page.locator("#selected-count").textContent(), "1 selected");
  for (let i = 2; i <= 6; i++) {
    began = Date.now();
    await page.locator("#older").click();
    // While the next page loads nothing can be acted on.
    await ready(`one class, page ${i} (Older)`, "25,000", began);
    assert.equal(await page.locator("#selected-count").textContent(), "0 selected", `page ${i}: the selection went with the rows`);
    assert.ok(await page.locator("button[data-action=selected]").isDisabled(), `page ${i}: nothing selected, nothing to replay`);
  }
  const classes = await page.locator("#dead-letters tr[data-record] td:nth-child(3)").allTextContents();
  assert.deepEqual([...new Set(classes)], ["invalid"], "every row of page 6 is of the class");

  // A key, a payload field, oldest first: typed into the address, as a
  // shared link would be.
  for (const [what, query, total] of [
    ["a key", "key=customer-42", "100"],
    ["a payload field", "field=customer.id%3D42", "100"],
    ["a reason's text", "reason=DECLINED", "70,000"],
    ["everything, oldest first", "order=oldest", "100,000"],
  ]) {
    began = Date.now();
    await page.goto(`${url}/console/#/dead-letters/${handler}?${query}`);
    await ready(what, total, began);
  }
  const first = await page.locator("#dead-letters tr[data-record]").first().getAttribute("data-record");
  assert.equal(first, "0:0", "oldest first starts at the first dead letter");
  assert.deepEqual(pageErrors, [], "no script errors");
  process.stdout.write("pass\n");
} finally {
  await browser.close();
}
