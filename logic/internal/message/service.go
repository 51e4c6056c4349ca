// Package message is the send path (docs/protocol.md §7 Sending):
// idempotency lookup, permission checks, the ordered commit, the
// deliver-queue enqueue, and the SEND_ACK; and the changes to sent
// messages and memberships: READ, RECALL, DELETE and conversation settings
// (commit to MySQL, invalidate the list entries, push a SIGNAL job).
package message

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/conversation"
	"github.com/sparkim/spark/logic/internal/metrics"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/frame"
)

// IDs issues ids (a *msgid.Generator).
type IDs interface {
	Next(ctx context.Context) (int64, error)
	NextAfter(ctx context.Context, floor int64) (int64, error)
}

// Config tunes the send path.
type Config struct {
	// MsgIDWindow is how far from now a client msg_id may have been issued.
	MsgIDWindow time.Duration
	// EnqueueRetries is the number of XADD attempts.
	EnqueueRetries int
	// Partitions is queue.partitions.
	Partitions int
	// RecallWindow is how long after sending the sender may recall a
	// message (logic.recall_window); ≤ 0 means DefaultRecallWindow.
	RecallWindow time.Duration
	// CommitWorkers is the number of group-commit workers
	// (logic.commit_workers), each running one transaction at a time;
	// ≤ 0 means DefaultCommitWorkers. Every send goes through the group
	// commit: there is no one-transaction-per-send mode to select, so
	// tests run the path production runs.
	CommitWorkers int
	// CommitBatch is the most sends one group-commit transaction takes
	// (logic.commit_batch); ≤ 0 means DefaultCommitBatch.
	CommitBatch int
	// MaxFrameSize is the clients' frame limit (logic.max_frame_size): a
	// message is refused (41301) unless its MESSAGE push fits; ≤ 0 means
	// frame.DefaultMaxFrameSize.
	MaxFrameSize int
	// Conversations resolves and authorizes send targets; nil means a
	// resolver whose P2P policy only requires that the recipient exists.
	Conversations *conversation.Resolver
}

// DefaultRecallWindow is logic.recall_window's default.
const DefaultRecallWindow = 2 * time.Minute

// Service sends messages.
type Service struct {
	store   *store.Store
	rdb     redis.Cmdable
	ids     IDs
	cfg     Config
	log     *zap.Logger
	metrics *metrics.Metrics

	// convs resolves and authorizes send targets.
	convs *conversation.Resolver
	// machines says which machine ids hold a MsgId lease (client msg_ids
	// of other machine ids are replaced).
	machines *machineLeases
	// committer is the group commit every send goes through.
	committer *committer
}

// newService returns a Service with its committer built but not started.
func newService(st *store.Store, rdb redis.Cmdable, ids IDs, cfg Config, log *zap.Logger, m *metrics.Metrics) *Service {
	if cfg.EnqueueRetries < 1 {
		cfg.EnqueueRetries = 1
	}
	if cfg.Partitions < 1 {
		cfg.Partitions = 1
	}
	if cfg.RecallWindow <= 0 {
		cfg.RecallWindow = DefaultRecallWindow
	}
	if log == nil {
		log = zap.NewNop()
	}
	if m == nil {
		m = metrics.New(nil)
	}
	if cfg.CommitWorkers <= 0 {
		cfg.CommitWorkers = DefaultCommitWorkers
	}
	if cfg.CommitBatch <= 0 {
		cfg.CommitBatch = DefaultCommitBatch
	}
	if cfg.MaxFrameSize <= 0 {
		cfg.MaxFrameSize = frame.DefaultMaxFrameSize
	}
	if cfg.Conversations == nil {
		cfg.Conversations = conversation.NewResolver(st, ids.Next, nil, nil)
	}
	s := &Service{
		store: st, rdb: rdb, ids: ids, cfg: cfg, log: log, metrics: m,
		convs: cfg.Conversations, machines: newMachineLeases(rdb),
	}
	s.committer = newCommitter(s, cfg.CommitWorkers, cfg.CommitBatch)
	return s
}

// New returns a Service whose group-commit workers run.
func New(st *store.Store, rdb redis.Cmdable, ids IDs, cfg Config, log *zap.Logger, m *metrics.Metrics) *Service {
	s := newService(st, rdb, ids, cfg, log, m)
	s.committer.start(s.cfg.CommitWorkers)
	return s
}

// Close stops the group-commit workers after their current batch; sends
// still queued, and later ones, answer 50301. Call it after the gateway
// drained its requests.
func (s *Service) Close() {
	s.committer.close()
}

// Sender is the authenticated sending device.
type Sender struct {
	UserID   int64
	DeviceID string
	RealIP   string
	// System marks the business API's system account: it may send into
	// any conversation, and the P2P policy does not apply to it.
	System bool
}
