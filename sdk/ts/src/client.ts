// SparkClient: a browser client of the Spark IM gate over WebSocket. It
// behaves like the Go reference client (client/): AUTH first, HEARTBEAT to
// keep the connection alive, SEND_MESSAGE with a client_msg_id retried on
// 50301 or a timeout, PUSH_ACK for every MESSAGE push, messages de-duplicated
// by msg_id, and after every (re)connect the sync sequence of docs/protocol.md §8
// (SYNC_INBOX to its last page, then SYNC_MESSAGES for each conversation that
// changed) from cursors kept in localStorage per user and device. A lost
// connection is reopened with jittered exponential backoff; a KICK (the same
// device signed in elsewhere, revoked, disabled) or a refused token ends it
// for good, so two tabs of one device never kick each other in a loop. The
// one exception is KICK "server_shutdown", a gate stopping: the client
// reconnects, to the next URL when it has several, like after a drop.

import { encodeFrame, compress, readMessage, FrameError, DEFAULT_MAX_FRAME_SIZE, type FrameFields } from "./frame.js";
import {
  Cmd,
  Code,
  ConversationType,
  EventType,
  compareIds,
  idOf,
  maxId,
  type AuthData,
  type Conversation,
  type Id,
  type MailboxEvent,
  type MediaDownload,
  type MediaKind,
  type MediaObject,
  type MediaUpload,
  type SignalPush,
  type Message,
  type ReactionCount,
  type ReactorsPage,
  type PushPreview,
  type PushToken,
  type ReplySnapshot,
  type SendAck,
  type UpstreamReply,
  type SyncInboxData,
  type SyncMessagesData,
  type Target,
} from "./protocol.js";
import { insertMessage, loadState, MemoryStore, stateKey, type DeviceState, type KeyValueStore } from "./store.js";

/** Where the connection stands. */
export type ConnState =
  /** connect() not called yet. */
  | "idle"
  /** Opening the WebSocket and authenticating. */
  | "connecting"
  /** Authenticated; requests flow. */
  | "online"
  /** The connection dropped; a reconnect is scheduled. */
  | "offline"
  /** The server kicked this device (KICK); no reconnect until connect() is called again. */
  | "kicked"
  /** The token was refused (40101); no reconnect until connect() is called again. */
  | "unauthorized"
  /** close() was called. */
  | "closed";

/** The part of the browser's WebSocket the client uses. */
export interface WebSocketLike {
  binaryType: string;
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  send(data: Uint8Array): void;
  close(code?: number, reason?: string): void;
}

/** Options of a SparkClient. */
export interface SparkOptions {
  /**
   * The gate's WebSocket endpoint, e.g. wss://im.example.com/ws, or several
   * gates' endpoints: each reconnect goes to the next, so the pages of a
   * stopping gate move to the others.
   */
  url: string | readonly string[];
  /** The user's token (HS256 JWT from the business server), or a function returning a fresh one for each connect. */
  token: string | (() => string | Promise<string>);
  /** The signed-in user; AUTH must confirm it (it keys the saved cursors). */
  userId: Id;
  /** A persisted id of this browser, 1–64 of [A-Za-z0-9._-]. */
  deviceId: string;
  platform?: string;
  appVersion?: string;
  /** HEARTBEAT period (default 30 s; the gate closes after 120 s without a frame). */
  heartbeatIntervalMs?: number;
  /** Bound of one request (default 10 s) and of one send attempt. */
  requestTimeoutMs?: number;
  /** Bound of opening the WebSocket plus AUTH (default 10 s). */
  connectTimeoutMs?: number;
  /** Tries of one send on 50301 or a timeout (default 5) and the first pause between them, doubled each time (default 200 ms). */
  sendAttempts?: number;
  sendBackoffMs?: number;
  /** Reconnect backoff: the first delay and the cap (defaults 500 ms, 30 s), jittered. */
  reconnectMinMs?: number;
  reconnectMaxMs?: number;
  /** Where cursors and the message cache live (default localStorage, else memory). */
  storage?: KeyValueStore;
  /** Newest messages kept per conversation (default 200; 0 keeps none). */
  cacheMessages?: number;
  /** Gzip request bodies of at least 512 bytes when that makes them smaller (default true). */
  compress?: boolean;
  /** Largest frame accepted from the server, header included (default 64 KiB, the server's default max_frame_size, as the Go client; raise it with the server's). */
  maxFrameSize?: number;
  /** Largest body after inflating a gzip body (default 64 MiB). */
  maxInflated?: number;
  /** Opens the WebSocket (default: the browser's WebSocket). */
  createWebSocket?: (url: string) => WebSocketLike;
  /** A number in [0, 1) for the backoff jitter (default Math.random). */
  random?: () => number;
}

/** An answer to a request. */
export interface Reply<T = unknown> {
  command: number;
  code: string;
  msg: string;
  data: T;
}

/** The data of a 40302 (Code.REJECTED): the business server's refusal. */
export interface Rejection {
  /** The business's own code (a positive number it defines). */
  reject_code: number;
  /** The business's text for the user. */
  reject_reason: string;
}

/** A request answered with a non-"0" code. */
export class CodeError extends Error {
  readonly command: number;
  readonly code: string;
  /** Set on a 40302 (Code.REJECTED): why the business server refused the message. */
  readonly rejection?: Rejection;
  constructor(command: number, code: string, msg: string, data?: unknown) {
    super(`spark: command ${command} failed: ${code} ${msg}`);
    this.name = "CodeError";
    this.command = command;
    this.code = code;
    if (code === Code.REJECTED && data && typeof data === "object") {
      const d = data as Partial<Rejection>;
      this.rejection = { reject_code: Number(d.reject_code ?? 0), reject_reason: String(d.reject_reason ?? "") };
    }
  }
}

/** A request that got no answer in time. */
export class TimeoutError extends Error {
  constructor(what: string, ms: number) {
    super(`spark: ${what} timed out after ${ms} ms`);
    this.name = "TimeoutError";
  }
}

/** The connection ended (or is not open) before the request was answered. */
export class ClosedError extends Error {
  constructor(why: string) {
    super(`spark: connection closed: ${why}`);
    this.name = "ClosedError";
  }
}

/** Where a delivered message came from. */
export type MessageSource = "push" | "sync" | "self";

/** What one sync brought. */
export interface SyncSummary {
  conversations: number;
  messages: number;
  events: number;
}

/** Events of a SparkClient and their listeners. */
export interface SparkEvents {
  /** The connection state changed; detail says why when it dropped. */
  state: (state: ConnState, detail: string) => void;
  /** A message new to this device, once per msg_id: pushed, synced, or sent by this device (from its SEND_ACK). */
  message: (m: Message, source: MessageSource) => void;
  /** The conversation list changed (unread, preview, flags, new entries). */
  conversations: (list: Conversation[]) => void;
  /** A message was recalled (its cached copy is now a tombstone). */
  recall: (conversationId: Id, msgId: Id) => void;
  /** The user deleted a message for themselves (it left the cache). */
  delete: (conversationId: Id, msgId: Id) => void;
  /** A group's owner or admin, or the business, deleted a message for everyone (its cached copy is now a status-3 tombstone). */
  deletedForEveryone: (conversationId: Id, msgId: Id) => void;
  /** Its sender edited a message: the cached copy has the new content, version and edited_at. */
  edit: (conversationId: Id, msgId: Id) => void;
  /** A cached message's reactions changed (its reactions field is the new counts). */
  reaction: (conversationId: Id, msgId: Id) => void;
  /** A transient signal of another member's device (SIGNAL 32: "typing", "typing_stop" or the application's own kind). */
  signal: (s: SignalPush) => void;
  /**
   * The server kicked this device; the client will not reconnect by itself.
   * Not emitted for KICK "server_shutdown" (a gate stopping), after which
   * the client reconnects: the state goes "offline" with that detail.
   */
  kick: (reason: string) => void;
  /** A sync finished. */
  synced: (s: SyncSummary) => void;
  /** A mailbox event the client does not apply itself (membership, friend, kick, missed message). */
  event: (e: MailboxEvent) => void;
  /** Another push: CONTROL_EVENT, TRANSIENT, … with its envelope data. */
  push: (command: number, data: unknown) => void;
  /** A failure that the client recovers from by itself (sync, protocol error, storage). */
  error: (err: Error) => void;
}

/** Counters for tests and diagnostics. */
export interface SparkStats {
  connects: number;
  heartbeats: number;
  pushAcks: number;
  gzippedOut: number;
  duplicatesDropped: number;
}

interface Pending {
  resolve: (r: Reply) => void;
  reject: (e: Error) => void;
  timer: ReturnType<typeof setTimeout>;
}

/** One WebSocket and what belongs to it. */
class Link {
  readonly pending = new Map<bigint, Pending>();
  /** Frames are decoded one after another (inflating is async), so they are handled in arrival order. */
  inbound: Promise<void> = Promise.resolve();
  /** Frames are written one after another (compressing is async), so requests keep their order. */
  outbound: Promise<void> = Promise.resolve();
  online = false;
  dead = false;
  heartbeat: ReturnType<typeof setInterval> | undefined;
  connectTimer: ReturnType<typeof setTimeout> | undefined;
  constructor(readonly ws: WebSocketLike) {}
}

const utf8 = new TextEncoder();
const utf8d = new TextDecoder("utf-8", { fatal: true });
const RECENT_IDS = 10000;

/**
 * The reconnect delay before attempt n (0-based): "equal jitter", half of
 * min(max, min·2^n) plus a random share of the other half, so a crowd of
 * pages dropped by one gate restart does not come back in lockstep, yet no
 * page retries at once.
 */
export function backoffDelay(attempt: number, minMs: number, maxMs: number, random: () => number = Math.random): number {
  const base = Math.min(maxMs, minMs * 2 ** Math.min(attempt, 30));
  return base / 2 + random() * (base / 2);
}

/** The KICK reason of a gate that is stopping: reconnect, elsewhere, rather than stop. */
export const KICK_SERVER_SHUTDOWN = "server_shutdown";

/** A fresh random idempotency key (32 hex digits), as the Go client's NewClientMsgID. */
export function newClientMsgId(): string {
  const b = new Uint8Array(16);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

function defaultStorage(): KeyValueStore {
  try {
    const ls = (globalThis as { localStorage?: KeyValueStore }).localStorage;
    if (ls) return ls;
  } catch {
    // localStorage access throws when the browser blocks storage
  }
  return new MemoryStore();
}

function sortConversations(list: Conversation[]): Conversation[] {
  return list.sort((a, b) => {
    if (a.pinned !== b.pinned) return a.pinned ? -1 : 1;
    if (a.last_msg_at !== b.last_msg_at) return b.last_msg_at - a.last_msg_at;
    const c = compareIds(b.last_msg_id, a.last_msg_id);
    return c !== 0 ? c : compareIds(b.conversation_id, a.conversation_id);
  });
}

function previewText(m: Message): string {
  const c = m.content;
  if (!c) return "";
  if (typeof c.text === "string") return c.text;
  return "";
}

/** Drops keys set to undefined, so they do not hide the defaults. */
function definedOnly<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

type Listeners = { [K in keyof SparkEvents]: Set<SparkEvents[K]> };

/** A Spark IM client for browsers. */
export class SparkClient {
  private readonly o: Required<Omit<SparkOptions, "url" | "token" | "storage" | "createWebSocket" | "random">> & {
    token: SparkOptions["token"];
    storage: KeyValueStore;
    createWebSocket: (url: string) => WebSocketLike;
    random: () => number;
  };
  /** Cached messages EDIT events named, fetched by id at the end of a sync. */
  private editsToFetch = new Map<Id, Set<Id>>();
  /** Cached messages REACTION events named, whose counts are read at the end of a sync. */
  private reactionsToFetch = new Map<Id, Set<Id>>();
  private readonly listeners: Listeners = {
    state: new Set(),
    message: new Set(),
    conversations: new Set(),
    recall: new Set(),
    deletedForEveryone: new Set(),
    edit: new Set(),
    reaction: new Set(),
    signal: new Set(),
    delete: new Set(),
    kick: new Set(),
    synced: new Set(),
    event: new Set(),
    push: new Set(),
    error: new Set(),
  };
  /** The gates' endpoints; urlIndex is the one the next open uses. */
  private readonly urls: readonly string[];
  private urlIndex = 0;
  private st: DeviceState;
  private connState: ConnState = "idle";
  private link: Link | null = null;
  private stopped = true;
  private attempt = 0;
  private reconnectTimer: ReturnType<typeof setTimeout> | undefined;
  private nextRequestId = 0n;
  private readonly recent = new Set<Id>();
  private syncing: Promise<void> | null = null;
  private syncAgain = false;
  private readonly waiters = new Set<{ resolve: (l: Link) => void; reject: (e: Error) => void; timer: ReturnType<typeof setTimeout> }>();
  private readonly onBrowserOnline = () => {
    if (this.connState === "offline") this.open();
  };
  /** Counters for tests and diagnostics. */
  readonly stats: SparkStats = { connects: 0, heartbeats: 0, pushAcks: 0, gzippedOut: 0, duplicatesDropped: 0 };

  constructor(options: SparkOptions) {
    if (!/^[A-Za-z0-9._-]{1,64}$/.test(options.deviceId)) {
      throw new Error(`spark: device id ${JSON.stringify(options.deviceId)} must be 1-64 of [A-Za-z0-9._-]`);
    }
    if (!/^[1-9][0-9]*$/.test(options.userId)) throw new Error(`spark: user id ${JSON.stringify(options.userId)} is not a decimal id`);
    this.o = {
      platform: "web",
      appVersion: "0.1.0",
      heartbeatIntervalMs: 30_000,
      requestTimeoutMs: 10_000,
      connectTimeoutMs: 10_000,
      sendAttempts: 5,
      sendBackoffMs: 200,
      reconnectMinMs: 500,
      reconnectMaxMs: 30_000,
      cacheMessages: 200,
      compress: true,
      maxFrameSize: DEFAULT_MAX_FRAME_SIZE,
      maxInflated: 64 << 20,
      ...definedOnly(options),
      token: options.token,
      userId: options.userId,
      deviceId: options.deviceId,
      storage: options.storage ?? defaultStorage(),
      createWebSocket: options.createWebSocket ?? ((url) => new WebSocket(url) as unknown as WebSocketLike),
      random: options.random ?? Math.random,
    };
    this.urls = typeof options.url === "string" ? [options.url] : [...options.url];
    if (this.urls.length === 0) throw new Error("spark: url must name at least one endpoint");
    this.st = loadState(this.o.storage, this.o.userId, this.o.deviceId);
    for (const list of Object.values(this.st.messages)) for (const m of list) this.remember(m.msg_id);
  }

  /** Subscribes to an event; the returned function unsubscribes. */
  on<K extends keyof SparkEvents>(event: K, fn: SparkEvents[K]): () => void {
    this.listeners[event].add(fn);
    return () => this.listeners[event].delete(fn);
  }

  private emit<K extends keyof SparkEvents>(event: K, ...args: Parameters<SparkEvents[K]>): void {
    for (const fn of this.listeners[event]) {
      try {
        (fn as (...a: Parameters<SparkEvents[K]>) => void)(...args);
      } catch (e) {
        if (event !== "error") this.emit("error", e instanceof Error ? e : new Error(String(e)));
      }
    }
  }

  /** The connection state. */
  get state(): ConnState {
    return this.connState;
  }

  /** The signed-in user. */
  get userId(): Id {
    return this.o.userId;
  }

  /** This browser's device id. */
  get deviceId(): string {
    return this.o.deviceId;
  }

  /** Opens the connection and keeps it open until close(), a KICK or a refused token. */
  connect(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.attempt = 0;
    (globalThis as { addEventListener?: (t: string, f: () => void) => void }).addEventListener?.("online", this.onBrowserOnline);
    this.open();
  }

  /** Closes the connection for good (connect() opens it again). */
  close(): void {
    this.stop("closed", "closed by the application");
  }

  private setState(s: ConnState, detail = ""): void {
    if (this.connState === s) return;
    this.connState = s;
    this.emit("state", s, detail);
  }

  private stop(s: ConnState, why: string): void {
    this.stopped = true;
    clearTimeout(this.reconnectTimer);
    (globalThis as { removeEventListener?: (t: string, f: () => void) => void }).removeEventListener?.("online", this.onBrowserOnline);
    this.setState(s, why);
    if (this.link) this.drop(this.link, why);
    for (const w of this.waiters) {
      clearTimeout(w.timer);
      w.reject(new ClosedError(`${s}: ${why}`));
    }
    this.waiters.clear();
  }

  private open(): void {
    clearTimeout(this.reconnectTimer);
    if (this.stopped || this.link) return;
    this.setState("connecting");
    this.stats.connects++;
    const tokenP = typeof this.o.token === "function" ? Promise.resolve().then(this.o.token as () => string | Promise<string>) : Promise.resolve(this.o.token);
    const url = this.urls[this.urlIndex % this.urls.length];
    let ws: WebSocketLike;
    try {
      ws = this.o.createWebSocket(url);
    } catch (e) {
      this.emit("error", e instanceof Error ? e : new Error(String(e)));
      this.scheduleReconnect(`cannot open ${url}`);
      return;
    }
    ws.binaryType = "arraybuffer";
    const link = new Link(ws);
    this.link = link;
    link.connectTimer = setTimeout(() => this.drop(link, `not signed in within ${this.o.connectTimeoutMs} ms`), this.o.connectTimeoutMs);
    ws.onopen = () => {
      if (!link.dead) void this.authenticate(link, tokenP);
    };
    ws.onmessage = (ev) => {
      if (link.dead) return;
      link.inbound = link.inbound.then(() => this.onData(link, ev.data));
    };
    ws.onclose = (ev) => {
      // After the frames that came before the close: a KICK or a refused
      // AUTH followed at once by the close must still be read as such, or
      // the client would reconnect into the same kick or refusal.
      const why = `closed by the server (${ev.code}${ev.reason ? " " + ev.reason : ""})`;
      link.inbound = link.inbound.then(() => this.drop(link, why));
    };
    ws.onerror = () => {
      // onclose follows with the code, and browsers tell scripts nothing more.
    };
  }

  private async authenticate(link: Link, tokenP: Promise<string>): Promise<void> {
    try {
      const token = await tokenP;
      const r = await this.requestOn<AuthData>(link, Cmd.AUTH, {
        token,
        device_id: this.o.deviceId,
        platform: this.o.platform,
        app_version: this.o.appVersion,
      });
      if (r.code === Code.BAD_TOKEN) {
        this.stop("unauthorized", `token refused: ${r.msg}`);
        this.emit("error", new CodeError(r.command, r.code, r.msg));
        return;
      }
      if (r.code !== Code.OK) throw new CodeError(r.command, r.code, r.msg);
      if (idOf(r.data.user_id) !== this.o.userId) {
        // The saved cursors are this user's; another user's would skip messages.
        this.stop("unauthorized", `token is user ${idOf(r.data.user_id)}, not ${this.o.userId}`);
        return;
      }
      if (link.dead) return;
      clearTimeout(link.connectTimer);
      link.online = true;
      this.attempt = 0;
      link.heartbeat = setInterval(() => void this.beat(link), this.o.heartbeatIntervalMs);
      this.setState("online");
      for (const w of this.waiters) {
        clearTimeout(w.timer);
        w.resolve(link);
      }
      this.waiters.clear();
      this.sync().catch((e) => this.emit("error", e instanceof Error ? e : new Error(String(e))));
    } catch (e) {
      if (link.dead) return;
      this.emit("error", e instanceof Error ? e : new Error(String(e)));
      this.drop(link, `sign-in failed: ${(e as Error).message}`);
    }
  }

  private async beat(link: Link): Promise<void> {
    try {
      await this.requestOn(link, Cmd.HEARTBEAT, undefined);
      this.stats.heartbeats++;
    } catch (e) {
      // A heartbeat without an answer means the path is dead even if the
      // socket does not know it yet (a sleeping laptop, a NAT that forgot us).
      this.drop(link, `heartbeat failed: ${(e as Error).message}`);
    }
  }

  /** Ends a link: its requests fail with ClosedError and, unless stopped, a reconnect is scheduled. */
  private drop(link: Link, why: string): void {
    if (link.dead) return;
    link.dead = true;
    link.online = false;
    clearInterval(link.heartbeat);
    clearTimeout(link.connectTimer);
    for (const p of link.pending.values()) {
      clearTimeout(p.timer);
      p.reject(new ClosedError(why));
    }
    link.pending.clear();
    link.ws.onopen = link.ws.onmessage = link.ws.onclose = link.ws.onerror = null;
    try {
      link.ws.close();
    } catch {
      // already closed
    }
    if (this.link === link) this.link = null;
    if (!this.stopped) this.scheduleReconnect(why);
  }

  private scheduleReconnect(why: string): void {
    this.setState("offline", why);
    // The endpoint that dropped or stopped may be gone; the next one is
    // as good a choice and moves a stopping gate's pages away from it.
    this.urlIndex = (this.urlIndex + 1) % this.urls.length;
    const delay = backoffDelay(this.attempt++, this.o.reconnectMinMs, this.o.reconnectMaxMs, this.o.random);
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = setTimeout(() => this.open(), delay);
  }

  private nextId(): bigint {
    this.nextRequestId = (this.nextRequestId + 1n) & ((1n << 64n) - 1n) || 1n;
    return this.nextRequestId;
  }

  private write(link: Link, f: FrameFields, body: Uint8Array, mayCompress: boolean): Promise<void> {
    const p = link.outbound.then(async () => {
      if (link.dead) throw new ClosedError("connection dropped");
      let flags = f.flags ?? 0;
      if (mayCompress && this.o.compress) {
        const z = await compress(body);
        if (z.gzipped) {
          flags |= 1;
          body = z.body;
          this.stats.gzippedOut++;
        }
      }
      if (link.dead) throw new ClosedError("connection dropped");
      link.ws.send(encodeFrame({ ...f, flags }, body));
    });
    link.outbound = p.catch(() => {});
    return p;
  }

  /** Sends one request on link and waits for the frame with its RequestID. */
  private requestOn<T = unknown>(link: Link, command: number, body: unknown, timeoutMs = this.o.requestTimeoutMs): Promise<Reply<T>> {
    if (link.dead) return Promise.reject(new ClosedError("connection dropped"));
    const id = this.nextId();
    const bytes = body === undefined ? new Uint8Array(0) : utf8.encode(typeof body === "string" ? body : JSON.stringify(body));
    return new Promise<Reply<T>>((resolve, reject) => {
      const timer = setTimeout(() => {
        link.pending.delete(id);
        reject(new TimeoutError(`command ${command}`, timeoutMs));
      }, timeoutMs);
      link.pending.set(id, { resolve: resolve as (r: Reply) => void, reject, timer });
      this.write(link, { command, requestId: id, sequenceId: Number(id & 0xffffffffn) }, bytes, true).catch((e: Error) => {
        clearTimeout(timer);
        link.pending.delete(id);
        reject(e);
      });
    });
  }

  private waitOnline(timeoutMs: number): Promise<Link> {
    const l = this.link;
    if (l && l.online && !l.dead) return Promise.resolve(l);
    if (this.stopped) return Promise.reject(new ClosedError(this.connState === "idle" ? "connect() was not called" : this.connState));
    return new Promise<Link>((resolve, reject) => {
      const w = {
        resolve,
        reject,
        timer: setTimeout(() => {
          this.waiters.delete(w);
          reject(new TimeoutError("waiting for the connection", timeoutMs));
        }, timeoutMs),
      };
      this.waiters.add(w);
    });
  }

  /**
   * Sends any request once the connection is online and returns the data
   * of its answer; a non-"0" code throws a CodeError. For commands the
   * client has no helper for (RELATION, GROUP, CONVERSATION_SETTINGS …).
   */
  async request<T = unknown>(command: number, body?: unknown): Promise<Reply<T>> {
    const link = await this.waitOnline(this.o.requestTimeoutMs);
    const r = await this.requestOn<T>(link, command, body);
    if (r.code !== Code.OK) throw new CodeError(r.command, r.code, r.msg);
    return r;
  }

  private async onData(link: Link, data: unknown): Promise<void> {
    let f;
    let env: { code?: string; msg?: string; data?: unknown } | null = null;
    try {
      if (!(data instanceof ArrayBuffer) && !(data instanceof Uint8Array)) {
        throw new FrameError("short", "a text message where binary frames are expected");
      }
      f = await readMessage(data, { maxFrameSize: this.o.maxFrameSize, maxInflated: this.o.maxInflated });
      if (f.body.byteLength > 0) env = JSON.parse(utf8d.decode(f.body));
    } catch (e) {
      // A frame we cannot read means the stream is broken (docs/protocol.md §2):
      // close and start over on a fresh connection.
      this.emit("error", e instanceof Error ? e : new Error(String(e)));
      this.drop(link, `protocol error: ${(e as Error).message}`);
      return;
    }
    if (link.dead) return;
    if (f.requestId !== 0n) {
      const p = link.pending.get(f.requestId);
      if (p) {
        link.pending.delete(f.requestId);
        clearTimeout(p.timer);
        p.resolve({ command: f.command, code: env?.code ?? Code.OK, msg: env?.msg ?? "", data: env?.data ?? {} });
        return;
      }
    }
    const d = (env?.data ?? {}) as Record<string, unknown>;
    switch (f.command) {
      case Cmd.MESSAGE:
        if (f.requestId === 0n) {
          // Acknowledge first, as the Go client does: the ack says the
          // frame arrived, whatever the page then does with it.
          this.write(link, { command: Cmd.PUSH_ACK, requestId: this.nextId(), sequenceId: f.sequenceId }, new Uint8Array(0), false)
            .then(() => this.stats.pushAcks++)
            .catch(() => {});
        }
        this.receive(d as unknown as Message, "push");
        this.persist();
        return;
      case Cmd.KICK: {
        const reason = typeof d.reason === "string" ? d.reason : "";
        if (reason === KICK_SERVER_SHUTDOWN) {
          // The gate is stopping and spreads its KICKs over a window; the
          // jittered backoff spreads the reconnects further. Requests in
          // flight fail over like after a drop (sends are retried).
          this.drop(link, `kicked: ${reason}, reconnecting`);
          return;
        }
        this.stop("kicked", reason || "kicked");
        this.emit("kick", reason);
        return;
      }
      case Cmd.READ_MESSAGE:
        this.applyRead(idOf(d.conversation_id), idOf(d.msg_id));
        return;
      case Cmd.RECALL_MESSAGE:
        this.applyRecall(idOf(d.conversation_id), idOf(d.msg_id));
        this.persist();
        return;
      case Cmd.SIGNAL:
        this.emit("signal", {
          conversation_id: idOf(d.conversation_id),
          sender_id: idOf(d.sender_id),
          device_id: typeof d.device_id === "string" ? d.device_id : "",
          kind: typeof d.kind === "string" ? d.kind : "",
          payload: d.payload && typeof d.payload === "object" ? (d.payload as Record<string, unknown>) : undefined,
        });
        return;
      case Cmd.REACTION:
        if (typeof d.emoji === "string" && typeof d.count === "number") {
          const mine = idOf(d.user_id) === this.o.userId ? d.added === true : undefined;
          this.applyReaction(idOf(d.conversation_id), idOf(d.msg_id), d.emoji, d.count, mine);
          this.persist();
        }
        return;
      case Cmd.EDIT_MESSAGE:
        if (typeof d.version === "number" && d.content && typeof d.content === "object") {
          this.applyEdit(idOf(d.conversation_id), idOf(d.msg_id), d.version, Number(d.edited_at) || 0, d.content as Message["content"]);
          this.persist();
        }
        return;
      case Cmd.DELETE_MESSAGE:
        if (d.for_everyone === true) this.applyRecall(idOf(d.conversation_id), idOf(d.msg_id), 3);
        else this.applyDelete(idOf(d.conversation_id), idOf(d.msg_id));
        this.persist();
        return;
      case Cmd.CONVERSATION_SETTINGS: {
        const c = this.st.conversations[idOf(d.conversation_id)];
        if (c) {
          if (typeof d.muted === "boolean") c.muted = d.muted;
          if (typeof d.pinned === "boolean") c.pinned = d.pinned;
          if (typeof d.hidden === "boolean") c.hidden = d.hidden;
          this.persist();
          this.emit("conversations", this.conversations());
        }
        return;
      }
      default:
        this.emit("push", f.command, env?.data);
    }
  }

  private remember(msgId: Id): void {
    this.recent.add(msgId);
    if (this.recent.size > RECENT_IDS) {
      const oldest = this.recent.values().next().value;
      if (oldest !== undefined) this.recent.delete(oldest);
    }
  }

  private normalize(m: Message): Message {
    return {
      ...m,
      msg_id: idOf(m.msg_id),
      conversation_id: idOf(m.conversation_id),
      sender_id: idOf(m.sender_id),
    };
  }

  /**
   * Takes in one message from a push, a sync page or this device's own
   * SEND_ACK: once per msg_id it is cached, the conversation list updated
   * and the message event emitted. Reports whether it was new.
   */
  private receive(raw: Message, source: MessageSource): boolean {
    const m = this.normalize(raw);
    if (m.msg_id === "0" || m.conversation_id === "0") return false;
    const cid = m.conversation_id;
    if (this.recent.has(m.msg_id)) {
      this.stats.duplicatesDropped++;
      // A sync may bring a message this device already has as a tombstone.
      if (m.status === 2 || m.status === 3) this.applyRecall(cid, m.msg_id, m.status);
      return false;
    }
    this.remember(m.msg_id);
    if (this.o.cacheMessages > 0) {
      const list = (this.st.messages[cid] ??= []);
      insertMessage(list, m, this.o.cacheMessages);
    }
    if (source !== "sync") this.touchConversation(m, source);
    this.emit("message", m, source);
    return true;
  }

  /** Moves a conversation's list entry forward for a pushed or sent message. */
  private touchConversation(m: Message, source: MessageSource): void {
    const cid = m.conversation_id;
    let c = this.st.conversations[cid];
    if (!c) {
      c = {
        conversation_id: cid,
        conversation_type: m.conversation_type,
        last_msg_id: "0",
        last_msg_at: 0,
        unread: 0,
        muted: false,
        pinned: false,
      };
      if (m.conversation_type === ConversationType.P2P && m.sender_id !== this.o.userId) c.peer_id = m.sender_id;
      this.st.conversations[cid] = c;
      // The list entry from the server (peer, group, flags, exact unread)
      // comes with the next SYNC_INBOX.
      if (source === "push") this.requestSync();
    }
    if (compareIds(m.msg_id, c.last_msg_id) > 0) {
      // Only a message past the list's last_msg_id counts as unread: one
      // at or below it was counted by the server already.
      if (source === "push" && m.sender_id !== this.o.userId && !c.muted) c.unread++;
      c.last_msg_id = m.msg_id;
      c.last_msg_at = Math.max(c.last_msg_at, m.created_at || 0);
      c.preview = { msg_id: m.msg_id, message_type: m.message_type, text: previewText(m), sender_id: m.sender_id };
      c.hidden = false;
    }
    this.emit("conversations", this.conversations());
  }

  private applyRead(cid: Id, msgId: Id): void {
    const c = this.st.conversations[cid];
    if (c && compareIds(msgId, c.last_msg_id) >= 0 && c.unread !== 0) {
      c.unread = 0;
      this.persist();
      this.emit("conversations", this.conversations());
    }
  }

  /** Makes a cached message a tombstone: 2 recalled, 3 deleted for everyone. */
  /** The snapshot of a message replied to, from the local history. */
  private localSnapshot(cid: Id, msgId: Id): ReplySnapshot {
    const o = this.st.messages[cid]?.find((x) => x.msg_id === msgId);
    if (!o?.content) return { msg_id: msgId };
    const text = typeof o.content.text === "string" ? [...o.content.text].slice(0, 50).join("") : "";
    return { msg_id: msgId, message_type: o.message_type, text, sender_id: o.sender_id };
  }

  private applyRecall(cid: Id, msgId: Id, status: 2 | 3 = 2): void {
    const list = this.st.messages[cid];
    const m = list?.find((x) => x.msg_id === msgId);
    let changed = false;
    if (m && m.status !== status) {
      m.status = status;
      delete m.content;
      changed = true;
    }
    // Replies quoting it lose the quoted text too, as the server's history
    // shows them.
    for (const r of list ?? []) {
      const snap = r.content?.reply_to as ReplySnapshot | undefined;
      if (r.content && snap && snap.msg_id === msgId && !snap.recalled) {
        r.content = { ...r.content, reply_to: { msg_id: msgId, recalled: true } };
        changed = true;
      }
    }
    const c = this.st.conversations[cid];
    if (c?.preview && c.preview.msg_id === msgId && !c.preview.recalled) {
      c.preview = { ...c.preview, recalled: true, text: "" };
      changed = true;
    }
    if (changed) {
      if (status === 3) this.emit("deletedForEveryone", cid, msgId);
      else this.emit("recall", cid, msgId);
    }
  }

  /**
   * Sets one emoji's count on a cached message; mine, when known, is
   * whether the user's own reaction is among them.
   */
  private applyReaction(cid: Id, msgId: Id, emoji: string, count: number, mine?: boolean): void {
    const m = this.st.messages[cid]?.find((x) => x.msg_id === msgId);
    if (!m || (m.status ?? 1) !== 1) return;
    const list = (m.reactions ??= []);
    const i = list.findIndex((r) => r.emoji === emoji);
    if (count <= 0) {
      if (i >= 0) list.splice(i, 1);
    } else if (i >= 0) {
      list[i] = { emoji, count, me: mine ?? list[i].me };
    } else {
      list.push({ emoji, count, me: mine ?? false });
    }
    if (list.length === 0) delete m.reactions;
    this.emit("reaction", cid, msgId);
  }

  /** Replaces the cached counts of the messages asked about with a get answer's. */
  private applyReactionPage(cid: Id, asked: Id[], got: { msg_id: Id; reactions: ReactionCount[] }[]): void {
    const byId = new Map(got.map((m) => [m.msg_id, m.reactions]));
    for (const id of asked) {
      const m = this.st.messages[cid]?.find((x) => x.msg_id === id);
      if (!m) continue;
      const rs = byId.get(id);
      const before = JSON.stringify(m.reactions ?? []);
      if (rs && rs.length > 0 && (m.status ?? 1) === 1) m.reactions = rs.map((r) => ({ emoji: r.emoji, count: r.count, me: r.me === true }));
      else delete m.reactions;
      if (JSON.stringify(m.reactions ?? []) !== before) this.emit("reaction", cid, id);
    }
  }

  /** Reads the counts of up to 100 messages of a conversation with REACTION get, following its pages. */
  private async fetchReactions(link: Link | null, cid: Id, ids: Id[]): Promise<{ msg_id: Id; reactions: ReactionCount[] }[]> {
    const out: { msg_id: Id; reactions: ReactionCount[] }[] = [];
    let rest = [...ids].sort(compareIds);
    while (rest.length > 0) {
      const body = { op: "get", conversation_id: cid, msg_ids: rest };
      const r = link
        ? await this.requestOn<ReactionsData>(link, Cmd.REACTION, body)
        : await this.request<ReactionsData>(Cmd.REACTION, body);
      if (r.code !== Code.OK) throw new CodeError(r.command, r.code, r.msg);
      out.push(...(r.data.messages ?? []));
      if (!r.data.more || !r.data.next_msg_id) break;
      const next = r.data.next_msg_id;
      rest = rest.filter((id) => compareIds(id, next) >= 0);
    }
    return out;
  }

  /** Queues a cached message for fetchEdits. */
  private noteEdit(cid: Id, msgId: Id): void {
    let ids = this.editsToFetch.get(cid);
    if (!ids) this.editsToFetch.set(cid, (ids = new Set()));
    ids.add(msgId);
  }

  /** Applies a newer version of a cached message (and of the list's preview of it). */
  private applyEdit(cid: Id, msgId: Id, version: number, editedAt: number, content: Message["content"]): void {
    const m = this.st.messages[cid]?.find((x) => x.msg_id === msgId);
    if (!m || (m.status ?? 1) !== 1 || version <= (m.version ?? 0)) return;
    m.content = content;
    m.version = version;
    m.edited_at = editedAt;
    const c = this.st.conversations[cid];
    if (c?.preview && c.preview.msg_id === msgId && !c.preview.recalled && content) {
      const text = typeof content.text === "string" ? [...content.text].slice(0, 50).join("") : c.preview.text;
      c.preview = { ...c.preview, text };
      this.emit("conversations", this.conversations());
    }
    this.emit("edit", cid, msgId);
  }

  /** Fetches the new versions of the messages EDIT events named (their payloads carry no content). */
  private async fetchEdits(link: Link, edited: Map<Id, Set<Id>>): Promise<void> {
    for (const [cid, ids] of edited) {
      const all = [...ids].sort(compareIds);
      for (let i = 0; i < all.length; i += 100) {
        let rest = all.slice(i, i + 100);
        while (rest.length > 0) {
          const r = await this.requestOn<SyncMessagesData>(link, Cmd.SYNC_MESSAGES, { conversation_id: cid, last_msg_id: "0", msg_ids: rest });
          if (r.code !== Code.OK) throw new CodeError(r.command, r.code, r.msg);
          for (const m of r.data.messages ?? []) this.applyEdit(cid, m.msg_id, m.version ?? 0, m.edited_at ?? 0, m.content);
          // Command 12: the frame limit cut the answer; the rest follow.
          if (r.command !== Cmd.SYNC_MESSAGES || (r.data.messages ?? []).length === 0) break;
          const next = r.data.next_msg_id;
          rest = rest.filter((id) => compareIds(id, next) > 0);
        }
      }
    }
  }

  private applyDelete(cid: Id, msgId: Id): void {
    this.remember(msgId); // a later sync must not bring it back
    const list = this.st.messages[cid];
    const i = list ? list.findIndex((x) => x.msg_id === msgId) : -1;
    if (list && i >= 0) {
      list.splice(i, 1);
      this.emit("delete", cid, msgId);
    }
  }

  private persist(): void {
    const key = stateKey(this.o.userId, this.o.deviceId);
    const json = JSON.stringify(this.st);
    try {
      this.o.storage.setItem(key, json);
    } catch (e) {
      // Storage full: keep the cursors and fewer cached messages.
      for (const list of Object.values(this.st.messages)) list.splice(0, Math.ceil(list.length / 2));
      try {
        this.o.storage.setItem(key, JSON.stringify(this.st));
      } catch {
        this.emit("error", new Error(`spark: cannot save sync state: ${(e as Error).message}`));
      }
    }
  }

  private requestSync(): void {
    if (this.connState === "online") this.sync().catch((e) => this.emit("error", e instanceof Error ? e : new Error(String(e))));
  }

  /**
   * Runs the sync sequence now (the client runs it after every connect by
   * itself). Syncs run one at a time; one asked for during another runs
   * right after it.
   */
  sync(): Promise<void> {
    if (this.syncing) {
      this.syncAgain = true;
      return this.syncing;
    }
    this.syncing = (async () => {
      try {
        for (;;) {
          this.syncAgain = false;
          try {
            await this.syncOnce();
          } catch (e) {
            // A sync cut short by a dropped connection must not swallow the
            // one the reconnect asked for meanwhile.
            if (!this.syncAgain) throw e;
            this.emit("error", e instanceof Error ? e : new Error(String(e)));
          }
          if (!this.syncAgain) return;
        }
      } finally {
        this.syncing = null;
      }
    })();
    return this.syncing;
  }

  private async syncOnce(): Promise<void> {
    const link = this.link;
    if (!link || !link.online) throw new ClosedError("not online");
    const summary: SyncSummary = { conversations: 0, messages: 0, events: 0 };
    const changed = new Set<Id>();
    // 1. SYNC_INBOX from the saved cursors to the last page (11).
    for (let pages = 0; ; pages++) {
      if (pages > 100_000) throw new Error("spark: SYNC_INBOX does not finish");
      const r = await this.requestOn<SyncInboxData>(link, Cmd.SYNC_INBOX, {
        dialog_cursor: this.st.dialog_cursor,
        mailbox_seq: this.st.mailbox_seq,
      });
      if (r.code !== Code.OK) throw new CodeError(r.command, r.code, r.msg);
      if (r.command !== Cmd.SYNC_INBOX && r.command !== Cmd.SYNC_INBOX_FINISH) {
        throw new Error(`spark: SYNC_INBOX answered with command ${r.command}`);
      }
      for (const raw of r.data.conversations ?? []) {
        const cid = idOf(raw.conversation_id);
        if (cid === "0") continue;
        const c: Conversation = {
          ...raw,
          conversation_id: cid,
          last_msg_id: idOf(raw.last_msg_id),
        };
        if (raw.peer_id !== undefined) c.peer_id = idOf(raw.peer_id);
        if (raw.group_id !== undefined) c.group_id = idOf(raw.group_id);
        this.st.conversations[cid] = c;
        changed.add(cid);
      }
      for (const e of r.data.events ?? []) {
        const seq = idOf(e.seq);
        if (seq !== "0" && compareIds(seq, this.st.mailbox_seq) <= 0) continue; // a page repeated after a retry
        this.applyEvent({ ...e, seq, conversation_id: idOf(e.conversation_id), msg_id: idOf(e.msg_id) });
        summary.events++;
        this.st.mailbox_seq = maxId(this.st.mailbox_seq, seq);
      }
      if (r.data.dialog_cursor) this.st.dialog_cursor = r.data.dialog_cursor;
      this.st.mailbox_seq = maxId(this.st.mailbox_seq, idOf(r.data.mailbox_seq));
      this.persist();
      if (r.command === Cmd.SYNC_INBOX_FINISH) break;
    }
    summary.conversations = changed.size;
    if (changed.size > 0) this.emit("conversations", this.conversations());

    // 2. SYNC_MESSAGES for each conversation that changed, or whose last
    // message is past the cursor held for it (an earlier sync cut short).
    const dirty = Object.values(this.st.conversations)
      .filter((c) => changed.has(c.conversation_id) || compareIds(c.last_msg_id, this.st.last_msg_ids[c.conversation_id]) > 0)
      .map((c) => c.conversation_id)
      .sort(compareIds);
    for (const cid of dirty) {
      let cursor = this.st.last_msg_ids[cid] ?? "0";
      for (;;) {
        const r = await this.requestOn<SyncMessagesData>(link, Cmd.SYNC_MESSAGES, {
          conversation_id: cid,
          last_msg_id: cursor,
          limit: 200,
        });
        if (r.code === Code.FORBIDDEN) {
          // No longer a member: the conversation leaves the list.
          delete this.st.conversations[cid];
          delete this.st.last_msg_ids[cid];
          delete this.st.messages[cid];
          this.persist();
          this.emit("conversations", this.conversations());
          break;
        }
        if (r.code !== Code.OK) throw new CodeError(r.command, r.code, r.msg);
        const last = r.command === Cmd.SYNC_MESSAGES_FINISH;
        if (!last && r.command !== Cmd.SYNC_MESSAGES) throw new Error(`spark: SYNC_MESSAGES answered with command ${r.command}`);
        for (const m of r.data.messages ?? []) {
          if (compareIds(idOf(m.msg_id), cursor) > 0 && this.receive(m, "sync")) summary.messages++;
        }
        const next = idOf(r.data.next_msg_id);
        if (compareIds(next, cursor) > 0) {
          cursor = next;
          this.st.last_msg_ids[cid] = cursor;
          this.persist();
        } else if (!last) {
          throw new Error(`spark: SYNC_MESSAGES of conversation ${cid} did not advance from ${cursor}`);
        }
        if (last) break;
      }
    }
    if (this.reactionsToFetch.size > 0) {
      const reacted = this.reactionsToFetch;
      this.reactionsToFetch = new Map();
      try {
        for (const [cid, ids] of reacted) {
          const all = [...ids];
          for (let i = 0; i < all.length; i += 100) {
            const part = all.slice(i, i + 100);
            this.applyReactionPage(cid, part, await this.fetchReactions(link, cid, part));
          }
        }
      } catch (e) {
        for (const [cid, ids] of reacted) for (const id of ids) noteIn(this.reactionsToFetch, cid, id);
        throw e;
      }
    }
    if (this.editsToFetch.size > 0) {
      const edited = this.editsToFetch;
      this.editsToFetch = new Map();
      try {
        await this.fetchEdits(link, edited);
      } catch (e) {
        for (const [cid, ids] of edited) for (const id of ids) this.noteEdit(cid, id);
        throw e;
      }
    }
    this.persist();
    this.emit("synced", summary);
  }

  private applyEvent(e: MailboxEvent): void {
    switch (e.event_type) {
      case EventType.RECALL:
        this.applyRecall(e.conversation_id, e.msg_id);
        return;
      case EventType.DELETE:
        if ((e.payload as { for_everyone?: boolean } | null)?.for_everyone === true) this.applyRecall(e.conversation_id, e.msg_id, 3);
        else this.applyDelete(e.conversation_id, e.msg_id);
        return;
      case EventType.REACTION:
        // A cached message's counts are read at the sync's end (one get
        // for all the events of a message); an uncached one has none to
        // keep.
        if (this.st.messages[e.conversation_id]?.some((x) => x.msg_id === e.msg_id)) noteIn(this.reactionsToFetch, e.conversation_id, e.msg_id);
        return;
      case EventType.EDIT: {
        // A cached message is fetched again at the sync's end; one not
        // cached comes with SYNC_MESSAGES in its newest version anyway.
        const v = (e.payload as { version?: number } | null)?.version ?? 0;
        const m = this.st.messages[e.conversation_id]?.find((x) => x.msg_id === e.msg_id);
        if (m && v > (m.version ?? 0)) this.noteEdit(e.conversation_id, e.msg_id);
        return;
      }
      default:
        this.emit("event", e);
    }
  }

  /**
   * Sends a message and resolves with it as stored (msg_id and
   * conversation_id from the SEND_ACK). On 50301, a timeout or a dropped
   * connection it tries again with the same client_msg_id, so the server
   * stores it at most once, up to sendAttempts tries with doubling pauses;
   * while the connection is down each try waits for it to come back. Other
   * codes reject with a CodeError. With opts.replyTo the message replies
   * to that message of the same conversation: the server stores its
   * snapshot in the content under "reply_to" (the local copy holds the
   * original's from the local history, if there, until a sync brings the
   * server's).
   */
  async send(target: Target, messageType: number, content: Record<string, unknown>, opts: { clientMsgId?: string; msgId?: Id; replyTo?: Id } = {}): Promise<Message> {
    const clientMsgId = opts.clientMsgId ?? newClientMsgId();
    const body: Record<string, unknown> = { client_msg_id: clientMsgId, message_type: messageType, content };
    let type = 0;
    if ("toUserId" in target) {
      body.to_user_id = target.toUserId;
      type = ConversationType.P2P;
    } else if ("groupId" in target) {
      body.group_id = target.groupId;
      type = ConversationType.GROUP;
    } else {
      body.conversation_id = target.conversationId;
      type = this.st.conversations[target.conversationId]?.conversation_type ?? 0;
    }
    if (opts.msgId) body.msg_id = opts.msgId;
    if (opts.replyTo) body.reply_to = opts.replyTo;
    // Encoded once: every try carries the same bytes, which the server
    // compares with the stored message of the same client_msg_id.
    const json = JSON.stringify(body);
    let pause = this.o.sendBackoffMs;
    let last: Error = new Error("spark: send not tried");
    for (let attempt = 1; ; attempt++) {
      try {
        const link = await this.waitOnline(this.o.requestTimeoutMs);
        const r = await this.requestOn<SendAck>(link, Cmd.SEND_MESSAGE, json);
        if (r.code === Code.OK && r.command === Cmd.SEND_ACK) {
          const m: Message = {
            msg_id: idOf(r.data.msg_id),
            conversation_id: idOf(r.data.conversation_id),
            conversation_type: type,
            sender_id: this.o.userId,
            client_msg_id: clientMsgId,
            message_type: messageType,
            content: (opts.replyTo ? { ...content, reply_to: this.localSnapshot(idOf(r.data.conversation_id), opts.replyTo) } : content) as Message["content"],
            created_at: r.data.server_time,
            status: 1,
          };
          const c = this.st.conversations[m.conversation_id];
          if (c) m.conversation_type = c.conversation_type;
          else if ("toUserId" in target) {
            this.st.conversations[m.conversation_id] = {
              conversation_id: m.conversation_id,
              conversation_type: ConversationType.P2P,
              peer_id: target.toUserId,
              last_msg_id: "0",
              last_msg_at: 0,
              unread: 0,
              muted: false,
              pinned: false,
            };
          } else if ("groupId" in target) {
            this.st.conversations[m.conversation_id] = {
              conversation_id: m.conversation_id,
              conversation_type: ConversationType.GROUP,
              group_id: target.groupId,
              last_msg_id: "0",
              last_msg_at: 0,
              unread: 0,
              muted: false,
              pinned: false,
            };
          }
          this.receive(m, "self");
          this.persist();
          return m;
        }
        if (r.code === Code.OK) throw new Error(`spark: send answered with command ${r.command}`);
        const ce = new CodeError(r.command, r.code, r.msg, r.data);
        if (r.code !== Code.BUSY) throw ce;
        last = ce;
      } catch (e) {
        const retryable =
          e instanceof TimeoutError || (e instanceof ClosedError && !this.stopped) || (e instanceof CodeError && e.code === Code.BUSY);
        if (!retryable) throw e;
        last = e as Error;
      }
      if (attempt >= this.o.sendAttempts) throw last;
      await new Promise((r) => setTimeout(r, pause));
      pause *= 2;
    }
  }

  /** Sends a text message ({"t":1,"text":…}). */
  sendText(target: Target, text: string, opts: { clientMsgId?: string; replyTo?: Id } = {}): Promise<Message> {
    return this.send(target, 1, { t: 1, text }, opts);
  }

  /**
   * Marks a conversation read up to the newest message this device knows
   * of (READ_MESSAGE) and, when the server's mark reaches the list's last
   * message, sets its unread to 0.
   */
  /**
   * Deletes a message for every member of its group (the user must be the
   * group's owner or an admin): DELETE_MESSAGE with for_everyone.
   */
  async deleteForEveryone(conversationId: Id, msgId: Id): Promise<void> {
    await this.request(Cmd.DELETE_MESSAGE, { conversation_id: conversationId, msg_id: msgId, for_everyone: true });
    this.applyRecall(conversationId, msgId, 3);
    this.persist();
  }

  /**
   * Replaces the text of one of the user's text messages (EDIT_MESSAGE,
   * within the server's edit window) and resolves with its new version;
   * the cached copy and the other devices follow.
   */
  async editMessage(conversationId: Id, msgId: Id, text: string): Promise<number> {
    const r = await this.request<{ version: number; edited_at: number }>(Cmd.EDIT_MESSAGE, {
      conversation_id: conversationId,
      msg_id: msgId,
      content: { t: 1, text },
    });
    const old = this.st.messages[conversationId]?.find((x) => x.msg_id === msgId);
    const content: Message["content"] = { t: 1, text };
    if (old?.content?.reply_to) content.reply_to = old.content.reply_to;
    this.applyEdit(conversationId, msgId, r.data.version, r.data.edited_at, content);
    this.persist();
    return r.data.version;
  }

  /**
   * Adds the user's reaction to a message (REACTION add: one emoji) and
   * resolves with the emoji's count; the cached copy and the other
   * devices follow. The same emoji twice rejects with code 40902, past the
   * server's caps with 40303.
   */
  async react(conversationId: Id, msgId: Id, emoji: string): Promise<number> {
    return this.changeReaction("add", conversationId, msgId, emoji);
  }

  /** Removes the user's reaction (REACTION remove); resolves with the emoji's count. */
  async unreact(conversationId: Id, msgId: Id, emoji: string): Promise<number> {
    return this.changeReaction("remove", conversationId, msgId, emoji);
  }

  private async changeReaction(op: "add" | "remove", conversationId: Id, msgId: Id, emoji: string): Promise<number> {
    const r = await this.request<{ count: number; changed: boolean }>(Cmd.REACTION, { op, conversation_id: conversationId, msg_id: msgId, emoji });
    this.applyReaction(conversationId, msgId, emoji, r.data.count, op === "add");
    this.persist();
    return r.data.count;
  }

  /**
   * Reads the reactions of messages of a conversation (REACTION get) and
   * resolves with each one's counts (in the order the emojis were first
   * used; me marks the user's own). Cached copies take them, so a page
   * that shows messages calls this once for them: the server's sync does
   * not carry reactions.
   */
  async reactions(conversationId: Id, msgIds: Id[]): Promise<Map<Id, ReactionCount[]>> {
    const out = new Map<Id, ReactionCount[]>();
    for (let i = 0; i < msgIds.length; i += 100) {
      const part = msgIds.slice(i, i + 100);
      const got = await this.fetchReactions(null, conversationId, part);
      this.applyReactionPage(conversationId, part, got);
      for (const m of got) out.set(m.msg_id, m.reactions.map((r) => ({ emoji: r.emoji, count: r.count, me: r.me === true })));
    }
    this.persist();
    return out;
  }

  /** Reads a page of who reacted to a message with one emoji (REACTION users), by user id after after. */
  async reactors(conversationId: Id, msgId: Id, emoji: string, after?: Id, limit?: number): Promise<ReactorsPage> {
    const r = await this.request<ReactorsPage>(Cmd.REACTION, { op: "users", conversation_id: conversationId, msg_id: msgId, emoji, after: after ?? "0", limit: limit ?? 0 });
    return r.data;
  }

  /**
   * Sends a transient signal into a conversation (SIGNAL 32): "typing"
   * every few seconds while the user types, "typing_stop" when they stop,
   * or the application's own kind with an optional payload (at most
   * 1 KiB). Never stored; resolves with how many other connections it
   * was queued for.
   */
  async signal(conversationId: Id, kind: string, payload?: Record<string, unknown>): Promise<number> {
    const r = await this.request<{ delivered: number }>(Cmd.SIGNAL, payload ? { conversation_id: conversationId, kind, payload } : { conversation_id: conversationId, kind });
    return r.data.delivered;
  }

  async markRead(conversationId: Id): Promise<void> {
    const c = this.st.conversations[conversationId];
    const cached = this.st.messages[conversationId];
    let newest = maxId(c?.last_msg_id, this.st.last_msg_ids[conversationId]);
    if (cached && cached.length > 0) newest = maxId(newest, cached[cached.length - 1]!.msg_id);
    if (newest === "0") return;
    const r = await this.request<{ conversation_id: Id; msg_id: Id }>(Cmd.READ_MESSAGE, { conversation_id: conversationId, msg_id: newest });
    this.applyRead(conversationId, idOf(r.data.msg_id));
  }

  /**
   * Registers this device's offline-push token (PUSH_SETTINGS register),
   * replacing the one it had. Call it after every connect: the platform
   * may have rotated the token.
   */
  async registerPushToken(t: PushToken): Promise<void> {
    await this.request(Cmd.PUSH_SETTINGS, { op: "register", ...t });
  }

  /** Removes this device's push token (signing out). */
  async unregisterPushToken(): Promise<void> {
    await this.request(Cmd.PUSH_SETTINGS, { op: "unregister" });
  }

  /** Sets (or, without an argument, reads) what the user's notifications show. */
  async pushPreview(preview?: PushPreview): Promise<PushPreview> {
    const r = await this.request<{ preview: PushPreview }>(Cmd.PUSH_SETTINGS, preview ? { op: "preview", preview } : { op: "preview" });
    return r.data.preview;
  }

  /**
   * Sends `body` to the business service `service` (UPSTREAM, 22) and
   * resolves once the server has durably queued it. `upstreamId` makes a
   * retry safe: the same user, service and id are queued once, and the
   * retry resolves with the first one's `id` and `duplicate: true`. Pass
   * the same id to every retry of one frame (a fresh random one per
   * frame).
   */
  async upstream(service: string, body: string, upstreamId?: string): Promise<UpstreamReply> {
    const r = await this.request<UpstreamReply>(Cmd.UPSTREAM, upstreamId ? { service, body, upstream_id: upstreamId } : { service, body });
    return { id: idOf(r.data.id), duplicate: r.data.duplicate };
  }

  /**
   * Asks for an upload of `size` bytes of `contentType` as `kind` (MEDIA
   * upload): the answer is the one HTTP request that stores it. Most
   * callers want `uploadFile`.
   */
  async requestUpload(kind: MediaKind, size: number, contentType: string): Promise<MediaUpload> {
    const r = await this.request<MediaUpload>(Cmd.MEDIA, { op: "upload", kind, size, content_type: contentType });
    return r.data;
  }

  /** Tells the server the upload of `key` is done (MEDIA complete); it answers the object as stored. */
  async completeUpload(key: string): Promise<MediaObject> {
    const r = await this.request<MediaObject>(Cmd.MEDIA, { op: "complete", key });
    return r.data;
  }

  /**
   * Uploads a Blob (a File from an input, a canvas's blob) as `kind`:
   * asks for the upload, PUTs the bytes straight to the object store with
   * XMLHttpRequest so `onProgress(sent, total)` sees the upload move, and
   * completes it. Rejects with a SparkError for the server's refusals and
   * an Error naming the HTTP status for the store's.
   */
  async uploadFile(kind: MediaKind, blob: Blob, opts: { contentType?: string; onProgress?: (sent: number, total: number) => void } = {}): Promise<MediaObject> {
    const contentType = opts.contentType ?? blob.type;
    if (!contentType) throw new Error("uploadFile: the blob has no type; pass contentType");
    const up = await this.requestUpload(kind, blob.size, contentType);
    await putBlob(up, blob, opts.onProgress);
    return this.completeUpload(up.key);
  }

  /**
   * A short-lived URL of a media key of message `msgId` (its `key` by
   * default, or `key`, e.g. its `thumb_key`), for a member of its
   * conversation. The URL is a credential: keep it in memory, and ask
   * again when it has expired.
   */
  async downloadUrl(conversationId: Id, msgId: Id, key?: string): Promise<MediaDownload> {
    const body: Record<string, unknown> = { op: "download", conversation_id: conversationId, msg_id: msgId };
    if (key) body.key = key;
    const r = await this.request<MediaDownload>(Cmd.MEDIA, body);
    return r.data;
  }

  /** The conversation list: pinned first, then by last activity; hidden ones left out. */
  conversations(): Conversation[] {
    return sortConversations(Object.values(this.st.conversations).filter((c) => !c.hidden)).map((c) => ({ ...c }));
  }

  /** One conversation of the list. */
  conversation(conversationId: Id): Conversation | undefined {
    const c = this.st.conversations[conversationId];
    return c ? { ...c } : undefined;
  }

  /** The cached messages of a conversation, ascending msg_id. */
  messages(conversationId: Id): Message[] {
    return (this.st.messages[conversationId] ?? []).map((m) => ({ ...m }));
  }

  /** The cursors and list this device has saved (a copy), for diagnostics. */
  savedState(): DeviceState {
    return JSON.parse(JSON.stringify(this.st)) as DeviceState;
  }
}

/**
 * PUTs a blob with a presigned upload request, reporting progress. The
 * request carries every header the server signed.
 */
function putBlob(up: MediaUpload, blob: Blob, onProgress?: (sent: number, total: number) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open(up.method, up.url);
    for (const [k, v] of Object.entries(up.headers ?? {})) xhr.setRequestHeader(k, v);
    if (onProgress) xhr.upload.onprogress = (e) => onProgress(e.loaded, e.lengthComputable ? e.total : blob.size);
    xhr.onload = () => {
      if (xhr.status >= 200 && xhr.status < 300) {
        onProgress?.(blob.size, blob.size);
        resolve();
      } else {
        reject(new Error(`upload refused by the object store: HTTP ${xhr.status} ${xhr.responseText.slice(0, 200)}`));
      }
    };
    xhr.onerror = () => reject(new Error("upload failed: network error"));
    xhr.send(blob);
  });
}

/** The data of a REACTION get answer. */
interface ReactionsData {
  conversation_id: Id;
  messages?: { msg_id: Id; reactions: ReactionCount[] }[];
  more?: boolean;
  next_msg_id?: Id;
}

/** Adds id to the set of cid in m. */
function noteIn(m: Map<Id, Set<Id>>, cid: Id, id: Id): void {
  let ids = m.get(cid);
  if (!ids) m.set(cid, (ids = new Set()));
  ids.add(id);
}
