package mailbox

import (
	"context"
	"errors"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sparkim/spark/logic/internal/store"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// Internal implements logicv1.InternalServer (deliver's side door; the
// cluster-secret guard of the gRPC server protects it).
type Internal struct {
	logicv1.UnimplementedInternalServer

	svc *Service
	log *zap.Logger
}

// NewInternal returns the Internal server.
func NewInternal(svc *Service, log *zap.Logger) *Internal {
	if log == nil {
		log = zap.NewNop()
	}
	return &Internal{svc: svc, log: log}
}

// AppendMailbox appends the events in one transaction; InvalidArgument for
// an invalid event (nothing is written), Unavailable when MySQL fails.
func (i *Internal) AppendMailbox(ctx context.Context, req *logicv1.AppendMailboxRequest) (*logicv1.AppendMailboxReply, error) {
	events := make([]store.MailboxEvent, len(req.Events))
	for k, e := range req.Events {
		events[k] = store.MailboxEvent{
			UserID: e.UserId, DeviceID: e.DeviceId, EventType: int(e.EventType),
			ConversationID: e.ConversationId, MsgID: e.MsgId, Payload: e.Payload,
		}
	}
	seqs, err := i.svc.Append(ctx, events)
	if errors.Is(err, ErrInvalid) {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err != nil {
		i.log.Warn("mailbox append failed", zap.Int("events", len(events)), zap.Error(err))
		return nil, status.Error(codes.Unavailable, "mailbox append failed")
	}
	return &logicv1.AppendMailboxReply{Seqs: seqs}, nil
}
