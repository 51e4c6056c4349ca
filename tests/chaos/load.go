package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
)

// group is a group conversation of the load.
type group struct {
	id, conv int64
	members  []int64
}

// world is who talks to whom: each user has a few P2P peers and is in
// some groups.
type world struct {
	users    []int64
	peers    map[int64][]int64
	groupsOf map[int64][]group
}

// pending is an operation whose answer was lost, to be repeated the way
// an SDK's outbox repeats it: a send with the same client_msg_id, a
// recall or delete of the same message, a read to the same mark.
type pending struct {
	kind string // KindSend, KindRecall, KindDelete, KindRead
	send sendReq
	conv int64
	msg  int64
}

// slot is one of a user's device places: the device in it may be
// replaced by a fresh one (a device switch to a new phone).
type slot struct {
	name   string
	user   int64
	fresh  bool // may be replaced by a fresh device id
	tokens func(string) string
	addrs  []string
	hist   *History
	rng    *rand.Rand

	mu     sync.Mutex
	dev    *device
	gen    int
	sent   int
	outbox []pending
}

func (s *slot) device() *device {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dev
}

// Weights of the load's operations, out of 1000.
var opWeights = []struct {
	name   string
	weight int
}{
	{"send", 560}, {"read", 130}, {"recall", 60}, {"delete", 60}, {"sync", 150},
	{"reconnect", 20}, {"switch", 12}, {"fresh", 8},
}

func (s *slot) pickOp() string {
	n := s.rng.IntN(1000)
	for _, w := range opWeights {
		if n < w.weight {
			return w.name
		}
		n -= w.weight
	}
	return "sync"
}

// run performs random operations until stop ends, pausing between them.
// Each operation runs under ctx, not stop, so the last one finishes with
// its answer instead of being cut off into an uncertain one.
func (s *slot) run(ctx, stop context.Context, w *world, minGap, maxGap time.Duration, sendsOnly bool) {
	for {
		gap := minGap + time.Duration(s.rng.Int64N(int64(maxGap-minGap)+1))
		t := time.NewTimer(gap)
		select {
		case <-stop.Done():
			t.Stop()
			return
		case <-t.C:
		}
		op := "send"
		if !sendsOnly {
			op = s.pickOp()
		}
		s.do(ctx, w, op)
	}
}

func (s *slot) do(ctx context.Context, w *world, op string) {
	d := s.device()
	switch op {
	case "send":
		sr := s.nextSend(w)
		if res, _ := d.send(ctx, sr); res == ResultUncertain {
			s.queue(pending{kind: KindSend, send: sr})
		}
	case "read":
		s.read(ctx, d)
	case "recall":
		s.edit(ctx, d, KindRecall)
	case "delete":
		s.edit(ctx, d, KindDelete)
	case "sync":
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		_ = d.sync(rctx)
		cancel()
	case "reconnect":
		d.stop()
		if !sleepCtx(ctx, 300*time.Millisecond+time.Duration(s.rng.Int64N(int64(2*time.Second)))) {
			// The run is ending: come back at once for the final phase.
			_ = d.start()
			return
		}
		_ = d.start()
	case "switch":
		// The same device signs in again on a new connection (an app
		// restart): the server kicks the old one.
		old := d.session()
		_ = d.start()
		select {
		case <-old.Done():
		case <-time.After(10 * time.Second):
		}
		_ = old.Close()
	case "fresh":
		if !s.fresh {
			return
		}
		// The user moves to a new device: the old one goes away for good,
		// the new one starts from an empty state and must converge.
		d.stop()
		s.mu.Lock()
		s.gen++
		id := fmt.Sprintf("%s.%d", s.name, s.gen)
		s.mu.Unlock()
		nd, err := newDevice(ctx, id, s.user, s.addrs, s.tokens(id), s.hist)
		if err != nil {
			_ = d.start()
			return
		}
		if err := nd.start(); err != nil {
			_ = d.start()
			return
		}
		s.mu.Lock()
		s.dev = nd
		s.mu.Unlock()
	}
}

func (s *slot) queue(p pending) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outbox = append(s.outbox, p)
}

// nextSend builds the next message: to a P2P peer or into a group.
func (s *slot) nextSend(w *world) sendReq {
	s.mu.Lock()
	s.sent++
	n := s.sent
	s.mu.Unlock()
	req := protocol.SendRequest{
		// The slot name, not the device id: unique per user across
		// fresh devices of the slot, so a resend keeps its key.
		ClientMsgID: fmt.Sprintf("%s-%d", s.name, n), MessageType: 1, Content: textContent(s.name, n),
	}
	gs := w.groupsOf[s.user]
	if len(gs) > 0 && s.rng.IntN(10) < 4 {
		g := gs[s.rng.IntN(len(gs))]
		req.GroupID = jsonid.ID(g.id)
		return sendReq{req: req, target: fmt.Sprintf("g%d", g.id)}
	}
	peers := w.peers[s.user]
	p := peers[s.rng.IntN(len(peers))]
	req.ToUserID = jsonid.ID(p)
	return sendReq{req: req, target: fmt.Sprintf("u%d", p)}
}

func (s *slot) pickKnown(d *device, own bool) (known, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var cands []known
	for _, k := range d.recent {
		if own && (!k.own || k.ackedAt.IsZero() || time.Since(k.ackedAt) > 90*time.Second) {
			continue
		}
		cands = append(cands, k)
	}
	if len(cands) == 0 {
		return known{}, false
	}
	return cands[s.rng.IntN(len(cands))], true
}

func (s *slot) read(ctx context.Context, d *device) {
	d.mu.Lock()
	var cids []int64
	for cid := range d.convs {
		cids = append(cids, cid)
	}
	d.mu.Unlock()
	if len(cids) == 0 {
		return
	}
	cid := cids[s.rng.IntN(len(cids))]
	mark := d.runner.NewestMsgID(cid)
	if mark <= 0 {
		return
	}
	if readOnce(ctx, d, cid, mark) == ResultUncertain {
		// A READ answered with an error may have moved last_read in
		// MySQL without the list hearing of it (docs/decisions.md 73):
		// like an SDK, repeat it until it is answered.
		s.queue(pending{kind: KindRead, conv: cid, msg: mark})
	}
}

func readOnce(ctx context.Context, d *device, conv, msg int64) string {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := d.conn(rctx)
	var reply client.ReadReply
	if err == nil {
		reply, err = c.Read(rctx, conv, msg)
	}
	res := outcome(err)
	d.hist.Add(Event{Kind: KindRead, Device: d.id, User: d.user, Conv: conv, Msg: msg, Result: res, Detail: fmt.Sprint(reply.MsgID), Err: errText(err)})
	return res
}

// edit recalls (kind KindRecall: one of d's own messages) or deletes for
// d (KindDelete: any message it knows) a message, queueing it for the
// outbox when the answer is uncertain.
func (s *slot) edit(ctx context.Context, d *device, kind string) {
	k, ok := s.pickKnown(d, kind == KindRecall)
	if !ok {
		return
	}
	if res := editOnce(ctx, d, kind, k.conv, k.msg); res == ResultUncertain {
		s.queue(pending{kind: kind, conv: k.conv, msg: k.msg})
	}
}

// editOnce makes one RECALL_MESSAGE (KindRecall) or DELETE_MESSAGE
// (KindDelete) request and records it, and on success what d now knows.
func editOnce(ctx context.Context, d *device, kind string, conv, msg int64) string {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := d.conn(rctx)
	if err == nil {
		if kind == KindRecall {
			err = c.Recall(rctx, conv, msg)
		} else {
			err = c.Delete(rctx, conv, msg)
		}
	}
	res := outcome(err)
	d.hist.Add(Event{Kind: kind, Device: d.id, User: d.user, Conv: conv, Msg: msg, Result: res, Err: errText(err)})
	if res == ResultOK {
		seen := KindDeleteSeen
		if kind == KindRecall {
			seen = KindRecallSeen
			d.runner.NoteEvent(client.EventRecall, msg)
		}
		d.hist.Add(Event{Kind: seen, Device: d.id, User: d.user, Conv: conv, Msg: msg, Detail: "own"})
	}
	return res
}

// flush repeats every operation whose answer was lost until it gets one
// (or attempts run out), as an SDK's outbox does once the network is
// back.
func (s *slot) flush(ctx context.Context) (left int) {
	s.mu.Lock()
	box := s.outbox
	s.outbox = nil
	s.mu.Unlock()
	for _, p := range box {
		res := ResultUncertain
		for attempt := 0; attempt < 6 && res == ResultUncertain && ctx.Err() == nil; attempt++ {
			if attempt > 0 {
				sleepCtx(ctx, time.Duration(attempt)*time.Second)
			}
			d := s.device()
			switch p.kind {
			case KindSend:
				res, _ = d.send(ctx, p.send)
			case KindRecall, KindDelete:
				res = editOnce(ctx, d, p.kind, p.conv, p.msg)
			case KindRead:
				res = readOnce(ctx, d, p.conv, p.msg)
			}
		}
		if res == ResultUncertain {
			left++
		}
	}
	return left
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// sleepCtx sleeps d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
