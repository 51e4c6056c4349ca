// Package push is offline push: the push tokens devices register, each
// user's preview setting, and (worker.go) the worker that reads the push
// queue deliver fills and sends notifications through the providers:
// APNs (apns.go), FCM HTTP v1 (fcm.go) and push gateways (gateway.go).
// The client protocol's PUSH command and the business API adapt onto the
// same Tokens service.
package push

import (
	"context"
	"regexp"
	"time"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/errcode"
)

// Platforms a token is registered for (t_push_tokens.platform).
const (
	PlatformAPNs    = 1
	PlatformFCM     = 2
	PlatformGateway = 3
)

// platformNames are the wire names of the platforms.
var platformNames = map[string]int{"apns": PlatformAPNs, "fcm": PlatformFCM, "gateway": PlatformGateway}

// PlatformName is the wire name of a platform ("" for an unknown one).
func PlatformName(p int) string {
	for n, v := range platformNames {
		if v == p {
			return n
		}
	}
	return ""
}

// previewNames are the wire names of the preview settings.
var previewNames = map[string]int{"full": store.PreviewFull, "sender": store.PreviewSender, "none": store.PreviewNone}

// PreviewName is the wire name of a preview setting.
func PreviewName(p int) string {
	for n, v := range previewNames {
		if v == p {
			return n
		}
	}
	return "full"
}

// Registration is a device's push token as a client or the business
// names it.
type Registration struct {
	UserID   int64
	DeviceID string
	// Platform is "apns", "fcm" or "gateway".
	Platform string
	Token    string
	// Topic is the APNs topic (the app's bundle id); required for APNs.
	Topic string
	// Sandbox sends an APNs token to the development environment.
	Sandbox bool
	// Gateway names the configured push gateway; required for "gateway".
	Gateway string
}

var (
	// A token travels in a URL path (APNs) or JSON: printable ASCII
	// without spaces or slashes.
	tokenPattern   = regexp.MustCompile(`^[A-Za-z0-9_:.\-]{1,512}$`)
	apnsToken      = regexp.MustCompile(`^[0-9a-fA-F]{32,200}$`)
	topicPattern   = regexp.MustCompile(`^[A-Za-z0-9._\-]{1,255}$`)
	gatewayPattern = regexp.MustCompile(`^[a-z0-9_\-]{1,64}$`)
	devicePattern  = regexp.MustCompile(`^.{1,64}$`)
)

// Tokens registers and removes push tokens and sets the preview.
type Tokens struct {
	store *store.Store
	now   func() time.Time
}

// NewTokens returns the token service.
func NewTokens(st *store.Store) *Tokens { return &Tokens{store: st, now: time.Now} }

// Validate checks a registration's fields, naming the first bad one.
func (r Registration) Validate() (store.PushToken, error) {
	t := store.PushToken{UserID: r.UserID, DeviceID: r.DeviceID, Token: r.Token}
	if r.UserID <= 0 {
		return t, errcode.Invalid("user_id", "must be a positive id")
	}
	if !devicePattern.MatchString(r.DeviceID) {
		return t, errcode.Invalid("device_id", "required, at most 64 characters")
	}
	p, ok := platformNames[r.Platform]
	if !ok {
		return t, errcode.Invalid("platform", `must be "apns", "fcm" or "gateway"`)
	}
	t.Platform = p
	if !tokenPattern.MatchString(r.Token) {
		return t, errcode.Invalid("token", "required, at most 512 characters of letters, digits and _ : . -")
	}
	switch p {
	case PlatformAPNs:
		if !apnsToken.MatchString(r.Token) {
			return t, errcode.Invalid("token", "an APNs device token is hexadecimal")
		}
		if !topicPattern.MatchString(r.Topic) {
			return t, errcode.Invalid("topic", "required for apns: the app's bundle id")
		}
		t.Topic, t.Sandbox = r.Topic, r.Sandbox
		if r.Gateway != "" {
			return t, errcode.Invalid("gateway", "only for platform gateway")
		}
	case PlatformFCM:
		if r.Topic != "" || r.Sandbox || r.Gateway != "" {
			return t, errcode.Invalid("platform", "fcm takes no topic, sandbox or gateway")
		}
	case PlatformGateway:
		if !gatewayPattern.MatchString(r.Gateway) {
			return t, errcode.Invalid("gateway", "required for gateway: the configured gateway name ([a-z0-9_-], at most 64)")
		}
		if r.Topic != "" || r.Sandbox {
			return t, errcode.Invalid("platform", "gateway takes no topic or sandbox")
		}
		t.Gateway = r.Gateway
	}
	return t, nil
}

// Register stores the device's token, replacing its previous one.
func (s *Tokens) Register(ctx context.Context, r Registration) error {
	t, err := r.Validate()
	if err != nil {
		return err
	}
	if err := s.store.SavePushToken(ctx, t, s.now()); err != nil {
		return errcode.Unavailable("", err)
	}
	return nil
}

// Unregister removes the device's token (signing out); removing none is
// not an error. It reports whether there was one.
func (s *Tokens) Unregister(ctx context.Context, userID int64, deviceID string) (bool, error) {
	if userID <= 0 {
		return false, errcode.Invalid("user_id", "must be a positive id")
	}
	if !devicePattern.MatchString(deviceID) {
		return false, errcode.Invalid("device_id", "required, at most 64 characters")
	}
	ok, err := s.store.DeletePushToken(ctx, userID, deviceID, "")
	if err != nil {
		return false, errcode.Unavailable("", err)
	}
	return ok, nil
}

// SetPreview sets what the user's notifications show: "full" (sender and
// text), "sender" (sender only) or "none".
func (s *Tokens) SetPreview(ctx context.Context, userID int64, preview string) error {
	if userID <= 0 {
		return errcode.Invalid("user_id", "must be a positive id")
	}
	p, ok := previewNames[preview]
	if !ok {
		return errcode.Invalid("preview", `must be "full", "sender" or "none"`)
	}
	if err := s.store.SetPushPreview(ctx, userID, p, s.now()); err != nil {
		return errcode.Unavailable("", err)
	}
	return nil
}

// Preview returns the user's preview setting's wire name.
func (s *Tokens) Preview(ctx context.Context, userID int64) (string, error) {
	if userID <= 0 {
		return "", errcode.Invalid("user_id", "must be a positive id")
	}
	p, err := s.store.PushPreview(ctx, userID)
	if err != nil {
		return "", errcode.Unavailable("", err)
	}
	return PreviewName(p), nil
}
