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
func NewPaused(st *store.Store, rdb redis.Cmdable, ids IDs, cfg Config, log *zap.Logger, m *metrics.Metrics) (s *Service, start func(), queued func() int, err error) {
	s, err = newService(st, rdb, ids, cfg, log, m)
	if err != nil {
		return nil, nil, nil, err
	}
	return s, func() { s.committer.start(s.cfg.CommitWorkers) }, func() int { return len(s.committer.queue) }, nil
}

// OnBatch makes s report the size of every batch its workers form. Call it
// before the first send.
func OnBatch(s *Service, f func(size int)) { s.committer.onBatch = f }
