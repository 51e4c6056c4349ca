package protocol

import "github.com/sparkim/spark/pkg/jsonid"

// MEDIA (23) ops.
const (
	// MediaOpUpload asks for a presigned upload of Kind, Size bytes of
	// ContentType; answered MediaUploadReply.
	MediaOpUpload = "upload"
	// MediaOpComplete tells logic the upload of Key is done; answered
	// MediaObject once the stored object is checked.
	MediaOpComplete = "complete"
	// MediaOpDownload asks for a presigned GET of a key of message MsgID,
	// or of Key alone (an own upload, an avatar); answered
	// MediaDownloadReply.
	MediaOpDownload = "download"
)

// MediaRequest is the body of MEDIA (23); which fields count depends on
// Op.
type MediaRequest struct {
	Op             string    `json:"op"`
	Kind           string    `json:"kind,omitempty"`
	Size           int64     `json:"size,omitempty"`
	ContentType    string    `json:"content_type,omitempty"`
	Key            string    `json:"key,omitempty"`
	MsgID          jsonid.ID `json:"msg_id,omitempty"`
	ConversationID jsonid.ID `json:"conversation_id,omitempty"`
}

// MediaUploadReply answers the upload op: one HTTP request (Method, URL,
// every header in Headers) that stores the object under Key until
// ExpiresAt (unix ms).
type MediaUploadReply struct {
	Key       string            `json:"key"`
	Method    string            `json:"method"`
	URL       string            `json:"url"`
	Headers   map[string]string `json:"headers"`
	ExpiresAt int64             `json:"expires_at"`
}

// MediaObject answers the complete op: the object as stored, with the
// content type sniffed from its first bytes.
type MediaObject struct {
	Key         string `json:"key"`
	Kind        string `json:"kind"`
	Size        int64  `json:"size"`
	ContentType string `json:"content_type"`
}

// MediaDownloadReply answers the download op: a GET of Key valid until
// ExpiresAt (unix ms).
type MediaDownloadReply struct {
	Key       string `json:"key"`
	URL       string `json:"url"`
	ExpiresAt int64  `json:"expires_at"`
}
