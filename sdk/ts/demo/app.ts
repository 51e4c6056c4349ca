// The demo chat page: a conversation list with unread counts, the messages
// of the open conversation and a send box, on top of SparkClient. Everything
// it shows comes from the SDK (its conversation list and message cache), so
// a reload shows what the device had plus what sync brings.
//
// Query string: gate (ws:// or wss:// URL of a gate's /ws), user, token,
// device (default: an id kept in this browser), peer (open a chat with this
// user id), hb (heartbeat period in ms, for tests).

import { SparkClient, type Conversation, type Id, type Message, type MessageSource, type ReplySnapshot } from "../src/index.js";

/** Message type of a picture (docs/protocol.md §7). */
const IMAGE = 2;

const q = new URLSearchParams(location.search);
const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;

function deviceId(): string {
  const given = q.get("device");
  if (given) return given;
  const key = "spark-demo-device";
  let id = localStorage.getItem(key);
  if (!id) {
    id = "web-" + Math.random().toString(36).slice(2, 10);
    localStorage.setItem(key, id);
  }
  return id;
}

/** What the browser test reads: every message event of this page load. */
interface DemoWindow {
  spark?: { client: SparkClient; log: { msg_id: Id; conversation_id: Id; source: MessageSource }[]; syncs: number };
}

const user = q.get("user") ?? "";
const token = q.get("token") ?? "";
if (!user || !token) {
  $("app").hidden = true;
  $("help").hidden = false;
  throw new Error("demo: user and token are required in the query string");
}

const client = new SparkClient({
  url: q.get("gate") ?? `ws://${location.hostname}:8180/ws`,
  token,
  userId: user,
  deviceId: deviceId(),
  heartbeatIntervalMs: q.get("hb") ? Number(q.get("hb")) : undefined,
});
const log: { msg_id: Id; conversation_id: Id; source: MessageSource }[] = [];
const demo = { client, log, syncs: 0 };
(window as DemoWindow).spark = demo;

/** The open conversation, or a new chat with a user before its first message. */
let open: { cid: Id } | { peer: Id } | null = null;
/** Messages sent but not acknowledged yet, shown greyed at the end. */
const pending: { key: number; target: string; text: string; failed?: string }[] = [];
/** Download URLs of pictures by msg_id, kept in memory only until they expire. */
const imageURLs = new Map<Id, { url: string; expires: number }>();
let pendingKey = 0;
// The message the next send replies to (a click on a message sets it).
let replyTo: Id | undefined;

$("me").textContent = `user ${user} · ${client.deviceId}`;

function title(c: Conversation): string {
  if (c.peer_id && c.peer_id !== "0") return `user ${c.peer_id}`;
  if (c.group_id && c.group_id !== "0") return `group ${c.group_id}`;
  return `conversation ${c.conversation_id}`;
}

function openKey(): string {
  if (!open) return "";
  return "cid" in open ? `c:${open.cid}` : `u:${open.peer}`;
}

function renderConversations(): void {
  const ul = $("conversations");
  ul.replaceChildren();
  for (const c of client.conversations()) {
    const li = document.createElement("li");
    li.dataset.convId = c.conversation_id;
    li.dataset.peer = c.peer_id ?? "";
    li.dataset.unread = String(c.unread);
    if (open && "cid" in open && open.cid === c.conversation_id) li.classList.add("active");
    const name = document.createElement("span");
    name.className = "name";
    name.textContent = title(c);
    li.append(name);
    if (c.unread > 0) {
      const badge = document.createElement("span");
      badge.className = "unread";
      badge.textContent = String(c.unread);
      li.append(badge);
    }
    const preview = document.createElement("div");
    preview.className = "preview";
    preview.textContent = c.preview ? (c.preview.recalled ? "(recalled)" : c.preview.text) : "";
    li.append(preview);
    li.addEventListener("click", () => openConversation(c.conversation_id));
    ul.append(li);
  }
}

function messageItem(m: Message): HTMLLIElement {
  const li = document.createElement("li");
  li.dataset.msgId = m.msg_id;
  li.dataset.sender = m.sender_id;
  if (m.sender_id === user) li.classList.add("mine");
  const who = document.createElement("div");
  who.className = "who";
  who.textContent = `${m.sender_id === user ? "me" : m.sender_id} · ${new Date(m.created_at).toLocaleTimeString()}`;
  const text = document.createElement("div");
  text.className = "text";
  if (m.status === 2 || m.status === 3) {
    text.classList.add("recalled");
    text.textContent = m.status === 3 ? "(deleted)" : "(recalled)";
  } else if (m.message_type === IMAGE && typeof m.content?.key === "string") {
    const img = document.createElement("img");
    img.alt = "picture";
    img.dataset.key = m.content.key;
    img.addEventListener("load", () => {
      const ol = $("messages");
      ol.scrollTop = ol.scrollHeight;
    });
    text.append(img);
    loadImage(img, m);
  } else {
    text.textContent = typeof m.content?.text === "string" ? m.content.text : `[message type ${m.message_type}]`;
    if (m.version) {
      const edited = document.createElement("span");
      edited.className = "edited";
      edited.textContent = " (edited)";
      edited.title = `version ${m.version}, ${new Date(m.edited_at ?? 0).toLocaleTimeString()}`;
      text.append(edited);
    }
    if (m.sender_id === user && m.message_type === 1) {
      // Double-click one of your texts to edit it.
      li.addEventListener("dblclick", () => {
        const next = prompt("Edit message", typeof m.content?.text === "string" ? m.content.text : "");
        if (next !== null && next.trim() !== "") {
          client.editMessage(m.conversation_id, m.msg_id, next).catch((e: Error) => console.warn("demo: edit", e.message));
        }
      });
    }
  }
  const snap = m.status === 2 || m.status === 3 ? undefined : (m.content?.reply_to as ReplySnapshot | undefined);
  if (snap) {
    const quote = document.createElement("div");
    quote.className = "quote";
    quote.textContent = snap.recalled ? "(recalled)" : `${snap.sender_id}: ${snap.text ?? ""}`;
    li.append(who, quote, text);
  } else {
    li.append(who, text);
  }
  if (m.status !== 2 && m.status !== 3) {
    li.append(reactionRow(m));
  }
  if (m.status !== 2 && m.status !== 3) {
    // Clicking a message makes the next one sent a reply to it.
    li.addEventListener("click", () => {
      replyTo = replyTo === m.msg_id ? undefined : m.msg_id;
      ($("text") as HTMLInputElement).placeholder = replyTo ? `Reply to #${replyTo}` : "Message";
    });
  }
  return li;
}

/** The reactions of m as buttons (clicking one toggles your own) and a 👍 button to add one. */
function reactionRow(m: Message): HTMLDivElement {
  const row = document.createElement("div");
  row.className = "reactions";
  const toggle = (emoji: string, mine: boolean) => (ev: Event) => {
    ev.stopPropagation(); // not a click that picks the message to reply to
    (mine ? client.unreact(m.conversation_id, m.msg_id, emoji) : client.react(m.conversation_id, m.msg_id, emoji)).catch((e: Error) =>
      console.warn("demo: reaction", e.message),
    );
  };
  for (const r of m.reactions ?? []) {
    const b = document.createElement("button");
    b.className = r.me ? "reaction me" : "reaction";
    b.dataset.emoji = r.emoji;
    b.textContent = `${r.emoji} ${r.count}`;
    b.addEventListener("click", toggle(r.emoji, r.me === true));
    row.append(b);
  }
  if (!(m.reactions ?? []).some((r) => r.emoji === "👍" && r.me)) {
    const add = document.createElement("button");
    add.className = "add-reaction";
    add.title = "React with 👍";
    add.textContent = "+👍";
    add.addEventListener("click", toggle("👍", false));
    row.append(add);
  }
  return row;
}

/** Points img at a download URL of the picture of m, asking the server for one unless a fresh one is cached. */
function loadImage(img: HTMLImageElement, m: Message): void {
  const cached = imageURLs.get(m.msg_id);
  if (cached && cached.expires - Date.now() > 10_000) {
    img.src = cached.url;
    return;
  }
  client
    .downloadUrl(m.conversation_id, m.msg_id)
    .then((d) => {
      imageURLs.set(m.msg_id, { url: d.url, expires: d.expires_at });
      img.src = d.url;
    })
    .catch((e: Error) => {
      img.alt = `picture not available: ${e.message}`;
    });
}

function renderMessages(): void {
  const ol = $("messages");
  ol.replaceChildren();
  const enabled = open !== null && client.state !== "kicked" && client.state !== "unauthorized";
  ($("text") as HTMLInputElement).disabled = !enabled;
  ($("send") as HTMLButtonElement).disabled = !enabled;
  ($("attach") as HTMLButtonElement).disabled = !enabled;
  if (!open) {
    $("title").textContent = "No conversation open";
    return;
  }
  if ("cid" in open) {
    const c = client.conversation(open.cid);
    $("title").textContent = c ? title(c) : `conversation ${open.cid}`;
    for (const m of client.messages(open.cid)) ol.append(messageItem(m));
  } else {
    $("title").textContent = `user ${open.peer} (new chat)`;
  }
  for (const p of pending.filter((p) => p.target === openKey())) {
    const li = document.createElement("li");
    li.className = p.failed ? "mine failed" : "mine pending";
    li.dataset.pending = "1";
    li.textContent = p.failed ? `${p.text} — not sent: ${p.failed}` : `${p.text} — sending…`;
    ol.append(li);
  }
  ol.scrollTop = ol.scrollHeight;
}

let reading = false;
/** Marks the open conversation read when it has unread messages. */
function readOpen(): void {
  if (!open || !("cid" in open) || reading) return;
  const cid = open.cid;
  if ((client.conversation(cid)?.unread ?? 0) === 0) return;
  reading = true;
  client
    .markRead(cid)
    .catch((e: Error) => console.warn("demo: mark read", e.message))
    .finally(() => {
      reading = false;
      renderConversations();
    });
}

function openConversation(cid: Id): void {
  open = { cid };
  renderConversations();
  renderMessages();
  // Sync carries no reactions: read those of the messages shown.
  const ids = client.messages(cid).slice(-100).map((m) => m.msg_id);
  if (ids.length > 0) client.reactions(cid, ids).catch((e: Error) => console.warn("demo: reactions", e.message));
  readOpen();
  ($("text") as HTMLInputElement).focus();
}

function openChatWith(peer: Id): void {
  const c = client.conversations().find((x) => x.peer_id === peer);
  if (c) return openConversation(c.conversation_id);
  open = { peer };
  renderConversations();
  renderMessages();
}

$("new-chat").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const peer = ($("peer") as HTMLInputElement).value.trim();
  if (/^[1-9][0-9]*$/.test(peer)) openChatWith(peer);
});

$("composer").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const input = $("text") as HTMLInputElement;
  const text = input.value;
  if (!open || text.trim() === "") return;
  input.value = "";
  const target = "cid" in open ? { conversationId: open.cid } : { toUserId: open.peer };
  const p: (typeof pending)[number] = { key: ++pendingKey, target: openKey(), text };
  const re = "cid" in open ? replyTo : undefined;
  replyTo = undefined;
  input.placeholder = "Message";
  pending.push(p);
  renderMessages();
  client
    .sendText(target, text, { replyTo: re })
    .then((m) => {
      pending.splice(pending.indexOf(p), 1);
      if (open && "peer" in open && open.peer === (target as { toUserId?: Id }).toUserId) open = { cid: m.conversation_id };
      renderConversations();
      renderMessages();
    })
    .catch((e: Error) => {
      p.failed = e.message;
      renderMessages();
    });
});

/** The size of a picture in pixels, or nothing when the browser cannot decode it. */
async function dimensions(file: Blob): Promise<{ width?: number; height?: number }> {
  try {
    const bmp = await createImageBitmap(file);
    const d = { width: bmp.width, height: bmp.height };
    bmp.close();
    return d;
  } catch {
    return {};
  }
}

$("attach").addEventListener("click", () => ($("file") as HTMLInputElement).click());
$("file").addEventListener("change", () => {
  const input = $("file") as HTMLInputElement;
  const file = input.files?.[0];
  input.value = "";
  if (!file || !open) return;
  const target = "cid" in open ? { conversationId: open.cid } : { toUserId: open.peer };
  const p: (typeof pending)[number] = { key: ++pendingKey, target: openKey(), text: `[picture] ${file.name} uploading 0%` };
  pending.push(p);
  renderMessages();
  (async () => {
    const obj = await client.uploadFile("image", file, {
      onProgress: (sent, total) => {
        p.text = `[picture] ${file.name} uploading ${Math.floor((100 * sent) / Math.max(total, 1))}%`;
        renderMessages();
      },
    });
    p.text = `[picture] ${file.name} sending`;
    renderMessages();
    return client.send(target, IMAGE, { t: IMAGE, key: obj.key, ...(await dimensions(file)) });
  })()
    .then((m) => {
      pending.splice(pending.indexOf(p), 1);
      if (open && "peer" in open && open.peer === (target as { toUserId?: Id }).toUserId) open = { cid: m.conversation_id };
      renderConversations();
      renderMessages();
    })
    .catch((e: Error) => {
      p.failed = e.message;
      renderMessages();
    });
});

// Typing: "typing" at most every 3 s while the user types into an open
// conversation; another member's shows for 5 s or until they stop.
const typingUntil = new Map<Id, number>();
let lastTyping = 0;
function renderTyping(): void {
  const cid = open && "cid" in open ? open.cid : "";
  const now = Date.now();
  const who = [...typingUntil].filter(([key, until]) => key.startsWith(cid + "/") && until > now).map(([key]) => key.split("/")[1]);
  $("typing").textContent = who.length > 0 ? `${who.join(", ")} typing…` : "";
}
$("text").addEventListener("input", () => {
  if (!open || !("cid" in open) || Date.now() - lastTyping < 3000) return;
  lastTyping = Date.now();
  client.signal(open.cid, "typing").catch((e: Error) => console.warn("demo: typing", e.message));
});
client.on("signal", (sg) => {
  const key = `${sg.conversation_id}/${sg.sender_id}`;
  if (sg.kind === "typing") typingUntil.set(key, Date.now() + 5000);
  else if (sg.kind === "typing_stop") typingUntil.delete(key);
  renderTyping();
  setTimeout(renderTyping, 5100);
});

client.on("state", (s, detail) => {
  const el = $("state");
  el.dataset.state = s;
  el.textContent = detail && s !== "online" && s !== "connecting" ? `${s}: ${detail}` : s;
  renderMessages();
});
client.on("message", (m, source) => {
  typingUntil.delete(`${m.conversation_id}/${m.sender_id}`);
  renderTyping();
  log.push({ msg_id: m.msg_id, conversation_id: m.conversation_id, source });
  if (open && "cid" in open && open.cid === m.conversation_id) {
    renderMessages();
    if (m.sender_id !== user) readOpen();
  }
});
client.on("conversations", renderConversations);
client.on("synced", () => {
  demo.syncs++;
  renderConversations();
  renderMessages();
  readOpen();
});
client.on("recall", renderMessages);
client.on("deletedForEveryone", renderMessages);
client.on("edit", renderMessages);
client.on("reaction", renderMessages);
client.on("delete", renderMessages);
client.on("error", (e) => console.warn("spark:", e.message));

renderConversations();
const peer = q.get("peer");
if (peer) openChatWith(peer);
else renderMessages();
client.connect();
