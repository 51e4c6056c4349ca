package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/tests/framework"
)

// storeStatus is the HTTP status of an object store's refusal, 0 for none.
func storeStatus(err error) int {
	var se *client.HTTPStatusError
	if errors.As(err, &se) {
		return se.Status
	}
	return 0
}

// imageContent is an image message's content for key.
func imageContent(key string, extra string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"t":2,"key":%q,"width":1,"height":1%s}`, key, extra))
}

// TestMediaUploadSendAndDownloadByAMemberWithEveryRefusal runs the
// picture path on the embedded local store, the store `make run` uses:
// upload, complete, send, and a download by the other member that
// returns the same bytes; then every refusal of MEDIA and of media
// messages: kinds, sizes and types at upload, a body of another size or
// type, an expired URL, bytes that are not what the kind accepts, another
// user's key (completed or sent without forwarding), a non-member's
// download, and a recalled message's.
func TestMediaUploadSendAndDownloadByAMemberWithEveryRefusal(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2, LogicEnv: []string{
		"IM_LOGIC_MEDIA_DOWNLOAD_TTL=2s", "IM_LOGIC_RECALL_WINDOW=1m", "IM_LOGIC_MEDIA_LIMITS_IMAGE=4096",
	}})
	ctx := ctxT(t, 2*time.Minute)
	a := c.Login(t, 0, 23101, "a")
	b := c.Login(t, 1, 23102, "b")
	outsider := c.Login(t, 1, 23103, "c")

	obj, err := a.Upload(ctx, nil, "image", "image/png", tinyPNG)
	if err != nil {
		t.Fatal(err)
	}
	if obj.Kind != "image" || obj.Size != int64(len(tinyPNG)) || obj.ContentType != "image/png" {
		t.Fatalf("completed object = %+v", obj)
	}
	again, err := a.CompleteUpload(ctx, obj.Key)
	if err != nil || again != obj {
		t.Fatalf("complete again = %+v, %v; want %+v", again, err, obj)
	}
	ack, err := a.Send(ctx, protocol.SendRequest{ToUserID: 23102, ClientMsgID: "img-1", MessageType: protocol.MessageImage,
		Content: imageContent(obj.Key, `,"size":`+fmt.Sprint(obj.Size)+`,"content_type":"image/png"`)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := nextMessage(b, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m.MsgID != ack.MsgID || m.MessageType != protocol.MessageImage {
		t.Fatalf("b got %+v, want the image %d", m, ack.MsgID)
	}
	cid, mid := ack.ConversationID.Int64(), ack.MsgID.Int64()
	url, exp, err := b.DownloadURL(ctx, mid, cid, "")
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(exp); d <= 0 || d > 3*time.Second {
		t.Fatalf("download expires in %v, want within logic.media.download_ttl (2s)", d)
	}
	got, ct, err := client.Fetch(ctx, nil, url, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, tinyPNG) || ct != "image/png" {
		t.Fatalf("downloaded %d bytes of %s, want the %d uploaded bytes of image/png", len(got), ct, len(tinyPNG))
	}

	// The uploader reads its own key without a message; another user
	// cannot, and nobody downloads a key the message does not carry.
	if _, _, err := a.DownloadURL(ctx, 0, 0, obj.Key); err != nil {
		t.Fatalf("uploader's own key: %v", err)
	}
	other, err := a.Upload(ctx, nil, "image", "image/png", tinyPNG)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		conn      *client.Conn
		msg, conv int64
		key       string
		code      errcode.Code
	}{
		{"another user's key alone", b, 0, 0, other.Key, errcode.NotFound},
		{"a key the message does not carry", b, mid, cid, other.Key, errcode.NotFound},
		{"a non-member", outsider, mid, 0, "", errcode.Forbidden},
		{"a forged message id", b, mid + 7777, 0, "", errcode.NotFound},
		{"the message in another conversation", b, mid, cid + 1, "", errcode.NotFound},
		{"a malformed key", b, 0, 0, "img/../../etc/passwd", errcode.InvalidArgument},
		{"no message and no key", b, 0, 0, "", errcode.InvalidArgument},
	} {
		if _, _, err := tc.conn.DownloadURL(ctx, tc.msg, tc.conv, tc.key); !hasCode(err, tc.code) {
			t.Errorf("download by %s: %v, want %s", tc.name, err, tc.code)
		}
	}

	// Upload refusals.
	for _, tc := range []struct {
		name, kind, ct string
		size           int64
		code           errcode.Code
	}{
		{"an unknown kind", "sticker", "image/png", 10, errcode.InvalidArgument},
		{"a zero size", "image", "image/png", 0, errcode.InvalidArgument},
		{"over the kind's limit", "image", "image/png", 4097, errcode.TooLarge},
		{"a type the kind refuses", "image", "image/svg+xml", 10, errcode.InvalidArgument},
		{"a malformed type", "file", "text/plain; charset=utf-8", 10, errcode.InvalidArgument},
		{"a video as a picture", "image", "video/mp4", 10, errcode.InvalidArgument},
	} {
		if _, err := a.RequestUpload(ctx, tc.kind, tc.size, tc.ct); !hasCode(err, tc.code) {
			t.Errorf("upload of %s: %v, want %s", tc.name, err, tc.code)
		}
	}

	// The store binds size, type and expiry.
	up, err := a.RequestUpload(ctx, "image", int64(len(tinyPNG)), "image/png")
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Put(ctx, nil, up, tinyPNG[:len(tinyPNG)-1]); storeStatus(err) != http.StatusBadRequest {
		t.Errorf("a body of another size: %v, want HTTP 400", err)
	}
	wrongType := up
	wrongType.Headers = map[string]string{"Content-Type": "image/gif"}
	if err := client.Put(ctx, nil, wrongType, tinyPNG); storeStatus(err) == 0 {
		t.Errorf("a body of another type was stored")
	}
	if _, err := a.CompleteUpload(ctx, up.Key); !hasCode(err, errcode.NotFound) {
		t.Errorf("complete before any upload: %v, want 40401", err)
	}
	if err := client.Put(ctx, nil, up, tinyPNG); err != nil {
		t.Fatal(err)
	}
	if err := client.Put(ctx, nil, up, tinyPNG); storeStatus(err) != http.StatusConflict {
		t.Errorf("a second upload to the key: %v, want HTTP 409", err)
	}
	if _, err := b.CompleteUpload(ctx, up.Key); !hasCode(err, errcode.NotFound) {
		t.Errorf("complete of another user's key: %v, want 40401", err)
	}
	// Bytes that are not a picture, declared as one.
	fake := []byte("<svg xmlns='http://www.w3.org/2000/svg'><script>alert(1)</script></svg>")
	if _, err := a.Upload(ctx, nil, "image", "image/png", fake); !hasCode(err, errcode.InvalidArgument) {
		t.Errorf("an SVG uploaded as a PNG: %v, want 40001 at complete", err)
	}

	// Media message refusals.
	pending, err := a.RequestUpload(ctx, "image", int64(len(tinyPNG)), "image/png")
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name    string
		conn    *client.Conn
		mt      int
		content string
		code    errcode.Code
	}{
		{"no key", a, 2, `{"t":2,"width":1}`, errcode.InvalidArgument},
		{"a malformed key", a, 2, `{"t":2,"key":"img/short"}`, errcode.InvalidArgument},
		{"a key of another kind", a, 3, fmt.Sprintf(`{"t":3,"key":%q}`, obj.Key), errcode.InvalidArgument},
		{"a key not completed", a, 2, fmt.Sprintf(`{"t":2,"key":%q}`, pending.Key), errcode.Forbidden},
		{"another user's key", b, 2, fmt.Sprintf(`{"t":2,"key":%q}`, other.Key), errcode.Forbidden},
		{"a wrong size", a, 2, fmt.Sprintf(`{"t":2,"key":%q,"size":5}`, obj.Key), errcode.InvalidArgument},
		{"a wrong type", a, 2, fmt.Sprintf(`{"t":2,"key":%q,"content_type":"image/gif"}`, obj.Key), errcode.InvalidArgument},
		{"a zero width", a, 2, fmt.Sprintf(`{"t":2,"key":%q,"width":0}`, obj.Key), errcode.InvalidArgument},
		{"a duration on a picture", a, 2, fmt.Sprintf(`{"t":2,"key":%q,"duration_ms":5}`, obj.Key), errcode.InvalidArgument},
		{"a thumbnail of a voice note", a, 3, `{"t":3,"key":"voc/0123456789012345678901","thumb_key":"img/0123456789012345678901"}`, errcode.InvalidArgument},
		{"a forwarded key from a message not shown", outsider, 2, fmt.Sprintf(`{"t":2,"key":%q,"src_msg_id":"%d"}`, obj.Key, mid), errcode.Forbidden},
		{"a file name with a slash", a, 7, `{"t":7,"key":"fil/0123456789012345678901","name":"../x"}`, errcode.InvalidArgument},
	} {
		req := protocol.SendRequest{ToUserID: 23102, ClientMsgID: fmt.Sprintf("img-bad-%d", i), MessageType: tc.mt, Content: json.RawMessage(tc.content)}
		if tc.conn == b {
			req.ToUserID = 23101
		}
		if _, err := tc.conn.Send(ctx, req); !hasCode(err, tc.code) {
			t.Errorf("media message with %s: %v, want %s", tc.name, err, tc.code)
		}
	}

	// A member forwards the picture with src_msg_id.
	fwd, err := b.Send(ctx, protocol.SendRequest{ToUserID: 23103, ClientMsgID: "img-fwd", MessageType: protocol.MessageImage,
		Content: imageContent(obj.Key, fmt.Sprintf(`,"src_msg_id":"%d"`, mid))})
	if err != nil {
		t.Fatalf("forward: %v", err)
	}
	if _, _, err := outsider.DownloadURL(ctx, fwd.MsgID.Int64(), 0, ""); err != nil {
		t.Fatalf("the forward's recipient downloads: %v", err)
	}

	// The URL expires; a recalled message issues no more.
	time.Sleep(3 * time.Second)
	if _, _, err := client.Fetch(ctx, nil, url, 1<<20); storeStatus(err) != http.StatusForbidden {
		t.Errorf("an expired URL: %v, want HTTP 403", err)
	}
	if err := a.Recall(ctx, cid, mid); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.DownloadURL(ctx, mid, cid, ""); !hasCode(err, errcode.NotFound) {
		t.Errorf("download of a recalled message: %v, want 40401", err)
	}
}
