package gateway

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/sparkim/spark/pkg/batch"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// recordingServerStream is the server side of a Gateway stream that
// records what the send loop sends.
type recordingServerStream struct {
	grpc.BidiStreamingServer[logicv1.GateFrame, logicv1.LogicFrame]
	mu   sync.Mutex
	sent []*logicv1.LogicFrame
}

func (r *recordingServerStream) Send(f *logicv1.LogicFrame) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, f)
	return nil
}

func resp(conn, id uint64, bodySize int) *logicv1.Response {
	return &logicv1.Response{ConnId: conn, Command: 5, RequestId: id, Body: bytes.Repeat([]byte("x"), bodySize)}
}

// shape names a sent frame: "R:<conn>.<id>" for a lone Response, "S" for
// Resync, "B:<conn>.<id>,…" for a LogicBatch.
func shape(t *testing.T, f *logicv1.LogicFrame) string {
	t.Helper()
	name := func(r *logicv1.Response) string { return fmt.Sprintf("%d.%d", r.ConnId, r.RequestId) }
	switch k := f.Kind.(type) {
	case *logicv1.LogicFrame_Response:
		return "R:" + name(k.Response)
	case *logicv1.LogicFrame_Resync:
		return "S"
	case *logicv1.LogicFrame_Batch:
		if len(k.Batch.Responses) < 2 {
			t.Errorf("a batch of %d responses: a lone one must go as itself", len(k.Batch.Responses))
		}
		if n := proto.Size(k.Batch); n > batch.StreamBytes {
			t.Errorf("a batch of %d bytes, over the %d bound", n, batch.StreamBytes)
		}
		names := make([]string, len(k.Batch.Responses))
		for i, r := range k.Batch.Responses {
			names[i] = name(r)
		}
		return "B:" + strings.Join(names, ",")
	}
	t.Fatalf("unexpected frame %v", f)
	return ""
}

// TestSendLoopBatches queues answers before the send loop starts (so all
// are waiting when it takes the first), then lets it flush.
func TestSendLoopBatches(t *testing.T) {
	batched := batch.Limits{MaxItems: batch.StreamItems, MaxBytes: batch.StreamBytes}
	many := func(n int) ([]*logicv1.Response, string, string) {
		out := make([]*logicv1.Response, n)
		var first, rest []string
		for i := range out {
			out[i] = resp(1, uint64(i+1), 10)
			if i < batch.StreamItems {
				first = append(first, fmt.Sprintf("1.%d", i+1))
			} else {
				rest = append(rest, fmt.Sprintf("1.%d", i+1))
			}
		}
		return out, "B:" + strings.Join(first, ","), "B:" + strings.Join(rest, ",")
	}
	manyRs, manyFirst, manyRest := many(batch.StreamItems + 3)
	tests := []struct {
		name   string
		lim    batch.Limits
		queued []*logicv1.Response
		resync bool
		want   []string
	}{
		{name: "lone answer goes as itself", lim: batched, queued: []*logicv1.Response{resp(1, 1, 10)}, want: []string{"R:1.1"}},
		{name: "queued answers go in one batch, in order", lim: batched,
			queued: []*logicv1.Response{resp(1, 1, 10), resp(2, 1, 10), resp(1, 2, 10)}, want: []string{"B:1.1,2.1,1.2"}},
		{name: "gate without batches gets one answer per frame", lim: batch.Limits{MaxItems: 1},
			queued: []*logicv1.Response{resp(1, 1, 10), resp(1, 2, 10)}, want: []string{"R:1.1", "R:1.2"}},
		{name: "count bound", lim: batched, queued: manyRs, want: []string{manyFirst, manyRest}},
		{name: "bytes bound", lim: batched,
			queued: []*logicv1.Response{resp(1, 1, 100<<10), resp(1, 2, 100<<10), resp(1, 3, 100<<10)}, want: []string{"B:1.1,1.2", "R:1.3"}},
		{name: "oversized answer alone, order kept", lim: batched,
			queued: []*logicv1.Response{resp(1, 1, 10), resp(1, 2, 300<<10), resp(1, 3, 10), resp(1, 4, 10)}, want: []string{"R:1.1", "R:1.2", "B:1.3,1.4"}},
		{name: "resync alone", lim: batched, resync: true, want: []string{"S"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := &Handler{}
			h.init()
			s := &Server{h: h, log: h.Log}
			out := make(chan *logicv1.Response, 128)
			for _, r := range tc.queued {
				out <- r
			}
			resyncq := make(chan struct{}, 1)
			if tc.resync {
				resyncq <- struct{}{}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			flush, sent := make(chan struct{}), make(chan struct{})
			rs := &recordingServerStream{}
			go s.sendLoop(ctx, cancel, rs, tc.lim, out, resyncq, flush, sent)
			// The loop takes what is queued at once; flush only ends it.
			deadline := time.Now().Add(5 * time.Second)
			for len(out) > 0 || len(resyncq) > 0 {
				if time.Now().After(deadline) {
					t.Fatal("send loop did not take the queue")
				}
				time.Sleep(time.Millisecond)
			}
			close(flush)
			<-sent
			got := make([]string, len(rs.sent))
			for i, f := range rs.sent {
				got[i] = shape(t, f)
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("frames\n%v\nwant\n%v", got, tc.want)
			}
		})
	}
}

// TestResponseSizeIsExact checks the byte bound counts what goes on the
// wire: a LogicBatch encodes to exactly the sum of its answers' sizes.
func TestResponseSizeIsExact(t *testing.T) {
	rs := []*logicv1.Response{
		resp(1, 1, 0), resp(1<<40, 1<<60, 300), resp(2, 2, 90<<10),
		{ConnId: 3, Command: 1, Body: []byte("{}"), Bind: &logicv1.Session{UserId: 9, DeviceId: "web", SinceMs: 1}, Close: true},
	}
	sum := 0
	for _, r := range rs {
		sum += responseSize(r)
	}
	if got := proto.Size(logicFrame(rs).GetBatch()); got != sum {
		t.Fatalf("LogicBatch encodes to %d bytes, answers sum to %d", got, sum)
	}
}
