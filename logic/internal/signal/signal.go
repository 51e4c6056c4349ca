// Package signal is the domain of transient conversation signals (SIGNAL,
// typing and the application's own): checked like a send (the sender must
// be allowed to send into the conversation), fanned out only to the online
// devices of the conversation's members, and never stored (decision 102).
package signal

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"github.com/sparkim/spark/logic/internal/conversation"
	"github.com/sparkim/spark/logic/internal/group"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
)

// Limits of one signal.
const (
	// MaxPayload bounds a signal's payload (JSON bytes): a signal is a hint
	// ("typing", "recording"), not a message.
	MaxPayload = 1 << 10
	// MaxGroupMembers is the largest group a signal fans out to: beyond it
	// one keystroke would cost a route read per member, so larger groups
	// refuse signals with 40301.
	MaxGroupMembers = 500
)

var kindPattern = regexp.MustCompile(`^[a-z][a-z0-9_.]{0,31}$`)

// Sender is the signalling device.
type Sender struct {
	UserID   int64
	DeviceID string
}

// Request is one SIGNAL.
type Request struct {
	ConversationID int64
	Kind           string
	Payload        []byte
}

// Convs resolves and authorizes a conversation (a *conversation.Resolver).
type Convs interface {
	ByID(ctx context.Context, id int64) (conversation.Conversation, error)
	Open(ctx context.Context, from conversation.Sender, c conversation.Conversation, now time.Time) (conversation.Conversation, error)
}

// Members pages a group conversation's members (a *group.Service).
type Members interface {
	MembersByConversation(ctx context.Context, conversationID, afterUserID int64, limit int) (group.MembersPage, error)
}

// Pusher pushes a frame to the online devices of users, except one device
// (an *online.Service).
type Pusher interface {
	PushSignal(ctx context.Context, uids []int64, exceptUser int64, exceptDevice string, body []byte) (int, error)
}

// Service sends signals.
type Service struct {
	convs   Convs
	members Members
	push    Pusher
	now     func() time.Time
}

// New returns a Service.
func New(convs Convs, members Members, push Pusher) *Service {
	return &Service{convs: convs, members: members, push: push, now: time.Now}
}

// Validate checks a request's shape without looking anything up (40001,
// 41301 for an oversized payload).
func Validate(r Request) error {
	switch {
	case r.ConversationID <= 0:
		return errcode.Invalid("conversation_id", "must be a positive id")
	case !kindPattern.MatchString(r.Kind):
		return errcode.Invalid("kind", "must be 1–32 characters a-z 0-9 _ . starting with a letter")
	case len(r.Payload) > MaxPayload:
		return errcode.New(errcode.TooLarge, fmt.Sprintf("payload over %d bytes", MaxPayload))
	}
	if len(r.Payload) > 0 {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(r.Payload, &obj); err != nil || obj == nil {
			return errcode.Invalid("payload", "must be a JSON object")
		}
	}
	return nil
}

// Send pushes the signal to the other online devices of the conversation's
// members and returns how many connections it was queued for. Errors:
// 40001, 41301, 40301 (not allowed to send there, or a group over
// MaxGroupMembers), 40401, 50301.
func (s *Service) Send(ctx context.Context, from Sender, r Request) (int, error) {
	if err := Validate(r); err != nil {
		return 0, err
	}
	c, err := s.convs.ByID(ctx, r.ConversationID)
	if err != nil {
		return 0, err
	}
	if c, err = s.convs.Open(ctx, conversation.Sender{UserID: from.UserID}, c, s.now()); err != nil {
		return 0, err
	}
	uids := c.Recipients()
	if c.Type == protocol.ConversationGroup {
		page, err := s.members.MembersByConversation(ctx, c.ID, 0, MaxGroupMembers)
		if err != nil {
			return 0, err
		}
		if page.NextUserID != 0 {
			return 0, errcode.New(errcode.Forbidden, fmt.Sprintf("signals are off in groups over %d members", MaxGroupMembers))
		}
		for _, m := range page.Members {
			uids = append(uids, m.UserID)
		}
	}
	body, err := protocol.Marshal(protocol.SignalPush{ConversationID: jsonid.ID(c.ID), SenderID: jsonid.ID(from.UserID),
		DeviceID: from.DeviceID, Kind: r.Kind, Payload: r.Payload})
	if err != nil {
		return 0, errcode.Invalid("payload", "must be a JSON object")
	}
	return s.push.PushSignal(ctx, uids, from.UserID, from.DeviceID, body)
}
