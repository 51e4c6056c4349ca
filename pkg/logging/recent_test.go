package logging

import (
	"errors"
	"testing"

	"go.uber.org/zap"
)

func TestRecentKeepsTheLastWarningsAndErrorsOnly(t *testing.T) {
	r := NewRecent(3)
	log := r.Tee(zap.NewNop()).With(zap.String("process", "logic"))
	log.Info("not kept")
	log.Warn("one", zap.Int("n", 1))
	log.Error("two", zap.Error(errors.New("boom")))
	log.Debug("not kept either")
	if got := r.Entries(); len(got) != 2 || got[0].Message != "one" || got[1].Message != "two" ||
		got[0].Level != "warn" || got[1].Level != "error" || got[0].Fields["process"] != "logic" || got[1].Fields["error"] != "boom" {
		t.Fatalf("entries %+v", got)
	}
	log.Warn("three")
	log.Warn("four")
	got := r.Entries()
	var msgs []string
	for _, e := range got {
		msgs = append(msgs, e.Message)
	}
	if len(msgs) != 3 || msgs[0] != "two" || msgs[1] != "three" || msgs[2] != "four" {
		t.Fatalf("after wrapping, %v, want [two three four]", msgs)
	}
}
