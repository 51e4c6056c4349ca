package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/tests/framework"
)

// TestMediaOnSeaweedFSS3UploadSendDownloadAndRefusals runs the picture
// path against a real S3 server (SeaweedFS's gateway, which checks SigV4
// signatures and presigned expiry): upload by presigned PUT, complete,
// send, download by a member with the same bytes; a body of another size
// or type and an expired URL refused by the store's signature check, a
// non-member's download and another user's key refused by logic.
func TestMediaOnSeaweedFSS3UploadSendDownloadAndRefusals(t *testing.T) {
	t.Parallel()
	s3 := framework.StartSeaweedFS(t)
	s3.CreateBucket(t, "spark-media")
	c := framework.NewCluster(t, framework.Options{Gates: 1, LogicEnv: append(s3.LogicEnv("spark-media"),
		"IM_LOGIC_MEDIA_DOWNLOAD_TTL=2s")})
	ctx := ctxT(t, 2*time.Minute)
	a := c.Login(t, 0, 23201, "a")
	b := c.Login(t, 0, 23202, "b")
	outsider := c.Login(t, 0, 23203, "c")

	up, err := a.RequestUpload(ctx, "image", int64(len(tinyPNG)), "image/png")
	if err != nil {
		t.Fatal(err)
	}
	if want := "http://" + s3.Endpoint + "/spark-media/" + up.Key; len(up.URL) < len(want) || up.URL[:len(want)] != want {
		t.Fatalf("upload URL %s, want one of the bucket's object %s", up.URL, want)
	}
	// The signature binds the size and the type.
	if err := client.Put(ctx, nil, up, tinyPNG[:len(tinyPNG)-3]); storeStatus(err) != http.StatusForbidden {
		t.Errorf("a body of another size: %v, want HTTP 403 from the signature check", err)
	}
	wrongType := up
	wrongType.Headers = map[string]string{"Content-Type": "text/html"}
	if err := client.Put(ctx, nil, wrongType, tinyPNG); storeStatus(err) != http.StatusForbidden {
		t.Errorf("a body of another type: %v, want HTTP 403 from the signature check", err)
	}
	if _, err := a.CompleteUpload(ctx, up.Key); !hasCode(err, errcode.NotFound) {
		t.Errorf("complete with nothing stored: %v, want 40401", err)
	}
	if err := client.Put(ctx, nil, up, tinyPNG); err != nil {
		t.Fatal(err)
	}
	if err := client.Put(ctx, nil, up, tinyPNG); storeStatus(err) != http.StatusPreconditionFailed {
		t.Errorf("a second upload to the key: %v, want HTTP 412 (the object is written once)", err)
	}
	if _, err := b.CompleteUpload(ctx, up.Key); !hasCode(err, errcode.NotFound) {
		t.Errorf("complete of another user's key: %v, want 40401", err)
	}
	obj, err := a.CompleteUpload(ctx, up.Key)
	if err != nil {
		t.Fatal(err)
	}
	if obj.ContentType != "image/png" || obj.Size != int64(len(tinyPNG)) {
		t.Fatalf("completed %+v", obj)
	}
	if _, err := b.Send(ctx, protocol.SendRequest{ToUserID: 23201, ClientMsgID: "s3-steal", MessageType: protocol.MessageImage,
		Content: imageContent(obj.Key, "")}); !hasCode(err, errcode.Forbidden) {
		t.Errorf("sending another user's key: %v, want 40301", err)
	}
	ack, err := a.Send(ctx, protocol.SendRequest{ToUserID: 23202, ClientMsgID: "s3-img", MessageType: protocol.MessageImage,
		Content: imageContent(obj.Key, "")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nextMessage(b, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	url, _, err := b.DownloadURL(ctx, ack.MsgID.Int64(), ack.ConversationID.Int64(), "")
	if err != nil {
		t.Fatal(err)
	}
	got, ct, err := client.Fetch(ctx, nil, url, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, tinyPNG) || ct != "image/png" {
		t.Fatalf("downloaded %d bytes of %s, want the %d uploaded bytes of image/png", len(got), ct, len(tinyPNG))
	}
	if _, _, err := outsider.DownloadURL(ctx, ack.MsgID.Int64(), 0, ""); !hasCode(err, errcode.Forbidden) {
		t.Errorf("download by a non-member: %v, want 40301", err)
	}
	// S3 presigned URLs carry whole seconds: wait past the 2 s life.
	time.Sleep(3500 * time.Millisecond)
	if _, _, err := client.Fetch(ctx, nil, url, 1<<20); storeStatus(err) != http.StatusForbidden {
		t.Errorf("an expired URL: %v, want HTTP 403", err)
	}
	tampered := url + fmt.Sprint("&x-extra=1")
	if _, _, err := client.Fetch(ctx, nil, tampered, 1<<20); storeStatus(err) == 0 {
		t.Errorf("a URL changed after signing was served")
	}
}
