package server

import (
	"sync/atomic"
	"time"
)

// stageTimer is the deadline of one stage a connection goes through before
// its session (PROXY header, TLS handshake, WebSocket upgrade): a timer
// that closes the socket if the stage is not done in time. Once the stage
// is done or the socket closed, the timer is stopped and dropped: a stopped
// *time.Timer and its closure, kept, cost every idle connection about 160
// bytes. Stopping races with nothing: the swap hands the timer to exactly
// one caller.
type stageTimer struct{ t atomic.Pointer[time.Timer] }

// arm starts the deadline; f runs after d unless stop comes first.
func (s *stageTimer) arm(d time.Duration, f func()) { s.t.Store(time.AfterFunc(d, f)) }

// stop stops and drops the timer. It may be called from any goroutine, any
// number of times, and before arm (then it does nothing).
func (s *stageTimer) stop() {
	if t := s.t.Swap(nil); t != nil {
		t.Stop()
	}
}
