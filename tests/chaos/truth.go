package chaos

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
)

// StoredMessage is a row of t_messages.
type StoredMessage struct {
	ID, Conv, Sender int64
	CMID             string
	// Content is the canonical form (see canonical) of the stored JSON.
	Content string
	// Status is 1 normal, 2 recalled.
	Status int
}

// Member is a row of t_conversation_members.
type Member struct {
	LastRead int64
	Muted    bool
}

// Truth is what MySQL holds at the end of a run: the record every client
// observation is checked against.
type Truth struct {
	Messages map[int64]StoredMessage
	// ConvLast is each conversation's last_msg_id.
	ConvLast map[int64]int64
	// Members maps conversation → user → membership.
	Members map[int64]map[int64]Member
	// Deleted maps user → msg_id for every delete-for-me.
	Deleted map[int64]map[int64]bool

	byConv map[int64][]StoredMessage
}

// NewTruth returns an empty Truth, for building one by hand.
func NewTruth() Truth {
	return Truth{Messages: map[int64]StoredMessage{}, ConvLast: map[int64]int64{},
		Members: map[int64]map[int64]Member{}, Deleted: map[int64]map[int64]bool{}}
}

// LoadTruth reads the tables the checker needs.
func LoadTruth(ctx context.Context, db *sql.DB) (Truth, error) {
	t := NewTruth()
	rows, err := db.QueryContext(ctx, `SELECT id, conversation_id, sender_id, client_msg_id, content, status FROM t_messages`)
	if err != nil {
		return t, fmt.Errorf("chaos: read messages: %w", err)
	}
	for rows.Next() {
		var m StoredMessage
		var content []byte
		if err := rows.Scan(&m.ID, &m.Conv, &m.Sender, &m.CMID, &content, &m.Status); err != nil {
			rows.Close()
			return t, fmt.Errorf("chaos: scan message: %w", err)
		}
		m.Content = canonical(string(content))
		t.Messages[m.ID] = m
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return t, fmt.Errorf("chaos: read messages: %w", err)
	}

	rows, err = db.QueryContext(ctx, `SELECT id, last_msg_id FROM t_conversations`)
	if err != nil {
		return t, fmt.Errorf("chaos: read conversations: %w", err)
	}
	for rows.Next() {
		var id, last int64
		if err := rows.Scan(&id, &last); err != nil {
			rows.Close()
			return t, fmt.Errorf("chaos: scan conversation: %w", err)
		}
		t.ConvLast[id] = last
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return t, fmt.Errorf("chaos: read conversations: %w", err)
	}

	rows, err = db.QueryContext(ctx, `SELECT conversation_id, user_id, last_read_msg_id, muted FROM t_conversation_members`)
	if err != nil {
		return t, fmt.Errorf("chaos: read members: %w", err)
	}
	for rows.Next() {
		var cid, uid int64
		var m Member
		if err := rows.Scan(&cid, &uid, &m.LastRead, &m.Muted); err != nil {
			rows.Close()
			return t, fmt.Errorf("chaos: scan member: %w", err)
		}
		if t.Members[cid] == nil {
			t.Members[cid] = map[int64]Member{}
		}
		t.Members[cid][uid] = m
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return t, fmt.Errorf("chaos: read members: %w", err)
	}

	rows, err = db.QueryContext(ctx, `SELECT user_id, msg_id FROM t_message_deletions`)
	if err != nil {
		return t, fmt.Errorf("chaos: read deletions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var uid, mid int64
		if err := rows.Scan(&uid, &mid); err != nil {
			return t, fmt.Errorf("chaos: scan deletion: %w", err)
		}
		if t.Deleted[uid] == nil {
			t.Deleted[uid] = map[int64]bool{}
		}
		t.Deleted[uid][mid] = true
	}
	if err := rows.Err(); err != nil {
		return t, fmt.Errorf("chaos: read deletions: %w", err)
	}
	return t, nil
}

// indexed returns t with its messages grouped by conversation, so the
// per-user questions below do not scan every message each time.
func (t Truth) indexed() Truth {
	t.byConv = map[int64][]StoredMessage{}
	for _, m := range t.Messages {
		t.byConv[m.Conv] = append(t.byConv[m.Conv], m)
	}
	for _, ms := range t.byConv {
		sort.Slice(ms, func(i, j int) bool { return ms[i].ID < ms[j].ID })
	}
	return t
}

// Conversation returns a conversation's messages in id order.
func (t Truth) Conversation(cid int64) []StoredMessage {
	if t.byConv != nil {
		return t.byConv[cid]
	}
	return t.indexed().byConv[cid]
}

// Visible returns what user uid must hold of a conversation after a final
// sync: its messages in id order without the ones uid deleted for
// themselves (recalled ones stay, as tombstones).
func (t Truth) Visible(uid, cid int64) []StoredMessage {
	var out []StoredMessage
	for _, m := range t.Conversation(cid) {
		if !t.Deleted[uid][m.ID] {
			out = append(out, m)
		}
	}
	return out
}

// Unread is the unread count of uid in cid recomputed from MySQL, the
// definition of docs/decisions.md 30 and 73: the messages after the
// member's last_read_msg_id up to the conversation's last_msg_id that
// others sent, that are not recalled and that uid did not delete; 0 in a
// conversation uid muted.
func (t Truth) Unread(uid, cid int64) int64 {
	m := t.Members[cid][uid]
	if m.Muted {
		return 0
	}
	var n int64
	for _, msg := range t.Conversation(cid) {
		if msg.ID > m.LastRead && msg.ID <= t.ConvLast[cid] && msg.Sender != uid && msg.Status == 1 && !t.Deleted[uid][msg.ID] {
			n++
		}
	}
	return n
}

// NewestVisible is the id of the newest message of cid uid did not
// delete, the conversation list's preview (0 when none).
func (t Truth) NewestVisible(uid, cid int64) (id int64, recalled bool) {
	v := t.Visible(uid, cid)
	if len(v) == 0 {
		return 0, false
	}
	last := v[len(v)-1]
	return last.ID, last.Status != 1
}

// canonical re-encodes a JSON object with sorted keys, so contents that
// differ only in key order or spacing compare equal; anything that is not
// JSON is returned as it is.
func canonical(s string) string {
	if s == "" {
		return ""
	}
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return s
	}
	return string(b)
}

// ListEntry is one message of a conversation as a list shows it.
type ListEntry struct {
	ID       int64
	Recalled bool
	// Content is canonical; empty for a recalled message.
	Content string
}

// ListDigest condenses a conversation's messages, in the order given,
// into a short string that differs when any id, its order, its recall
// state or its content differs.
func ListDigest(entries []ListEntry) string {
	h := sha256.New()
	for _, e := range entries {
		if e.Recalled {
			fmt.Fprintf(h, "%d:r;", e.ID)
		} else {
			fmt.Fprintf(h, "%d:%s;", e.ID, e.Content)
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// VisibleList is Visible as ListEntries.
func (t Truth) VisibleList(uid, cid int64) []ListEntry {
	v := t.Visible(uid, cid)
	out := make([]ListEntry, len(v))
	for i, m := range v {
		out[i] = ListEntry{ID: m.ID, Recalled: m.Status != 1}
		if !out[i].Recalled {
			out[i].Content = m.Content
		}
	}
	return out
}
