// Package notify tells devices about membership and friend changes: the
// change is committed and its mailbox events written by the domain service
// (group, relation); this package then refreshes the conversation lists it
// touched and queues CONTROL_EVENT (17) pushes through deliver, so online
// devices learn of it at once and offline ones by the mailbox.
//
// Per-member work stays out of the request: a change that concerns every
// member of a group is one SIGNAL job whose recipients deliver expands from
// its member cache, in chunks, whatever the group's size.
package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/group"
	"github.com/sparkim/spark/logic/internal/relation"
	"github.com/sparkim/spark/pkg/dialog"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/queue"
	queuev1 "github.com/sparkim/spark/proto/queue/v1"
)

// enqueueTimeout bounds one XADD of a control push.
const enqueueTimeout = time.Second

// Service queues the pushes and list refreshes of changes.
type Service struct {
	rdb        redis.Cmdable
	partitions int
}

// New returns a Service enqueueing on the deliver queue's partitions
// (queue.partitions, at least 1).
func New(rdb redis.Cmdable, partitions int) (*Service, error) {
	if partitions < 1 {
		return nil, fmt.Errorf("notify: queue.partitions %d must be at least 1", partitions)
	}
	return &Service{rdb: rdb, partitions: partitions}, nil
}

// ControlEvent is the data of a CONTROL_EVENT push: a mailbox event
// without its seq (the mailbox has it when sync must replay it). It is the
// protocol's type, so clients decode what this package writes.
type ControlEvent = protocol.ControlEvent

// Notifier is what the front doors (the client protocol's gateway handler
// and the business API) call after a change: a *Service, or a fake in
// tests.
type Notifier interface {
	GroupChanged(ctx context.Context, ch group.Change) error
	RelationChanged(ctx context.Context, ch relation.Change) error
}

// AfterGroupChange tells n about a committed group change when it Changed
// something, and logs a failure with fields instead of returning it
// (decision 51): the change is committed, and the affected users' mailbox
// events let their devices catch up by sync, so the caller answers
// success either way. Both front doors call it, so they notify alike. n
// may be nil (changes then reach devices by sync only).
func AfterGroupChange(ctx context.Context, n Notifier, log *zap.Logger, ch group.Change, fields ...zap.Field) {
	if !ch.Changed || n == nil {
		return
	}
	if err := n.GroupChanged(ctx, ch); err != nil && log != nil {
		log.Warn("group change notification failed",
			append(fields, zap.Int64("group_id", ch.Group.GroupID), zap.Error(err))...)
	}
}

// AfterRelationChange is AfterGroupChange for a friend or block change.
func AfterRelationChange(ctx context.Context, n Notifier, log *zap.Logger, ch relation.Change, fields ...zap.Field) {
	if !ch.Changed || n == nil {
		return
	}
	if err := n.RelationChanged(ctx, ch); err != nil && log != nil {
		log.Warn("relation change notification failed", append(fields, zap.Error(err))...)
	}
}

// GroupChanged refreshes the lists of the users who joined or left (the
// group appears in, or drops out of, their next SYNC_INBOX), pushes each
// affected user their own event (one job for the users sharing a payload), and, when the change concerns every
// member, queues one push to the whole group at its new member_version.
// An idempotent repeat (nothing changed) does nothing. The change is
// committed already: an error here means some devices learn of it only by
// sync.
func (s *Service) GroupChanged(ctx context.Context, ch group.Change) error {
	if !ch.Changed {
		return nil
	}
	cid := ch.Group.ConversationID
	var errs []error
	for _, lists := range [][]int64{ch.Added, ch.Removed} {
		for _, uid := range lists {
			if err := dialog.Invalidate(ctx, s.rdb, uid, cid); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// One job per distinct payload, not per user: the members added by one
	// call (up to 500) usually share theirs.
	var order []string
	byPayload := map[string][]int64{}
	for _, ev := range ch.Events {
		k := string(ev.Payload)
		if _, ok := byPayload[k]; !ok {
			order = append(order, k)
		}
		byPayload[k] = append(byPayload[k], ev.UserID)
	}
	for _, k := range order {
		if err := s.push(ctx, cid, protocol.ConversationGroup, 0, byPayload[k],
			ControlEvent{EventType: protocol.EventMembership, ConversationID: jsonid.ID(cid), Payload: json.RawMessage(k)}); err != nil {
			errs = append(errs, err)
		}
	}
	if ch.NotifyMembers {
		if err := s.push(ctx, cid, protocol.ConversationGroup, ch.Group.MemberVersion, nil,
			ControlEvent{EventType: protocol.EventMembership, ConversationID: jsonid.ID(cid), Payload: ch.Payload()}); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("notify: group %d: %w", ch.Group.GroupID, err)
	}
	return nil
}

// RelationChanged pushes every friend event of the change to its user's
// devices.
func (s *Service) RelationChanged(ctx context.Context, ch relation.Change) error {
	if !ch.Changed {
		return nil
	}
	var errs []error
	for _, ev := range ch.Events {
		if err := s.push(ctx, 0, 0, 0, []int64{ev.UserID},
			ControlEvent{EventType: protocol.EventFriend, Payload: ev.Payload}); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("notify: friend change: %w", err)
	}
	return nil
}

// push queues a SIGNAL job carrying a CONTROL_EVENT to recipients' devices
// (every device: no acting device is excluded), or to a group's members
// when recipients is nil. Friend events have no conversation and all go to
// partition 0, so one user's control events stay in order.
func (s *Service) push(ctx context.Context, cid int64, ctype int, memberVersion int64, recipients []int64, ev ControlEvent) error {
	data, err := protocol.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode control event: %w", err)
	}
	job := &queuev1.DeliverJob{
		Kind: queuev1.JobKind_JOB_KIND_SIGNAL, Command: uint32(protocol.CmdControlEvent),
		ConversationId: cid, ConversationType: int32(ctype), Recipients: recipients,
		MemberVersion: memberVersion, PushData: data,
		CreatedAtMs: time.Now().UnixMilli(), EnqueuedAtMs: time.Now().UnixMilli(),
	}
	actx, cancel := context.WithTimeout(ctx, enqueueTimeout)
	defer cancel()
	if _, err := queue.Enqueue(actx, s.rdb, s.partitions, job); err != nil {
		return fmt.Errorf("enqueue control event: %w", err)
	}
	return nil
}
