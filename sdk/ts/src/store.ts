// What a device keeps between page loads so that its next sync fetches only
// what is new (docs/protocol.md §8 Sync), as the Go client's SyncState does: the
// two SYNC_INBOX cursors, the SYNC_MESSAGES cursor of every conversation and
// the conversation list (SYNC_INBOX answers only what changed since the
// cursor). A browser also keeps the newest messages of each conversation,
// so a reloaded page shows them at once and can tell the messages a sync
// brings again (pushes never move a cursor) from new ones.

import { compareIds, type Conversation, type Id, type Message } from "./protocol.js";

/** The subset of the Web Storage API the SDK uses (localStorage fits). */
export interface KeyValueStore {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
}

/** A KeyValueStore in memory, for pages without localStorage and for tests. */
export class MemoryStore implements KeyValueStore {
  private readonly items = new Map<string, string>();
  getItem(key: string): string | null {
    return this.items.get(key) ?? null;
  }
  setItem(key: string, value: string): void {
    this.items.set(key, value);
  }
}

/** The persisted state of one (user, device). */
export interface DeviceState {
  v: 1;
  user_id: Id;
  device_id: string;
  /** SYNC_INBOX cursors; "0" on a fresh device. */
  dialog_cursor: string;
  mailbox_seq: Id;
  /** SYNC_MESSAGES cursor per conversation id: the last id scanned. */
  last_msg_ids: Record<Id, Id>;
  /** The conversation list as of the last sync, plus what pushes added. */
  conversations: Record<Id, Conversation>;
  /** The newest messages of each conversation, ascending msg_id. */
  messages: Record<Id, Message[]>;
}

/**
 * The storage key of a (user, device): cursors belong to one device of one
 * user, so two users (or two devices of a user) in one browser profile must
 * not share them.
 */
export function stateKey(userId: Id, deviceId: string): string {
  return `spark:v1:${userId}:${deviceId}`;
}

/** The state of a device that never synced. */
export function freshState(userId: Id, deviceId: string): DeviceState {
  return {
    v: 1,
    user_id: userId,
    device_id: deviceId,
    dialog_cursor: "0",
    mailbox_seq: "0",
    last_msg_ids: {},
    conversations: {},
    messages: {},
  };
}

/**
 * Loads the saved state of (user, device). A missing, unreadable or foreign
 * state (another user's or device's: its cursors would skip what this
 * device never saw) starts fresh.
 */
export function loadState(store: KeyValueStore, userId: Id, deviceId: string): DeviceState {
  let raw: string | null = null;
  try {
    raw = store.getItem(stateKey(userId, deviceId));
  } catch {
    raw = null; // storage disabled by the browser: behave as a fresh device
  }
  if (!raw) return freshState(userId, deviceId);
  try {
    const s = JSON.parse(raw) as Partial<DeviceState>;
    if (s.v !== 1 || s.user_id !== userId || s.device_id !== deviceId) return freshState(userId, deviceId);
    return {
      v: 1,
      user_id: userId,
      device_id: deviceId,
      dialog_cursor: s.dialog_cursor || "0",
      mailbox_seq: s.mailbox_seq || "0",
      last_msg_ids: s.last_msg_ids ?? {},
      conversations: s.conversations ?? {},
      messages: s.messages ?? {},
    };
  } catch {
    return freshState(userId, deviceId);
  }
}

/**
 * Inserts m into the ascending list unless its msg_id is there already,
 * keeping at most keep messages (the newest). Reports whether it was added.
 */
export function insertMessage(list: Message[], m: Message, keep: number): boolean {
  let i = list.length;
  while (i > 0) {
    const c = compareIds(list[i - 1]!.msg_id, m.msg_id);
    if (c === 0) return false;
    if (c < 0) break;
    i--;
  }
  if (keep > 0 && list.length >= keep && i === 0) return false; // older than everything kept
  list.splice(i, 0, m);
  if (keep > 0 && list.length > keep) list.splice(0, list.length - keep);
  return true;
}
