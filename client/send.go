package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/retry"
	"github.com/sparkim/spark/pkg/token"
)

// Send sends a message and returns its SEND_ACK. On "50301" (busy) and on a
// timeout it retries with the same client_msg_id (set to a fresh one when
// empty), so the server stores the message at most once, up to
// Options.SendAttempts tries with doubling backoff. Other failure codes come
// back as a *CodeError.
func (c *Conn) Send(ctx context.Context, req protocol.SendRequest) (protocol.SendAck, error) {
	if req.ClientMsgID == "" {
		req.ClientMsgID = NewClientMsgID()
	}
	body, err := protocol.Marshal(req)
	if err != nil {
		return protocol.SendAck{}, fmt.Errorf("client: encode send: %w", err)
	}
	pacing := retry.Policy{Initial: c.opts.SendBackoff, Multiplier: 2}
	var last error
	for attempt := 1; ; attempt++ {
		ack, err := c.sendOnce(ctx, body)
		if err == nil {
			return ack, nil
		}
		last = err
		var ce *CodeError
		retryable := errors.Is(err, ErrTimeout) || (errors.As(err, &ce) && ce.Code == errcode.Busy)
		if !retryable || attempt >= c.opts.SendAttempts || ctx.Err() != nil {
			break
		}
		t := time.NewTimer(pacing.Delay(attempt - 1))
		select {
		case <-ctx.Done():
			t.Stop()
			return protocol.SendAck{}, fmt.Errorf("client: send %s: %w (last: %v)", req.ClientMsgID, ctx.Err(), last)
		case <-c.done:
			t.Stop()
			return protocol.SendAck{}, fmt.Errorf("client: send %s: %w (last: %v)", req.ClientMsgID, ErrClosed, last)
		case <-t.C:
		}
	}
	return protocol.SendAck{}, last
}

func (c *Conn) sendOnce(ctx context.Context, body []byte) (protocol.SendAck, error) {
	// Each attempt gets its own timeout so a lost answer is retried while the
	// caller's deadline still allows it.
	actx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	var ack protocol.SendAck
	r, err := c.call(actx, protocol.CmdSendMessage, body, nil)
	if err != nil {
		return ack, err
	}
	if r.Command != protocol.CmdSendAck {
		return ack, fmt.Errorf("client: send answered with command %d, want %d", r.Command, protocol.CmdSendAck)
	}
	return ack, r.Decode(&ack)
}

// SendText sends a text message to a user.
func (c *Conn) SendText(ctx context.Context, toUserID int64, text string) (protocol.SendAck, error) {
	content, err := TextContent(text)
	if err != nil {
		return protocol.SendAck{}, err
	}
	req := protocol.SendRequest{MessageType: 1, Content: content}
	req.ToUserID = idOf(toUserID)
	return c.Send(ctx, req)
}

// TextContent returns the content of a text message: {"t":1,"text":…}.
func TextContent(text string) (json.RawMessage, error) {
	b, err := protocol.Marshal(struct {
		T    int    `json:"t"`
		Text string `json:"text"`
	}{1, text})
	if err != nil {
		return nil, fmt.Errorf("client: encode text: %w", err)
	}
	return b, nil
}

// NewClientMsgID returns a fresh random idempotency key (32 hex digits).
func NewClientMsgID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// DevToken mints a token for userID (bound to deviceID when not empty)
// with the logic JWT secret, valid for ttl, as a business server would.
func DevToken(secret string, userID int64, deviceID string, ttl time.Duration) (string, error) {
	tok, _, err := token.Mint([]byte(secret), userID, deviceID, ttl, time.Now())
	if err != nil {
		return "", fmt.Errorf("client: mint token: %w", err)
	}
	return tok, nil
}

func idOf(v int64) jsonid.ID { return jsonid.ID(v) }
