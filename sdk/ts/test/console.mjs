// Drives logic's admin console (logic/internal/console) in headless
// Chromium for tests/e2e/console_test.go. It lives beside browser.mjs
// because the browser tooling (playwright-core) is installed here.
//
// Input: SPARK_CONSOLE_CONFIG, JSON:
//   { url, key, artifacts, online: [before, after] }
// The page must refuse a wrong key, then with the right one show
// `before` devices online; the script then writes <artifacts>/phase1 and
// waits for the page to show `after` by itself (the Go test signs more
// devices in). Screenshots go to the artifacts directory; state.json there
// is what the page showed last. Exits non-zero on the first failed check.
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { chromium } from "playwright-core";

const cfg = JSON.parse(process.env.SPARK_CONSOLE_CONFIG ?? "null");
assert.ok(cfg && cfg.url && cfg.key && cfg.online?.length === 2, "SPARK_CONSOLE_CONFIG with url, key and online is required");
mkdirSync(cfg.artifacts, { recursive: true });
const WAIT = { timeout: 30_000 };
const t0 = Date.now();
const step = (s) => console.log(`console: +${((Date.now() - t0) / 1000).toFixed(1)}s ${s}`);

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
    "--no-first-run", "--disable-component-update", "--disable-sync"],
});
const pageErrors = [];
try {
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
  page.on("pageerror", (e) => pageErrors.push(e.message));
  await page.goto(`${cfg.url}?every=500`);
  assert.equal(await page.textContent("#status"), "enter an API key");

  await page.fill("#key", "not-the-key");
  await page.click("#login button");
  await page.waitForSelector('body[data-state="refused"]', WAIT);
  assert.match(await page.textContent("#status"), /wrong or missing API key/);
  assert.equal(await page.textContent("#online"), "–", "a refused key shows no figure");
  await page.screenshot({ path: path.join(cfg.artifacts, "console-refused.png"), fullPage: true });
  step("wrong key refused");

  await page.fill("#key", cfg.key);
  await page.click("#login button");
  const showsOnline = (n) => page.waitForFunction((n) => document.body.dataset.state === "shown" &&
    document.getElementById("online").textContent === String(n), n, WAIT);
  await showsOnline(cfg.online[0]);
  await page.waitForFunction(() => document.querySelectorAll("#gates tbody tr").length >= 1, null, WAIT);
  await page.screenshot({ path: path.join(cfg.artifacts, "console-before.png"), fullPage: true });
  step(`shows ${cfg.online[0]} online`);
  writeFileSync(path.join(cfg.artifacts, "phase1"), "");

  await showsOnline(cfg.online[1]);
  // A few more refreshes so the chart has a line.
  const updates = Number(await page.evaluate(() => document.body.dataset.updates));
  await page.waitForFunction((n) => Number(document.body.dataset.updates) >= n + 2, updates, WAIT);
  await page.screenshot({ path: path.join(cfg.artifacts, "console-after.png"), fullPage: true });
  step(`shows ${cfg.online[1]} online without a reload`);
  const shown = await page.evaluate(() => ({
    online: document.getElementById("online").textContent,
    gates: [...document.querySelectorAll("#gates tbody tr")].map((tr) => [...tr.children].map((td) => td.textContent)),
    deliver: [...document.querySelectorAll("#deliver tbody tr")].map((tr) => [...tr.children].map((td) => td.textContent)),
    webhooks: [...document.querySelectorAll("#webhooks tbody tr")].map((tr) => [...tr.children].map((td) => td.textContent)),
    errors: [...document.querySelectorAll("#errors tbody tr")].map((tr) => [...tr.children].map((td) => td.textContent)),
    chartDrawn: (() => {
      const cv = document.getElementById("chart");
      const px = cv.getContext("2d").getImageData(0, 0, cv.width, cv.height).data;
      for (let i = 3; i < px.length; i += 4) if (px[i] !== 0) return true;
      return false;
    })(),
  }));
  writeFileSync(path.join(cfg.artifacts, "state.json"), JSON.stringify(shown, null, 2));
  assert.deepEqual(pageErrors, [], "the page threw");
} finally {
  await browser.close();
}
