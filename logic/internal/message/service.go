// Package message is the send path (docs/protocol.md §7 Sending):
// idempotency lookup, permission checks, the ordered commit, the
// deliver-queue enqueue, and the SEND_ACK; and the changes to sent
// messages and memberships: READ, RECALL, DELETE and conversation settings
// (commit to MySQL, invalidate the list entries, push a SIGNAL job).
package message

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/conversation"
	"github.com/sparkim/spark/logic/internal/metrics"
	"github.com/sparkim/spark/logic/internal/sendhook"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/protocol"
)

// IDs issues ids (a *msgid.Generator).
type IDs interface {
	Next(ctx context.Context) (int64, error)
	NextAfter(ctx context.Context, floor int64) (int64, error)
}

// Config tunes the send path.
type Config struct {
	// MsgIDWindow is how far from now a client msg_id may have been issued
	// (config.Logic.ClientMsgIDWindow).
	MsgIDWindow time.Duration
	// EnqueueRetries is the number of XADD attempts.
	EnqueueRetries int
	// Partitions is queue.partitions.
	Partitions int
	// RecallWindow is how long after sending the sender may recall a
	// message (logic.recall_window).
	RecallWindow time.Duration
	// EditWindow is how long after sending the sender may edit a text
	// message (logic.edit_window).
	EditWindow time.Duration
	// ReactionKinds is the most emojis one message carries
	// (logic.reaction_kinds), ReactionsPerUser the most of them one user
	// adds (logic.reactions_per_user).
	ReactionKinds    int
	ReactionsPerUser int
	// CommitWorkers is the number of group-commit workers
	// (logic.commit_workers), each running one transaction at a time.
	// Every send goes through the group commit: there is no
	// one-transaction-per-send mode to select, so tests run the path
	// production runs.
	CommitWorkers int
	// CommitBatch is the most sends one group-commit transaction takes
	// (logic.commit_batch).
	CommitBatch int
	// MaxFrameSize is the clients' frame limit (logic.max_frame_size): a
	// message is refused (41301) unless its MESSAGE push fits.
	MaxFrameSize int
	// BeforeSend is the business server's before-send hook; nil: off.
	BeforeSend *sendhook.Hook
	// Media checks the media keys a message carries into a conversation
	// (the media service's CheckMessage); nil leaves media unchecked,
	// which only tests that send no media may do.
	Media func(ctx context.Context, from Sender, conversationID int64, messageType int, content []byte) error
	// Conversations resolves and authorizes send targets; nil means a
	// resolver whose P2P policy only requires that the recipient exists.
	Conversations *conversation.Resolver
}

// ConfigFrom takes the send path's settings from a loaded configuration
// (Conversations and BeforeSend left nil).
func ConfigFrom(c *config.Config) Config {
	return Config{
		MsgIDWindow: c.Logic.ClientMsgIDWindow(), EnqueueRetries: c.Logic.EnqueueRetries, Partitions: c.Queue.Partitions,
		RecallWindow: c.Logic.RecallWindow, EditWindow: c.Logic.EditWindow, MaxFrameSize: c.Logic.MaxFrameSize,
		ReactionKinds: c.Logic.ReactionKinds, ReactionsPerUser: c.Logic.ReactionsPerUser,
		CommitWorkers: c.Logic.CommitWorkers, CommitBatch: c.Logic.CommitBatch,
	}
}

// validate refuses what config.Validate refuses, so a Service built from
// a hand-made Config cannot run with a value production would not start
// with.
func (c Config) validate() error {
	if c.MsgIDWindow <= 0 || c.RecallWindow <= 0 || c.EditWindow <= 0 || c.ReactionKinds < 1 || c.ReactionsPerUser < 1 || c.EnqueueRetries < 1 || c.Partitions < 1 ||
		c.CommitWorkers < 1 || c.CommitBatch < 1 || c.MaxFrameSize < 4<<10 {
		return fmt.Errorf("message: invalid config (logic.msg_id_window %v, logic.recall_window %v, logic.edit_window %v, logic.enqueue_retries %d, queue.partitions %d, logic.commit_workers %d, logic.commit_batch %d, logic.max_frame_size %d): start from config.Default()",
			c.MsgIDWindow, c.RecallWindow, c.EditWindow, c.EnqueueRetries, c.Partitions, c.CommitWorkers, c.CommitBatch, c.MaxFrameSize)
	}
	if b := protocol.MessageReactionsBound(c.ReactionKinds); b > protocol.PageBudget(c.MaxFrameSize) {
		// One message's counts must fit a REACTION get page, or a page
		// could never make progress.
		return fmt.Errorf("message: logic.reaction_kinds %d needs %d bytes per message, over what logic.max_frame_size %d leaves a page (%d)",
			c.ReactionKinds, b, c.MaxFrameSize, protocol.PageBudget(c.MaxFrameSize))
	}
	return nil
}

// Service is the send path and the changes to sent messages and
// memberships (read, recall, delete, settings).
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
func newService(st *store.Store, rdb redis.Cmdable, ids IDs, cfg Config, log *zap.Logger, m *metrics.Metrics) (*Service, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	if m == nil {
		m = metrics.New(nil)
	}
	if cfg.Conversations == nil {
		cfg.Conversations = conversation.NewResolver(st, ids.Next, nil, nil)
	}
	s := &Service{
		store: st, rdb: rdb, ids: ids, cfg: cfg, log: log, metrics: m,
		convs: cfg.Conversations, machines: newMachineLeases(rdb),
	}
	s.committer = newCommitter(s, cfg.CommitWorkers, cfg.CommitBatch)
	return s, nil
}

// New returns a Service whose group-commit workers run; it refuses a
// Config with a value config.Validate would refuse.
func New(st *store.Store, rdb redis.Cmdable, ids IDs, cfg Config, log *zap.Logger, m *metrics.Metrics) (*Service, error) {
	s, err := newService(st, rdb, ids, cfg, log, m)
	if err != nil {
		return nil, err
	}
	s.committer.start(s.cfg.CommitWorkers)
	return s, nil
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
	// API marks a send of the business API (SendMessage): the before-send
	// hook's api switch covers it, whatever its conversation.
	API bool
}
