package server

import (
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sparkim/spark/pkg/batch"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// sendQueued sends first and whatever else is already queued behind it,
// several per GateBatch frame once logic reads them (decisions.md 68). It
// never waits for more, so a lone request goes at once. It runs only on
// the stream's send loop, which owns st.buf.
func (st *stream) sendQueued(cs grpc.BidiStreamingClient[logicv1.GateFrame, logicv1.LogicFrame], first upItem) error {
	lim := batch.Limits{MaxItems: 1}
	if st.batches.Load() {
		lim = batch.Limits{MaxItems: batch.StreamItems, MaxBytes: batch.StreamBytes}
	}
	var err error
	st.buf, err = batch.Send(st.buf, first, st.sendq, lim, upItemSize, func(items []upItem) error {
		st.u.metrics.UpstreamFrames.Add(1)
		st.u.metrics.UpstreamItems.Add(uint64(len(items)))
		return cs.Send(gateFrame(items))
	})
	// The buffer must not keep sent requests (and their bodies) alive.
	clear(st.buf[:cap(st.buf)])
	return err
}

// gateFrame wraps items in one frame: a lone item as itself, exactly as
// before batching, several as a GateBatch. The batch gets its own slice:
// items is the send loop's buffer, reused as soon as Send returns.
func gateFrame(items []upItem) *logicv1.GateFrame {
	if len(items) == 1 {
		if it := items[0]; it.req != nil {
			return &logicv1.GateFrame{Kind: &logicv1.GateFrame_Request{Request: it.req}}
		}
		return &logicv1.GateFrame{Kind: &logicv1.GateFrame_Closed{Closed: items[0].closed}}
	}
	events := make([]*logicv1.GateEvent, len(items))
	for i, it := range items {
		if it.req != nil {
			events[i] = &logicv1.GateEvent{Kind: &logicv1.GateEvent_Request{Request: it.req}}
		} else {
			events[i] = &logicv1.GateEvent{Kind: &logicv1.GateEvent_Closed{Closed: it.closed}}
		}
	}
	return &logicv1.GateFrame{Kind: &logicv1.GateFrame_Batch{Batch: &logicv1.GateBatch{Events: events}}}
}

// upItemSize is the exact encoded size of it as one entry of
// GateBatch.events: the entry's tag and length, and inside it the
// Request's or Closed's tag, length and body (both field numbers are
// below 16, so each tag is one byte).
func upItemSize(it upItem) int {
	var n int
	if it.req != nil {
		n = proto.Size(it.req)
	} else {
		n = proto.Size(it.closed)
	}
	return 1 + protowire.SizeBytes(1+protowire.SizeBytes(n))
}
