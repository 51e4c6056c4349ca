package protocol

// The ops of PUSH_SETTINGS (21). The device is always the session's.
const (
	// PushOpRegister stores the device's token (platform, token; topic
	// and sandbox for APNs, gateway for a push gateway), replacing the
	// one it had.
	PushOpRegister = "register"
	// PushOpUnregister removes the device's token (signing out).
	PushOpUnregister = "unregister"
	// PushOpPreview sets what the user's notifications show when preview
	// is present, and answers the setting in effect.
	PushOpPreview = "preview"
)

// PushRequest is the body of PUSH_SETTINGS (21).
type PushRequest struct {
	Op       string `json:"op"`
	Platform string `json:"platform,omitempty"`
	Token    string `json:"token,omitempty"`
	Topic    string `json:"topic,omitempty"`
	Sandbox  bool   `json:"sandbox,omitempty"`
	Gateway  string `json:"gateway,omitempty"`
	// Preview is "full", "sender" or "none" (op preview; absent: read).
	Preview string `json:"preview,omitempty"`
}

// PushReply is the answer of PUSH_SETTINGS: register and unregister say
// whether the device now has a token, preview names the setting.
type PushReply struct {
	Registered *bool  `json:"registered,omitempty"`
	Preview    string `json:"preview,omitempty"`
}
