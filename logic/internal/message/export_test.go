package message

import (
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/metrics"
	"github.com/sparkim/spark/logic/internal/store"
)

// NewPaused is New with the group-commit workers not started: sends queue
// up until start is called, so a test can form one batch exactly, in a
// known arrival order. Queued reports how many sends wait.
func NewPaused(st *store.Store, rdb redis.Cmdable, ids IDs, cfg Config, log *zap.Logger, m *metrics.Metrics) (s *Service, start func(), queued func() int) {
	workers := cfg.CommitWorkers
	if workers <= 0 {
		workers = DefaultCommitWorkers
	}
	cfg.CommitWorkers = -1
	s = New(st, rdb, ids, cfg, log, m)
	s.cfg.CommitWorkers = workers
	if s.cfg.CommitBatch <= 0 {
		s.cfg.CommitBatch = DefaultCommitBatch
	}
	s.group = newCommitter(s, workers, s.cfg.CommitBatch)
	return s, func() { s.group.start(workers) }, func() int { return len(s.group.queue) }
}
