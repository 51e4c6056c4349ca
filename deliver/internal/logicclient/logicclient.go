// Package logicclient calls logic's Internal service. Logic owns every MySQL
// write and read, so deliver records mailbox events (MISSED_MESSAGE) and
// reads group members through it. Any
// logic instance will do; the client tries them in turn within one time
// budget, so an unreachable logic never holds a partition.
package logicclient

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sparkim/spark/pkg/clusterauth"
	"github.com/sparkim/spark/pkg/rpclimit"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// Pool holds one Internal client per logic address. It is safe for
// concurrent use.
type Pool struct {
	addrs   []string
	conns   []*grpc.ClientConn
	clients []logicv1.InternalClient
	timeout time.Duration
	// next rotates the first logic tried, spreading calls over instances.
	next atomic.Uint32
}

// New prepares clients for addrs, authenticated with the cluster secret.
// Connections are made lazily on first use. timeout
// (deliver.logic_timeout, positive) bounds one AppendMailbox over every
// logic tried.
func New(addrs []string, secret string, timeout time.Duration) (*Pool, error) {
	if len(addrs) == 0 {
		return nil, errors.New("logicclient: deliver.logic_addrs is empty")
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("logicclient: deliver.logic_timeout %v must be positive", timeout)
	}
	p := &Pool{addrs: addrs, timeout: timeout}
	for _, addr := range addrs {
		cc, err := grpc.NewClient(addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			clusterauth.Credentials(secret),
			rpclimit.DialOption(),
		)
		if err != nil {
			_ = p.Close()
			return nil, fmt.Errorf("logicclient: dial %s: %w", addr, err)
		}
		p.conns = append(p.conns, cc)
		p.clients = append(p.clients, logicv1.NewInternalClient(cc))
	}
	return p, nil
}

// AppendMailbox records events through the first logic that answers,
// within the pool's timeout. A logic that refuses the connection fails
// fast (no WaitForReady), so the next one is tried at once; a hanging one
// gets only its share of what is left of the budget. A try that timed out
// after logic committed makes the next try record the events twice; that
// is harmless (a MISSED_MESSAGE event only tells the device to sync).
func (p *Pool) AppendMailbox(ctx context.Context, events []*logicv1.MailboxEvent) (*logicv1.AppendMailboxReply, error) {
	req := &logicv1.AppendMailboxRequest{Events: events}
	reply, err := try(ctx, p, func(ctx context.Context, c logicv1.InternalClient) (*logicv1.AppendMailboxReply, error) {
		return c.AppendMailbox(ctx, req)
	})
	if err != nil {
		return nil, fmt.Errorf("logicclient: append mailbox: %w", err)
	}
	return reply, nil
}

// GroupMembers reads one page of a group conversation's members through
// the first logic that answers, like AppendMailbox.
func (p *Pool) GroupMembers(ctx context.Context, conversationID, afterUserID int64, limit int) (*logicv1.GroupMembersReply, error) {
	req := &logicv1.GroupMembersRequest{ConversationId: conversationID, AfterUserId: afterUserID, Limit: int32(limit)}
	reply, err := try(ctx, p, func(ctx context.Context, c logicv1.InternalClient) (*logicv1.GroupMembersReply, error) {
		return c.GroupMembers(ctx, req)
	})
	if err != nil {
		return nil, fmt.Errorf("logicclient: group members of %d: %w", conversationID, err)
	}
	return reply, nil
}

// try makes call on the pool's logics in turn, starting from a rotating
// one, until one answers, all within the pool's timeout; each try gets
// its share of what is left of the budget.
func try[R any](ctx context.Context, p *Pool, call func(context.Context, logicv1.InternalClient) (R, error)) (R, error) {
	deadline := time.Now().Add(p.timeout)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	start := int(p.next.Add(1))
	var errs []error
	for i := range p.clients {
		k := (start + i) % len(p.clients)
		share := time.Until(deadline) / time.Duration(len(p.clients)-i)
		actx, acancel := context.WithTimeout(ctx, share)
		reply, err := call(actx, p.clients[k])
		acancel()
		if err == nil {
			return reply, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", p.addrs[k], err))
		if ctx.Err() != nil {
			break
		}
	}
	var zero R
	return zero, errors.Join(errs...)
}

// Close closes every client connection.
func (p *Pool) Close() error {
	var errs []error
	for i, cc := range p.conns {
		if err := cc.Close(); err != nil {
			errs = append(errs, fmt.Errorf("logicclient: close %s: %w", p.addrs[i], err))
		}
	}
	return errors.Join(errs...)
}
