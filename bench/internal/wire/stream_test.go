package wire

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/sparkim/spark/pkg/frame"
	"github.com/sparkim/spark/pkg/testca"
)

// echoFrames reads Spark frames from r and writes each back with write,
// until r ends.
func echoFrames(r io.Reader, write func([]byte) error) {
	br := bufio.NewReader(r)
	for {
		var hdr [frame.HeaderSize]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return
		}
		h, err := frame.ParseHeader(hdr[:], 0)
		if err != nil {
			return
		}
		body := make([]byte, h.BodyLength)
		if _, err := io.ReadFull(br, body); err != nil {
			return
		}
		if write(frame.Encode(h, body)) != nil {
			return
		}
	}
}

// sendAll writes n frames, several per Write (a WebSocket connection must
// cut them into one message each), and waits for n echoes in order.
func sendAll(t *testing.T, e *Engine, addr string, carrier Carrier, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := &collect{closed: make(chan struct{})}
	c, err := e.DialCarrier(ctx, netip.MustParseAddr("127.0.0.2"), netip.MustParseAddrPort(addr), carrier, h)
	if err != nil {
		t.Fatal(err)
	}
	var batch []byte
	for i := uint32(1); i <= uint32(n); i++ {
		batch = frame.Append(batch, frame.Header{Command: 6, SequenceID: i}, make([]byte, i%300))
		if i%3 == 0 || i == uint32(n) {
			if err := c.Write(batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	for {
		h.mu.Lock()
		got := len(h.seqs)
		h.mu.Unlock()
		if got == n {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: %d of %d echoes", carrier, got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.mu.Lock()
	for i, s := range h.seqs {
		if s != uint32(i+1) {
			t.Fatalf("%s: echo %d has sequence %d", carrier, i, s)
		}
	}
	h.mu.Unlock()
	if e.Count() != 1 {
		t.Fatalf("%s: engine counts %d connections, want 1", carrier, e.Count())
	}
	c.Close()
	<-h.closed
	if e.Count() != 0 {
		t.Fatalf("%s: engine counts %d connections after close, want 0", carrier, e.Count())
	}
}

// A TLS connection and a WebSocket one (with a ping from the server
// first, which must be answered) carry frames both ways, in order.
func TestCarriers(t *testing.T) {
	ca := testca.New(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca.WriteServer(t, certFile, keyFile, 2)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	tln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatal(err)
	}
	defer tln.Close()
	go func() {
		for {
			c, err := tln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				echoFrames(c, func(b []byte) error { _, err := c.Write(b); return err })
			}()
		}
	}()
	wln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer wln.Close()
	pong := make(chan struct{}, 1)
	go func() {
		for {
			c, err := wln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := (ws.Upgrader{}).Upgrade(c); err != nil {
					return
				}
				if ws.WriteFrame(c, ws.NewPingFrame([]byte("p"))) != nil {
					return
				}
				pr, pw := io.Pipe()
				go echoFrames(pr, func(b []byte) error { return wsutil.WriteServerBinary(c, b) })
				for {
					msgs, err := wsutil.ReadClientMessage(c, nil)
					if err != nil {
						_ = pw.CloseWithError(err)
						return
					}
					for _, m := range msgs {
						switch m.OpCode {
						case ws.OpPong:
							pong <- struct{}{}
						case ws.OpBinary:
							if _, _, n, err := frame.Decode(m.Payload, 0); err != nil || n != len(m.Payload) {
								t.Errorf("message of %d bytes is not one frame (%v)", len(m.Payload), err)
							}
							_, _ = pw.Write(m.Payload)
						}
					}
				}
			}()
		}
	}()
	e, err := New(1)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	sendAll(t, e, tln.Addr().String(), Carrier{TLS: ca.ClientConfig()}, 300)
	sendAll(t, e, wln.Addr().String(), Carrier{WSPath: "/ws"}, 300)
	select {
	case <-pong:
	case <-time.After(5 * time.Second):
		t.Fatal("the server's ping was not answered")
	}
}
