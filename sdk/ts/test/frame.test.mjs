// The frame codec against the shared test vectors (docs/protocol.md §2), the same
// file the Go codec's tests read: pkg/frame/testdata/frames.json.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

import {
  DEFAULT_MAX_FRAME_SIZE,
  FLAG_GZIP,
  FrameError,
  compress,
  decodeFrame,
  encodeFrame,
  inflate,
  readMessage,
} from "../dist/src/index.js";

const vectors = JSON.parse(readFileSync(new URL("../../../pkg/frame/testdata/frames.json", import.meta.url), "utf8"));
const limits = { maxFrameSize: DEFAULT_MAX_FRAME_SIZE, maxInflated: 4 * DEFAULT_MAX_FRAME_SIZE };
const hex = (s) => Uint8Array.from(Buffer.from(s, "hex"));
const text = (b) => new TextDecoder().decode(b);

test("the vector file has valid and invalid frames", () => {
  assert.ok(vectors.frames.filter((v) => v.valid).length >= 5);
  assert.ok(vectors.frames.filter((v) => !v.valid).length >= 5);
});

for (const v of vectors.frames.filter((v) => v.valid)) {
  test(`valid vector decodes: ${v.name}`, async () => {
    const got = decodeFrame(hex(v.hex));
    assert.ok(got, "a whole frame");
    assert.equal(got.used, hex(v.hex).length);
    assert.equal(got.frame.command, v.command);
    assert.equal(got.frame.flags, v.flags ?? 0);
    assert.equal(got.frame.requestId, BigInt(v.request_id));
    assert.equal(got.frame.sequenceId, v.sequence_id);
    // readMessage is the WebSocket path: one message, gzip inflated.
    const f = await readMessage(hex(v.hex), limits);
    assert.equal(f.flags & FLAG_GZIP, 0, "flags no longer say gzip after inflating");
    assert.equal(text(f.body), v.body ?? "");
    if (v.body !== undefined && f.body.length > 0) JSON.parse(text(f.body)); // the body is JSON
  });

  if (!((v.flags ?? 0) & FLAG_GZIP)) {
    test(`valid vector encodes byte for byte: ${v.name}`, () => {
      const out = encodeFrame(
        { command: v.command, flags: v.flags ?? 0, requestId: BigInt(v.request_id), sequenceId: v.sequence_id },
        new TextEncoder().encode(v.body ?? ""),
      );
      assert.equal(Buffer.from(out).toString("hex"), v.hex);
    });
  }
}

const expectedKind = {
  "bad magic": "bad_magic",
  "unknown version": "bad_version",
  "length one byte over the 64 KiB default": "too_large",
  "gzip flag on a body that is not gzip": "bad_gzip",
};

for (const v of vectors.frames.filter((v) => !v.valid)) {
  test(`invalid vector is refused: ${v.name} (${v.why})`, async () => {
    const b = hex(v.hex);
    if (v.why.startsWith("incomplete")) {
      // A stream decoder waits for more bytes; a WebSocket message that
      // short is not a frame at all.
      assert.equal(decodeFrame(b), null);
      await assert.rejects(readMessage(b, limits), (e) => e instanceof FrameError && e.kind === "short");
      return;
    }
    const kind = expectedKind[v.name];
    assert.ok(kind, `the test knows what vector ${JSON.stringify(v.name)} must do`);
    if (kind === "bad_gzip") {
      // The header is fine; the body does not inflate.
      assert.ok(decodeFrame(b));
    } else {
      // Refused from the header alone, without waiting for a body.
      assert.throws(() => decodeFrame(b.subarray(0, 23)), (e) => e instanceof FrameError && e.kind === kind);
      assert.throws(() => decodeFrame(b), (e) => e instanceof FrameError && e.kind === kind);
    }
    await assert.rejects(readMessage(b, limits), (e) => e instanceof FrameError && e.kind === kind);
  });
}

test("bad magic and version are refused before the header is complete", () => {
  assert.throws(() => decodeFrame(hex("1250")), (e) => e.kind === "bad_magic");
  assert.throws(() => decodeFrame(hex("535002")), (e) => e.kind === "bad_version");
  assert.equal(decodeFrame(hex("535001")), null);
});

test("a message holding more or less than one frame is refused", async () => {
  const one = encodeFrame({ command: 2, requestId: 1n, sequenceId: 1 });
  const two = new Uint8Array([...one, ...one]);
  await assert.rejects(readMessage(two, limits), (e) => e.kind === "length_mismatch");
  const body = encodeFrame({ command: 4, requestId: 1n }, new TextEncoder().encode("{}"));
  await assert.rejects(readMessage(body.subarray(0, body.length - 1), limits), (e) => e.kind === "length_mismatch");
});

test("encode refuses fields out of range", () => {
  assert.throws(() => encodeFrame({ command: 0x10000 }), (e) => e.kind === "bad_field");
  assert.throws(() => encodeFrame({ command: 1, requestId: 1n << 64n }), (e) => e.kind === "bad_field");
  assert.throws(() => encodeFrame({ command: 1, sequenceId: -1 }), (e) => e.kind === "bad_field");
});

test("compress gzips large bodies only when smaller, and inflate restores them", async () => {
  const small = new TextEncoder().encode("{}");
  assert.equal((await compress(small)).gzipped, false);
  const big = new TextEncoder().encode(JSON.stringify({ text: "a".repeat(2000) }));
  const z = await compress(big);
  assert.equal(z.gzipped, true);
  assert.ok(z.body.length < big.length);
  assert.deepEqual(await inflate(z.body, 1 << 20), big);
  // A gzip frame the client sends decodes like the vector's.
  const f = await readMessage(encodeFrame({ command: 4, flags: FLAG_GZIP, requestId: 3n }, z.body), limits);
  assert.equal(text(f.body), text(big));
});

test("inflate refuses a body that inflates past the limit", async () => {
  const z = await compress(new Uint8Array(100_000));
  await assert.rejects(inflate(z.body, 50_000), (e) => e.kind === "inflated_too_large");
});
