package dialog

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/pkg/protocol"
)

// State is one conversation's entry in a user's list.
type State struct {
	Type      int
	PeerID    int64
	GroupID   int64
	LastMsgID int64
	LastMsgAt int64
	Unread    int64
	LastRead  int64
	Muted     bool
	Pinned    bool
	// HiddenAt is the last_msg_id when the user hid the conversation (0:
	// not hidden); see Hidden.
	HiddenAt int64
	Preview  *Preview
	// Base is the newest message id the cold rebuild counted.
	Base int64
}

// Hidden reports whether the user hid the conversation and no newer
// message came since (a new message shows it again, whatever its unread).
func (s State) Hidden() bool { return s.HiddenAt != 0 && s.LastMsgID <= s.HiddenAt }

func b2s(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func (s State) fields() []any {
	f := []any{
		FieldType, s.Type, FieldPeer, s.PeerID, FieldGroup, s.GroupID,
		FieldLastMsgID, s.LastMsgID, FieldLastMsgAt, s.LastMsgAt, FieldUnread, s.Unread,
		FieldLastRead, s.LastRead, FieldMuted, b2s(s.Muted), FieldPinned, b2s(s.Pinned), FieldHiddenAt, s.HiddenAt,
		FieldBase, s.Base, FieldAppliedCount, 0,
	}
	if s.Preview != nil {
		pj, _ := protocol.Marshal(s.Preview)
		f = append(f, FieldPreview, string(pj))
	}
	return f
}

// stateFields are the fields Load reads: HMGET of these, not HGETALL, so
// the recorded ids (FieldAppliedPrefix) are never read.
var stateFields = []string{
	FieldType, FieldPeer, FieldGroup, FieldLastMsgID, FieldLastMsgAt, FieldUnread,
	FieldLastRead, FieldMuted, FieldPinned, FieldHiddenAt, FieldBase, FieldPreview,
}

// Load reads a user's state of a conversation; ok is false when absent.
func Load(ctx context.Context, rdb redis.Cmdable, uid, cid int64) (s State, ok bool, err error) {
	vals, err := rdb.HMGet(ctx, StateKey(uid, cid), stateFields...).Result()
	if err != nil {
		return State{}, false, fmt.Errorf("dialog: load conversation %d of user %d: %w", cid, uid, err)
	}
	m := make(map[string]string, len(stateFields))
	for i, v := range vals {
		if str, isStr := v.(string); isStr {
			m[stateFields[i]] = str
		}
	}
	if len(m) == 0 {
		return State{}, false, nil
	}
	return parse(m), true, nil
}

func parse(m map[string]string) State {
	i := func(k string) int64 { v, _ := strconv.ParseInt(m[k], 10, 64); return v }
	s := State{
		Type: int(i(FieldType)), PeerID: i(FieldPeer), GroupID: i(FieldGroup),
		LastMsgID: i(FieldLastMsgID), LastMsgAt: i(FieldLastMsgAt), Unread: i(FieldUnread),
		LastRead: i(FieldLastRead), Muted: m[FieldMuted] == "1", Pinned: m[FieldPinned] == "1", HiddenAt: i(FieldHiddenAt),
		Base: i(FieldBase),
	}
	if p := m[FieldPreview]; p != "" {
		var pv Preview
		if json.Unmarshal([]byte(p), &pv) == nil {
			s.Preview = &pv
		}
	}
	return s
}
