package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
)

// EventDelete is the delete-for-me mailbox event: the user deleted a
// message on another device.
const EventDelete = protocol.EventDelete

// SyncConn is the part of a connection a SyncRunner pages with. *Conn
// implements it; tests substitute a scripted server.
type SyncConn interface {
	SyncInboxPage(ctx context.Context, dialogCursor, mailboxSeq string, limit int) (InboxPage, error)
	SyncMessagesPage(ctx context.Context, conversationID, lastMsgID int64, limit int) (MessagesPage, error)
}

// ReadConn is the part of a connection SyncRunner.MarkRead uses.
type ReadConn interface {
	Read(ctx context.Context, conversationID, msgID int64) (ReadReply, error)
}

// SyncRunnerOptions tune a SyncRunner; the zero value is usable.
type SyncRunnerOptions struct {
	// InboxLimit is the SYNC_INBOX page size (0: the server's default).
	InboxLimit int
	// MessagesLimit is the SYNC_MESSAGES page size (default 200, the
	// largest page the server gives).
	MessagesLimit int
}

// SyncResult is what one Sync brought: what a user who was away should be
// shown.
type SyncResult struct {
	// Changed are the conversations that changed since the previous sync,
	// each once with its newest state, in list order (see Conversations).
	Changed []Conversation
	// Messages are the messages new to this device per conversation id,
	// ascending MsgId; recalled ones come as tombstones (status 2, no
	// content).
	Messages map[int64][]protocol.Message
	// Events are the mailbox events not already reported by NotePush, in
	// seq order. A recall of a message that is in Messages is left out:
	// its tombstone says it.
	Events []MailboxEvent
	// Removed are conversations the user is no longer a member of; they
	// left the list.
	Removed []int64
}

// NewMessages counts the messages of the result.
func (r SyncResult) NewMessages() int {
	n := 0
	for _, ms := range r.Messages {
		n += len(ms)
	}
	return n
}

// ConversationIDs returns the conversations with new messages, in the
// order of Changed first, then ascending id, so output is stable.
func (r SyncResult) ConversationIDs() []int64 {
	seen := map[int64]bool{}
	var out []int64
	for _, c := range r.Changed {
		if cid := c.ConversationID.Int64(); len(r.Messages[cid]) > 0 && !seen[cid] {
			seen[cid] = true
			out = append(out, cid)
		}
	}
	var rest []int64
	for cid, ms := range r.Messages {
		if len(ms) > 0 && !seen[cid] {
			rest = append(rest, cid)
		}
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i] < rest[j] })
	return append(out, rest...)
}

type eventKey struct {
	typ   int
	msgID int64
	// version tells one edit of a message from the next (EventEdit).
	version int
	// change tells one reaction change from another (EventReaction):
	// who, which emoji, added or removed, and the count after it.
	change string
}

// keyOf is the key of an event of typ about msgID with this payload.
func keyOf(typ int, msgID int64, payload []byte) eventKey {
	k := eventKey{typ: typ, msgID: msgID}
	switch typ {
	case EventEdit:
		var e struct {
			Version int `json:"version"`
		}
		if json.Unmarshal(payload, &e) == nil {
			k.version = e.Version
		}
	case EventReaction:
		var e protocol.ReactionPush
		if json.Unmarshal(payload, &e) == nil {
			k.change = fmt.Sprintf("%d %s %v %d", e.UserID, e.Emoji, e.Added, e.Count)
		}
	}
	return k
}

// maxSeen bounds the events remembered from pushes; past it the memory is
// dropped and an event may be reported twice, which is harmless.
const maxSeen = 4096

// SyncRunner runs the sync sequence of docs/protocol.md §8 for one (user,
// device) and keeps its cursors: SYNC_INBOX paged to the last page (11),
// then SYNC_MESSAGES for every conversation that changed from the cursor
// it holds. Every step is saved to its StateStore, so the next session,
// or the next sync after a reconnect, fetches only what is new, and a
// sync cut short resumes where it stopped. It is safe for concurrent use;
// syncs run one at a time.
type SyncRunner struct {
	store StateStore
	opts  SyncRunnerOptions

	mu    sync.Mutex
	state SyncState
	seen  map[eventKey]bool
}

// NewSyncRunner loads the saved state of (userID, deviceID) from store, or
// starts fresh. A saved state of another user or device is refused rather
// than used: its cursors would skip what this device never saw.
func NewSyncRunner(ctx context.Context, store StateStore, userID int64, deviceID string, opts SyncRunnerOptions) (*SyncRunner, error) {
	if opts.MessagesLimit <= 0 {
		opts.MessagesLimit = 200
	}
	st, ok, err := store.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("client: load sync state: %w", err)
	}
	if !ok {
		st = NewSyncState(userID, deviceID)
	} else if st.UserID.Int64() != userID || st.DeviceID != deviceID {
		return nil, fmt.Errorf("client: sync state belongs to user %s device %q, not user %d device %q", st.UserID, st.DeviceID, userID, deviceID)
	}
	return &SyncRunner{store: store, opts: opts, state: st, seen: map[eventKey]bool{}}, nil
}

// State returns a copy of the current state.
func (r *SyncRunner) State() SyncState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state.clone()
}

// Conversations returns the conversation list: pinned first, then by last
// activity, newest first.
func (r *SyncRunner) Conversations() []Conversation {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Conversation, 0, len(r.state.Conversations))
	for _, c := range r.state.Conversations {
		out = append(out, c)
	}
	sortConversations(out)
	return out
}

// Conversation returns one conversation of the list.
func (r *SyncRunner) Conversation(conversationID int64) (Conversation, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.state.Conversations[conversationID]
	return c, ok
}

// NewestMsgID is the newest message id this device knows of in a
// conversation (0 when none): the mark READ_MESSAGE should move to.
func (r *SyncRunner) NewestMsgID(conversationID int64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.newest(conversationID)
}

func (r *SyncRunner) newest(cid int64) int64 {
	return max(r.state.Conversations[cid].LastMsgID.Int64(), r.state.LastMsgIDs[cid].Int64())
}

func sortConversations(cs []Conversation) {
	sort.SliceStable(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		if a.Pinned != b.Pinned {
			return a.Pinned
		}
		if a.LastMsgAt != b.LastMsgAt {
			return a.LastMsgAt > b.LastMsgAt
		}
		if a.LastMsgID != b.LastMsgID {
			return a.LastMsgID > b.LastMsgID
		}
		return a.ConversationID > b.ConversationID
	})
}

// NotePush records a RECALL_MESSAGE (9), DELETE_MESSAGE (15),
// EDIT_MESSAGE (24) or REACTION (25) push as the
// mailbox event it stands for and returns it, so the caller can show it at
// once and a later Sync does not report the same event again. ok is false
// for other pushes and for an event already noted.
func (r *SyncRunner) NotePush(f Frame) (MailboxEvent, bool) {
	var typ int
	switch f.Command {
	case protocol.CmdRecallMessage:
		typ = EventRecall
	case protocol.CmdDeleteMessage:
		typ = EventDelete
	case protocol.CmdEditMessage:
		typ = EventEdit
	case protocol.CmdReaction:
		typ = EventReaction
	default:
		return MailboxEvent{}, false
	}
	env, err := f.Envelope()
	if err != nil {
		return MailboxEvent{}, false
	}
	var ref protocol.MessageRef
	if err := json.Unmarshal(env.Data, &ref); err != nil || ref.MsgID <= 0 {
		return MailboxEvent{}, false
	}
	if !r.note(keyOf(typ, ref.MsgID.Int64(), env.Data)) {
		return MailboxEvent{}, false
	}
	return MailboxEvent{EventType: typ, ConversationID: ref.ConversationID, MsgID: ref.MsgID, Payload: env.Data}, true
}

// NoteEvent records that the user already knows of event typ on msgID
// (they recalled the message themselves, or a push told them), so a later
// Sync does not report the mailbox event again. It reports whether the
// event was new.
func (r *SyncRunner) NoteEvent(typ int, msgID int64) bool {
	return r.note(eventKey{typ: typ, msgID: msgID})
}

// note records k as known; it reports whether it was new.
func (r *SyncRunner) note(k eventKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[k] {
		return false
	}
	if len(r.seen) >= maxSeen {
		r.seen = map[eventKey]bool{}
	}
	r.seen[k] = true
	return true
}

// Sync runs the sync sequence once on conn and returns what it brought.
// The conversations to page are those the inbox reported changed plus any
// whose last_msg_id is past the cursor held for it (a conversation an
// earlier, interrupted sync did not finish). On an error the result holds
// what was fetched before it; the state already covers that part.
func (r *SyncRunner) Sync(ctx context.Context, conn SyncConn) (SyncResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := SyncResult{Messages: map[int64][]protocol.Message{}}
	changed := map[int64]bool{}
	if err := r.syncInbox(ctx, conn, &res, changed); err != nil {
		return r.finish(ctx, res, changed, err)
	}

	dirty := make([]int64, 0, len(changed))
	for cid, c := range r.state.Conversations {
		if changed[cid] || c.LastMsgID > r.state.LastMsgIDs[cid] {
			dirty = append(dirty, cid)
		}
	}
	sort.Slice(dirty, func(i, j int) bool { return dirty[i] < dirty[j] })
	for _, cid := range dirty {
		err := r.syncConversation(ctx, conn, cid, &res)
		var ce *CodeError
		if errors.As(err, &ce) && ce.Code == errcode.Forbidden {
			// No longer a member: the conversation leaves the list.
			delete(r.state.Conversations, cid)
			delete(r.state.LastMsgIDs, cid)
			delete(changed, cid)
			res.Removed = append(res.Removed, cid)
			continue
		}
		if err != nil {
			return r.finish(ctx, res, changed, err)
		}
	}
	return r.finish(ctx, res, changed, nil)
}

func (r *SyncRunner) syncInbox(ctx context.Context, conn SyncConn, res *SyncResult, changed map[int64]bool) error {
	for pages := 0; ; pages++ {
		if pages > 100000 {
			return errors.New("client: SYNC_INBOX does not finish")
		}
		p, err := conn.SyncInboxPage(ctx, r.state.DialogCursor, r.state.MailboxSeq.String(), r.opts.InboxLimit)
		if err != nil {
			return fmt.Errorf("client: sync inbox from %q/%s: %w", r.state.DialogCursor, r.state.MailboxSeq, err)
		}
		for _, c := range p.Conversations {
			cid := c.ConversationID.Int64()
			if cid <= 0 {
				continue
			}
			r.state.Conversations[cid] = c
			changed[cid] = true
		}
		for _, e := range p.Events {
			if e.Seq > 0 && e.Seq <= r.state.MailboxSeq {
				continue // a page repeated after a retry
			}
			k := keyOf(e.EventType, e.MsgID.Int64(), e.Payload)
			if r.seen[k] {
				delete(r.seen, k) // reported from its push already
			} else {
				res.Events = append(res.Events, e)
			}
			if e.Seq > r.state.MailboxSeq {
				r.state.MailboxSeq = e.Seq
			}
		}
		if p.DialogCursor != "" {
			r.state.DialogCursor = p.DialogCursor
		}
		if p.MailboxSeq > r.state.MailboxSeq {
			r.state.MailboxSeq = p.MailboxSeq
		}
		if err := r.save(ctx); err != nil {
			return err
		}
		if p.Last {
			return nil
		}
	}
}

// SyncConversation pages one conversation from its cursor at once,
// without SYNC_INBOX, for a conversation known to have news before the
// list says so: the device just sent into it. It returns the messages new
// to this device.
func (r *SyncRunner) SyncConversation(ctx context.Context, conn SyncConn, conversationID int64) ([]protocol.Message, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := SyncResult{Messages: map[int64][]protocol.Message{}}
	err := r.syncConversation(ctx, conn, conversationID, &res)
	return res.Messages[conversationID], err
}

func (r *SyncRunner) syncConversation(ctx context.Context, conn SyncConn, cid int64, res *SyncResult) error {
	cursor := r.state.LastMsgIDs[cid].Int64()
	for {
		p, err := conn.SyncMessagesPage(ctx, cid, cursor, r.opts.MessagesLimit)
		if err != nil {
			return fmt.Errorf("client: sync messages of conversation %d from %d: %w", cid, cursor, err)
		}
		for _, m := range p.Messages {
			if m.MsgID.Int64() > cursor {
				res.Messages[cid] = append(res.Messages[cid], m)
			}
		}
		next := p.NextMsgID.Int64()
		if next > cursor {
			cursor = next
			r.state.LastMsgIDs[cid] = jsonid.ID(cursor)
			if err := r.save(ctx); err != nil {
				return err
			}
		} else if !p.Last {
			return fmt.Errorf("client: SYNC_MESSAGES of conversation %d did not advance from %d", cid, cursor)
		}
		if p.Last {
			return nil
		}
	}
}

// finish fills the result's lists and saves the state.
func (r *SyncRunner) finish(ctx context.Context, res SyncResult, changed map[int64]bool, err error) (SyncResult, error) {
	for cid := range changed {
		if c, ok := r.state.Conversations[cid]; ok {
			res.Changed = append(res.Changed, c)
		}
	}
	sortConversations(res.Changed)
	// A recall of a message fetched in this sync is told by its tombstone.
	fetched := map[int64]bool{}
	for _, ms := range res.Messages {
		for _, m := range ms {
			fetched[m.MsgID.Int64()] = true
		}
	}
	events := res.Events[:0]
	for _, e := range res.Events {
		if e.EventType == EventRecall && fetched[e.MsgID.Int64()] {
			continue
		}
		events = append(events, e)
	}
	res.Events = events
	if serr := r.save(ctx); serr != nil && err == nil {
		err = serr
	}
	return res, err
}

func (r *SyncRunner) save(ctx context.Context) error {
	if err := r.store.Save(ctx, r.state); err != nil {
		return fmt.Errorf("client: save sync state: %w", err)
	}
	return nil
}

// MarkRead sends READ_MESSAGE up to the newest message this device knows
// of in a conversation and, when the server's mark reaches it, sets the
// conversation's unread to 0 locally, so the list is right before the
// next sync confirms it.
func (r *SyncRunner) MarkRead(ctx context.Context, conn ReadConn, conversationID int64) (ReadReply, error) {
	r.mu.Lock()
	newest := r.newest(conversationID)
	r.mu.Unlock()
	if newest <= 0 {
		return ReadReply{}, fmt.Errorf("client: no message known in conversation %d (sync first)", conversationID)
	}
	reply, err := conn.Read(ctx, conversationID, newest)
	if err != nil {
		return reply, fmt.Errorf("client: read conversation %d up to %d: %w", conversationID, newest, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.state.Conversations[conversationID]; ok && reply.MsgID >= c.LastMsgID {
		c.Unread = 0
		r.state.Conversations[conversationID] = c
		if err := r.save(ctx); err != nil {
			return reply, err
		}
	}
	return reply, nil
}

// History returns the newest n messages of a conversation (all when n <=
// 0), ascending, and how many it has in all. SYNC_MESSAGES only pages
// forward, so it pages from the start; it moves no cursor and so can be
// used any time, by any device.
func History(ctx context.Context, conn SyncConn, conversationID int64, n, pageLimit int) ([]protocol.Message, int, error) {
	if pageLimit <= 0 {
		pageLimit = 200
	}
	var out []protocol.Message
	total := 0
	var cursor int64
	for {
		p, err := conn.SyncMessagesPage(ctx, conversationID, cursor, pageLimit)
		if err != nil {
			return out, total, fmt.Errorf("client: history of conversation %d from %d: %w", conversationID, cursor, err)
		}
		total += len(p.Messages)
		out = append(out, p.Messages...)
		if n > 0 && len(out) > n {
			out = append(out[:0], out[len(out)-n:]...)
		}
		next := p.NextMsgID.Int64()
		if p.Last {
			return out, total, nil
		}
		if next <= cursor {
			return out, total, fmt.Errorf("client: SYNC_MESSAGES of conversation %d did not advance from %d", conversationID, cursor)
		}
		cursor = next
	}
}
