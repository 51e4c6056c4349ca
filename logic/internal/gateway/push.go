package gateway

import (
	"context"
	"fmt"

	"github.com/sparkim/spark/logic/internal/push"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
)

// pushSettings answers PUSH_SETTINGS (21) for the session's device: the
// same push.Tokens service the business API calls.
func (h *Handler) pushSettings(ctx context.Context, user int64, device string, body []byte) ([]byte, error) {
	if h.Push == nil {
		return nil, errcode.New(errcode.Internal, "push tokens are not configured")
	}
	var r protocol.PushRequest
	if err := decodeFields(body, &r); err != nil {
		return nil, err
	}
	switch r.Op {
	case protocol.PushOpRegister:
		err := h.Push.Register(ctx, push.Registration{UserID: user, DeviceID: device, Platform: r.Platform,
			Token: r.Token, Topic: r.Topic, Sandbox: r.Sandbox, Gateway: r.Gateway})
		if err != nil {
			return nil, err
		}
		yes := true
		return protocol.Marshal(protocol.PushReply{Registered: &yes})
	case protocol.PushOpUnregister:
		if _, err := h.Push.Unregister(ctx, user, device); err != nil {
			return nil, err
		}
		no := false
		return protocol.Marshal(protocol.PushReply{Registered: &no})
	case protocol.PushOpPreview:
		if r.Preview != "" {
			if err := h.Push.SetPreview(ctx, user, r.Preview); err != nil {
				return nil, err
			}
		}
		p, err := h.Push.Preview(ctx, user)
		if err != nil {
			return nil, err
		}
		return protocol.Marshal(protocol.PushReply{Preview: p})
	case "":
		return nil, errcode.Invalid("op", "required")
	}
	return nil, errcode.Invalid("op", fmt.Sprintf("unknown op %q (register, unregister, preview)", r.Op))
}
