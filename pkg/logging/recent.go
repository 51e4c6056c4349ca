package logging

import (
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Entry is one log line a Recent ring kept.
type Entry struct {
	Time    time.Time      `json:"time"`
	Level   string         `json:"level"`
	Message string         `json:"message"`
	Fields  map[string]any `json:"fields,omitempty"`
}

// Recent keeps the last warnings and errors a process logged, for an
// operator's page: newest last, at most its size, in memory only.
type Recent struct {
	mu      sync.Mutex
	entries []Entry
	next    int
	full    bool
}

// NewRecent returns a ring of n entries.
func NewRecent(n int) *Recent { return &Recent{entries: make([]Entry, max(n, 1))} }

// Tee returns log writing also to r every entry at warn level or above.
func (r *Recent) Tee(log *zap.Logger) *zap.Logger {
	return log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewTee(c, &recentCore{r: r, LevelEnabler: zapcore.WarnLevel})
	}))
}

// Entries returns the kept entries, oldest first.
func (r *Recent) Entries() []Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Entry, 0, len(r.entries))
	if !r.full {
		return append(out, r.entries[:r.next]...)
	}
	return append(append(out, r.entries[r.next:]...), r.entries[:r.next]...)
}

func (r *Recent) add(e Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries[r.next] = e
	r.next++
	if r.next == len(r.entries) {
		r.next, r.full = 0, true
	}
}

// recentCore is the zapcore.Core that feeds a Recent.
type recentCore struct {
	zapcore.LevelEnabler
	r      *Recent
	fields []zapcore.Field
}

func (c *recentCore) With(fs []zapcore.Field) zapcore.Core {
	return &recentCore{LevelEnabler: c.LevelEnabler, r: c.r, fields: append(append([]zapcore.Field(nil), c.fields...), fs...)}
}

func (c *recentCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *recentCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fs {
		f.AddTo(enc)
	}
	c.r.add(Entry{Time: e.Time, Level: e.Level.String(), Message: e.Message, Fields: enc.Fields})
	return nil
}

func (c *recentCore) Sync() error { return nil }
