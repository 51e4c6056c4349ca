package client

import (
	"context"
	"fmt"

	"github.com/sparkim/spark/pkg/protocol"
)

// CmdPushSettings (21) registers the device's offline-push token and sets
// the user's notification preview.
const CmdPushSettings = protocol.CmdPushSettings

// PushToken is a device's offline-push token: Platform "apns" (with Topic,
// the app's bundle id, and Sandbox for development builds), "fcm", or
// "gateway" (with Gateway, the name the server's operator configured).
type PushToken struct {
	Platform string
	Token    string
	Topic    string
	Sandbox  bool
	Gateway  string
}

// RegisterPushToken stores the signed-in device's push token, replacing
// the one it had. Call it after each AUTH: platforms rotate tokens.
func (c *Conn) RegisterPushToken(ctx context.Context, t PushToken) error {
	req := protocol.PushRequest{Op: protocol.PushOpRegister, Platform: t.Platform, Token: t.Token, Topic: t.Topic, Sandbox: t.Sandbox, Gateway: t.Gateway}
	if _, err := c.call(ctx, CmdPushSettings, req, nil); err != nil {
		return fmt.Errorf("client: register push token: %w", err)
	}
	return nil
}

// UnregisterPushToken removes the signed-in device's push token (signing
// out of push while staying connected).
func (c *Conn) UnregisterPushToken(ctx context.Context) error {
	if _, err := c.call(ctx, CmdPushSettings, protocol.PushRequest{Op: protocol.PushOpUnregister}, nil); err != nil {
		return fmt.Errorf("client: unregister push token: %w", err)
	}
	return nil
}

// PushPreview sets the user's notification preview ("full", "sender" or
// "none"; "" only reads it) and returns the setting in effect.
func (c *Conn) PushPreview(ctx context.Context, preview string) (string, error) {
	var out protocol.PushReply
	if _, err := c.call(ctx, CmdPushSettings, protocol.PushRequest{Op: protocol.PushOpPreview, Preview: preview}, &out); err != nil {
		return "", fmt.Errorf("client: push preview: %w", err)
	}
	return out.Preview, nil
}
