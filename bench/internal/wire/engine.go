// Package wire is the load generator's event-driven client transport: a
// few epoll loops own every socket, so a connection costs a file
// descriptor and a few hundred bytes, not a goroutine and a 64 KiB
// buffered reader. Reads decode frames straight out of the loop's shared
// scratch buffer; only a partial frame is copied into the connection.
package wire

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sparkim/spark/pkg/frame"
)

// Handler receives a connection's frames and its close, on the loop
// goroutine: it must not block (record, hand off, return). body aliases
// the loop's buffer and is valid only during the call.
type Handler interface {
	OnFrame(c *Conn, h frame.Header, body []byte)
	OnClose(c *Conn, err error)
}

// ErrClosed is returned by Write on a closed connection.
var ErrClosed = errors.New("wire: connection closed")

// Engine runs the epoll loops.
type Engine struct {
	loops []*loop
	mu    sync.Mutex
	next  int
	// streams are the open goroutine connections (DialCarrier: TLS,
	// WebSocket), which no loop owns; under mu.
	streams map[*Conn]struct{}
	done    chan struct{}
	wg      sync.WaitGroup
}

type loop struct {
	epfd    int
	mu      sync.Mutex
	conns   map[int32]*Conn
	scratch []byte
}

// Conn is one client socket: a loop's (fd, l) or, for TLS and WebSocket,
// a goroutine's (nc, e).
type Conn struct {
	fd      int
	l       *loop
	h       Handler
	partial []byte // bytes of an incomplete frame, loop goroutine only

	nc net.Conn // a DialCarrier connection, read by its own goroutine
	e  *Engine

	wmu     sync.Mutex
	pending []byte // bytes a full socket did not take yet
	closed  bool
	// Value is free for the owner (e.g. the per-connection client state).
	Value any
}

// New starts n epoll loops.
func New(n int) (*Engine, error) {
	if n < 1 {
		n = 1
	}
	e := &Engine{done: make(chan struct{})}
	for i := 0; i < n; i++ {
		fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("wire: epoll_create: %w", err)
		}
		l := &loop{epfd: fd, conns: map[int32]*Conn{}, scratch: make([]byte, 256<<10)}
		e.loops = append(e.loops, l)
		e.wg.Add(1)
		go func() { defer e.wg.Done(); e.run(l) }()
	}
	return e, nil
}

// Close closes every connection and stops the loops.
func (e *Engine) Close() {
	select {
	case <-e.done:
		return
	default:
		close(e.done)
	}
	for _, l := range e.loops {
		l.mu.Lock()
		cs := make([]*Conn, 0, len(l.conns))
		for _, c := range l.conns {
			cs = append(cs, c)
		}
		l.mu.Unlock()
		for _, c := range cs {
			c.closeWith(ErrClosed, false)
		}
	}
	e.mu.Lock()
	ss := make([]*Conn, 0, len(e.streams))
	for c := range e.streams {
		ss = append(ss, c)
	}
	e.mu.Unlock()
	for _, c := range ss {
		c.closeWith(ErrClosed, false)
	}
	e.wg.Wait()
	for _, l := range e.loops {
		_ = unix.Close(l.epfd)
	}
}

// Count is the number of open connections.
func (e *Engine) Count() int {
	e.mu.Lock()
	n := len(e.streams)
	e.mu.Unlock()
	for _, l := range e.loops {
		l.mu.Lock()
		n += len(l.conns)
		l.mu.Unlock()
	}
	return n
}

// Dial connects from local (port 0: the kernel picks one when connecting,
// so one source address serves many destinations) to remote and registers
// the socket with a loop. The connect itself is non-blocking and bounded by
// ctx.
func (e *Engine) Dial(ctx context.Context, local netip.Addr, remote netip.AddrPort, h Handler) (*Conn, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("wire: socket: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = unix.Close(fd)
		}
	}()
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	if local.IsValid() {
		// Without this bind() reserves a port per source address for every
		// destination and runs out at ~28k sockets.
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: local.As4()}); err != nil {
			return nil, fmt.Errorf("wire: bind %s: %w", local, err)
		}
	}
	err = unix.Connect(fd, &unix.SockaddrInet4{Addr: remote.Addr().As4(), Port: int(remote.Port())})
	if err != nil && !errors.Is(err, unix.EINPROGRESS) {
		return nil, fmt.Errorf("wire: connect %s: %w", remote, err)
	}
	if err != nil {
		deadline, has := ctx.Deadline()
		timeout := 10 * time.Second
		if has {
			timeout = time.Until(deadline)
		}
		for {
			ms := int(timeout / time.Millisecond)
			if ms <= 0 {
				return nil, fmt.Errorf("wire: connect %s: %w", remote, context.DeadlineExceeded)
			}
			if ms > 100 {
				ms = 100
			}
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
			n, perr := unix.Poll(pfd, ms)
			if perr != nil && !errors.Is(perr, unix.EINTR) {
				return nil, fmt.Errorf("wire: poll: %w", perr)
			}
			if n > 0 {
				break
			}
			if ctx.Err() != nil {
				return nil, fmt.Errorf("wire: connect %s: %w", remote, ctx.Err())
			}
			timeout -= time.Duration(ms) * time.Millisecond
		}
		soErr, gerr := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if gerr != nil {
			return nil, fmt.Errorf("wire: SO_ERROR: %w", gerr)
		}
		if soErr != 0 {
			return nil, fmt.Errorf("wire: connect %s: %w", remote, unix.Errno(soErr))
		}
	}
	e.mu.Lock()
	l := e.loops[e.next%len(e.loops)]
	e.next++
	e.mu.Unlock()
	c := &Conn{fd: fd, l: l, h: h}
	l.mu.Lock()
	l.conns[int32(fd)] = c
	l.mu.Unlock()
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(fd)}); err != nil {
		l.mu.Lock()
		delete(l.conns, int32(fd))
		l.mu.Unlock()
		return nil, fmt.Errorf("wire: epoll add: %w", err)
	}
	ok = true
	return c, nil
}

// LocalPort returns the connection's source port (0 if unknown).
func (c *Conn) LocalPort() int {
	if c.nc != nil {
		if a, ok := c.nc.LocalAddr().(*net.TCPAddr); ok {
			return a.Port
		}
		return 0
	}
	sa, err := unix.Getsockname(c.fd)
	if err != nil {
		return 0
	}
	if in, ok := sa.(*unix.SockaddrInet4); ok {
		return in.Port
	}
	return 0
}

// Write sends b (one or more whole frames). What the socket does not take
// at once is queued and flushed by the loop, so Write never blocks; on a
// TLS or WebSocket connection it writes through (a few bytes to a socket
// with room, in practice never blocking either).
func (c *Conn) Write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if c.nc != nil {
		return c.writeStream(b)
	}
	if len(c.pending) > 0 {
		c.pending = append(c.pending, b...)
		return nil
	}
	for len(b) > 0 {
		n, err := unix.Write(c.fd, b)
		if n > 0 {
			b = b[n:]
		}
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if errors.Is(err, unix.EAGAIN) {
				c.pending = append(c.pending[:0], b...)
				_ = unix.EpollCtl(c.l.epfd, unix.EPOLL_CTL_MOD, c.fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLOUT, Fd: int32(c.fd)})
				return nil
			}
			return fmt.Errorf("wire: write: %w", err)
		}
	}
	return nil
}

// Close closes the connection; OnClose is called once.
func (c *Conn) Close() { c.closeWith(ErrClosed, true) }

func (c *Conn) closeWith(err error, notify bool) {
	c.wmu.Lock()
	if c.closed {
		c.wmu.Unlock()
		return
	}
	c.closed = true
	if c.nc != nil {
		c.e.mu.Lock()
		delete(c.e.streams, c)
		c.e.mu.Unlock()
		// Unblocks the connection's reader, which then finds it closed.
		_ = c.nc.Close()
	} else {
		c.l.mu.Lock()
		delete(c.l.conns, int32(c.fd))
		c.l.mu.Unlock()
		_ = unix.EpollCtl(c.l.epfd, unix.EPOLL_CTL_DEL, c.fd, nil)
		_ = unix.Close(c.fd)
	}
	c.pending = nil
	c.wmu.Unlock()
	if notify {
		c.h.OnClose(c, err)
	}
}

func (c *Conn) flush() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for len(c.pending) > 0 && !c.closed {
		n, err := unix.Write(c.fd, c.pending)
		if n > 0 {
			c.pending = c.pending[n:]
		}
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if errors.Is(err, unix.EAGAIN) {
				return
			}
			break
		}
	}
	if len(c.pending) == 0 {
		c.pending = nil
		if !c.closed {
			_ = unix.EpollCtl(c.l.epfd, unix.EPOLL_CTL_MOD, c.fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(c.fd)})
		}
	}
}

func (e *Engine) run(l *loop) {
	events := make([]unix.EpollEvent, 512)
	for {
		select {
		case <-e.done:
			return
		default:
		}
		n, err := unix.EpollWait(l.epfd, events, 100)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		for i := 0; i < n; i++ {
			ev := events[i]
			l.mu.Lock()
			c := l.conns[ev.Fd]
			l.mu.Unlock()
			if c == nil {
				continue
			}
			if ev.Events&unix.EPOLLOUT != 0 {
				c.flush()
			}
			if ev.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				c.readOnce(l.scratch)
			}
		}
	}
}

// readOnce reads what the socket holds and dispatches every whole frame.
func (c *Conn) readOnce(scratch []byte) {
	n, err := unix.Read(c.fd, scratch)
	if err != nil {
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			return
		}
		c.closeWith(fmt.Errorf("wire: read: %w", err), true)
		return
	}
	if n == 0 {
		c.closeWith(errors.New("wire: closed by peer"), true)
		return
	}
	buf := scratch[:n]
	if len(c.partial) > 0 {
		c.partial = append(c.partial, buf...)
		buf = c.partial
	}
	for {
		h, body, used, derr := frame.Decode(buf, 0)
		if derr != nil {
			c.closeWith(fmt.Errorf("wire: %w", derr), true)
			return
		}
		if used == 0 {
			break
		}
		c.h.OnFrame(c, h, body)
		buf = buf[used:]
	}
	if len(buf) == 0 {
		c.partial = nil
		return
	}
	c.partial = append(make([]byte, 0, len(buf)+512), buf...)
}
