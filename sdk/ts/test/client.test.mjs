// SparkClient against a scripted gate: each test plays the server's side of
// the protocol frame by frame (real Spark frames through the SDK's codec),
// so the client's retries, de-duplication, sync paging and reconnect rules
// are checked exactly. The real gate is driven by the browser test
// (tests/e2e/browser_test.go).
import { test } from "node:test";
import assert from "node:assert/strict";
import { gzipSync } from "node:zlib";

import { Cmd, Code, MemoryStore, SparkClient, backoffDelay, decodeFrame, encodeFrame, stateKey } from "../dist/src/index.js";

const enc = new TextEncoder();
const dec = new TextDecoder();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(what, cond, ms = 5000) {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

/** One scripted WebSocket: frames the client sends go to the gate's handler. */
class Sock {
  constructor(gate) {
    this.gate = gate;
    this.binaryType = "blob";
    this.onopen = this.onmessage = this.onclose = this.onerror = null;
    this.closed = false;
    this.frames = [];
  }
  send(data) {
    assert.ok(data instanceof Uint8Array, "binary frames only");
    assert.equal(this.binaryType, "arraybuffer");
    const got = decodeFrame(data);
    assert.ok(got && got.used === data.length, "exactly one frame per message");
    const f = got.frame;
    f.json = f.body.length && !(f.flags & 1) ? JSON.parse(dec.decode(f.body)) : undefined;
    this.frames.push(f);
    this.gate.frames.push(f);
    queueMicrotask(() => this.gate.handle(this, f));
  }
  close() {
    this.closed = true;
  }
  deliver(command, requestId, sequenceId, bodyObj, flags = 0) {
    if (this.closed) return;
    let body = bodyObj === undefined ? new Uint8Array(0) : enc.encode(JSON.stringify(bodyObj));
    if (flags & 1) body = new Uint8Array(gzipSync(body));
    const b = encodeFrame({ command, flags, requestId, sequenceId }, body);
    this.onmessage?.({ data: b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength) });
  }
  /** Answers request f with the envelope of data (code "0" unless given). */
  reply(f, command, data = {}, code = "0") {
    this.deliver(command, f.requestId, f.sequenceId, { code, msg: code === "0" ? "ok" : "error", request_id: "AAAAAAAAAAA", data });
  }
  push(command, data, sequenceId = 0, flags = 0) {
    this.deliver(command, 0n, sequenceId, { code: "0", msg: "ok", request_id: "AAAAAAAAAAA", data }, flags);
  }
  serverClose(code = 1006) {
    this.closed = true;
    this.onclose?.({ code, reason: "" });
  }
}

/** A scripted gate: handlers per command; by default AUTH, HEARTBEAT and an empty sync succeed. */
class Gate {
  constructor(userId = "1001") {
    this.sockets = [];
    this.frames = [];
    this.handlers = {
      [Cmd.AUTH]: (s, f) => s.reply(f, Cmd.AUTH, { user_id: userId, device_id: f.json.device_id, server_time: Date.now() }),
      [Cmd.HEARTBEAT]: (s, f) => s.deliver(Cmd.HEARTBEAT, f.requestId, f.sequenceId),
      [Cmd.SYNC_INBOX]: (s, f) => s.reply(f, Cmd.SYNC_INBOX_FINISH, { conversations: [], events: [], dialog_cursor: f.json.dialog_cursor, mailbox_seq: f.json.mailbox_seq }),
    };
    this.create = (url) => {
      assert.match(url, /^wss?:\/\//);
      const s = new Sock(this);
      s.url = url;
      s.openedAt = Date.now();
      this.sockets.push(s);
      queueMicrotask(() => s.onopen?.({}));
      return s;
    };
  }
  handle(s, f) {
    const h = this.handlers[f.command];
    if (h) h(s, f);
  }
  sent(command) {
    return this.frames.filter((f) => f.command === command);
  }
  get last() {
    return this.sockets[this.sockets.length - 1];
  }
}

function newClient(gate, extra = {}) {
  const storage = extra.storage ?? new MemoryStore();
  const c = new SparkClient({
    url: "ws://gate.test/ws",
    token: "tok",
    userId: "1001",
    deviceId: "web-1",
    storage,
    createWebSocket: gate.create,
    reconnectMinMs: 10,
    reconnectMaxMs: 40,
    sendBackoffMs: 5,
    ...extra,
  });
  const log = { states: [], messages: [], errors: [], kicks: [] };
  c.on("state", (s) => log.states.push(s));
  c.on("message", (m, source) => log.messages.push({ id: m.msg_id, source, text: m.content?.text }));
  c.on("error", (e) => log.errors.push(e));
  c.on("kick", (r) => log.kicks.push(r));
  return { c, log, storage };
}

const msg = (id, cid, sender = "1002", text = `m${id}`) => ({
  msg_id: id,
  conversation_id: cid,
  conversation_type: 1,
  sender_id: sender,
  client_msg_id: `c${id}`,
  message_type: 1,
  content: { t: 1, text },
  created_at: 1_700_000_000_000 + Number(id),
});
const conv = (cid, last, unread, peer = "1002") => ({
  conversation_id: cid,
  conversation_type: 1,
  peer_id: peer,
  last_msg_id: last,
  last_msg_at: 1_700_000_000_000 + Number(last),
  unread,
  muted: false,
  pinned: false,
});

test("AUTH is the first frame and carries the token and device id", async () => {
  const gate = new Gate();
  const { c } = newClient(gate, { platform: "web", appVersion: "9.9" });
  c.connect();
  await until("online", () => c.state === "online");
  const first = gate.frames[0];
  assert.equal(first.command, Cmd.AUTH);
  assert.deepEqual(first.json, { token: "tok", device_id: "web-1", platform: "web", app_version: "9.9" });
  assert.notEqual(first.requestId, 0n);
  c.close();
});

test("sync pages SYNC_INBOX to its last page, then SYNC_MESSAGES of each changed conversation, and saves the cursors", async () => {
  const gate = new Gate();
  const big = "7301234567890123456"; // past 2^53: ids stay strings
  gate.handlers[Cmd.SYNC_INBOX] = (s, f) => {
    if (f.json.dialog_cursor === "0") {
      s.reply(f, Cmd.SYNC_INBOX, { conversations: [conv("11", "103", 3)], events: [], dialog_cursor: "d1", mailbox_seq: "4" });
    } else if (f.json.dialog_cursor === "d1") {
      assert.equal(f.json.mailbox_seq, "4");
      s.reply(f, Cmd.SYNC_INBOX_FINISH, { conversations: [conv(big, big, 1, "1003")], events: [], dialog_cursor: "d2", mailbox_seq: "5" });
    } else {
      s.reply(f, Cmd.SYNC_INBOX_FINISH, { conversations: [], events: [], dialog_cursor: f.json.dialog_cursor, mailbox_seq: f.json.mailbox_seq });
    }
  };
  gate.handlers[Cmd.SYNC_MESSAGES] = (s, f) => {
    const { conversation_id: cid, last_msg_id: after } = f.json;
    if (cid === "11" && after === "0") s.reply(f, Cmd.SYNC_MESSAGES, { conversation_id: cid, messages: [msg("101", cid), msg("102", cid)], next_msg_id: "102" });
    else if (cid === "11" && after === "102") s.reply(f, Cmd.SYNC_MESSAGES_FINISH, { conversation_id: cid, messages: [msg("103", cid)], next_msg_id: "103" });
    else if (cid === big && after === "0") s.reply(f, Cmd.SYNC_MESSAGES_FINISH, { conversation_id: cid, messages: [msg(big, cid, "1003")], next_msg_id: big });
    else s.reply(f, Cmd.SYNC_MESSAGES_FINISH, { conversation_id: cid, messages: [], next_msg_id: after });
  };
  const { c, log, storage } = newClient(gate);
  let synced = 0;
  c.on("synced", () => synced++);
  c.connect();
  await until("first sync", () => synced === 1);
  assert.deepEqual(
    log.messages.map((m) => [m.id, m.source]),
    [["101", "sync"], ["102", "sync"], ["103", "sync"], [big, "sync"]],
  );
  assert.deepEqual(gate.sent(Cmd.SYNC_MESSAGES).map((f) => [f.json.conversation_id, f.json.last_msg_id]), [["11", "0"], ["11", "102"], [big, "0"]]);
  const saved = JSON.parse(storage.getItem(stateKey("1001", "web-1")));
  assert.equal(saved.dialog_cursor, "d2");
  assert.equal(saved.mailbox_seq, "5");
  assert.deepEqual(saved.last_msg_ids, { 11: "103", [big]: big });
  assert.deepEqual(c.conversations().map((x) => [x.conversation_id, x.unread]), [[big, 1], ["11", 3]]);
  c.close();

  // The next page load resumes from the saved cursors and fetches nothing twice.
  const gate2 = new Gate();
  gate2.handlers[Cmd.SYNC_INBOX] = (s, f) =>
    s.reply(f, Cmd.SYNC_INBOX_FINISH, { conversations: [conv("11", "104", 4)], events: [], dialog_cursor: "d3", mailbox_seq: "5" });
  gate2.handlers[Cmd.SYNC_MESSAGES] = (s, f) =>
    s.reply(f, Cmd.SYNC_MESSAGES_FINISH, { conversation_id: "11", messages: [msg("103", "11"), msg("104", "11")], next_msg_id: "104" });
  const again = newClient(gate2, { storage });
  let synced2 = 0;
  again.c.on("synced", () => synced2++);
  assert.deepEqual(again.c.messages("11").map((m) => m.msg_id), ["101", "102", "103"], "cached messages are there before connecting");
  again.c.connect();
  await until("second sync", () => synced2 === 1);
  assert.deepEqual(gate2.sent(Cmd.SYNC_INBOX).map((f) => [f.json.dialog_cursor, f.json.mailbox_seq]), [["d2", "5"]]);
  assert.deepEqual(gate2.sent(Cmd.SYNC_MESSAGES).map((f) => [f.json.conversation_id, f.json.last_msg_id]), [["11", "103"]]);
  assert.deepEqual(again.log.messages.map((m) => m.id), ["104"], "103 came again and was dropped");
  again.c.close();
});

test("a MESSAGE push is acknowledged with its sequence id and de-duplicated against sync", async () => {
  const gate = new Gate();
  let syncs = 0;
  gate.handlers[Cmd.SYNC_INBOX] = (s, f) => {
    syncs++;
    const conversations = syncs === 1 ? [] : [conv("21", "201", 1)];
    s.reply(f, Cmd.SYNC_INBOX_FINISH, { conversations, events: [], dialog_cursor: `d${syncs}`, mailbox_seq: "0" });
  };
  gate.handlers[Cmd.SYNC_MESSAGES] = (s, f) =>
    s.reply(f, Cmd.SYNC_MESSAGES_FINISH, { conversation_id: "21", messages: [msg("201", "21")], next_msg_id: "201" });
  const { c, log } = newClient(gate);
  c.connect();
  await until("first sync", () => syncs === 1 && c.state === "online");
  gate.last.push(Cmd.MESSAGE, msg("201", "21"), 77);
  await until("push ack", () => gate.sent(Cmd.PUSH_ACK).length === 1);
  const ack = gate.sent(Cmd.PUSH_ACK)[0];
  assert.equal(ack.sequenceId, 77);
  assert.equal(ack.body.length, 0);
  assert.notEqual(ack.requestId, 0n);
  // A push of an unknown conversation asks for a sync, which brings 201 again.
  await until("sync of the new conversation", () => gate.sent(Cmd.SYNC_MESSAGES).length === 1);
  await sleep(20);
  gate.last.push(Cmd.MESSAGE, msg("201", "21"), 78); // a redelivered push
  await until("second ack", () => gate.sent(Cmd.PUSH_ACK).length === 2);
  assert.deepEqual(log.messages, [{ id: "201", source: "push", text: "m201" }]);
  assert.equal(c.stats.duplicatesDropped, 2);
  c.close();
});

test("a push past the list's last message counts unread once; markRead sends READ_MESSAGE up to the newest and zeroes it", async () => {
  const gate = new Gate();
  gate.handlers[Cmd.SYNC_INBOX] = (s, f) =>
    s.reply(f, Cmd.SYNC_INBOX_FINISH, { conversations: [conv("31", "301", 2)], events: [], dialog_cursor: "d", mailbox_seq: "0" });
  gate.handlers[Cmd.SYNC_MESSAGES] = (s, f) =>
    s.reply(f, Cmd.SYNC_MESSAGES_FINISH, { conversation_id: "31", messages: [], next_msg_id: "301" });
  gate.handlers[Cmd.READ_MESSAGE] = (s, f) => s.reply(f, Cmd.READ_MESSAGE, { conversation_id: f.json.conversation_id, msg_id: f.json.msg_id });
  const { c } = newClient(gate);
  let synced = false;
  c.on("synced", () => (synced = true));
  c.connect();
  await until("sync", () => synced);
  gate.last.push(Cmd.MESSAGE, msg("301", "31"), 1); // already counted by the server
  gate.last.push(Cmd.MESSAGE, msg("302", "31"), 2);
  gate.last.push(Cmd.MESSAGE, msg("303", "31", "1001"), 3); // my own, from another device
  await until("pushes", () => c.conversation("31").last_msg_id === "303");
  assert.equal(c.conversation("31").unread, 3);
  await c.markRead("31");
  assert.deepEqual(gate.sent(Cmd.READ_MESSAGE).map((f) => f.json), [{ conversation_id: "31", msg_id: "303" }]);
  assert.equal(c.conversation("31").unread, 0);
  c.close();
});

test("send retries 50301 with the same client_msg_id and resolves with the SEND_ACK's ids", async () => {
  const gate = new Gate();
  let tries = 0;
  gate.handlers[Cmd.SEND_MESSAGE] = (s, f) => {
    tries++;
    if (tries < 3) s.reply(f, Cmd.SEND_MESSAGE, {}, "50301");
    else s.reply(f, Cmd.SEND_ACK, { msg_id: "401", client_msg_id: f.json.client_msg_id, conversation_id: "41", server_time: 1_700_000_000_401 });
  };
  const { c, log } = newClient(gate);
  c.connect();
  const m = await c.sendText({ toUserId: "1002" }, "hello");
  const sends = gate.sent(Cmd.SEND_MESSAGE);
  assert.equal(sends.length, 3);
  assert.match(sends[0].json.client_msg_id, /^[0-9a-f]{32}$/);
  for (const f of sends) assert.deepEqual(f.json, sends[0].json, "every try carries the same body");
  assert.deepEqual(sends[0].json, { client_msg_id: sends[0].json.client_msg_id, message_type: 1, content: { t: 1, text: "hello" }, to_user_id: "1002" });
  assert.equal(m.msg_id, "401");
  assert.equal(m.conversation_id, "41");
  assert.equal(m.sender_id, "1001");
  assert.deepEqual(log.messages, [{ id: "401", source: "self", text: "hello" }]);
  assert.equal(c.conversation("41").peer_id, "1002");
  assert.deepEqual(c.messages("41").map((x) => x.msg_id), ["401"]);
  c.close();
});

test("send retries a try that got no answer in time, with the same client_msg_id", async () => {
  const gate = new Gate();
  gate.handlers[Cmd.SEND_MESSAGE] = (s, f) => {
    if (gate.sent(Cmd.SEND_MESSAGE).length === 1) return; // the answer is lost
    s.reply(f, Cmd.SEND_ACK, { msg_id: "501", client_msg_id: f.json.client_msg_id, conversation_id: "51", server_time: 1 });
  };
  const { c } = newClient(gate, { requestTimeoutMs: 300 });
  c.connect();
  const m = await c.sendText({ conversationId: "51" }, "once", { clientMsgId: "fixed-1" });
  assert.equal(m.msg_id, "501");
  const tries = gate.sent(Cmd.SEND_MESSAGE).map((f) => f.json.client_msg_id);
  assert.ok(tries.length >= 2, `tried again after the lost answer: ${tries}`);
  assert.ok(tries.every((id) => id === "fixed-1"), `every try carries the same client_msg_id: ${tries}`);
  c.close();
});

test("send retries across a dropped connection and gives up at once on other codes", async () => {
  const gate = new Gate();
  gate.handlers[Cmd.SEND_MESSAGE] = (s, f) => {
    if (f.json.client_msg_id === "denied") return s.reply(f, Cmd.SEND_MESSAGE, {}, "40301");
    if (gate.sent(Cmd.SEND_MESSAGE).length === 1) return s.serverClose(); // dies before answering
    s.reply(f, Cmd.SEND_ACK, { msg_id: "601", client_msg_id: f.json.client_msg_id, conversation_id: "61", server_time: 1 });
  };
  const { c } = newClient(gate);
  c.connect();
  const m = await c.sendText({ toUserId: "1002" }, "x", { clientMsgId: "across" });
  assert.equal(m.msg_id, "601");
  assert.equal(gate.sockets.length, 2, "reconnected");
  assert.deepEqual(gate.sent(Cmd.SEND_MESSAGE).map((f) => f.json.client_msg_id), ["across", "across"]);
  await assert.rejects(c.sendText({ toUserId: "1002" }, "no", { clientMsgId: "denied" }), (e) => e.name === "CodeError" && e.code === "40301");
  assert.equal(gate.sent(Cmd.SEND_MESSAGE).filter((f) => f.json.client_msg_id === "denied").length, 1);
  c.close();
});

test("a send the business server rejects fails at once with its reject_code and reject_reason", async () => {
  const gate = new Gate();
  gate.handlers[Cmd.SEND_MESSAGE] = (s, f) => s.reply(f, Cmd.SEND_MESSAGE, { reject_code: 7001, reject_reason: "no <links> & such" }, "40302");
  const { c } = newClient(gate);
  c.connect();
  await assert.rejects(
    c.sendText({ toUserId: "1002" }, "http://spam", { clientMsgId: "vetoed" }),
    (e) => e.name === "CodeError" && e.code === Code.REJECTED && e.rejection.reject_code === 7001 && e.rejection.reject_reason === "no <links> & such",
  );
  assert.equal(gate.sent(Cmd.SEND_MESSAGE).length, 1, "a rejection is not retried");
  c.close();
});

test("a dropped connection reconnects after a backoff and syncs again from the saved cursors", async () => {
  const gate = new Gate();
  const { c, log } = newClient(gate);
  c.connect();
  await until("online", () => c.state === "online" && gate.sent(Cmd.SYNC_INBOX).length === 1);
  gate.last.serverClose();
  await until("offline", () => c.state === "offline");
  await until("online again", () => c.state === "online" && gate.sent(Cmd.SYNC_INBOX).length === 2);
  assert.equal(gate.sockets.length, 2);
  assert.equal(gate.sockets[1].frames[0].command, Cmd.AUTH);
  assert.deepEqual(log.states, ["connecting", "online", "offline", "connecting", "online"]);
  c.close();
});

test("a KICK stops the client: no reconnect, pending sends fail", async () => {
  const gate = new Gate();
  const { c, log } = newClient(gate);
  c.connect();
  await until("online", () => c.state === "online");
  gate.last.push(Cmd.KICK, { reason: "same device signed in elsewhere" });
  gate.last.serverClose(1000); // the gate closes right after the KICK
  await until("kicked", () => c.state === "kicked");
  assert.deepEqual(log.kicks, ["same device signed in elsewhere"]);
  assert.ok(gate.last.closed, "the client closed its socket");
  await sleep(200); // many times the reconnect backoff
  assert.equal(gate.sockets.length, 1, "no reconnect after a kick");
  await assert.rejects(c.sendText({ toUserId: "1002" }, "late"), (e) => e.name === "ClosedError");
  assert.equal(gate.sent(Cmd.SEND_MESSAGE).length, 0);
});

test("KICK server_shutdown reconnects to the next URL after a jittered backoff, syncs, and retries the pending send with its client_msg_id", async () => {
  const gate = new Gate();
  let kickedAt = 0;
  gate.handlers[Cmd.SEND_MESSAGE] = (s, f) => {
    if (gate.sent(Cmd.SEND_MESSAGE).length === 1) {
      // The stopping gate kicks before answering, then closes.
      kickedAt = Date.now();
      s.push(Cmd.KICK, { reason: "server_shutdown" });
      return s.serverClose(1000);
    }
    s.reply(f, Cmd.SEND_ACK, { msg_id: "701", client_msg_id: f.json.client_msg_id, conversation_id: "71", server_time: 1 });
  };
  const { c, log } = newClient(gate, {
    url: ["ws://gate-a.test/ws", "ws://gate-b.test/ws"],
    reconnectMinMs: 60,
    reconnectMaxMs: 1000,
    random: () => 0.5,
  });
  c.connect();
  await until("online", () => c.state === "online" && gate.sent(Cmd.SYNC_INBOX).length === 1);
  const m = await c.sendText({ toUserId: "1002" }, "moves", { clientMsgId: "moving" });
  assert.equal(m.msg_id, "701");
  assert.deepEqual(gate.sockets.map((s) => s.url), ["ws://gate-a.test/ws", "ws://gate-b.test/ws"]);
  // Equal jitter with random 0.5: 45 ms of the first 60.
  assert.ok(gate.sockets[1].openedAt - kickedAt >= 40, `reconnected ${gate.sockets[1].openedAt - kickedAt} ms after the KICK`);
  assert.deepEqual(gate.sent(Cmd.SEND_MESSAGE).map((f) => f.json.client_msg_id), ["moving", "moving"]);
  await until("synced on the next gate", () => gate.sockets[1].frames.some((f) => f.command === Cmd.SYNC_INBOX));
  assert.equal(gate.sockets[1].frames[0].command, Cmd.AUTH);
  assert.deepEqual(log.kicks, [], "not a kick that stops the client");
  assert.deepEqual(log.states, ["connecting", "online", "offline", "connecting", "online"]);
  c.close();
});

test("a refused token (40101) is not retried", async () => {
  const gate = new Gate();
  gate.handlers[Cmd.AUTH] = (s, f) => {
    s.reply(f, Cmd.AUTH, {}, "40101");
    s.serverClose(1008);
  };
  const { c, log } = newClient(gate);
  c.connect();
  await until("unauthorized", () => c.state === "unauthorized");
  await sleep(200);
  assert.equal(gate.sockets.length, 1);
  assert.ok(log.errors.some((e) => e.code === "40101"));
});

test("AUTH of another user than the client's stops it (the saved cursors are per user)", async () => {
  const gate = new Gate("2002");
  const { c } = newClient(gate);
  c.connect();
  await until("unauthorized", () => c.state === "unauthorized");
  assert.equal(gate.sent(Cmd.SYNC_INBOX).length, 0);
});

test("a heartbeat without an answer drops the connection and reconnects", async () => {
  const gate = new Gate();
  let answer = false;
  gate.handlers[Cmd.HEARTBEAT] = (s, f) => {
    if (answer) s.deliver(Cmd.HEARTBEAT, f.requestId, f.sequenceId);
  };
  const { c } = newClient(gate, { heartbeatIntervalMs: 40, requestTimeoutMs: 60 });
  c.connect();
  await until("second socket", () => gate.sockets.length >= 2);
  answer = true;
  await until("heartbeats answered", () => c.stats.heartbeats >= 2);
  assert.equal(gate.sent(Cmd.HEARTBEAT)[0].body.length, 0, "HEARTBEAT has an empty body");
  c.close();
});

test("a gzip-flagged push is inflated with DecompressionStream", async () => {
  const gate = new Gate();
  const { c, log } = newClient(gate);
  c.connect();
  await until("online", () => c.state === "online");
  const long = "z".repeat(3000);
  gate.last.push(Cmd.MESSAGE, msg("701", "71", "1002", long), 5, 1);
  await until("message", () => log.messages.length === 1);
  assert.equal(log.messages[0].text, long);
  c.close();
});

test("a frame that breaks the protocol closes the connection and the client starts over", async () => {
  const gate = new Gate();
  const { c, log } = newClient(gate);
  c.connect();
  await until("online", () => c.state === "online");
  const bad = encodeFrame({ command: Cmd.MESSAGE }, enc.encode("{}"));
  bad[0] = 0x12; // bad magic
  gate.last.onmessage({ data: bad.buffer });
  await until("reconnected", () => gate.sockets.length === 2 && c.state === "online");
  assert.ok(gate.sockets[0].closed);
  assert.ok(log.errors.some((e) => e.kind === "bad_magic"));
  c.close();
});

test("large request bodies go out gzipped and the server side inflates them", async () => {
  const gate = new Gate();
  gate.handlers[Cmd.SEND_MESSAGE] = (s, f) => {
    assert.equal(f.flags & 1, 1);
    s.reply(f, Cmd.SEND_ACK, { msg_id: "801", client_msg_id: "big", conversation_id: "81", server_time: 1 });
  };
  const { c } = newClient(gate);
  c.connect();
  await c.sendText({ toUserId: "1002" }, "b".repeat(4000), { clientMsgId: "big" });
  const f = gate.sent(Cmd.SEND_MESSAGE)[0];
  const { gunzipSync } = await import("node:zlib");
  assert.equal(JSON.parse(gunzipSync(f.body).toString()).content.text, "b".repeat(4000));
  assert.equal(c.stats.gzippedOut, 1);
  c.close();
});

test("backoff delays grow, are capped and jittered within [base/2, base]", () => {
  for (let n = 0; n < 12; n++) {
    const base = Math.min(30_000, 500 * 2 ** n);
    assert.equal(backoffDelay(n, 500, 30_000, () => 0), base / 2);
    assert.equal(backoffDelay(n, 500, 30_000, () => 0.999999), base / 2 + 0.999999 * (base / 2));
  }
  assert.equal(backoffDelay(100, 500, 30_000, () => 0.5), 22_500);
});

test("the saved state is keyed by user and device", () => {
  assert.notEqual(stateKey("1001", "a"), stateKey("1001", "b"));
  assert.notEqual(stateKey("1001", "a"), stateKey("1002", "a"));
  assert.throws(() => new SparkClient({ url: "ws://x/ws", token: "t", userId: "1001", deviceId: "bad id!" }));
});

test("registerPushToken, pushPreview and unregisterPushToken send PUSH_SETTINGS with their op; a refused field throws its code", async () => {
  const gate = new Gate();
  gate.handlers[Cmd.PUSH_SETTINGS] = (s, f) => {
    if (f.json.op === "register" && f.json.platform === "apns" && !f.json.topic) return s.reply(f, Cmd.PUSH_SETTINGS, {}, "40001");
    if (f.json.op === "preview") return s.reply(f, Cmd.PUSH_SETTINGS, { preview: f.json.preview ?? "full" });
    return s.reply(f, Cmd.PUSH_SETTINGS, { registered: f.json.op === "register" });
  };
  const { c } = newClient(gate);
  let synced = false;
  c.on("synced", () => (synced = true));
  c.connect();
  await until("sync", () => synced);
  await c.registerPushToken({ platform: "fcm", token: "fcm-1" });
  assert.equal(await c.pushPreview("sender"), "sender");
  assert.equal(await c.pushPreview(), "full");
  await c.unregisterPushToken();
  await assert.rejects(c.registerPushToken({ platform: "apns", token: "ab" }), (e) => e.code === Code.INVALID_ARGUMENT);
  assert.deepEqual(gate.sent(Cmd.PUSH_SETTINGS).map((f) => f.json), [
    { op: "register", platform: "fcm", token: "fcm-1" },
    { op: "preview", preview: "sender" },
    { op: "preview" },
    { op: "unregister" },
    { op: "register", platform: "apns", token: "ab" },
  ]);
  c.close();
});

test("upstream sends UPSTREAM with service, body and upstream_id, resolves with the queued id, and a refused service throws its code", async () => {
  const gate = new Gate();
  gate.handlers[Cmd.UPSTREAM] = (s, f) => {
    if (f.json.service !== "orders") return s.reply(f, Cmd.UPSTREAM, {}, "40401");
    return s.reply(f, Cmd.UPSTREAM, { id: "7250199883011457024", duplicate: f.json.upstream_id === "u-1" });
  };
  const { c } = newClient(gate);
  let synced = false;
  c.on("synced", () => (synced = true));
  c.connect();
  await until("sync", () => synced);
  assert.deepEqual(await c.upstream("orders", "{\"op\":\"cancel\"}"), { id: "7250199883011457024", duplicate: false });
  assert.deepEqual(await c.upstream("orders", "again", "u-1"), { id: "7250199883011457024", duplicate: true });
  await assert.rejects(c.upstream("billing", "x"), (e) => e.code === Code.NOT_FOUND);
  assert.deepEqual(gate.sent(Cmd.UPSTREAM).map((f) => f.json), [
    { service: "orders", body: "{\"op\":\"cancel\"}" },
    { service: "orders", body: "again", upstream_id: "u-1" },
    { service: "billing", body: "x" },
  ]);
  c.close();
});

test("an EDIT_MESSAGE push replaces the cached content once per version; an EDIT event fetches the message by id at the end of the sync", async () => {
  const gate = new Gate();
  let syncs = 0;
  gate.handlers[Cmd.SYNC_INBOX] = (s, f) => {
    syncs++;
    const events =
      syncs === 2
        ? [{ seq: "1", event_type: 7, conversation_id: "31", msg_id: "301", payload: { msg_id: "301", conversation_id: "31", sender_id: "1002", version: 2, edited_at: 5 } }]
        : [];
    s.reply(f, Cmd.SYNC_INBOX_FINISH, { conversations: syncs === 1 ? [conv("31", "301", 0)] : [], events, dialog_cursor: `d${syncs}`, mailbox_seq: syncs === 2 ? "1" : "0" });
  };
  gate.handlers[Cmd.SYNC_MESSAGES] = (s, f) => {
    const body = JSON.parse(new TextDecoder().decode(f.body));
    if (body.msg_ids) {
      assert.deepEqual(body.msg_ids, ["301"]);
      s.reply(f, Cmd.SYNC_MESSAGES_FINISH, { conversation_id: "31", messages: [{ ...msg("301", "31", "1002", "v2 text"), version: 2, edited_at: 5 }], next_msg_id: "301" });
      return;
    }
    s.reply(f, Cmd.SYNC_MESSAGES_FINISH, { conversation_id: "31", messages: [msg("301", "31")], next_msg_id: "301" });
  };
  const { c } = newClient(gate);
  const edits = [];
  c.on("edit", (cid, id) => edits.push([cid, id, c.messages(cid).find((m) => m.msg_id === id)?.content?.text]));
  c.connect();
  await until("first sync", () => syncs === 1 && c.state === "online" && c.messages("31").length === 1);
  const push = { msg_id: "301", conversation_id: "31", sender_id: "1002", version: 1, edited_at: 4, content: { t: 1, text: "v1 text" } };
  gate.last.push(Cmd.EDIT_MESSAGE, push, 0);
  gate.last.push(Cmd.EDIT_MESSAGE, push, 0); // the same version again: nothing
  await until("edit applied", () => edits.length === 1);
  assert.equal(c.messages("31")[0].version, 1);
  assert.equal(c.conversation("31").preview?.text ?? "v1 text", "v1 text");
  // A later sync brings an EDIT event of version 2: the message is fetched by id.
  await c.sync();
  await until("edit fetched", () => edits.length === 2);
  assert.deepEqual(edits, [["31", "301", "v1 text"], ["31", "301", "v2 text"]]);
  assert.equal(c.messages("31")[0].version, 2);
  c.close();
});

test("signal sends SIGNAL with its kind and payload; a SIGNAL push is the signal event", async () => {
  const gate = new Gate();
  gate.handlers[Cmd.SYNC_INBOX] = (s, f) => s.reply(f, Cmd.SYNC_INBOX_FINISH, { conversations: [], events: [], dialog_cursor: "d", mailbox_seq: "0" });
  gate.handlers[Cmd.SIGNAL] = (s, f) => s.reply(f, Cmd.SIGNAL, { delivered: 2 });
  const { c } = newClient(gate);
  const seen = [];
  c.on("signal", (sg) => seen.push(sg));
  c.connect();
  await until("online", () => c.state === "online");
  assert.equal(await c.signal("41", "typing"), 2);
  assert.equal(await c.signal("41", "game.move", { x: 1 }), 2);
  const sent = gate.sent(Cmd.SIGNAL).map((f) => JSON.parse(new TextDecoder().decode(f.body)));
  assert.deepEqual(sent, [{ conversation_id: "41", kind: "typing" }, { conversation_id: "41", kind: "game.move", payload: { x: 1 } }]);
  gate.last.push(Cmd.SIGNAL, { conversation_id: "41", sender_id: "1002", device_id: "phone", kind: "typing" }, 0);
  await until("signal event", () => seen.length === 1);
  assert.deepEqual(seen[0], { conversation_id: "41", sender_id: "1002", device_id: "phone", kind: "typing", payload: undefined });
  c.close();
});

test("reactions: react and unreact update the cached counts, a REACTION push sets one emoji's count, a REACTION event reads the message's counts with get at the end of the sync, and a duplicate rejects 40902", async () => {
  const gate = new Gate();
  let syncs = 0;
  gate.handlers[Cmd.SYNC_INBOX] = (s, f) => {
    syncs++;
    const events =
      syncs === 2
        ? [
            { seq: "1", event_type: 8, conversation_id: "31", msg_id: "301", payload: { msg_id: "301", conversation_id: "31", user_id: "1003", emoji: "🎉", added: true, count: 1 } },
            { seq: "2", event_type: 8, conversation_id: "31", msg_id: "301", payload: { msg_id: "301", conversation_id: "31", user_id: "1003", emoji: "🎉", added: false, count: 0 } },
          ]
        : [];
    s.reply(f, Cmd.SYNC_INBOX_FINISH, { conversations: syncs === 1 ? [conv("31", "301", 0)] : [], events, dialog_cursor: `d${syncs}`, mailbox_seq: syncs === 2 ? "2" : "0" });
  };
  gate.handlers[Cmd.SYNC_MESSAGES] = (s, f) => s.reply(f, Cmd.SYNC_MESSAGES_FINISH, { conversation_id: "31", messages: [msg("301", "31")], next_msg_id: "301" });
  const gets = [];
  gate.handlers[Cmd.REACTION] = (s, f) => {
    const b = JSON.parse(new TextDecoder().decode(f.body));
    if (b.op === "get") {
      gets.push(b.msg_ids);
      return s.reply(f, Cmd.REACTION, { conversation_id: "31", messages: [{ msg_id: "301", reactions: [{ emoji: "👍", count: 3, me: true }, { emoji: "❤️", count: 1 }] }], more: false });
    }
    if (b.op === "add" && b.emoji === "👍") return s.reply(f, Cmd.REACTION, {}, "40902");
    return s.reply(f, Cmd.REACTION, { msg_id: "301", conversation_id: "31", emoji: b.emoji, count: b.op === "add" ? 2 : 0, changed: true });
  };
  const { c } = newClient(gate);
  const changes = [];
  c.on("reaction", (cid, id) => changes.push(JSON.stringify(c.messages(cid).find((m) => m.msg_id === id)?.reactions ?? [])));
  c.connect();
  await until("first sync", () => syncs === 1 && c.state === "online" && c.messages("31").length === 1);
  assert.equal(await c.react("31", "301", "😂"), 2);
  assert.deepEqual(c.messages("31")[0].reactions, [{ emoji: "😂", count: 2, me: true }]);
  await assert.rejects(c.react("31", "301", "👍"), (e) => e.code === Code.DUPLICATE);
  // Another member's reaction: the count is set, "me" is kept.
  gate.last.push(Cmd.REACTION, { msg_id: "301", conversation_id: "31", user_id: "1002", emoji: "😂", added: true, count: 3 }, 0);
  await until("push applied", () => c.messages("31")[0].reactions?.[0]?.count === 3);
  assert.deepEqual(c.messages("31")[0].reactions, [{ emoji: "😂", count: 3, me: true }]);
  assert.equal(await c.unreact("31", "301", "😂"), 0);
  assert.equal(c.messages("31")[0].reactions, undefined);
  // Two events of one message: one get at the sync's end, whose counts replace the cache.
  await c.sync();
  assert.deepEqual(gets, [["301"]]);
  assert.deepEqual(c.messages("31")[0].reactions, [{ emoji: "👍", count: 3, me: true }, { emoji: "❤️", count: 1, me: false }]);
  assert.deepEqual((await c.reactions("31", ["301"])).get("301"), [{ emoji: "👍", count: 3, me: true }, { emoji: "❤️", count: 1, me: false }]);
  assert.equal(changes.length, 4); // react, push, unreact, the sync's get (the explicit get changed nothing)
  c.close();
});
