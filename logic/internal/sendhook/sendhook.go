// Package sendhook is the before-send hook (docs/api.md, "Before-send
// hook"): before a send is committed, logic POSTs the message as JSON to
// the business server, whose answer allows it, rejects it with the
// business's own code and reason, or rewrites its content. A failure or a
// timeout applies the configured policy, and a circuit breaker stops a
// dead hook from slowing every send.
package sendhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/metrics"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/stdwebhook"
)

// Kind is which switch of logic.before_send covers a send.
type Kind int

// The kinds of send.
const (
	// P2P is a client's one-to-one send.
	P2P Kind = iota
	// Group is a client's group send.
	Group
	// API is a business API SendMessage, whatever its conversation.
	API
)

func (k Kind) String() string {
	switch k {
	case P2P:
		return "p2p"
	case Group:
		return "group"
	}
	return "api"
}

// maxAnswer bounds the answer read: a 64 KiB content, its JSON escaping
// and the answer's few other fields.
const maxAnswer = 256 << 10

// MaxReasonLen bounds a rejection's reason, in bytes: it travels to the
// client in the failure envelope.
const MaxReasonLen = 256

// Message is what the hook is told about a send: its JSON body.
type Message struct {
	// Kind is "p2p" or "group" (the conversation's), Origin "client" or
	// "api".
	Kind   string `json:"kind"`
	Origin string `json:"origin"`
	// SenderID, DeviceID (empty for the API) and System (the API's system
	// account) say who sends.
	SenderID int64  `json:"sender_id,string"`
	DeviceID string `json:"device_id"`
	System   bool   `json:"system"`
	// ConversationID is the target conversation; ToUserID the peer of a
	// one-to-one send, GroupID the group of a group send (0 otherwise).
	ConversationID int64  `json:"conversation_id,string"`
	ToUserID       int64  `json:"to_user_id,string"`
	GroupID        int64  `json:"group_id,string"`
	ClientMsgID    string `json:"client_msg_id"`
	MessageType    int    `json:"message_type"`
	// Content is the message's content in compact form, as it would be
	// stored.
	Content json.RawMessage `json:"content"`
	// EditOf is the id of the message an edit (EDIT_MESSAGE) replaces the
	// content of; absent for a send.
	EditOf int64 `json:"edit_of,omitempty,string"`
}

// answer is the hook's JSON answer.
type answer struct {
	Action  string          `json:"action"`
	Code    int64           `json:"code"`
	Reason  string          `json:"reason"`
	Content json.RawMessage `json:"content"`
}

// The actions of an answer.
const (
	actionAllow  = "allow"
	actionReject = "reject"
	actionModify = "modify"
)

// Validator checks content the hook wrote exactly as a client's content
// is checked, returning its compact form or why it is refused.
type Validator func(content json.RawMessage) ([]byte, error)

// errTimeout marks a call that did not answer within the timeout.
var errTimeout = errors.New("sendhook: no answer in time")

// errOpen marks a call the open breaker refused.
var errOpen = errors.New("sendhook: breaker open")

// Hook calls the business server's before-send hook.
type Hook struct {
	url       string
	secret    stdwebhook.Secret
	ids       *envelope.IDSource
	covers    [3]bool
	timeout   time.Duration
	onError   string
	onTimeout string
	client    *http.Client
	breaker   *breaker
	log       *zap.Logger
	m         *metrics.Metrics
}

// New returns the hook of c, or nil when c names no URL (the hook is off).
// c has passed config.BeforeSend.Validate.
func New(c config.BeforeSend, log *zap.Logger, m *metrics.Metrics) (*Hook, error) {
	if c.URL == "" {
		return nil, nil
	}
	secret, err := stdwebhook.ParseSecret(c.Secret)
	if err != nil {
		return nil, fmt.Errorf("sendhook: logic.before_send.secret: %w", err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	if m == nil {
		m = metrics.New(nil)
	}
	h := &Hook{
		url: c.URL, secret: secret, ids: envelope.NewIDSource(), covers: [3]bool{P2P: c.P2P, Group: c.Group, API: c.API},
		timeout: c.Timeout, onError: c.OnError, onTimeout: c.OnTimeout,
		// Its own transport: the hook's connections are kept alive
		// between sends, and never shared with another client's limits.
		client: &http.Client{Transport: &http.Transport{
			Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second,
		}},
		log: log, m: m,
	}
	h.breaker = newBreaker(c.BreakerFailures, c.BreakerCooldown, time.Now, func(s State) {
		m.HookBreakerState.Set(float64(s))
	})
	m.HookBreakerState.Set(float64(Closed))
	return h, nil
}

// Covers reports whether sends of kind k call the hook (false on a nil
// Hook).
func (h *Hook) Covers(k Kind) bool {
	return h != nil && h.covers[k]
}

// Check asks the hook about msg and returns the content to commit: the
// message's own, or the hook's rewrite once valid checks it. A rejection
// is errcode.Reject's 40302; a failure, a timeout or the open breaker
// whose policy is reject is a 50301 (the message was not judged: a retry
// with the same client_msg_id is judged once the hook answers).
func (h *Hook) Check(ctx context.Context, k Kind, msg *Message, valid Validator) ([]byte, error) {
	a, err := h.ask(ctx, k, msg)
	var content []byte
	if err == nil {
		content, err = h.decide(k, a, msg, valid)
	}
	if err == nil {
		return content, nil
	}
	if errcode.RejectionOf(err) != nil {
		return nil, err
	}
	cause, policy := "error", h.onError
	switch {
	case errors.Is(err, errTimeout):
		cause, policy = "timeout", h.onTimeout
	case errors.Is(err, errOpen):
		cause = "open"
	}
	h.m.HookFallbacks.WithLabelValues(cause, policy).Inc()
	if cause != "open" {
		h.log.Warn("before-send hook failed", zap.String("kind", k.String()), zap.String("policy", policy),
			zap.Int64("sender_id", msg.SenderID), zap.String("client_msg_id", msg.ClientMsgID), zap.Error(err))
	}
	if policy == config.HookAllow {
		return msg.Content, nil
	}
	return nil, errcode.Unavailable("before-send hook", err)
}

// ask POSTs msg to the hook through the breaker and parses its answer. A
// malformed answer is a failure of the hook, as is a status other than
// 200.
func (h *Hook) ask(ctx context.Context, k Kind, msg *Message) (answer, error) {
	probe, ok := h.breaker.allow()
	if !ok {
		h.m.HookCalls.WithLabelValues(k.String(), "open").Inc()
		return answer{}, errOpen
	}
	start := time.Now()
	a, err := h.post(ctx, msg)
	h.m.HookLatency.Observe(time.Since(start).Seconds())
	result := a.Action
	switch {
	case errors.Is(err, errTimeout):
		result = "timeout"
	case err != nil:
		result = "error"
	}
	h.m.HookCalls.WithLabelValues(k.String(), result).Inc()
	// A caller that gave up (its own deadline, a closed connection) says
	// nothing about the hook's health.
	if ctx.Err() == nil || err == nil {
		h.breaker.done(probe, err == nil)
	} else {
		h.breaker.abandon(probe)
	}
	return a, err
}

// post is one HTTP call of the hook, bounded by the timeout.
func (h *Hook) post(ctx context.Context, msg *Message) (answer, error) {
	body, err := marshal(msg)
	if err != nil {
		return answer{}, fmt.Errorf("sendhook: encode: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return answer{}, fmt.Errorf("sendhook: request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	// Signed as the webhooks are, so the business server verifies both
	// the same way; the id is new for every call.
	stdwebhook.SetHeaders(req.Header, "bs_"+h.ids.Next(), time.Now().Unix(), body, h.secret)
	resp, err := h.client.Do(req)
	if err != nil {
		if cctx.Err() != nil && ctx.Err() == nil {
			return answer{}, fmt.Errorf("%w after %v: %v", errTimeout, h.timeout, err)
		}
		return answer{}, fmt.Errorf("sendhook: post: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		if cctx.Err() != nil && ctx.Err() == nil {
			return answer{}, fmt.Errorf("%w after %v reading the answer: %v", errTimeout, h.timeout, err)
		}
		return answer{}, fmt.Errorf("sendhook: read answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return answer{}, fmt.Errorf("sendhook: status %d", resp.StatusCode)
	}
	return parseAnswer(raw)
}

// parseAnswer reads and checks the hook's answer: an action of allow,
// reject (with a positive code and a reason of at most MaxReasonLen
// bytes) or modify (with a content object).
func parseAnswer(raw []byte) (answer, error) {
	if len(raw) > maxAnswer {
		return answer{}, fmt.Errorf("sendhook: answer over %d bytes", maxAnswer)
	}
	var a answer
	if err := json.Unmarshal(raw, &a); err != nil {
		return answer{}, fmt.Errorf("sendhook: answer is not a JSON object: %w", err)
	}
	switch a.Action {
	case actionAllow:
	case actionReject:
		if a.Code <= 0 {
			return answer{}, fmt.Errorf("sendhook: reject needs a positive code (got %d)", a.Code)
		}
		if len(a.Reason) > MaxReasonLen {
			return answer{}, fmt.Errorf("sendhook: reject reason over %d bytes", MaxReasonLen)
		}
	case actionModify:
		if t := bytes.TrimSpace(a.Content); len(t) == 0 || t[0] != '{' {
			return answer{}, errors.New("sendhook: modify needs a content object")
		}
	default:
		return answer{}, fmt.Errorf("sendhook: unknown action %q (want allow, reject or modify)", a.Action)
	}
	return a, nil
}

// decide turns a parsed answer into the content to commit or the
// rejection. A rewrite that fails valid is the hook's failure, not the
// sender's: the sender's message was valid.
func (h *Hook) decide(k Kind, a answer, msg *Message, valid Validator) ([]byte, error) {
	switch a.Action {
	case actionReject:
		return nil, errcode.Reject(a.Code, a.Reason)
	case actionModify:
		content, err := valid(a.Content)
		if err != nil {
			h.m.HookCalls.WithLabelValues(k.String(), "invalid").Inc()
			return nil, fmt.Errorf("sendhook: modified content refused: %w", err)
		}
		return content, nil
	}
	return msg.Content, nil
}

// marshal writes msg without HTML escaping, as every JSON the server
// writes (docs/protocol.md §3).
func marshal(msg *Message) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(msg); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
