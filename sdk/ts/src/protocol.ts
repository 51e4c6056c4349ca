// Commands, codes and body shapes of the Spark client protocol
// (docs/protocol.md). Every 64-bit id is a decimal string: they exceed
// JavaScript's 2^53.

/** Command numbers. */
export const Cmd = {
  AUTH: 1,
  HEARTBEAT: 2,
  GENERATE_MSG_ID: 3,
  SEND_MESSAGE: 4,
  SEND_ACK: 5,
  MESSAGE: 6,
  PUSH_ACK: 7,
  READ_MESSAGE: 8,
  RECALL_MESSAGE: 9,
  SYNC_INBOX: 10,
  SYNC_INBOX_FINISH: 11,
  SYNC_MESSAGES: 12,
  SYNC_MESSAGES_FINISH: 13,
  KICK: 14,
  DELETE_MESSAGE: 15,
  CONVERSATION_SETTINGS: 16,
  CONTROL_EVENT: 17,
  TRANSIENT: 18,
  RELATION: 19,
  GROUP: 20,
  PUSH_SETTINGS: 21,
  UPSTREAM: 22,
  MEDIA: 23,
  EDIT_MESSAGE: 24,
  REACTION: 25,
  SIGNAL: 32,
} as const;

/** Error codes (docs/protocol.md §5 says what each means and what a client does). */
export const Code = {
  OK: "0",
  INVALID_ARGUMENT: "40001",
  BAD_TOKEN: "40101",
  NOT_AUTHENTICATED: "40102",
  FORBIDDEN: "40301",
  REJECTED: "40302",
  LIMIT_REACHED: "40303",
  NOT_FOUND: "40401",
  CONFLICT: "40901",
  DUPLICATE: "40902",
  TOO_LARGE: "41301",
  RATE_LIMITED: "42901",
  INTERNAL: "50001",
  BUSY: "50301",
} as const;

/** Mailbox event types of SYNC_INBOX. */
export const EventType = {
  RECALL: 1,
  KICK: 2,
  MEMBERSHIP: 3,
  FRIEND: 4,
  MISSED_MESSAGE: 5,
  DELETE: 6,
  EDIT: 7,
  REACTION: 8,
} as const;

/** conversation_type values. */
export const ConversationType = { P2P: 1, GROUP: 2 } as const;

/** A device's offline-push token (PUSH_SETTINGS op register, docs/protocol.md §11). */
export type PushToken =
  | { platform: "apns"; token: string; topic: string; sandbox?: boolean }
  | { platform: "fcm"; token: string }
  | { platform: "gateway"; token: string; gateway: string };

/** The answer of UPSTREAM (docs/protocol.md §11): the queued item's id, and whether an earlier frame with the same upstream_id had queued it. */
export interface UpstreamReply {
  id: Id;
  duplicate: boolean;
}

/** The kinds of media MEDIA uploads (docs/protocol.md §11, "Media"). */
export type MediaKind = "image" | "voice" | "video" | "file" | "avatar";

/** The answer of MEDIA upload: one HTTP request that stores the object under key until expires_at (ms). */
export interface MediaUpload {
  key: string;
  method: string;
  url: string;
  headers: Record<string, string>;
  expires_at: number;
}

/** A completed upload as the server checked it: content_type is what its bytes showed. */
export interface MediaObject {
  key: string;
  kind: MediaKind;
  size: number;
  content_type: string;
}

/** The answer of MEDIA download: a GET of key valid until expires_at (ms). */
export interface MediaDownload {
  key: string;
  url: string;
  expires_at: number;
}

/** A SIGNAL (32) push: another member's device is typing, or sent the application's own transient signal. */
export interface SignalPush {
  conversation_id: Id;
  sender_id: Id;
  device_id: string;
  kind: string;
  payload?: Record<string, unknown>;
}

/** What the user's notifications show. */
export type PushPreview = "full" | "sender" | "none";

/** A decimal 64-bit id. */
export type Id = string;

/** The envelope of every answer and push. */
export interface Envelope<T = unknown> {
  code: string;
  msg: string;
  request_id: string;
  data: T;
}

/** A message as pushed (MESSAGE) and as synced (plus status). */
export interface Message {
  msg_id: Id;
  conversation_id: Id;
  conversation_type: number;
  sender_id: Id;
  client_msg_id: string;
  message_type: number;
  /** JSON object whose "t" equals message_type; absent when recalled. */
  content?: { t: number; text?: string; [k: string]: unknown };
  /** Unix ms. */
  created_at: number;
  /** 1 normal (or absent), 2 recalled, 3 deleted for everyone. */
  status?: number;
  /** How many times its sender edited it (absent: never), and when last (unix ms). */
  version?: number;
  edited_at?: number;
  /**
   * Its reactions as this device knows them (REACTION 25): kept by the
   * SDK from pushes, sync and reactions(); the server's SYNC_MESSAGES does
   * not carry them.
   */
  reactions?: ReactionCount[];
}

/** One emoji's count on a message; me marks the user's own. */
export interface ReactionCount {
  emoji: string;
  count: number;
  me?: boolean;
}

/** A page of who reacted to a message with one emoji (REACTION users). */
export interface ReactorsPage {
  msg_id: Id;
  conversation_id: Id;
  emoji: string;
  count: number;
  users: { user_id: Id; reacted_at: number }[];
  more: boolean;
  /** The after of the next page when more. */
  next?: Id;
}

/**
 * What a reply's content carries under "reply_to": the server's snapshot
 * of the message replied to, reduced to msg_id and recalled once that
 * message is recalled or deleted for everyone.
 */
export interface ReplySnapshot {
  msg_id: Id;
  message_type?: number;
  text?: string;
  sender_id?: Id;
  recalled?: boolean;
}

/** The short form of a conversation's newest message. */
export interface Preview {
  msg_id: Id;
  message_type: number;
  text: string;
  sender_id: Id;
  recalled?: boolean;
}

/** One entry of the conversation list. */
export interface Conversation {
  conversation_id: Id;
  conversation_type: number;
  peer_id?: Id;
  group_id?: Id;
  last_msg_id: Id;
  last_msg_at: number;
  unread: number;
  muted: boolean;
  pinned: boolean;
  hidden?: boolean;
  preview?: Preview;
}

/** A mailbox event: what sync cannot rebuild from the conversations. */
export interface MailboxEvent {
  seq: Id;
  event_type: number;
  conversation_id: Id;
  msg_id: Id;
  payload: unknown;
}

/** Data of a SYNC_INBOX / SYNC_INBOX_FINISH answer. */
export interface SyncInboxData {
  conversations: Conversation[] | null;
  events: MailboxEvent[] | null;
  dialog_cursor: string;
  mailbox_seq: Id;
}

/** Data of a SYNC_MESSAGES / SYNC_MESSAGES_FINISH answer. */
export interface SyncMessagesData {
  conversation_id: Id;
  messages: Message[] | null;
  next_msg_id: Id;
}

/** Data of SEND_ACK. */
export interface SendAck {
  msg_id: Id;
  client_msg_id: string;
  conversation_id: Id;
  server_time: number;
}

/** Data of an AUTH answer. */
export interface AuthData {
  user_id: Id;
  device_id: string;
  server_time: number;
}

/** Where a message goes: exactly one of the three. */
export type Target = { toUserId: Id } | { groupId: Id } | { conversationId: Id };

/** Normalizes an id read from JSON (a string, or a number from a lenient peer). */
export function idOf(v: unknown): Id {
  if (typeof v === "string") return v === "" ? "0" : v;
  if (typeof v === "number" || typeof v === "bigint") return BigInt(v).toString();
  return "0";
}

/** Compares two decimal ids: negative, zero or positive. */
export function compareIds(a: Id | undefined, b: Id | undefined): number {
  const x = BigInt(a || "0");
  const y = BigInt(b || "0");
  return x < y ? -1 : x > y ? 1 : 0;
}

/** The larger of two decimal ids. */
export function maxId(a: Id | undefined, b: Id | undefined): Id {
  return compareIds(a, b) >= 0 ? a || "0" : b || "0";
}
