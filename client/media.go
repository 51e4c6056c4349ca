package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
)

// CmdMedia (23) uploads and downloads pictures, voice, video and files by
// presigned URL: the bytes go straight to and from the object store.
const CmdMedia = protocol.CmdMedia

// MediaUpload is the request the server signed for one upload: send it
// with every header in Headers before ExpiresAt.
type MediaUpload struct {
	Key       string
	Method    string
	URL       string
	Headers   map[string]string
	ExpiresAt time.Time
}

// MediaObject is a completed upload as the server checked it.
type MediaObject = protocol.MediaObject

// RequestUpload asks for an upload of size bytes of contentType as kind
// ("image", "voice", "video", "file", "avatar").
func (c *Conn) RequestUpload(ctx context.Context, kind string, size int64, contentType string) (MediaUpload, error) {
	var out protocol.MediaUploadReply
	req := protocol.MediaRequest{Op: protocol.MediaOpUpload, Kind: kind, Size: size, ContentType: contentType}
	if _, err := c.call(ctx, CmdMedia, req, &out); err != nil {
		return MediaUpload{}, fmt.Errorf("client: media upload: %w", err)
	}
	return MediaUpload{Key: out.Key, Method: out.Method, URL: out.URL, Headers: out.Headers,
		ExpiresAt: time.UnixMilli(out.ExpiresAt)}, nil
}

// CompleteUpload tells the server the upload of key is done; it answers
// the object as stored (its content type sniffed from its bytes).
func (c *Conn) CompleteUpload(ctx context.Context, key string) (MediaObject, error) {
	var out protocol.MediaObject
	if _, err := c.call(ctx, CmdMedia, protocol.MediaRequest{Op: protocol.MediaOpComplete, Key: key}, &out); err != nil {
		return MediaObject{}, fmt.Errorf("client: media complete %s: %w", key, err)
	}
	return out, nil
}

// DownloadURL asks for a short-lived GET of a media key of message msgID
// (key "" for its main key) or, with msgID 0, of key alone (an own upload,
// an avatar). The URL is a credential: keep it in memory only.
func (c *Conn) DownloadURL(ctx context.Context, msgID, conversationID int64, key string) (string, time.Time, error) {
	var out protocol.MediaDownloadReply
	req := protocol.MediaRequest{Op: protocol.MediaOpDownload, MsgID: jsonid.ID(msgID), ConversationID: jsonid.ID(conversationID), Key: key}
	if _, err := c.call(ctx, CmdMedia, req, &out); err != nil {
		return "", time.Time{}, fmt.Errorf("client: media download: %w", err)
	}
	return out.URL, time.UnixMilli(out.ExpiresAt), nil
}

// HTTPStatusError is a store's refusal of a presigned request.
type HTTPStatusError struct {
	Status int
	Body   string
}

func (e *HTTPStatusError) Error() string {
	return fmt.Sprintf("client: object store answered %d: %s", e.Status, e.Body)
}

// Upload stores data as kind with contentType: it asks for the upload,
// sends the bytes to the store and completes it. hc nil means
// http.DefaultClient.
func (c *Conn) Upload(ctx context.Context, hc *http.Client, kind, contentType string, data []byte) (MediaObject, error) {
	up, err := c.RequestUpload(ctx, kind, int64(len(data)), contentType)
	if err != nil {
		return MediaObject{}, err
	}
	if err := Put(ctx, hc, up, data); err != nil {
		return MediaObject{}, err
	}
	return c.CompleteUpload(ctx, up.Key)
}

// Put sends data with the signed request up.
func Put(ctx context.Context, hc *http.Client, up MediaUpload, data []byte) error {
	if hc == nil {
		hc = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, up.Method, up.URL, bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("client: media put: %w", err)
	}
	for k, v := range up.Headers {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("client: media put: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode/100 != 2 {
		return &HTTPStatusError{Status: resp.StatusCode, Body: string(bytes.TrimSpace(body))}
	}
	return nil
}

// Fetch reads an object from a download URL, at most max bytes.
func Fetch(ctx context.Context, hc *http.Client, url string, max int64) ([]byte, string, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, "", fmt.Errorf("client: media get: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("client: media get: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, max))
	if err != nil {
		return nil, "", fmt.Errorf("client: media get: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, "", &HTTPStatusError{Status: resp.StatusCode, Body: string(bytes.TrimSpace(body))}
	}
	return body, resp.Header.Get("Content-Type"), nil
}
