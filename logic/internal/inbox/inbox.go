// Package inbox answers SYNC_INBOX (10/11) and SYNC_MESSAGES (12/13): the
// user's conversation list from pkg/dialog in Redis with its exact change
// cursor, the cold rebuild of missing entries from MySQL, the mailbox
// events, and message history pages (docs/internals.md "Conversation
// lists, unread and sync").
package inbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/mailbox"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/dialog"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
)

// Page sizes (docs/internals.md).
const (
	DefaultInboxLimit    = 100
	DefaultMessagesLimit = 50
	MaxLimit             = 200
)

// Service answers the sync commands.
type Service struct {
	store   *store.Store
	rdb     redis.Cmdable
	mailbox *mailbox.Service
	log     *zap.Logger
}

// New returns a Service. Its pages are bounded by what the asking front
// door gives in each query (ListBound, SizeBound), not by one frame size.
func New(st *store.Store, rdb redis.Cmdable, mb *mailbox.Service, log *zap.Logger) *Service {
	if log == nil {
		log = zap.NewNop()
	}
	return &Service{store: st, rdb: rdb, mailbox: mb, log: log}
}

// limit applies a page size's default and clamp; a negative one is 40001.
func limit(n, def int) (int, error) {
	switch {
	case n < 0:
		return 0, errcode.New(errcode.InvalidArgument, "limit must not be negative")
	case n == 0:
		return def, nil
	case n > MaxLimit:
		return MaxLimit, nil
	}
	return n, nil
}

// newEpoch names a freshly built list: unique enough that a cursor of an
// earlier build (before a Redis flush) never matches it.
func newEpoch() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return strconv.FormatInt(time.Now().UnixMilli(), 36) + hex.EncodeToString(b[:])
}

// InboxQuery asks for a page of a device's conversation list changes and
// mailbox events (SYNC_INBOX).
type InboxQuery struct {
	UserID   int64
	DeviceID string
	// DialogCursor and MailboxSeq are the cursors of the last page ("" and
	// 0 for a fresh device).
	DialogCursor string
	MailboxSeq   int64
	// Limit is the most conversations and the most events of the page: 0
	// means DefaultInboxLimit, more than MaxLimit means MaxLimit.
	Limit int
	// Bound is the page's byte bound as the asking front door encodes it;
	// the zero ListBound bounds nothing.
	Bound ListBound
}

// ListBound limits an inbox page by the bytes its conversations and events
// take once a front door has encoded them (SizeBound, for lists).
type ListBound struct {
	// Budget is the bytes the page's entries may take in all (each plus
	// one byte of separator); ≤ 0 bounds nothing.
	Budget           int
	ConversationSize func(Conversation) int
	EventSize        func(mailbox.Event) int
}

// Conversation is one entry of a user's conversation list.
type Conversation struct {
	ID   int64
	Type int
	// PeerID is the other user of a P2P conversation, GroupID the group of
	// a group conversation.
	PeerID    int64
	GroupID   int64
	LastMsgID int64
	// LastMsgAt is the newest message's time, Unix ms.
	LastMsgAt int64
	Unread    int64
	Muted     bool
	Pinned    bool
	// Hidden: the user hid the conversation and no newer message came
	// since.
	Hidden  bool
	Preview *Preview
}

// Preview is the short form of a conversation's newest message.
type Preview struct {
	MsgID       int64
	MessageType int
	Text        string
	SenderID    int64
	Recalled    bool
}

// InboxPage is one page of SYNC_INBOX.
type InboxPage struct {
	Conversations []Conversation
	Events        []mailbox.Event
	// DialogCursor and MailboxSeq are the cursors of the next page.
	DialogCursor string
	MailboxSeq   int64
	// More reports whether another page follows.
	More bool
}

// SyncInbox answers one page of a device's conversation list changes and
// mailbox events.
func (s *Service) SyncInbox(ctx context.Context, q InboxQuery) (InboxPage, error) {
	cur, err := dialog.ParseCursor(q.DialogCursor)
	if err != nil {
		return InboxPage{}, errcode.Wrap(errcode.InvalidArgument, "malformed dialog_cursor", err)
	}
	if q.MailboxSeq < 0 {
		return InboxPage{}, errcode.New(errcode.InvalidArgument, "malformed mailbox_seq")
	}
	n, err := limit(q.Limit, DefaultInboxLimit)
	if err != nil {
		return InboxPage{}, err
	}

	epoch, err := s.ensureList(ctx, q.UserID)
	if err != nil {
		return InboxPage{}, err
	}
	from := cur.From(epoch)
	changes, err := dialog.Changes(ctx, s.rdb, q.UserID, from, n+1)
	if err != nil {
		return InboxPage{}, errcode.Unavailable("dialog changes", err)
	}
	moreConvs := len(changes) > n
	if moreConvs {
		changes = changes[:n]
	}
	page := InboxPage{Conversations: make([]Conversation, 0, len(changes)), Events: []mailbox.Event{}}
	// The page stops before its encoding would pass the bound; the cursors
	// then name the last entry taken, so the rest comes next page. One
	// conversation and one event always fit.
	bytes := pageBytes{budget: q.Bound.Budget}
	last := from
	for _, ch := range changes {
		st, ok, err := s.state(ctx, q.UserID, ch)
		if err != nil {
			return InboxPage{}, err
		}
		if ok {
			c := conversation(ch.ConversationID, st)
			if q.Bound.Budget > 0 && !bytes.fits(q.Bound.ConversationSize(c)) {
				moreConvs = true
				break
			}
			page.Conversations = append(page.Conversations, c)
		}
		last = ch.Version
	}
	page.DialogCursor = dialog.Cursor{Epoch: epoch, Version: last}.String()

	events, moreEvents, err := s.mailbox.Since(ctx, q.UserID, q.DeviceID, q.MailboxSeq, n)
	if err != nil {
		return InboxPage{}, errcode.Unavailable("mailbox", err)
	}
	page.MailboxSeq = q.MailboxSeq
	for i, ev := range events {
		if q.Bound.Budget > 0 && !bytes.fits(q.Bound.EventSize(ev)) {
			events, moreEvents = events[:i], true
			break
		}
	}
	page.Events = events
	if len(events) > 0 {
		page.MailboxSeq = events[len(events)-1].Seq
	}
	page.More = moreConvs || moreEvents
	return page, nil
}

// ensureList returns the epoch of the user's list, building it from the
// memberships in MySQL when it is not built (first use, or Redis lost it).
func (s *Service) ensureList(ctx context.Context, uid int64) (string, error) {
	epoch, err := dialog.Epoch(ctx, s.rdb, uid)
	if err != nil {
		return "", errcode.Unavailable("dialog epoch", err)
	}
	if epoch != "" {
		return epoch, nil
	}
	cids, err := s.store.Memberships(ctx, uid)
	if err != nil {
		return "", errcode.Unavailable("memberships", err)
	}
	epoch, err = dialog.EnsureMembers(ctx, s.rdb, uid, newEpoch(), cids)
	if err != nil {
		return "", errcode.Unavailable("dialog build", err)
	}
	s.log.Info("conversation list rebuilt", zap.Int64("user_id", uid), zap.Int("conversations", len(cids)), zap.String("epoch", epoch))
	return epoch, nil
}

// state returns the user's state of a changed conversation: from Redis,
// or computed from MySQL and written back when absent. The write is
// refused when the conversation changed meanwhile; the state computed is
// still answered (it is at least as new as the change being paged) and
// the newer change brings the conversation back in a later page. ok is
// false when the user is no longer a member.
func (s *Service) state(ctx context.Context, uid int64, ch dialog.Change) (dialog.State, bool, error) {
	st, ok, err := dialog.Load(ctx, s.rdb, uid, ch.ConversationID)
	if err != nil {
		return dialog.State{}, false, errcode.Unavailable("dialog state", err)
	}
	if ok {
		return st, true, nil
	}
	st, ok, err = s.ColdState(ctx, uid, ch.ConversationID)
	if err != nil {
		return dialog.State{}, false, errcode.Unavailable("cold state", err)
	}
	if !ok {
		return dialog.State{}, false, nil
	}
	if _, err := dialog.WriteCold(ctx, s.rdb, uid, ch.ConversationID, strconv.FormatInt(ch.Version, 10), st); err != nil {
		return dialog.State{}, false, errcode.Unavailable("dialog write", err)
	}
	return st, true, nil
}

func conversation(cid int64, st dialog.State) Conversation {
	c := Conversation{
		ID: cid, Type: st.Type, LastMsgID: st.LastMsgID,
		LastMsgAt: st.LastMsgAt, Unread: st.Unread, Muted: st.Muted, Pinned: st.Pinned, Hidden: st.Hidden(),
	}
	if st.Type == protocol.ConversationGroup {
		c.GroupID = st.GroupID
	} else {
		c.PeerID = st.PeerID
	}
	if p := st.Preview; p != nil {
		mid, _ := strconv.ParseInt(p.MsgID, 10, 64)
		sid, _ := strconv.ParseInt(p.SenderID, 10, 64)
		c.Preview = &Preview{MsgID: mid, MessageType: p.MessageType, Text: p.Text, SenderID: sid, Recalled: p.Recalled}
	}
	return c
}

// HistoryQuery asks for a page of a conversation's messages as one member
// sees them (SYNC_MESSAGES, the business API's GetHistory).
type HistoryQuery struct {
	UserID         int64
	ConversationID int64
	// After is the cursor: the page starts after this message id (0: from
	// the first message).
	After int64
	// Limit is the most messages of the page: 0 means
	// DefaultMessagesLimit, more than MaxLimit means MaxLimit.
	Limit int
	// Bound is the page's byte bound as the asking front door encodes it;
	// the zero SizeBound bounds nothing.
	Bound SizeBound
	// IDs, when set, asks for these messages (at most
	// store.MaxMessagesByID) instead of the page after After.
	IDs []int64
}

// SizeBound limits a page by the bytes its entries take once a front door
// has encoded them: each front door has its own encoding and its own
// message limit (the client's frame, the gRPC message), so the domain
// only counts.
type SizeBound struct {
	// Budget is the bytes the page's entries may take in all (each plus
	// one byte of separator); ≤ 0 bounds nothing.
	Budget int
	// MessageSize is the most bytes one message of these content and
	// client_msg_id lengths takes.
	MessageSize func(contentLen, clientMsgIDLen int) int
}

// Message is a stored message as one member sees it.
type Message struct {
	ID               int64
	ConversationID   int64
	ConversationType int
	SenderID         int64
	ClientMsgID      string
	MessageType      int
	// Content is the message's compact JSON object; nil once recalled or
	// deleted for everyone.
	Content   []byte
	CreatedAt time.Time
	// Recalled is set for every tombstone; Deleted too when it was deleted
	// for everyone rather than recalled.
	Recalled bool
	Deleted  bool
	// Version counts the edits; EditedAt is the newest one's time (zero:
	// never edited).
	Version  int
	EditedAt time.Time
}

// HistoryPage is one page of a conversation's messages.
type HistoryPage struct {
	ConversationID int64
	// Messages are in id order, without the ones the member deleted.
	Messages []Message
	// Next is the cursor of the next page: the last message id scanned
	// (the query's After when none was).
	Next int64
	// More reports whether another page follows.
	More bool
}

// History answers one page of a conversation's messages to a member
// (40301 for anyone else).
func (s *Service) History(ctx context.Context, q HistoryQuery) (HistoryPage, error) {
	cid := q.ConversationID
	if cid <= 0 {
		return HistoryPage{}, errcode.New(errcode.InvalidArgument, "conversation_id is required")
	}
	if q.After < 0 {
		return HistoryPage{}, errcode.New(errcode.InvalidArgument, "last_msg_id must not be negative")
	}
	n, err := limit(q.Limit, DefaultMessagesLimit)
	if err != nil {
		return HistoryPage{}, err
	}
	if len(q.IDs) > store.MaxMessagesByID {
		return HistoryPage{}, errcode.Invalid("msg_ids", fmt.Sprintf("at most %d ids", store.MaxMessagesByID))
	}
	for _, id := range q.IDs {
		if id <= 0 {
			return HistoryPage{}, errcode.Invalid("msg_ids", "ids are positive")
		}
	}
	if _, err := s.store.GetMember(ctx, cid, q.UserID); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return HistoryPage{}, errcode.New(errcode.Forbidden, "not a member of the conversation")
		}
		return HistoryPage{}, errcode.Unavailable("member", err)
	}
	var (
		conv store.Conversation
		rows []store.Message
	)
	if len(q.IDs) > 0 {
		conv, rows, err = s.byID(ctx, cid, q.IDs)
	} else {
		conv, rows, err = s.store.ConversationPage(ctx, cid, q.After, n+1)
	}
	var ce *errcode.Error
	if errors.As(err, &ce) {
		return HistoryPage{}, err
	}
	if errors.Is(err, store.ErrNotFound) {
		return HistoryPage{}, errcode.New(errcode.Forbidden, "not a member of the conversation")
	}
	if err != nil {
		return HistoryPage{}, errcode.Unavailable("messages", err)
	}
	page := HistoryPage{ConversationID: cid, More: len(q.IDs) == 0 && len(rows) > n, Next: q.After}
	if page.More {
		rows = rows[:n]
	}
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	deleted, err := s.store.DeletedAmong(ctx, q.UserID, ids)
	if err != nil {
		return HistoryPage{}, errcode.Unavailable("deletions", err)
	}
	page.Messages = make([]Message, 0, len(rows))
	bytes := pageBytes{budget: q.Bound.Budget}
	for _, r := range rows {
		if !deleted[r.ID] && r.Status == store.MessageNormal && q.Bound.Budget > 0 &&
			!bytes.fits(q.Bound.MessageSize(len(r.Content), len(r.ClientMsgID))) {
			// Next stays at the last message taken: the rest comes next
			// page.
			page.More = true
			break
		}
		page.Next = r.ID
		if deleted[r.ID] {
			continue
		}
		m := Message{
			ID: r.ID, ConversationID: r.ConversationID, ConversationType: conv.Type,
			SenderID: r.SenderID, ClientMsgID: r.ClientMsgID, MessageType: r.MessageType,
			CreatedAt: r.CreatedAt, Recalled: r.Status != store.MessageNormal, Deleted: r.Status == store.MessageDeleted,
		}
		if !m.Recalled {
			m.Content = r.Content
		}
		if r.EditedAt.Valid {
			m.Version, m.EditedAt = r.Version, r.EditedAt.Time
		}
		page.Messages = append(page.Messages, m)
	}
	if err := s.markRecalledReplies(ctx, cid, page.Messages); err != nil {
		return HistoryPage{}, err
	}
	return page, nil
}

// byID reads the messages ids names (deduplicated, at most
// store.MaxMessagesByID) as a page that ends where it began.
func (s *Service) byID(ctx context.Context, cid int64, ids []int64) (store.Conversation, []store.Message, error) {
	conv, err := s.store.GetConversation(ctx, cid)
	if err != nil {
		return store.Conversation{}, nil, err
	}
	rows, err := s.store.MessagesByID(ctx, cid, slices.Compact(slices.Sorted(slices.Values(ids))))
	return conv, rows, err
}

// markRecalledReplies reduces the snapshot of each reply whose original
// has since been recalled or deleted for everyone to its id and
// "recalled", so the quoted text goes with the original. One statement
// per page, and none for a page without replies.
func (s *Service) markRecalledReplies(ctx context.Context, cid int64, msgs []Message) error {
	var origs []int64
	for _, m := range msgs {
		if id := protocol.ReplyOf(m.Content); id > 0 {
			origs = append(origs, id)
		}
	}
	if len(origs) == 0 {
		return nil
	}
	gone, err := s.store.WithdrawnAmong(ctx, cid, origs)
	if err != nil {
		return errcode.Unavailable("reply originals", err)
	}
	for i := range msgs {
		if id := protocol.ReplyOf(msgs[i].Content); id > 0 && gone[id] {
			msgs[i].Content = protocol.RecalledReply(msgs[i].Content, id)
		}
	}
	return nil
}

// pageBytes counts what a page's lists take against its byte budget. The
// first entry is always taken: the send rule makes one message fit, and a
// page without progress would loop the client forever.
type pageBytes struct {
	budget, used, n int
}

// fits reports whether an entry of size bytes (plus its comma) still fits
// and, if so, counts it.
func (p *pageBytes) fits(size int) bool {
	if p.budget > 0 && p.n > 0 && p.used+size+1 > p.budget {
		return false
	}
	p.used += size + 1
	p.n++
	return true
}
