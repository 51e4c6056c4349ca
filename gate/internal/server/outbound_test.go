package server

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sparkim/spark/pkg/frame"
)

// fakeSink records writes; when gate is set each write waits on it, so a
// test can hold the flusher inside a write.
type fakeSink struct {
	gate    chan struct{}
	started chan struct{}

	active   atomic.Int32
	overlaps atomic.Int32

	mu       sync.Mutex
	frames   []frame.Header
	shutdown chan string
}

func newFakeSink(blocking bool) *fakeSink {
	s := &fakeSink{started: make(chan struct{}, 64), shutdown: make(chan string, 1)}
	if blocking {
		s.gate = make(chan struct{})
	}
	return s
}

func (s *fakeSink) write(b *frameBatch) error {
	if s.active.Add(1) > 1 {
		s.overlaps.Add(1)
	}
	defer s.active.Add(-1)
	s.started <- struct{}{}
	if s.gate != nil {
		<-s.gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Each frame of the batch is exactly one whole frame, and together
	// they are the batch's bytes.
	total := 0
	for i := range b.len() {
		f := b.frame(i)
		h, _, n, err := frame.Decode(f, 0)
		if err != nil || n != len(f) {
			panic("outbound wrote a broken frame")
		}
		s.frames = append(s.frames, h)
		total += n
	}
	if total != len(b.bytes()) {
		panic("a batch's frames do not cover its bytes")
	}
	return nil
}

func (s *fakeSink) written() []frame.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]frame.Header(nil), s.frames...)
}

func (s *fakeSink) shutdownReason(t *testing.T) string {
	t.Helper()
	select {
	case r := <-s.shutdown:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("sink was never shut down")
		return ""
	}
}

// sinkAdapter gives fakeSink the sink method name without clashing with
// its shutdown channel.
type sinkAdapter struct{ *fakeSink }

func (a sinkAdapter) shutdown(r closeReason) { a.fakeSink.shutdown <- r.String() }

func waitStarted(t *testing.T, s *fakeSink) {
	t.Helper()
	select {
	case <-s.started:
	case <-time.After(5 * time.Second):
		t.Fatal("flusher never started a write")
	}
}

func TestOutboundBoundsAndDrops(t *testing.T) {
	const limit = 3
	cases := []struct {
		name string
		kind frameKind
		// accepted is how many more frames fit while the flusher is stuck
		// in the first write.
		accepted int
	}{
		{"pushes stop at the limit", kindPush, limit},
		{"responses get headroom over pushes", kindResponse, 2 * limit},
		{"signals stop at a quarter of the push limit (at least one)", kindSignal, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newFakeSink(true)
			o := NewOutbound(sinkAdapter{s}, limit, nil)
			if got := o.Enqueue(outFrame{kind: tc.kind, hdr: frame.Header{Command: 6}}); got != queued {
				t.Fatalf("first frame: %v", got)
			}
			waitStarted(t, s) // the first frame left the queue and is being written
			for i := 0; i < tc.accepted; i++ {
				if got := o.Enqueue(outFrame{kind: tc.kind, hdr: frame.Header{Command: 6}}); got != queued {
					t.Fatalf("frame %d: got %v, want queued", i, got)
				}
			}
			if got := o.Enqueue(outFrame{kind: tc.kind}); got != queueFull {
				t.Fatalf("over the bound: got %v, want queueFull", got)
			}
			// A control frame always fits and ends the queue.
			if got := o.Enqueue(outFrame{kind: kindControl, close: true, hdr: frame.Header{Command: 14}}); got != queued {
				t.Fatalf("control frame: got %v", got)
			}
			if got := o.Enqueue(outFrame{kind: kindResponse}); got != queueClosed {
				t.Fatalf("after close frame: got %v, want queueClosed", got)
			}
			close(s.gate)
			if r := s.shutdownReason(t); r != "closed after answer" {
				t.Fatalf("shutdown reason %q", r)
			}
			got := s.written()
			if want := 1 + tc.accepted + 1; len(got) != want {
				t.Fatalf("wrote %d frames, want %d", len(got), want)
			}
			if got[len(got)-1].Command != 14 {
				t.Fatalf("last frame command %d, want the close frame", got[len(got)-1].Command)
			}
		})
	}
}

func TestOutboundSingleWriterKeepsOrder(t *testing.T) {
	s := newFakeSink(false)
	s.started = make(chan struct{}, 1<<16)
	o := NewOutbound(sinkAdapter{s}, 1<<16, nil)
	const writers, each = 8, 200
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if got := o.Enqueue(outFrame{kind: kindPush, hdr: frame.Header{Command: uint16(w + 1), SequenceID: uint32(i)}}); got != queued {
					t.Errorf("enqueue: %v", got)
					return
				}
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for len(s.written()) < writers*each && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	got := s.written()
	if len(got) != writers*each {
		t.Fatalf("wrote %d frames, want %d", len(got), writers*each)
	}
	if n := s.overlaps.Load(); n != 0 {
		t.Fatalf("%d writes overlapped", n)
	}
	next := map[uint16]uint32{}
	for _, h := range got {
		if h.SequenceID != next[h.Command] {
			t.Fatalf("writer %d: seq %d, want %d", h.Command, h.SequenceID, next[h.Command])
		}
		next[h.Command]++
	}
}

func TestOutboundFinish(t *testing.T) {
	cases := []struct {
		name      string
		queued    bool
		wantClose bool // Finish asks the caller to close
	}{
		{"idle queue closes at once", false, true},
		{"busy queue closes after flushing", true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newFakeSink(true)
			o := NewOutbound(sinkAdapter{s}, 4, nil)
			if tc.queued {
				o.Enqueue(outFrame{kind: kindResponse, hdr: frame.Header{Command: 3}})
				waitStarted(t, s)
			}
			if got := o.Finish(); got != tc.wantClose {
				t.Fatalf("Finish = %v, want %v", got, tc.wantClose)
			}
			if got := o.Enqueue(outFrame{kind: kindPush}); got != queueClosed {
				t.Fatalf("enqueue after Finish: %v", got)
			}
			close(s.gate)
			if tc.queued {
				if r := s.shutdownReason(t); r != "server shutting down" {
					t.Fatalf("reason %q", r)
				}
				if n := len(s.written()); n != 1 {
					t.Fatalf("wrote %d frames, want 1", n)
				}
			}
		})
	}
}
