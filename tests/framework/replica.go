package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
)

// Replica is what a well-behaved client device knows: the conversation
// list and messages it learned from sync and pushes. Pushes only add what
// they carry; cursors move only through sync (a push never moves a
// cursor past a gap), which is how a real SDK must behave.
type Replica struct {
	mu           sync.Mutex
	DialogCursor string
	MailboxSeq   string
	Convs        map[int64]client.Conversation
	Msgs         map[int64]map[int64]protocol.Message
	Cursor       map[int64]int64
	Deleted      map[int64]bool
	// Reactions are the counts of each message's emojis the device
	// learned from pushes and, authoritatively, from REACTION get after a
	// sync's REACTION events.
	Reactions map[int64]map[string]int
}

// NewReplica returns an empty (fresh device) replica.
func NewReplica() *Replica {
	return &Replica{DialogCursor: "0", MailboxSeq: "0", Convs: map[int64]client.Conversation{},
		Msgs: map[int64]map[int64]protocol.Message{}, Cursor: map[int64]int64{}, Deleted: map[int64]bool{},
		Reactions: map[int64]map[string]int{}}
}

func (r *Replica) put(m protocol.Message) {
	cid := m.ConversationID.Int64()
	if r.Deleted[m.MsgID.Int64()] {
		return
	}
	if r.Msgs[cid] == nil {
		r.Msgs[cid] = map[int64]protocol.Message{}
	}
	if old, ok := r.Msgs[cid][m.MsgID.Int64()]; ok && old.Status == protocol.StatusRecalled {
		return // a recall is final
	}
	r.Msgs[cid][m.MsgID.Int64()] = m
}

func (r *Replica) recall(cid, msgID int64) {
	if m, ok := r.Msgs[cid][msgID]; ok {
		m.Status = protocol.StatusRecalled
		m.Content = nil
		r.Msgs[cid][msgID] = m
	}
}

type idPair struct {
	ConversationID jsonid.ID `json:"conversation_id"`
	MsgID          jsonid.ID `json:"msg_id"`
}

// ApplyPush folds a push frame into the replica.
func (r *Replica) ApplyPush(f client.Frame) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch f.Command {
	case protocol.CmdMessage:
		m, err := f.Message()
		if err != nil {
			return err
		}
		if m.Status == 0 {
			m.Status = protocol.StatusNormal
		}
		r.put(m)
	case protocol.CmdEditMessage:
		env, err := f.Envelope()
		if err != nil {
			return err
		}
		var e protocol.EditPush
		if err := json.Unmarshal(env.Data, &e); err != nil {
			return fmt.Errorf("push %d data %s: %w", f.Command, env.Data, err)
		}
		r.edit(e.ConversationID.Int64(), e.MsgID.Int64(), e.Version, e.EditedAt, e.Content)
	case protocol.CmdReaction:
		env, err := f.Envelope()
		if err != nil {
			return err
		}
		var e protocol.ReactionPush
		if err := json.Unmarshal(env.Data, &e); err != nil {
			return fmt.Errorf("push %d data %s: %w", f.Command, env.Data, err)
		}
		r.react(e.MsgID.Int64(), e.Emoji, e.Count)
	case protocol.CmdRecallMessage, protocol.CmdDeleteMessage:
		env, err := f.Envelope()
		if err != nil {
			return err
		}
		var p idPair
		if err := json.Unmarshal(env.Data, &p); err != nil {
			return fmt.Errorf("push %d data %s: %w", f.Command, env.Data, err)
		}
		if f.Command == protocol.CmdRecallMessage {
			r.recall(p.ConversationID.Int64(), p.MsgID.Int64())
		} else {
			r.Deleted[p.MsgID.Int64()] = true
			delete(r.Msgs[p.ConversationID.Int64()], p.MsgID.Int64())
		}
	}
	return nil
}

// edit applies a newer version of a message the replica holds.
func (r *Replica) edit(cid, msgID int64, version int, at int64, content json.RawMessage) {
	if m, ok := r.Msgs[cid][msgID]; ok && m.Status == protocol.StatusNormal && version > m.Version {
		m.Version, m.EditedAt, m.Content = version, at, content
		r.Msgs[cid][msgID] = m
	}
}

// react sets the count of one emoji of a message.
func (r *Replica) react(msgID int64, emoji string, count int) {
	if r.Reactions[msgID] == nil {
		r.Reactions[msgID] = map[string]int{}
	}
	if r.Reactions[msgID][emoji] = count; count == 0 {
		delete(r.Reactions[msgID], emoji)
	}
}

// ReactionsOf renders a message's counts as "emoji count" pairs in emoji
// order.
func (r *Replica) ReactionsOf(msgID int64) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]string, 0, len(r.Reactions[msgID]))
	for k := range r.Reactions[msgID] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, r.Reactions[msgID][k]))
	}
	return strings.Join(parts, ", ")
}

// DeleteLocal applies a delete-for-me this device made itself (the server
// pushes it only to the user's other devices).
func (r *Replica) DeleteLocal(cid, msgID int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Deleted[msgID] = true
	delete(r.Msgs[cid], msgID)
}

// Sync runs SYNC_INBOX from the replica's cursors, then SYNC_MESSAGES for
// every conversation that changed, the way an SDK does after AUTH.
func (r *Replica) Sync(ctx context.Context, conn *client.Conn) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	page, err := conn.SyncInbox(ctx, r.DialogCursor, r.MailboxSeq, 50)
	if err != nil {
		return fmt.Errorf("sync inbox: %w", err)
	}
	r.DialogCursor, r.MailboxSeq = page.DialogCursor, page.MailboxSeq.String()
	dirty := map[int64]bool{}
	// edited are the messages EDIT events named: their new versions are
	// fetched by id once the conversations are synced.
	edited := map[int64][]int64{}
	// reacted are the messages REACTION events named: their counts are
	// read with REACTION get.
	reacted := map[int64][]int64{}
	for _, c := range page.Conversations {
		r.Convs[c.ConversationID.Int64()] = c
		dirty[c.ConversationID.Int64()] = true
	}
	for _, e := range page.Events {
		switch e.EventType {
		case client.EventRecall:
			r.recall(e.ConversationID.Int64(), e.MsgID.Int64())
		case protocol.EventDelete:
			r.Deleted[e.MsgID.Int64()] = true
			delete(r.Msgs[e.ConversationID.Int64()], e.MsgID.Int64())
		case client.EventEdit:
			edited[e.ConversationID.Int64()] = append(edited[e.ConversationID.Int64()], e.MsgID.Int64())
		case client.EventReaction:
			reacted[e.ConversationID.Int64()] = append(reacted[e.ConversationID.Int64()], e.MsgID.Int64())
		}
	}
	for cid := range dirty {
		msgs, next, err := conn.SyncMessages(ctx, cid, r.Cursor[cid], 200)
		if err != nil {
			return fmt.Errorf("sync messages of %d: %w", cid, err)
		}
		for _, m := range msgs {
			r.put(m)
		}
		r.Cursor[cid] = next
	}
	for cid, ids := range edited {
		for len(ids) > 0 {
			n := min(len(ids), 100)
			msgs, err := conn.MessagesByID(ctx, cid, ids[:n])
			if err != nil {
				return fmt.Errorf("edited messages of %d: %w", cid, err)
			}
			for _, m := range msgs {
				r.edit(cid, m.MsgID.Int64(), m.Version, m.EditedAt, m.Content)
			}
			ids = ids[n:]
		}
	}
	for cid, ids := range reacted {
		for len(ids) > 0 {
			n := min(len(ids), protocol.MaxReactionMsgIDs)
			got, err := conn.Reactions(ctx, cid, ids[:n])
			if err != nil {
				return fmt.Errorf("reactions of %d: %w", cid, err)
			}
			for _, id := range ids[:n] {
				delete(r.Reactions, id)
			}
			for _, m := range got {
				for _, c := range m.Reactions {
					r.react(m.MsgID.Int64(), c.Emoji, c.Count)
				}
			}
			ids = ids[n:]
		}
	}
	return nil
}

// Snapshot renders the replica in a canonical text form for comparison:
// conversations newest first with unread, flags and preview, then each
// conversation's messages in MsgId order with status and content.
func (r *Replica) Snapshot() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	convs := make([]client.Conversation, 0, len(r.Convs))
	for _, c := range r.Convs {
		convs = append(convs, c)
	}
	sort.Slice(convs, func(i, j int) bool {
		if convs[i].LastMsgID != convs[j].LastMsgID {
			return convs[i].LastMsgID > convs[j].LastMsgID
		}
		return convs[i].ConversationID < convs[j].ConversationID
	})
	var b strings.Builder
	for _, c := range convs {
		pv, _ := json.Marshal(c.Preview)
		fmt.Fprintf(&b, "conv %s type %d peer %s group %s last %s at %d unread %d muted %v pinned %v preview %s\n",
			c.ConversationID, c.ConversationType, c.PeerID, c.GroupID, c.LastMsgID, c.LastMsgAt, c.Unread, c.Muted, c.Pinned, pv)
		ids := make([]int64, 0, len(r.Msgs[c.ConversationID.Int64()]))
		for id := range r.Msgs[c.ConversationID.Int64()] {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		for _, id := range ids {
			m := r.Msgs[c.ConversationID.Int64()][id]
			fmt.Fprintf(&b, "  msg %d from %s status %d type %d version %d content %s\n", id, m.SenderID, m.Status, m.MessageType, m.Version, m.Content)
		}
	}
	return b.String()
}
