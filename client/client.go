// Package client is the Go client of the Spark IM protocol (docs/protocol.md):
// it dials a gate over TCP, pairs requests with their answers by RequestID,
// delivers pushes on a channel and acknowledges MESSAGE pushes. It is used
// by the end-to-end tests, the imcli tool and the load generator, so it
// exposes the raw frames as well as typed helpers.
package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/protocol"
)

// Errors of a Conn.
var (
	// ErrClosed is returned by calls on a connection that has closed; Err
	// then tells why.
	ErrClosed = errors.New("client: connection closed")
	// ErrTimeout is returned (wrapped) when a request got no answer in time,
	// from Options.RequestTimeout or the caller's context deadline.
	ErrTimeout = errors.New("client: request timed out")
)

// CodeError is a request answered with a non-"0" code.
type CodeError struct {
	Command uint16
	Code    errcode.Code
	Msg     string
	// RetryAfter is the server's hint, when it gave one (data
	// retry_after_ms of a 42901), of how long to wait before trying again.
	RetryAfter time.Duration
	// Rejection is set on a 40302 (errcode.Rejected): the business
	// server's own code and reason for refusing the message.
	Rejection *envelope.Rejected
}

func (e *CodeError) Error() string {
	return fmt.Sprintf("client: command %d failed: %s %s", e.Command, e.Code, e.Msg)
}

// Options configure a Conn. The zero value is usable.
type Options struct {
	// DialTimeout bounds the TCP connect (default 5 s) when ctx has no
	// earlier deadline.
	DialTimeout time.Duration
	// RequestTimeout bounds a request whose ctx has no deadline, and each
	// attempt of Send (default 10 s).
	RequestTimeout time.Duration
	// WriteTimeout bounds one frame write (default 10 s), so a server that
	// stopped reading cannot wedge the caller or the reader's PUSH_ACKs.
	WriteTimeout time.Duration
	// MaxFrameSize limits incoming frames, header included (default
	// frame.DefaultMaxFrameSize, 64 KiB: the server's size rule keeps every
	// push and page within it, and a client closes on a larger frame).
	MaxFrameSize int
	// MaxInflated limits an incoming gzip body after inflating (default 64 MiB).
	MaxInflated int
	// PushBuffer is the capacity of the Pushes channel (default 4096).
	PushBuffer int
	// DropPushesWhenFull makes the reader drop (and count, see
	// DroppedPushes) a push when the Pushes channel is full. By default the
	// reader waits for the caller instead, so nothing is lost; answers to
	// requests then also wait behind the undelivered push.
	DropPushesWhenFull bool
	// NoAutoPushAck disables the automatic PUSH_ACK of MESSAGE pushes.
	NoAutoPushAck bool
	// Compress gzips request bodies of at least 512 bytes when that makes
	// them smaller.
	Compress bool
	// SendAttempts bounds how many times Send tries one message on 50301 or
	// a timeout (default 5), and SendBackoff is the first pause between
	// attempts, doubled each time (default 200 ms).
	SendAttempts int
	SendBackoff  time.Duration
	// Dial replaces the TCP dialer (TLS, test transports).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

func (o Options) withDefaults() Options {
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 10 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.MaxFrameSize <= 0 {
		o.MaxFrameSize = frame.DefaultMaxFrameSize
	}
	if o.MaxInflated <= 0 {
		o.MaxInflated = 64 << 20
	}
	if o.PushBuffer <= 0 {
		o.PushBuffer = 4096
	}
	if o.SendAttempts <= 0 {
		o.SendAttempts = 5
	}
	if o.SendBackoff <= 0 {
		o.SendBackoff = 200 * time.Millisecond
	}
	return o
}

// Frame is one frame received from the server, its body inflated.
type Frame struct {
	Command    uint16
	Flags      uint16
	RequestID  uint64
	SequenceID uint32
	Body       []byte
}

// IsPush reports whether the server sent the frame on its own (RequestID 0)
// rather than as a late answer to a request that gave up waiting.
func (f Frame) IsPush() bool { return f.RequestID == 0 }

// Envelope decodes the body as a response envelope.
func (f Frame) Envelope() (envelope.Response, error) {
	var r envelope.Response
	if err := json.Unmarshal(f.Body, &r); err != nil {
		return r, fmt.Errorf("client: decode envelope of command %d: %w", f.Command, err)
	}
	return r, nil
}

// Message decodes the data of a MESSAGE push.
func (f Frame) Message() (protocol.Message, error) {
	var m protocol.Message
	env, err := f.Envelope()
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(env.Data, &m); err != nil {
		return m, fmt.Errorf("client: decode message: %w", err)
	}
	return m, nil
}

// Reply is the answer to a request.
type Reply struct {
	Frame
	// Envelope is the decoded body; zero when the body is empty (HEARTBEAT).
	Envelope envelope.Response
}

// Err returns a *CodeError when the answer carries a non-"0" code.
func (r Reply) Err() error {
	if r.Envelope.Code == "" || r.Envelope.Code == errcode.OK {
		return nil
	}
	e := &CodeError{Command: r.Command, Code: r.Envelope.Code, Msg: r.Envelope.Msg}
	var hint envelope.RetryAfter
	if len(r.Envelope.Data) > 0 && json.Unmarshal(r.Envelope.Data, &hint) == nil && hint.RetryAfterMs > 0 {
		e.RetryAfter = time.Duration(hint.RetryAfterMs) * time.Millisecond
	}
	var rej envelope.Rejected
	if e.Code == errcode.Rejected && json.Unmarshal(r.Envelope.Data, &rej) == nil {
		e.Rejection = &rej
	}
	return e
}

// Decode unmarshals the envelope's data into v.
func (r Reply) Decode(v any) error {
	if len(r.Envelope.Data) == 0 {
		return fmt.Errorf("client: command %d answer has no data", r.Command)
	}
	if err := json.Unmarshal(r.Envelope.Data, v); err != nil {
		return fmt.Errorf("client: decode data of command %d: %w", r.Command, err)
	}
	return nil
}

// Conn is a client connection. Its methods are safe for concurrent use.
type Conn struct {
	nc   net.Conn
	opts Options

	nextID atomic.Uint64
	wmu    sync.Mutex

	mu      sync.Mutex
	pending map[uint64]chan Frame
	err     error

	pushes  chan Frame
	dropped atomic.Uint64
	done    chan struct{}
	closing chan struct{}
	once    sync.Once
}

// Dial connects to a gate at addr and starts reading.
func Dial(ctx context.Context, addr string, opts Options) (*Conn, error) {
	opts = opts.withDefaults()
	dctx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
	defer cancel()
	dial := opts.Dial
	if dial == nil {
		d := &net.Dialer{KeepAlive: 30 * time.Second}
		dial = d.DialContext
	}
	nc, err := dial(dctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", addr, err)
	}
	return New(nc, opts), nil
}

// New wraps an established connection (for example a TLS one) and starts
// reading from it.
func New(nc net.Conn, opts Options) *Conn {
	opts = opts.withDefaults()
	c := &Conn{
		nc: nc, opts: opts,
		pending: make(map[uint64]chan Frame),
		pushes:  make(chan Frame, opts.PushBuffer),
		done:    make(chan struct{}),
		closing: make(chan struct{}),
	}
	go c.readLoop()
	return c
}

// Pushes delivers every frame that does not answer a pending request:
// MESSAGE, KICK and other server pushes, and late answers to requests that
// gave up (Frame.IsPush tells them apart). It is closed when the connection
// ends. See Options.DropPushesWhenFull for what happens when it is full.
func (c *Conn) Pushes() <-chan Frame { return c.pushes }

// DroppedPushes counts pushes dropped because Pushes was full (only with
// Options.DropPushesWhenFull).
func (c *Conn) DroppedPushes() uint64 { return c.dropped.Load() }

// Done is closed when the connection has ended, by either side.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err reports why the connection ended: nil while it is open, ErrClosed
// after Close, io.EOF when the server closed it, or the read error.
func (c *Conn) Err() error {
	select {
	case <-c.done:
	default:
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// LocalAddr returns the client side address.
func (c *Conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }

// Close closes the connection and waits for the reader to finish.
func (c *Conn) Close() error {
	var err error
	c.once.Do(func() {
		close(c.closing)
		err = c.nc.Close()
	})
	<-c.done
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (c *Conn) readLoop() {
	br := bufio.NewReaderSize(c.nc, 64<<10)
	err := c.readFrames(br)
	select {
	case <-c.closing:
		err = ErrClosed
	default:
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.EOF
		}
		_ = c.nc.Close()
	}
	c.mu.Lock()
	c.err = err
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	for _, ch := range pending {
		close(ch)
	}
	close(c.pushes)
	close(c.done)
}

func (c *Conn) readFrames(br *bufio.Reader) error {
	var hdr [frame.HeaderSize]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return err
		}
		h, err := frame.ParseHeader(hdr[:], c.opts.MaxFrameSize)
		if err != nil {
			return fmt.Errorf("client: read frame: %w", err)
		}
		body := make([]byte, h.BodyLength)
		if _, err := io.ReadFull(br, body); err != nil {
			return err
		}
		if h.Gzip() {
			if body, err = frame.Inflate(body, c.opts.MaxInflated); err != nil {
				return fmt.Errorf("client: command %d: %w", h.Command, err)
			}
		}
		f := Frame{Command: h.Command, Flags: h.Flags &^ frame.FlagGzip, RequestID: h.RequestID, SequenceID: h.SequenceID, Body: body}
		c.dispatch(f)
	}
}

func (c *Conn) dispatch(f Frame) {
	if f.RequestID != 0 {
		c.mu.Lock()
		ch, ok := c.pending[f.RequestID]
		if ok {
			delete(c.pending, f.RequestID)
		}
		c.mu.Unlock()
		if ok {
			ch <- f // buffered, never blocks
			return
		}
	}
	if f.Command == protocol.CmdMessage && !c.opts.NoAutoPushAck {
		if err := c.PushAck(f.SequenceID); err != nil {
			_ = err // the connection is failing; the reader will see it
		}
	}
	if c.opts.DropPushesWhenFull {
		select {
		case c.pushes <- f:
		default:
			c.dropped.Add(1)
		}
		return
	}
	select {
	case c.pushes <- f:
	case <-c.closing:
	}
}

// WriteFrame writes one frame as given (RequestID included).
func (c *Conn) WriteFrame(h frame.Header, body []byte) error {
	return c.WriteRaw(frame.Encode(h, body))
}

// WriteRaw writes b to the connection unchanged, for tests that send
// malformed or partial frames.
func (c *Conn) WriteRaw(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	select {
	case <-c.done:
		return ErrClosed
	default:
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.opts.WriteTimeout))
	if _, err := c.nc.Write(b); err != nil {
		return fmt.Errorf("client: write: %w", err)
	}
	return nil
}

// PushAck acknowledges the push with sequence id seq.
func (c *Conn) PushAck(seq uint32) error {
	// A fresh, never-answered RequestID: the gate consumes PUSH_ACK.
	return c.WriteFrame(frame.Header{Command: protocol.CmdPushAck, RequestID: c.nextID.Add(1), SequenceID: seq}, nil)
}

func encodeBody(body any) ([]byte, error) {
	switch b := body.(type) {
	case nil:
		return nil, nil
	case []byte:
		return b, nil
	case json.RawMessage:
		return b, nil
	case string:
		return []byte(b), nil
	default:
		out, err := protocol.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("client: encode body: %w", err)
		}
		return out, nil
	}
}

// Request sends command cmd with body (nil: empty; []byte, string and
// json.RawMessage: as is; anything else: JSON) and waits for the answer
// with the same RequestID. A non-"0" code is not an error here: see
// Reply.Err. Without a deadline on ctx, Options.RequestTimeout applies.
func (c *Conn) Request(ctx context.Context, cmd uint16, body any) (Reply, error) {
	b, err := encodeBody(body)
	if err != nil {
		return Reply{}, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.RequestTimeout)
		defer cancel()
	}
	id := c.nextID.Add(1)
	ch := make(chan Frame, 1)
	c.mu.Lock()
	if c.pending == nil {
		c.mu.Unlock()
		return Reply{}, ErrClosed
	}
	c.pending[id] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		if c.pending != nil {
			delete(c.pending, id)
		}
		c.mu.Unlock()
	}

	h := frame.Header{Command: cmd, RequestID: id, SequenceID: uint32(id)}
	if c.opts.Compress {
		var z bool
		if b, z = frame.Compress(b); z {
			h.Flags |= frame.FlagGzip
		}
	}
	start := time.Now()
	if err := c.WriteFrame(h, b); err != nil {
		forget()
		return Reply{}, err
	}
	select {
	case f, ok := <-ch:
		if !ok {
			return Reply{}, fmt.Errorf("%w while waiting for command %d: %v", ErrClosed, cmd, c.Err())
		}
		r := Reply{Frame: f}
		if len(f.Body) > 0 {
			if r.Envelope, err = f.Envelope(); err != nil {
				return r, err
			}
		}
		return r, nil
	case <-ctx.Done():
		forget()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Reply{}, fmt.Errorf("%w: command %d after %v", ErrTimeout, cmd, time.Since(start).Round(time.Millisecond))
		}
		return Reply{}, ctx.Err()
	}
}

// call runs a request and turns a failure code into a *CodeError.
func (c *Conn) call(ctx context.Context, cmd uint16, body any, out any) (Reply, error) {
	r, err := c.Request(ctx, cmd, body)
	if err != nil {
		return r, err
	}
	if err := r.Err(); err != nil {
		return r, err
	}
	if out != nil {
		return r, r.Decode(out)
	}
	return r, nil
}

// Auth authenticates the connection; it must be the first request.
func (c *Conn) Auth(ctx context.Context, token, deviceID, platform, appVersion string) (protocol.AuthReply, error) {
	var out protocol.AuthReply
	_, err := c.call(ctx, protocol.CmdAuth, protocol.AuthRequest{Token: token, DeviceID: deviceID, Platform: platform, AppVersion: appVersion}, &out)
	return out, err
}

// Heartbeat sends HEARTBEAT and returns the round-trip time.
func (c *Conn) Heartbeat(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	if _, err := c.call(ctx, protocol.CmdHeartbeat, nil, nil); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// GenerateMsgID asks for a MsgId for optimistic UI.
func (c *Conn) GenerateMsgID(ctx context.Context) (int64, error) {
	var out protocol.MsgIDReply
	if _, err := c.call(ctx, protocol.CmdGenerateMsgID, nil, &out); err != nil {
		return 0, err
	}
	return out.MsgID.Int64(), nil
}
