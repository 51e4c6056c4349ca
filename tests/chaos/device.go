package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
)

// memStore keeps a device's sync state in memory: the runner lives as
// long as the device.
type memStore struct {
	mu sync.Mutex
	st *client.SyncState
}

func (m *memStore) Load(context.Context) (client.SyncState, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.st == nil {
		return client.SyncState{}, false, nil
	}
	return *m.st, true, nil
}

func (m *memStore) Save(_ context.Context, st client.SyncState) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.st = &st
	return nil
}

// known is a message a device may read, recall or delete.
type known struct {
	conv, msg int64
	own       bool
	ackedAt   time.Time
}

// device is one signed-in device of the load: a client.Session across
// gates with a SyncRunner, recording everything into the history.
type device struct {
	id    string
	user  int64
	addrs []string
	token string
	hist  *History

	runner *client.SyncRunner

	mu      sync.Mutex
	sess    *client.Session
	readers sync.WaitGroup
	recent  []known // ring of the newest messages it learned of
	convs   map[int64]bool
	signIns int
}

const recentKeep = 64

func newDevice(ctx context.Context, id string, user int64, addrs []string, token string, hist *History) (*device, error) {
	r, err := client.NewSyncRunner(ctx, &memStore{}, user, id, client.SyncRunnerOptions{})
	if err != nil {
		return nil, fmt.Errorf("chaos: runner of %s: %w", id, err)
	}
	return &device{id: id, user: user, addrs: addrs, token: token, hist: hist, runner: r, convs: map[int64]bool{}}, nil
}

// start signs the device in through a new session (the previous one, if
// any, is left to the caller: a second sign-in of the same device kicks
// it).
func (d *device) start() error {
	sess, err := client.StartSession(client.SessionOptions{
		Addrs: d.addrs, Token: d.token, DeviceID: d.id, Platform: "chaos", AppVersion: "1.0.0",
		Conn:   client.Options{RequestTimeout: 8 * time.Second, SendAttempts: 3},
		Runner: d.runner,
		OnSync: func(res client.SyncResult, err error) {
			// Called once per sign-in, after its sync.
			d.mu.Lock()
			d.signIns++
			n := d.signIns
			d.mu.Unlock()
			d.hist.Add(Event{Kind: KindConnect, Device: d.id, User: d.user, Conn: n})
			d.recordSync(res, err)
		},
		ReconnectMin: 300 * time.Millisecond, ReconnectMax: 3 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("chaos: session of %s: %w", d.id, err)
	}
	d.mu.Lock()
	d.sess = sess
	d.mu.Unlock()
	d.readers.Add(1)
	go d.readPushes(sess)
	return nil
}

func (d *device) session() *client.Session {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sess
}

// stop closes the current session and waits for its push reader.
func (d *device) stop() {
	if s := d.session(); s != nil {
		_ = s.Close()
	}
	d.readers.Wait()
}

// conn waits (bounded by ctx) for the signed-in connection.
func (d *device) conn(ctx context.Context) (*client.Conn, error) {
	s := d.session()
	if s == nil {
		return nil, errors.New("chaos: device not started")
	}
	return s.Conn(ctx)
}

func (d *device) readPushes(sess *client.Session) {
	defer d.readers.Done()
	for f := range sess.Pushes() {
		switch f.Command {
		case protocol.CmdMessage:
			m, err := f.Message()
			if err != nil {
				d.hist.Add(Event{Kind: KindPush, Device: d.id, User: d.user, Err: err.Error()})
				continue
			}
			d.hist.Add(Event{Kind: KindPush, Device: d.id, User: d.user, Conn: sess.Connects(), Conv: m.ConversationID.Int64(), Msg: m.MsgID.Int64(),
				Sender: m.SenderID.Int64(), CMID: m.ClientMsgID, Content: string(m.Content), Status: m.Status})
			d.learn(known{conv: m.ConversationID.Int64(), msg: m.MsgID.Int64()})
		case protocol.CmdRecallMessage, protocol.CmdDeleteMessage:
			ev, ok := d.runner.NotePush(f)
			if !ok {
				continue
			}
			kind := KindRecallSeen
			if f.Command == protocol.CmdDeleteMessage {
				kind = KindDeleteSeen
			}
			d.hist.Add(Event{Kind: kind, Device: d.id, User: d.user, Conv: ev.ConversationID.Int64(), Msg: ev.MsgID.Int64(), Detail: "push"})
		case protocol.CmdKick:
			reason, _ := client.KickReason(f)
			d.hist.Add(Event{Kind: KindConnect, Device: d.id, User: d.user, Conn: sess.Connects(), Detail: "kick " + reason})
		}
	}
}

// recordSync writes what a sync brought into the history.
func (d *device) recordSync(res client.SyncResult, err error) {
	for cid, ms := range res.Messages {
		for _, m := range ms {
			d.hist.Add(Event{Kind: KindSync, Device: d.id, User: d.user, Conv: cid, Msg: m.MsgID.Int64(), Sender: m.SenderID.Int64(),
				CMID: m.ClientMsgID, Content: string(m.Content), Status: m.Status})
			d.learn(known{conv: cid, msg: m.MsgID.Int64(), own: m.SenderID.Int64() == d.user})
		}
	}
	for _, e := range res.Events {
		switch e.EventType {
		case client.EventRecall:
			d.hist.Add(Event{Kind: KindRecallSeen, Device: d.id, User: d.user, Conv: e.ConversationID.Int64(), Msg: e.MsgID.Int64(), Detail: "mailbox"})
		case client.EventDelete:
			d.hist.Add(Event{Kind: KindDeleteSeen, Device: d.id, User: d.user, Conv: e.ConversationID.Int64(), Msg: e.MsgID.Int64(), Detail: "mailbox"})
		}
	}
	// The recall of a message fetched in the same sync comes as its
	// tombstone only (SyncResult leaves the event out), which KindSync
	// with status 2 records.
	d.mu.Lock()
	for _, c := range res.Changed {
		d.convs[c.ConversationID.Int64()] = true
	}
	d.mu.Unlock()
	_ = err // an interrupted sync is resumed by the next one; its part is recorded
}

func (d *device) learn(k known) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.convs[k.conv] = true
	if len(d.recent) >= recentKeep {
		d.recent = append(d.recent[:0], d.recent[1:]...)
	}
	d.recent = append(d.recent, k)
}

// sync runs the sync sequence on the current connection.
func (d *device) sync(ctx context.Context) error {
	c, err := d.conn(ctx)
	if err != nil {
		return err
	}
	res, err := d.runner.Sync(ctx, c)
	d.recordSync(res, err)
	return err
}

// outcome classifies a request's error: nil is ok, a 4xxxx code a
// refusal that changed nothing, anything else (50301, a timeout, a lost
// connection) uncertain.
func outcome(err error) string {
	if err == nil {
		return ResultOK
	}
	var ce *client.CodeError
	if errors.As(err, &ce) && ce.Code != errcode.Busy && ce.Code != errcode.Internal && ce.Code != errcode.RateLimited {
		return ResultRefused
	}
	return ResultUncertain
}

// sendReq is one message of the load, kept for resending.
type sendReq struct {
	req    protocol.SendRequest
	target string
}

// send sends req through the session and records the send and its
// answer; it returns the outcome.
func (d *device) send(ctx context.Context, sr sendReq) (string, protocol.SendAck) {
	d.hist.Add(Event{Kind: KindSend, Device: d.id, User: d.user, CMID: sr.req.ClientMsgID, Target: sr.target, Content: string(sr.req.Content)})
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	s := d.session()
	ack, err := s.Send(sctx, sr.req)
	res := outcome(err)
	if res == ResultOK {
		d.hist.Add(Event{Kind: KindAck, Device: d.id, User: d.user, CMID: sr.req.ClientMsgID, Msg: ack.MsgID.Int64(), Conv: ack.ConversationID.Int64()})
		d.learn(known{conv: ack.ConversationID.Int64(), msg: ack.MsgID.Int64(), own: true, ackedAt: time.Now()})
		return res, ack
	}
	d.hist.Add(Event{Kind: KindSendFail, Device: d.id, User: d.user, CMID: sr.req.ClientMsgID, Definite: res == ResultRefused, Err: err.Error()})
	return res, ack
}

// textContent is the content of the n-th message of a device: unique, so
// a content mix-up between messages shows.
func textContent(dev string, n int) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"t": 1, "text": fmt.Sprintf("%s#%d", dev, n)})
	return b
}

// conversations lists the conversations the device knows of: its sync
// state's list and any it learned of by push or its own sends.
func (d *device) conversations() []int64 {
	seen := map[int64]bool{}
	for _, c := range d.runner.Conversations() {
		seen[c.ConversationID.Int64()] = true
	}
	d.mu.Lock()
	for cid := range d.convs {
		seen[cid] = true
	}
	d.mu.Unlock()
	out := make([]int64, 0, len(seen))
	for cid := range seen {
		out = append(out, cid)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
