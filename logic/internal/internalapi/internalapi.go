// Package internalapi is logic.v1.Internal, the side door deliver calls
// (the cluster-secret guard of the gRPC server protects it): a thin
// adapter over the mailbox and group services.
package internalapi

import (
	"context"
	"errors"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sparkim/spark/logic/internal/group"
	"github.com/sparkim/spark/logic/internal/mailbox"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/errcode"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// Groups pages a group conversation's members (a *group.Service).
type Groups interface {
	MembersByConversation(ctx context.Context, conversationID, afterUserID int64, limit int) (group.MembersPage, error)
}

// Server implements logicv1.InternalServer.
type Server struct {
	logicv1.UnimplementedInternalServer

	mailbox *mailbox.Service
	groups  Groups
	log     *zap.Logger
}

// New returns the Internal server.
func New(mb *mailbox.Service, groups Groups, log *zap.Logger) *Server {
	if log == nil {
		log = zap.NewNop()
	}
	return &Server{mailbox: mb, groups: groups, log: log}
}

// AppendMailbox appends the events in one transaction; InvalidArgument for
// an invalid event (nothing is written), Unavailable when MySQL fails.
func (i *Server) AppendMailbox(ctx context.Context, req *logicv1.AppendMailboxRequest) (*logicv1.AppendMailboxReply, error) {
	events := make([]store.MailboxEvent, len(req.Events))
	for k, e := range req.Events {
		events[k] = store.MailboxEvent{
			UserID: e.UserId, DeviceID: e.DeviceId, EventType: int(e.EventType),
			ConversationID: e.ConversationId, MsgID: e.MsgId, Payload: e.Payload,
		}
	}
	seqs, err := i.mailbox.Append(ctx, events)
	if errors.Is(err, mailbox.ErrInvalid) {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err != nil {
		i.log.Warn("mailbox append failed", zap.Int("events", len(events)), zap.Error(err))
		return nil, status.Error(codes.Unavailable, "mailbox append failed")
	}
	return &logicv1.AppendMailboxReply{Seqs: seqs}, nil
}

// MaxMembersPage bounds a GroupMembers page (and is its default): the
// group service's page bound.
const MaxMembersPage = group.MaxPageSize

// GroupMembers pages a group conversation's members for deliver's member
// cache. NotFound when the conversation is no group's.
func (i *Server) GroupMembers(ctx context.Context, req *logicv1.GroupMembersRequest) (*logicv1.GroupMembersReply, error) {
	if req.ConversationId <= 0 {
		return nil, status.Error(codes.InvalidArgument, "conversation_id must be positive")
	}
	if req.AfterUserId < 0 {
		return nil, status.Error(codes.InvalidArgument, "after_user_id must not be negative")
	}
	limit := int(req.Limit)
	if limit <= 0 || limit > MaxMembersPage {
		limit = MaxMembersPage
	}
	page, err := i.groups.MembersByConversation(ctx, req.ConversationId, req.AfterUserId, limit)
	if err != nil {
		switch c, msg := errcode.Of(err); c {
		case errcode.NotFound:
			return nil, status.Error(codes.NotFound, msg)
		case errcode.InvalidArgument:
			return nil, status.Error(codes.InvalidArgument, msg)
		}
		i.log.Warn("group members failed", zap.Int64("conversation_id", req.ConversationId), zap.Error(err))
		return nil, status.Error(codes.Unavailable, "group members unavailable")
	}
	ids := make([]int64, len(page.Members))
	for k, m := range page.Members {
		ids[k] = m.UserID
	}
	return &logicv1.GroupMembersReply{UserIds: ids, More: page.NextUserID != 0, MemberVersion: page.MemberVersion}, nil
}
