package group

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/errcode"
)

// The send path's view of groups (conversation.Groups): which conversation
// a group is, and whether a sender may send into it now.

// ConversationOf returns the conversation of a group: 40401 when there is
// no such group (a group id is public, so this reveals nothing new).
func (s *Service) ConversationOf(ctx context.Context, groupID int64) (int64, error) {
	if groupID <= 0 {
		return 0, errcode.Invalid("group_id", "must be a positive id")
	}
	g, err := s.store.GetGroup(ctx, groupID)
	if errors.Is(err, store.ErrNotFound) {
		return 0, errGroupNotFound
	}
	if err != nil {
		return 0, errcode.Unavailable(fmt.Sprintf("group: read group %d", groupID), err)
	}
	return g.ConversationID, nil
}

// GroupOf returns the group id of a group conversation; ErrNotFound (not an
// *errcode.Error) when the conversation is no group's.
func (s *Service) GroupOf(ctx context.Context, conversationID int64) (int64, error) {
	g, err := s.store.GroupByConversation(ctx, conversationID)
	if errors.Is(err, store.ErrNotFound) {
		return 0, store.ErrNotFound
	}
	if err != nil {
		return 0, errcode.Unavailable(fmt.Sprintf("group: read group of conversation %d", conversationID), err)
	}
	return g.ID, nil
}

// AuthorizeSend checks that userID may send into the group conversation at
// now — the rules of CheckSend, on the one read of the group row — and returns the member_version the send is
// authorized against (the deliver job carries it). A system sender (the
// business API's own account) is not a member and needs only an active
// group. Errors are *errcode.Error; a database failure is 50301.
func (s *Service) AuthorizeSend(ctx context.Context, conversationID, userID int64, system bool, now time.Time) (int64, error) {
	g, err := s.store.GroupByConversation(ctx, conversationID)
	if errors.Is(err, store.ErrNotFound) {
		return 0, errNotMember
	}
	if err != nil {
		return 0, errcode.Unavailable(fmt.Sprintf("group: read group of conversation %d", conversationID), err)
	}
	if system {
		if g.Status != store.GroupActive {
			return 0, forbidden("the group is dissolved")
		}
		return g.MemberVersion, nil
	}
	if err := s.checkSend(ctx, g, userID, now); err != nil {
		var ec *errcode.Error
		if errors.As(err, &ec) {
			return 0, err
		}
		return 0, errcode.Unavailable("", err)
	}
	return g.MemberVersion, nil
}
