// Fair shares and the Secure cookie in a real browser (Debian's Chromium,
// Playwright). tests/tests/admin/console.rs starts a host with
// `console_behind_tls = true` and 20 dead letters, then runs this script:
//
// - the operator's session cookie is Secure (the console is behind a TLS
//   proxy; Chromium keeps a Secure cookie from http://localhost, a
//   potentially trustworthy origin, so the pages still work here);
// - a read session's page loops over the dead-letter API, four requests
//   at once, while the operator opens the dead-letter page again and
//   again: each of the operator's loads shows all 20 records, never an
//   error, and the reader is refused past its one page at a time.
//
// Any failed check exits non-zero naming it; `pass` is printed last.

import assert from "node:assert/strict";
import { chromium } from "playwright-core";

const url = process.env.CONSOLE_URL; // http://localhost:PORT
const handler = "billing";
const deadLetters = 20;

function log(text) {
  process.stderr.write(`shares.mjs: ${text}\n`);
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
  const operator = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  const page = await operator.newPage();
  await login(page, process.env.OPERATE_TOKEN);
  const cookie = (await operator.cookies()).find((c) => c.name === "idem_console");
  assert.ok(cookie, "a session cookie");
  assert.equal(cookie.secure, true, "behind TLS the session cookie is Secure");
  assert.equal(cookie.httpOnly, true, "the session cookie is HttpOnly");

  const reader = await (await browser.newContext()).newPage();
  await login(reader, process.env.READ_TOKEN);
  await reader.locator("#who").getByText("scope: read").waitFor();
  // The reader's own script: four reads at once, again and again, for 12 s
  // (not from the cache: Chromium would queue identical GETs behind one).
  const looping = reader.evaluate(async (h) => {
    const counts = { read: 0, refused: 0, other: [] };
    const end = Date.now() + 12000;
    while (Date.now() < end) {
      const tries = Array.from({ length: 4 }, () => fetch(`/console/api/handlers/${h}/dead-letters`, { cache: "no-store" }));
      for (const r of await Promise.all(tries)) {
        if (r.status === 200) counts.read++;
        else if (r.status === 429) counts.refused++;
        else counts.other.push(r.status);
      }
    }
    return counts;
  }, handler);

  await new Promise((r) => setTimeout(r, 500));
  for (let i = 0; i < 6; i++) {
    const began = Date.now();
    await page.goto(`${url}/console/#/dead-letters/${handler}`);
    await page.reload();
    const rows = page.locator("#dead-letters tr[data-record]");
    await rows.nth(deadLetters - 1).waitFor({ timeout: 25000 }).catch(async (e) => {
      throw new Error(`load ${i}: not every dead letter shown within 25 s; the page said: ${(await page.locator("body").innerText()).slice(0, 600)}`, { cause: e });
    });
    assert.equal(await rows.count(), deadLetters, `load ${i}: every dead letter shown`);
    assert.equal(await page.locator(".message.error").count(), 0, `load ${i}: no error on the operator's page`);
    log(`operator's load ${i}: ${deadLetters} records in ${Date.now() - began} ms`);
  }
  const counts = await looping;
  log(`the reader: ${JSON.stringify(counts)}`);
  assert.deepEqual(counts.other, [], "the reader got only pages and refusals");
  assert.ok(counts.read > 0, "the reader had its turns");
  assert.ok(counts.refused > 0, "the reader was refused past one page at a time");
  process.stdout.write("pass\n");
} finally {
  await browser.close();
}
