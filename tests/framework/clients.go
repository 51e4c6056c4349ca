package framework

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/protocol"
)

// Dial opens a raw, unauthenticated connection to gate i.
func (c *Cluster) Dial(t testing.TB, gate int) *client.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := client.Dial(ctx, c.Gates[gate].TCPAddr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// Login dials gate i and authenticates userID on deviceID.
func (c *Cluster) Login(t testing.TB, gate int, userID int64, deviceID string) *client.Conn {
	t.Helper()
	conn := c.Dial(t, gate)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := conn.Auth(ctx, c.Token(userID, deviceID), deviceID, "test", "1.0.0"); err != nil {
		t.Fatalf("auth user %d device %s on %s: %v", userID, deviceID, c.Gates[gate].ID, err)
	}
	return conn
}

// NextMessage waits for the next MESSAGE push on conn, skipping other pushes.
func NextMessage(conn *client.Conn, timeout time.Duration) (protocol.Message, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case f, ok := <-conn.Pushes():
			if !ok {
				return protocol.Message{}, fmt.Errorf("connection closed: %v", conn.Err())
			}
			if f.Command != protocol.CmdMessage || !f.IsPush() {
				continue
			}
			return f.Message()
		case <-deadline.C:
			return protocol.Message{}, fmt.Errorf("no MESSAGE within %v", timeout)
		}
	}
}

// NextPush waits for the next push frame of any command.
func NextPush(conn *client.Conn, timeout time.Duration) (client.Frame, error) {
	select {
	case f, ok := <-conn.Pushes():
		if !ok {
			return client.Frame{}, fmt.Errorf("connection closed: %v", conn.Err())
		}
		return f, nil
	case <-time.After(timeout):
		return client.Frame{}, fmt.Errorf("no push within %v", timeout)
	}
}
