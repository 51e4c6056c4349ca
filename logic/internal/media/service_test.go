package media

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/errcode"
)

// memRecords keeps upload records, messages and memberships in memory:
// the seam between the service's rules and MySQL.
type memRecords struct {
	media    map[string]store.Media
	messages map[int64]store.Message
	members  map[[2]int64]bool
}

func newMemRecords() *memRecords {
	return &memRecords{media: map[string]store.Media{}, messages: map[int64]store.Message{}, members: map[[2]int64]bool{}}
}

func (m *memRecords) InsertMedia(_ context.Context, r store.Media) error {
	m.media[r.Key] = r
	return nil
}
func (m *memRecords) GetMedia(_ context.Context, key string) (store.Media, error) {
	r, ok := m.media[key]
	if !ok {
		return store.Media{}, store.ErrNotFound
	}
	return r, nil
}
func (m *memRecords) CompleteMedia(_ context.Context, key, ct string, now time.Time) error {
	r := m.media[key]
	if !r.Completed() {
		r.ContentType, r.CompletedAt = ct, sql.NullTime{Time: now, Valid: true}
		m.media[key] = r
	}
	return nil
}
func (m *memRecords) GetMessage(_ context.Context, id, cid int64) (store.Message, error) {
	msg, ok := m.messages[id]
	if !ok || cid != 0 && msg.ConversationID != cid {
		return store.Message{}, store.ErrNotFound
	}
	return msg, nil
}
func (m *memRecords) GetMember(_ context.Context, cid, uid int64) (store.Member, error) {
	if !m.members[[2]int64{cid, uid}] {
		return store.Member{}, store.ErrNotFound
	}
	return store.Member{ConversationID: cid, UserID: uid}, nil
}

func newService(t *testing.T) (*Service, *memRecords) {
	t.Helper()
	l, _ := newLocal(t)
	rec := newMemRecords()
	cfg := config.Default().Logic.Media
	return NewService(rec, l, cfg), rec
}

// completed uploads data for user as kind and completes it.
func completed(t *testing.T, s *Service, user int64, kind, ct string, data []byte) string {
	t.Helper()
	ctx := context.Background()
	g, err := s.Upload(ctx, UploadRequest{UserID: user, Kind: kind, Size: int64(len(data)), ContentType: ct})
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := do(t, g.Upload.Method, g.Upload.URL, data, ct); code != 200 {
		t.Fatalf("upload answered %d", code)
	}
	if _, err := s.Complete(ctx, user, g.Key); err != nil {
		t.Fatal(err)
	}
	return g.Key
}

func codeOf(err error) errcode.Code {
	if err == nil {
		return errcode.OK
	}
	c, _ := errcode.Of(err)
	return c
}

func TestCheckMessageRequiresOwnCompletedKeysOfTheRightKindOrAForward(t *testing.T) {
	s, rec := newService(t)
	ctx := context.Background()
	const alice, bob, carol, conv, other = 1, 2, 3, 100, 200
	img := completed(t, s, alice, "image", "image/png", pngBytes)
	bobImg := completed(t, s, bob, "image", "image/png", pngBytes)
	file := completed(t, s, alice, "file", "application/pdf", []byte("%PDF-1.4 not much"))
	pending, err := s.Upload(ctx, UploadRequest{UserID: alice, Kind: "image", Size: 10, ContentType: "image/png"})
	if err != nil {
		t.Fatal(err)
	}
	rec.members[[2]int64{conv, alice}], rec.members[[2]int64{conv, bob}] = true, true
	rec.messages[7] = store.Message{ID: 7, ConversationID: conv, MessageType: 2, Status: store.MessageNormal,
		Content: json.RawMessage(fmt.Sprintf(`{"t":2,"key":%q}`, img))}
	rec.messages[8] = store.Message{ID: 8, ConversationID: conv, MessageType: 2, Status: 2,
		Content: json.RawMessage(fmt.Sprintf(`{"t":2,"key":%q}`, img))}

	for _, tc := range []struct {
		name    string
		from    Sender
		mt      int
		content string
		want    errcode.Code
	}{
		{"own image", Sender{UserID: alice}, 2, fmt.Sprintf(`{"t":2,"key":%q,"width":640,"height":480}`, img), errcode.OK},
		{"own image with its thumbnail", Sender{UserID: alice}, 2, fmt.Sprintf(`{"t":2,"key":%q,"thumb_key":%q}`, img, img), errcode.OK},
		{"own file with a name", Sender{UserID: alice}, 7, fmt.Sprintf(`{"t":7,"key":%q,"name":"report.pdf","size":17}`, file), errcode.OK},
		{"text is not checked", Sender{UserID: alice}, 1, `{"t":1,"text":"hi"}`, errcode.OK},
		{"the business sends any completed key", Sender{UserID: carol, Trusted: true}, 2, fmt.Sprintf(`{"t":2,"key":%q}`, bobImg), errcode.OK},
		{"a forward of a message the sender sees", Sender{UserID: bob}, 2, fmt.Sprintf(`{"t":2,"key":%q,"src_msg_id":"7"}`, img), errcode.OK},
		{"another user's key", Sender{UserID: alice}, 2, fmt.Sprintf(`{"t":2,"key":%q}`, bobImg), errcode.Forbidden},
		{"a forward by a non-member", Sender{UserID: carol}, 2, fmt.Sprintf(`{"t":2,"key":%q,"src_msg_id":"7"}`, img), errcode.Forbidden},
		{"a forward of a recalled message", Sender{UserID: bob}, 2, fmt.Sprintf(`{"t":2,"key":%q,"src_msg_id":"8"}`, img), errcode.Forbidden},
		{"a forward naming a key its message does not carry", Sender{UserID: alice}, 2, fmt.Sprintf(`{"t":2,"key":%q,"src_msg_id":"7"}`, bobImg), errcode.Forbidden},
		{"a pending upload", Sender{UserID: alice}, 2, fmt.Sprintf(`{"t":2,"key":%q}`, pending.Key), errcode.Forbidden},
		{"the business sends a pending upload", Sender{UserID: alice, Trusted: true}, 2, fmt.Sprintf(`{"t":2,"key":%q}`, pending.Key), errcode.Forbidden},
		{"no key", Sender{UserID: alice}, 2, `{"t":2,"url":"http://x/y.png"}`, errcode.InvalidArgument},
		{"a key that is a number", Sender{UserID: alice}, 2, `{"t":2,"key":5}`, errcode.InvalidArgument},
		{"a file key as an image", Sender{UserID: alice}, 2, fmt.Sprintf(`{"t":2,"key":%q}`, file), errcode.InvalidArgument},
		{"an image key as a voice note", Sender{UserID: alice}, 3, fmt.Sprintf(`{"t":3,"key":%q}`, img), errcode.InvalidArgument},
		{"a thumbnail on a file", Sender{UserID: alice}, 7, fmt.Sprintf(`{"t":7,"key":%q,"thumb_key":%q}`, file, img), errcode.InvalidArgument},
		{"a width past the bound", Sender{UserID: alice}, 2, fmt.Sprintf(`{"t":2,"key":%q,"width":100001}`, img), errcode.InvalidArgument},
		{"a fractional height", Sender{UserID: alice}, 2, fmt.Sprintf(`{"t":2,"key":%q,"height":1.5}`, img), errcode.InvalidArgument},
		{"a duration on a file", Sender{UserID: alice}, 7, fmt.Sprintf(`{"t":7,"key":%q,"duration_ms":5}`, file), errcode.InvalidArgument},
		{"a size other than stored", Sender{UserID: alice}, 2, fmt.Sprintf(`{"t":2,"key":%q,"size":1}`, img), errcode.InvalidArgument},
		{"a type other than sniffed", Sender{UserID: alice}, 2, fmt.Sprintf(`{"t":2,"key":%q,"content_type":"image/jpeg"}`, img), errcode.InvalidArgument},
		{"a name on an image", Sender{UserID: alice}, 2, fmt.Sprintf(`{"t":2,"key":%q,"name":"x.png"}`, img), errcode.InvalidArgument},
		{"a name with a control character", Sender{UserID: alice}, 7, fmt.Sprintf(`{"t":7,"key":%q,"name":"a\u0007b"}`, file), errcode.InvalidArgument},
		{"an empty name", Sender{UserID: alice}, 7, fmt.Sprintf(`{"t":7,"key":%q,"name":""}`, file), errcode.InvalidArgument},
		{"a src_msg_id that is not an id", Sender{UserID: bob}, 2, fmt.Sprintf(`{"t":2,"key":%q,"src_msg_id":"x"}`, img), errcode.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.CheckMessage(ctx, tc.from, conv, tc.mt, []byte(tc.content))
			if got := codeOf(err); got != tc.want {
				t.Fatalf("CheckMessage = %v (%s), want %s", err, got, tc.want)
			}
		})
	}
}

func TestCompleteChecksSizeAndSniffedType(t *testing.T) {
	s, rec := newService(t)
	ctx := context.Background()
	const alice = 1
	g, err := s.Upload(ctx, UploadRequest{UserID: alice, Kind: "image", Size: int64(len(pngBytes)), ContentType: "image/png"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Complete(ctx, alice, g.Key); codeOf(err) != errcode.NotFound {
		t.Fatalf("complete before upload = %v, want 40401", err)
	}
	do(t, g.Upload.Method, g.Upload.URL, pngBytes, "image/png")
	if _, err := s.Complete(ctx, 2, g.Key); codeOf(err) != errcode.NotFound {
		t.Fatalf("complete by another user = %v, want 40401", err)
	}
	obj, err := s.Complete(ctx, alice, g.Key)
	if err != nil || obj.ContentType != "image/png" || obj.Size != int64(len(pngBytes)) {
		t.Fatalf("complete = %+v, %v", obj, err)
	}
	// A GIF declared as a PNG is recorded as what its bytes are.
	gif := append([]byte("GIF89a"), make([]byte, 30)...)
	g2, _ := s.Upload(ctx, UploadRequest{UserID: alice, Kind: "image", Size: int64(len(gif)), ContentType: "image/png"})
	do(t, g2.Upload.Method, g2.Upload.URL, gif, "image/png")
	if obj, err := s.Complete(ctx, alice, g2.Key); err != nil || obj.ContentType != "image/gif" {
		t.Fatalf("GIF declared as PNG completes as %+v, %v; want image/gif", obj, err)
	}
	// Not a picture at all.
	html := []byte("<html><script>alert(1)</script></html>")
	g3, _ := s.Upload(ctx, UploadRequest{UserID: alice, Kind: "image", Size: int64(len(html)), ContentType: "image/png"})
	do(t, g3.Upload.Method, g3.Upload.URL, html, "image/png")
	if _, err := s.Complete(ctx, alice, g3.Key); codeOf(err) != errcode.InvalidArgument {
		t.Fatalf("HTML as an image = %v, want 40001", err)
	}
	if rec.media[g3.Key].Completed() {
		t.Fatal("a refused object was marked completed")
	}
}

func TestDownloadOnlyForMembersOfAMessageNotWithdrawn(t *testing.T) {
	s, rec := newService(t)
	ctx := context.Background()
	const alice, bob, carol, conv = 1, 2, 3, 100
	img := completed(t, s, alice, "image", "image/png", pngBytes)
	rec.members[[2]int64{conv, alice}], rec.members[[2]int64{conv, bob}] = true, true
	content := json.RawMessage(fmt.Sprintf(`{"t":2,"key":%q,"thumb_key":%q}`, img, img))
	for id, status := range map[int64]int{7: store.MessageNormal, 8: 2, 9: 3} {
		rec.messages[id] = store.Message{ID: id, ConversationID: conv, MessageType: 2, Status: status, Content: content}
	}
	rec.messages[10] = store.Message{ID: 10, ConversationID: conv, MessageType: 1, Status: store.MessageNormal, Content: json.RawMessage(`{"t":1,"text":"hi"}`)}
	for _, tc := range []struct {
		name string
		req  DownloadRequest
		want errcode.Code
	}{
		{"a member", DownloadRequest{UserID: bob, MsgID: 7}, errcode.OK},
		{"a member, the thumbnail", DownloadRequest{UserID: bob, MsgID: 7, Key: img}, errcode.OK},
		{"a member, with the conversation", DownloadRequest{UserID: bob, MsgID: 7, ConversationID: conv}, errcode.OK},
		{"the uploader by key", DownloadRequest{UserID: alice, Key: img}, errcode.OK},
		{"a non-member", DownloadRequest{UserID: carol, MsgID: 7}, errcode.Forbidden},
		{"another user by key", DownloadRequest{UserID: bob, Key: img}, errcode.NotFound},
		{"a recalled message", DownloadRequest{UserID: bob, MsgID: 8}, errcode.NotFound},
		{"a message deleted for everyone", DownloadRequest{UserID: bob, MsgID: 9}, errcode.NotFound},
		{"a text message", DownloadRequest{UserID: bob, MsgID: 10}, errcode.NotFound},
		{"the wrong conversation", DownloadRequest{UserID: bob, MsgID: 7, ConversationID: conv + 1}, errcode.NotFound},
		{"a negative id", DownloadRequest{UserID: bob, MsgID: -7}, errcode.InvalidArgument},
		{"nothing named", DownloadRequest{UserID: bob}, errcode.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := s.Download(ctx, tc.req)
			if got := codeOf(err); got != tc.want {
				t.Fatalf("Download = %v (%s), want %s", err, got, tc.want)
			}
			if err == nil && (d.Key != img || d.URL == "" || !d.Expires.After(time.Now())) {
				t.Fatalf("Download = %+v", d)
			}
		})
	}
}
