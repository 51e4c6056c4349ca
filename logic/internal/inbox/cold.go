package inbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/dialog"
)

// Bounds of the cold computation.
const (
	// previewBatch / previewScan: the preview is the newest message the
	// user did not delete, looked for among at most previewScan messages.
	previewBatch = 20
	previewScan  = 200
	// deletedBatch is how many of the user's deletions after last_read are
	// read at a time to subtract them from unread.
	deletedBatch = 500
)

// PreviewOf is a message's list preview, built by dialog.PreviewOf exactly
// as logic builds the one deliver stores (so incremental and cold states
// agree); a recalled message has no text and Recalled set.
func PreviewOf(m store.Message) dialog.Preview {
	if m.Status != store.MessageNormal {
		return dialog.Preview{
			MsgID: strconv.FormatInt(m.ID, 10), MessageType: m.MessageType, SenderID: strconv.FormatInt(m.SenderID, 10),
			Recalled: true,
		}
	}
	return dialog.PreviewOf(m.ID, m.SenderID, m.MessageType, m.Content)
}

// ColdState computes a user's state of a conversation from MySQL
// (docs/internals.md "cold path"). Everything is bounded by the
// conversation's last_msg_id read first (base): messages committed after it
// are applied by deliver on top, never counted twice. ok is false when the
// user is not a member.
func (s *Service) ColdState(ctx context.Context, uid, cid int64) (st dialog.State, ok bool, err error) {
	c, err := s.store.GetConversation(ctx, cid)
	if errors.Is(err, store.ErrNotFound) {
		return dialog.State{}, false, nil
	}
	if err != nil {
		return dialog.State{}, false, fmt.Errorf("inbox: conversation %d: %w", cid, err)
	}
	m, err := s.store.GetMember(ctx, cid, uid)
	if errors.Is(err, store.ErrNotFound) {
		return dialog.State{}, false, nil
	}
	if err != nil {
		return dialog.State{}, false, fmt.Errorf("inbox: member %d of %d: %w", uid, cid, err)
	}
	base := c.LastMsgID
	st = dialog.State{
		Type: c.Type, LastMsgID: base, LastMsgAt: c.LastMsgAt.UnixMilli(), LastRead: m.LastReadMsgID,
		Muted: m.Muted, Pinned: m.Pinned, HiddenAt: m.HiddenAt, Base: base,
	}
	switch c.Type {
	case store.ConversationP2P:
		p, err := s.store.P2PByConversation(ctx, cid)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return dialog.State{}, false, fmt.Errorf("inbox: pair of %d: %w", cid, err)
		}
		st.PeerID = p.Peer(uid)
	case store.ConversationGroup:
		g, err := s.store.GroupByConversation(ctx, cid)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return dialog.State{}, false, fmt.Errorf("inbox: group of %d: %w", cid, err)
		}
		st.GroupID = g.ID
	}
	if base == 0 {
		return st, true, nil
	}
	if st.Preview, err = s.preview(ctx, uid, cid, base); err != nil {
		return dialog.State{}, false, err
	}
	if m.Muted {
		return st, true, nil // a muted conversation counts no unread (decision 30)
	}
	if st.Unread, err = s.unread(ctx, uid, cid, m.LastReadMsgID, base); err != nil {
		return dialog.State{}, false, err
	}
	return st, true, nil
}

// preview finds the newest message ≤ upTo the user did not delete.
func (s *Service) preview(ctx context.Context, uid, cid, upTo int64) (*dialog.Preview, error) {
	for scanned := 0; scanned < previewScan; {
		msgs, err := s.store.MessagesBefore(ctx, cid, upTo, previewBatch)
		if err != nil {
			return nil, fmt.Errorf("inbox: newest messages of %d: %w", cid, err)
		}
		if len(msgs) == 0 {
			return nil, nil
		}
		ids := make([]int64, len(msgs))
		for i, m := range msgs {
			ids[i] = m.ID
		}
		deleted, err := s.store.DeletedAmong(ctx, uid, ids)
		if err != nil {
			return nil, fmt.Errorf("inbox: deletions of %d: %w", uid, err)
		}
		for _, m := range msgs {
			if !deleted[m.ID] {
				p := PreviewOf(m)
				return &p, nil
			}
		}
		scanned += len(msgs)
		upTo = msgs[len(msgs)-1].ID - 1
	}
	return nil, nil
}

// unread counts the messages from others after lastRead up to upTo that are
// not recalled and not deleted by the user.
func (s *Service) unread(ctx context.Context, uid, cid, lastRead, upTo int64) (int64, error) {
	if upTo <= lastRead {
		return 0, nil
	}
	n, err := s.store.CountUnread(ctx, cid, uid, lastRead, upTo)
	if err != nil {
		return 0, fmt.Errorf("inbox: count unread of %d in %d: %w", uid, cid, err)
	}
	for after := lastRead; n > 0; {
		ids, err := s.store.DeletedInRange(ctx, uid, cid, after, upTo, deletedBatch)
		if err != nil {
			return 0, fmt.Errorf("inbox: deletions of %d in %d: %w", uid, cid, err)
		}
		if len(ids) == 0 {
			break
		}
		d, err := s.store.CountUnreadAmong(ctx, cid, uid, ids)
		if err != nil {
			return 0, fmt.Errorf("inbox: count deleted of %d in %d: %w", uid, cid, err)
		}
		n -= d
		if len(ids) < deletedBatch {
			break
		}
		after = ids[len(ids)-1]
	}
	if n < 0 {
		n = 0
	}
	return n, nil
}
