// Drives the demo page in headless Chromium for tests/e2e/browser_test.go:
// two users, each in their own browser context (two browsers, separate
// localStorage), on two gates, exchange messages both ways; one page goes
// away while the other sends, comes back and catches up by sync without
// duplicates; a plain reload brings nothing twice; the same device signing
// in from another tab kicks the first, which stays down (no reconnect loop).
// Last, A sends a picture from the page's file input: it goes to the object
// store by presigned PUT (the SDK's progress callback reaches 100 %), and
// B's page shows it loaded from a download URL only members get.
// Screenshots go to the artifacts directory; result.json there lists what
// each page shows, which the Go test checks against MySQL.
//
// Input: SPARK_BROWSER_CONFIG, JSON:
//   { base, artifacts, chromiumArgs: [], users: [{ user, device, token, gate }, …2] }
// Exits non-zero with the reason on the first failed check.
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { deflateSync } from "node:zlib";
import path from "node:path";
import { chromium } from "playwright-core";

const cfg = JSON.parse(process.env.SPARK_BROWSER_CONFIG ?? "null");
assert.ok(cfg && cfg.users?.length === 2, "SPARK_BROWSER_CONFIG with two users is required");
const [A, B] = cfg.users;
mkdirSync(cfg.artifacts, { recursive: true });
const vectors = JSON.parse(readFileSync(new URL("../../../pkg/frame/testdata/frames.json", import.meta.url), "utf8"));

const t0 = Date.now();
const step = (s) => console.log(`browser: +${((Date.now() - t0) / 1000).toFixed(1)}s ${s}`);
const url = (u, extra = {}) =>
  `${cfg.base}/demo/index.html?` + new URLSearchParams({ gate: u.gate, user: u.user, token: u.token, device: u.device, hb: "1000", ...extra });
// Generous: the machine may be shared and loaded; a pass is usually seconds.
const WAIT = { timeout: 30_000 };

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
    ...(cfg.chromiumArgs ?? []),
  ],
});
step(`chromium ${browser.version()}`);

const pageErrors = [];
async function newPage(ctx, name) {
  const page = await ctx.newPage();
  page.on("pageerror", (e) => pageErrors.push(`${name}: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "warning" || m.type() === "error") console.log(`browser: [${name} console.${m.type()}] ${m.text()}`);
  });
  return page;
}

async function shot(page, name) {
  const file = path.join(cfg.artifacts, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  step(`screenshot ${file}`);
}

async function online(page) {
  await page.waitForSelector('#state[data-state="online"]', WAIT);
}

/** Types text into the send box and waits until the page shows it acknowledged (it has a msg_id). */
async function send(page, text) {
  await page.fill("#text", text);
  await page.click("#send");
  await page.waitForFunction(
    (t) =>
      [...document.querySelectorAll("#messages li[data-msg-id] .text")].some((e) => e.textContent === t) &&
      !document.querySelector("#messages li[data-pending]"),
    text,
    WAIT,
  );
}

/** The messages the page shows: [msg_id, text] in order; fails on a duplicate msg_id. */
async function shown(page) {
  const rows = await page.$$eval("#messages li", (lis) => lis.map((li) => [li.dataset.msgId ?? "", li.querySelector(".text")?.textContent ?? li.textContent]));
  const ids = rows.map(([id]) => id);
  assert.ok(ids.every((id) => /^[0-9]+$/.test(id)), `every shown message has a msg_id: ${JSON.stringify(rows)}`);
  assert.equal(new Set(ids).size, ids.length, `no message shown twice: ${JSON.stringify(rows)}`);
  return rows;
}

async function waitTexts(page, texts) {
  await page.waitForFunction(
    (want) => JSON.stringify([...document.querySelectorAll("#messages li[data-msg-id] .text")].map((e) => e.textContent)) === JSON.stringify(want),
    texts,
    WAIT,
  ).catch(async (e) => {
    throw new Error(`${e.message}\nwant ${JSON.stringify(texts)}\nshown ${JSON.stringify(await shown(page))}`);
  });
}

const eventLog = (page) => page.evaluate(() => window.spark.log);

/** A size×size RGB PNG of a colour gradient, encoded here (zlib and CRC-32, no library). */
function gradientPNG(size) {
  const crcTable = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc = (buf) => {
    let c = 0xffffffff;
    for (const b of buf) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  };
  const chunk = (type, data) => {
    const head = Buffer.alloc(8);
    head.writeUInt32BE(data.length, 0);
    head.write(type, 4, "ascii");
    const sum = Buffer.alloc(4);
    sum.writeUInt32BE(crc(Buffer.concat([head.subarray(4), data])), 0);
    return Buffer.concat([head, data, sum]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(size, 0);
  ihdr.writeUInt32BE(size, 4);
  ihdr.set([8, 2, 0, 0, 0], 8); // 8-bit RGB
  const rows = [];
  for (let y = 0; y < size; y++) {
    const row = Buffer.alloc(1 + 3 * size); // filter byte 0
    for (let x = 0; x < size; x++) row.set([(255 * x) / size, (255 * y) / size, 160], 1 + 3 * x);
    rows.push(row);
  }
  return Buffer.concat([Buffer.from("\x89PNG\r\n\x1a\n", "latin1"), chunk("IHDR", ihdr), chunk("IDAT", deflateSync(Buffer.concat(rows))), chunk("IEND", Buffer.alloc(0))]);
}

try {
  const ctxA = await browser.newContext({ viewport: { width: 900, height: 560 } });
  const ctxB = await browser.newContext({ viewport: { width: 900, height: 560 } });
  const pageA = await newPage(ctxA, "A");
  const pageB = await newPage(ctxB, "B");
  await pageA.goto(url(A, { peer: B.user }));
  await pageB.goto(url(B));
  step("demo page loaded twice");
  await Promise.all([online(pageA), online(pageB)]);
  const connects = await Promise.all([pageA, pageB].map((p) => p.evaluate(() => window.spark.client.stats.connects)));
  assert.deepEqual(connects, [1, 1], "each page signed in on its first connection");
  step(`A (user ${A.user}) on ${A.gate} and B (user ${B.user}) on ${B.gate} are online`);

  // The gzip vector through this browser's DecompressionStream, and the
  // broken one refused, with the SDK the page loaded.
  const gz = vectors.frames.find((v) => v.valid && (v.flags ?? 0) & 1);
  const badGz = vectors.frames.find((v) => !v.valid && v.name.includes("gzip"));
  const inBrowser = await pageA.evaluate(
    async ([good, bad]) => {
      const sdk = await import("/dist/src/index.js");
      const bytes = (h) => Uint8Array.from(h.match(/../g).map((x) => parseInt(x, 16)));
      const limits = { maxFrameSize: 65536, maxInflated: 262144 };
      const f = await sdk.readMessage(bytes(good), limits);
      let badKind = "accepted";
      await sdk.readMessage(bytes(bad), limits).catch((e) => (badKind = e.kind));
      return { body: new TextDecoder().decode(f.body), badKind };
    },
    [gz.hex, badGz.hex],
  );
  assert.equal(inBrowser.body, gz.body, "the gzip vector inflates in Chromium");
  assert.equal(inBrowser.badKind, "bad_gzip", "a body flagged gzip that is not gzip is refused in Chromium");
  step("gzip frame vectors pass in Chromium");

  // A → B by push: B's list shows the new conversation with one unread.
  await send(pageA, "hello from A");
  const convSel = `#conversations li[data-peer="${A.user}"]`;
  await pageB.waitForSelector(`${convSel}[data-unread="1"]`, WAIT);
  await shot(pageB, "01-b-new-message-unread");
  const convId = await pageB.getAttribute(convSel, "data-conv-id");
  await pageB.click(convSel);
  await waitTexts(pageB, ["hello from A"]);
  await pageB.waitForSelector(`${convSel}[data-unread="0"]`, WAIT); // READ_MESSAGE went through
  step(`A → B delivered in conversation ${convId}, B read it`);

  // B → A, one short and one long reply; the long body goes out gzipped.
  const long = "long: " + "the quick brown fox jumps over the lazy dog; ".repeat(12);
  await send(pageB, "hi A, B here");
  await send(pageB, long);
  const exchanged = ["hello from A", "hi A, B here", long];
  await waitTexts(pageA, exchanged);
  assert.ok((await pageB.evaluate(() => window.spark.client.stats.gzippedOut)) >= 1, "B gzipped its long request body");
  // A beats every second (hb=1000); on a fast machine the exchange above
  // ends sooner, so wait for the first answered beat rather than assume it.
  await pageA.waitForFunction(() => window.spark.client.stats.heartbeats >= 1, null, WAIT);
  const acks = await pageA.evaluate(() => window.spark.client.stats.pushAcks);
  assert.equal(acks, 2, "A acknowledged both pushes");
  await shot(pageA, "02-a-exchange");
  await shot(pageB, "02-b-exchange");
  step("B → A delivered (one gzipped)");

  // B goes away; A sends while B has no connection.
  await pageB.goto("about:blank");
  const away = ["while you were away 1", "while you were away 2", "while you were away 3"];
  for (const t of away) await send(pageA, t);
  const all = [...exchanged, ...away];
  await waitTexts(pageA, all);
  step("A sent 3 messages while B was away");

  // B comes back: sync brings exactly the three, the list says 3 unread.
  await pageB.goto(url(B));
  await online(pageB);
  await pageB.waitForSelector(`${convSel}[data-unread="3"]`, WAIT);
  await pageB.waitForFunction(() => window.spark.syncs >= 1, null, WAIT);
  await shot(pageB, "03-b-back-unread");
  await pageB.click(convSel);
  await waitTexts(pageB, all);
  await pageB.waitForSelector(`${convSel}[data-unread="0"]`, WAIT);
  const bRows = await shown(pageB);
  const aRows = await shown(pageA);
  assert.deepEqual(bRows, aRows, "B shows the same messages, ids and order as A");
  const backLog = await eventLog(pageB);
  assert.deepEqual(
    backLog.map((e) => [e.msg_id, e.source]),
    bRows.slice(exchanged.length).map(([id]) => [id, "sync"]),
    "after coming back B got each missed message once, by sync, and nothing it had already",
  );
  await shot(pageB, "04-b-caught-up");
  step("B caught up by sync: 3 new messages, no duplicates");

  // A plain reload: everything is cached and the cursors are current, so
  // sync brings nothing and the page shows the same list.
  await pageB.reload();
  await online(pageB);
  await pageB.waitForFunction(() => window.spark.syncs >= 1, null, WAIT);
  await pageB.click(convSel);
  await waitTexts(pageB, all);
  assert.deepEqual(await eventLog(pageB), [], "a reload re-delivers nothing");
  assert.deepEqual(await shown(pageB), bRows);
  step("B reloaded: same messages, none delivered twice");

  // The same device signs in from a second tab: the first is kicked and
  // stays down, the second stays up (a reconnect loop would kick it back).
  const pageB2 = await newPage(ctxB, "B2");
  await pageB2.goto(url(B));
  await online(pageB2);
  await pageB.waitForSelector('#state[data-state="kicked"]', WAIT);
  await pageB2.waitForTimeout(3000);
  assert.equal(await pageB.getAttribute("#state", "data-state"), "kicked");
  assert.equal(await pageB2.getAttribute("#state", "data-state"), "online");
  assert.equal(await pageB2.evaluate(() => window.spark.client.stats.connects), 1, "the new tab was never kicked off");
  assert.equal(await pageB.evaluate(() => window.spark.client.stats.connects), 1, "the kicked tab did not reconnect");
  await shot(pageB, "05-b-kicked");
  step("same device in a second tab: the first was kicked and stayed down");

  // A picture: the SDK's upload reports progress up to the whole size...
  const png = gradientPNG(48);
  const progress = await pageA.evaluate(async (b64) => {
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const seen = [];
    const obj = await window.spark.client.uploadFile("image", new Blob([bytes], { type: "image/png" }), {
      onProgress: (sent, total) => seen.push([sent, total]),
    });
    return { obj, seen };
  }, png.toString("base64"));
  assert.equal(progress.obj.content_type, "image/png", "the store holds a PNG, as sniffed");
  assert.equal(progress.obj.size, png.length);
  assert.deepEqual(progress.seen.at(-1), [png.length, png.length], "upload progress reaches the whole size");
  // ...and the page sends one from its file input; B's page shows it.
  await pageA.setInputFiles("#file", { name: "gradient.png", mimeType: "image/png", buffer: png });
  await pageA.waitForFunction(
    () => !document.querySelector("#messages li[data-pending]") && document.querySelector("#messages li[data-msg-id] img[data-key]"),
    null,
    WAIT,
  );
  const sentImage = await pageA.$eval("#messages li[data-msg-id]:last-child", (li) => ({ msg_id: li.dataset.msgId, key: li.querySelector("img").dataset.key }));
  await pageB2.click(convSel);
  await pageB2.waitForFunction(
    (id) => {
      const img = document.querySelector(`#messages li[data-msg-id="${id}"] img`);
      return img && img.complete && img.naturalWidth > 0;
    },
    sentImage.msg_id,
    WAIT,
  );
  const natural = await pageB2.$eval(`#messages li[data-msg-id="${sentImage.msg_id}"] img`, (img) => [img.naturalWidth, img.naturalHeight]);
  assert.deepEqual(natural, [48, 48], "B's page shows the 48x48 picture A sent");
  await shot(pageA, "06-a-picture-sent");
  await shot(pageB2, "06-b-picture-received");
  step(`picture ${sentImage.key} sent by A's page, shown on B's`);

  // A reaction: B's page reacts 👍 to the picture and A's page shows it
  // live; A's page reacts too and B's count follows (REACTION pushes).
  const reactionSel = (id) => `#messages li[data-msg-id="${id}"] .reactions button.reaction[data-emoji="👍"]`;
  await pageB2.click(`#messages li[data-msg-id="${sentImage.msg_id}"] .add-reaction`);
  await pageB2.waitForSelector(reactionSel(sentImage.msg_id) + ".me", WAIT);
  await pageA.waitForFunction((sel) => document.querySelector(sel)?.textContent === "👍 1", reactionSel(sentImage.msg_id), WAIT);
  await pageA.click(`#messages li[data-msg-id="${sentImage.msg_id}"] .add-reaction`);
  await pageB2.waitForFunction((sel) => document.querySelector(sel)?.textContent === "👍 2", reactionSel(sentImage.msg_id), WAIT);
  await pageA.waitForSelector(reactionSel(sentImage.msg_id) + ".me", WAIT);
  await shot(pageA, "07-a-reactions");
  await shot(pageB2, "07-b-reactions");
  step(`reactions on ${sentImage.msg_id}: B's 👍 shown on A's page, A's on B's, count 2`);

  assert.deepEqual(pageErrors, [], "no uncaught page errors");
  const result = { conversation_id: convId, a: aRows, b: bRows, texts: all, image: sentImage };
  writeFileSync(path.join(cfg.artifacts, "result.json"), JSON.stringify(result, null, 2));
  step(`passed; result in ${path.join(cfg.artifacts, "result.json")}`);
} catch (e) {
  console.error(`browser: FAILED: ${e.stack ?? e}`);
  for (const p of browser.contexts().flatMap((c) => c.pages())) {
    await p.screenshot({ path: path.join(cfg.artifacts, `failure-${Date.now()}.png`) }).catch(() => {});
  }
  process.exitCode = 1;
} finally {
  await browser.close();
}
