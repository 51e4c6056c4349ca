package media

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
)

// Records is what the media service keeps in MySQL: the upload records
// and, to authorize downloads and forwards, messages and memberships.
// *store.Store implements it.
type Records interface {
	InsertMedia(ctx context.Context, m store.Media) error
	GetMedia(ctx context.Context, key string) (store.Media, error)
	CompleteMedia(ctx context.Context, key, contentType string, now time.Time) error
	GetMessage(ctx context.Context, msgID, conversationID int64) (store.Message, error)
	GetMember(ctx context.Context, conversationID, userID int64) (store.Member, error)
}

// Service is the media domain: it hands out upload requests for keys it
// chooses, checks completed uploads, checks the keys a message carries and
// issues downloads to the members of the conversation holding them. Bytes
// never pass through it (docs/decisions.md 103).
type Service struct {
	records     Records
	storage     Storage
	limits      Limits
	uploadTTL   time.Duration
	downloadTTL time.Duration
	now         func() time.Time
}

// NewService returns the media service over records and storage, with
// cfg's limits and lifetimes (a checked config: the server trusts it).
func NewService(records Records, storage Storage, cfg config.Media) *Service {
	return &Service{records: records, storage: storage, limits: Limits(cfg.Limits),
		uploadTTL: cfg.UploadTTL, downloadTTL: cfg.DownloadTTL, now: time.Now}
}

// UploadRequest asks for one upload.
type UploadRequest struct {
	UserID      int64
	Kind        string
	Size        int64
	ContentType string
}

// Grant is an upload handed out: the key and the request that stores it.
type Grant struct {
	Key    string
	Upload Upload
}

// Upload records a fresh key of the requested kind for the user and
// returns the presigned request that stores exactly Size bytes of
// ContentType under it.
func (s *Service) Upload(ctx context.Context, r UploadRequest) (Grant, error) {
	kind, err := ParseKind(r.Kind)
	if err != nil {
		return Grant{}, errcode.Invalid("kind", fmt.Sprintf("unknown kind %q (image, voice, video, file, avatar)", r.Kind))
	}
	if r.Size < 1 {
		return Grant{}, errcode.Invalid("size", "must be a positive byte count")
	}
	if max := s.limits.Max(kind); r.Size > max {
		return Grant{}, errcode.New(errcode.TooLarge, fmt.Sprintf("%s over %d bytes (logic.media.limits.%s)", kind, max, kind))
	}
	if !validContentType(r.ContentType) {
		return Grant{}, errcode.Invalid("content_type", "must be a MIME type such as image/png")
	}
	if !kind.Accepts(r.ContentType) {
		return Grant{}, errcode.Invalid("content_type", fmt.Sprintf("%s does not accept %s", kind, r.ContentType))
	}
	key, err := NewKey(kind)
	if err != nil {
		return Grant{}, errcode.Wrap(errcode.Internal, "", err)
	}
	up, err := s.storage.PresignUpload(ctx, key, r.Size, r.ContentType, s.uploadTTL)
	if err != nil {
		return Grant{}, errcode.Unavailable("media presign upload", err)
	}
	// The record first: a key is usable only once it is recorded, and an
	// upload whose record failed is never completed.
	if err := s.records.InsertMedia(ctx, store.Media{Key: key, UploaderID: r.UserID, Kind: string(kind),
		Size: r.Size, ContentType: r.ContentType, CreatedAt: s.now()}); err != nil {
		return Grant{}, errcode.Unavailable("media record", err)
	}
	return Grant{Key: key, Upload: up}, nil
}

// validContentType reports whether ct looks like type/subtype, without
// parameters, spaces or control characters.
func validContentType(ct string) bool {
	if len(ct) < 3 || len(ct) > 127 || strings.Count(ct, "/") != 1 {
		return false
	}
	for _, c := range ct {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("/.+-_", c)) {
			return false
		}
	}
	return !strings.HasPrefix(ct, "/") && !strings.HasSuffix(ct, "/")
}

// Record is a completed object as logic knows it.
type Record struct {
	Key         string
	Kind        string
	Size        int64
	ContentType string
}

// Complete checks the object the user uploaded under key (its size, and
// the type its first bytes show) and makes it usable in messages.
func (s *Service) Complete(ctx context.Context, userID int64, key string) (Record, error) {
	if _, err := KeyKind(key); err != nil {
		return Record{}, errcode.Invalid("key", "not a media key")
	}
	m, err := s.records.GetMedia(ctx, key)
	if errors.Is(err, store.ErrNotFound) || err == nil && m.UploaderID != userID {
		// Alike: a key's existence is not revealed to another user.
		return Record{}, errcode.New(errcode.NotFound, "no upload of yours under this key")
	}
	if err != nil {
		return Record{}, errcode.Unavailable("media record", err)
	}
	if m.Completed() {
		return recordOf(m), nil
	}
	obj, err := s.storage.Head(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return Record{}, errcode.New(errcode.NotFound, "nothing uploaded under this key yet")
	}
	if err != nil {
		return Record{}, errcode.Unavailable("media head", err)
	}
	if obj.Size != m.Size {
		return Record{}, errcode.Invalid("key", fmt.Sprintf("the object holds %d bytes, not the %d declared", obj.Size, m.Size))
	}
	head, err := s.storage.ReadHead(ctx, key, SniffLen)
	if err != nil {
		return Record{}, errcode.Unavailable("media read", err)
	}
	kind := Kind(m.Kind)
	sniffed := Sniff(head)
	if kind != KindFile && !kind.Accepts(sniffed) {
		return Record{}, errcode.Invalid("key", fmt.Sprintf("the object is %s, which %s does not accept", sniffed, kind))
	}
	ct := m.ContentType
	if kind != KindFile {
		// What the bytes are, not what the client said: a viewer trusts it.
		ct = sniffed
	}
	if err := s.records.CompleteMedia(ctx, key, ct, s.now()); err != nil {
		return Record{}, errcode.Unavailable("media complete", err)
	}
	m.ContentType = ct
	return recordOf(m), nil
}

func recordOf(m store.Media) Record {
	return Record{Key: m.Key, Kind: m.Kind, Size: m.Size, ContentType: m.ContentType}
}

// DownloadRequest names the object a user wants to read: a key of the
// message MsgID (ConversationID optional; Key empty means the message's
// "key"), or Key alone for the user's own upload or an avatar.
type DownloadRequest struct {
	UserID         int64
	MsgID          int64
	ConversationID int64
	Key            string
}

// Download is a presigned GET.
type Download struct {
	Key     string
	URL     string
	Expires time.Time
}

// Download issues a short-lived GET of an object the user may read: one
// carried by a message of a conversation they are a member of and that is
// not withdrawn, their own upload, or any avatar.
func (s *Service) Download(ctx context.Context, r DownloadRequest) (Download, error) {
	if r.MsgID < 0 || r.ConversationID < 0 {
		return Download{}, errcode.Invalid("msg_id", "ids are positive")
	}
	if r.Key != "" {
		if _, err := KeyKind(r.Key); err != nil {
			return Download{}, errcode.Invalid("key", "not a media key")
		}
	}
	key := r.Key
	switch {
	case r.MsgID > 0:
		keys, err := s.visibleKeys(ctx, r.UserID, r.MsgID, r.ConversationID)
		if err != nil {
			return Download{}, err
		}
		if key == "" {
			key = keys.Key
		}
		if key == "" || key != keys.Key && key != keys.Thumb {
			return Download{}, errcode.New(errcode.NotFound, "the message carries no such media key")
		}
	case key == "":
		return Download{}, errcode.Invalid("msg_id", "msg_id or key is required")
	default:
		m, err := s.records.GetMedia(ctx, key)
		if errors.Is(err, store.ErrNotFound) || err == nil && !m.Completed() ||
			err == nil && m.UploaderID != r.UserID && Kind(m.Kind) != KindAvatar {
			return Download{}, errcode.New(errcode.NotFound, "no object of yours under this key")
		}
		if err != nil {
			return Download{}, errcode.Unavailable("media record", err)
		}
	}
	url, exp, err := s.storage.PresignDownload(ctx, key, s.downloadTTL)
	if err != nil {
		return Download{}, errcode.Unavailable("media presign download", err)
	}
	return Download{Key: key, URL: url, Expires: exp}, nil
}

// visibleKeys returns the media keys of a message the user can see: a
// member of its conversation, the message neither recalled nor deleted
// for everyone (either stops new downloads at once).
func (s *Service) visibleKeys(ctx context.Context, userID, msgID, conversationID int64) (contentKeys, error) {
	msg, err := s.records.GetMessage(ctx, msgID, conversationID)
	if errors.Is(err, store.ErrNotFound) {
		return contentKeys{}, errcode.New(errcode.NotFound, "message not found")
	}
	if err != nil {
		return contentKeys{}, errcode.Unavailable("message", err)
	}
	if _, err := s.records.GetMember(ctx, msg.ConversationID, userID); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return contentKeys{}, errcode.New(errcode.Forbidden, "not a member of the conversation")
		}
		return contentKeys{}, errcode.Unavailable("member", err)
	}
	if msg.Status != store.MessageNormal {
		return contentKeys{}, errcode.New(errcode.NotFound, "the message was withdrawn")
	}
	if !IsMediaType(msg.MessageType) {
		return contentKeys{}, errcode.New(errcode.NotFound, "the message carries no media")
	}
	var k contentKeys
	_ = json.Unmarshal(msg.Content, &k) // stored content was checked when sent
	return k, nil
}

// kindOfType is the media kind each media message type carries.
var kindOfType = map[int]Kind{
	protocol.MessageImage: KindImage, protocol.MessageVoice: KindVoice,
	protocol.MessageVideo: KindVideo, protocol.MessageFile: KindFile,
}

// IsMediaType reports whether message type t carries a media key.
func IsMediaType(t int) bool { _, ok := kindOfType[t]; return ok }

// contentKeys are the keys a media message's content names.
type contentKeys struct {
	Key   string `json:"key"`
	Thumb string `json:"thumb_key"`
}

// mediaContent is the part of a media message's content the server
// checks; the rest is the application's.
type mediaContent struct {
	Key         *string          `json:"key"`
	Thumb       *string          `json:"thumb_key"`
	SrcMsgID    *json.RawMessage `json:"src_msg_id"`
	Width       *json.Number     `json:"width"`
	Height      *json.Number     `json:"height"`
	DurationMS  *json.Number     `json:"duration_ms"`
	Size        *json.Number     `json:"size"`
	ContentType *string          `json:"content_type"`
	Name        *string          `json:"name"`
}

// Sender is who sends a media message. An API send (the business on a
// user's behalf, or a system message) may carry keys of any completed
// upload: the business is trusted with its users' media.
type Sender struct {
	UserID  int64
	Trusted bool
}

// CheckMessage checks the media a message of messageType carries into
// conversationID: a key (and an image's or video's thumb_key) of the
// right kind, completed, and the sender's own or forwarded from a message
// the sender can see (src_msg_id); the metadata the server knows must
// match. Messages of other types pass unchecked.
func (s *Service) CheckMessage(ctx context.Context, from Sender, conversationID int64, messageType int, content []byte) error {
	kind, ok := kindOfType[messageType]
	if !ok {
		return nil
	}
	var c mediaContent
	d := json.NewDecoder(bytes.NewReader(content))
	d.UseNumber()
	if err := d.Decode(&c); err != nil {
		return errcode.Invalid("content", "media fields have the wrong type")
	}
	if c.Key == nil {
		return errcode.Invalid("content.key", "required for a media message")
	}
	if err := checkMeta(kind, &c); err != nil {
		return err
	}
	var forwarded contentKeys
	if c.SrcMsgID != nil {
		id, err := parseID(*c.SrcMsgID)
		if err != nil {
			return errcode.Invalid("content.src_msg_id", "must be a message id")
		}
		if forwarded, err = s.visibleKeys(ctx, from.UserID, id, 0); err != nil {
			if code, _ := errcode.Of(err); code == errcode.NotFound || code == errcode.Forbidden {
				return errcode.New(errcode.Forbidden, "content.src_msg_id: not a message with media you can see")
			}
			return err
		}
	}
	m, err := s.checkKey(ctx, from, "content.key", *c.Key, kind, forwarded)
	if err != nil {
		return err
	}
	if c.Size != nil && c.Size.String() != fmt.Sprint(m.Size) {
		return errcode.Invalid("content.size", fmt.Sprintf("the object holds %d bytes", m.Size))
	}
	if c.ContentType != nil && *c.ContentType != m.ContentType {
		return errcode.Invalid("content.content_type", fmt.Sprintf("the object is %s", m.ContentType))
	}
	if c.Thumb != nil {
		if _, err := s.checkKey(ctx, from, "content.thumb_key", *c.Thumb, KindImage, forwarded); err != nil {
			return err
		}
	}
	return nil
}

// checkKey checks one key a message carries.
func (s *Service) checkKey(ctx context.Context, from Sender, field, key string, want Kind, forwarded contentKeys) (store.Media, error) {
	k, err := KeyKind(key)
	if err != nil {
		return store.Media{}, errcode.Invalid(field, "not a media key")
	}
	if k != want {
		return store.Media{}, errcode.Invalid(field, fmt.Sprintf("a %s key, not %s", want, k))
	}
	m, err := s.records.GetMedia(ctx, key)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return store.Media{}, errcode.Unavailable("media record", err)
	}
	usable := err == nil && m.Completed() &&
		(from.Trusted || m.UploaderID == from.UserID || key == forwarded.Key || key == forwarded.Thumb)
	if !usable {
		return store.Media{}, errcode.New(errcode.Forbidden, field+": not a completed upload of yours (forward with src_msg_id)")
	}
	return m, nil
}

// Bounds of the metadata the server checks.
const (
	maxDimension  = 100_000
	maxDurationMS = 86_400_000
	maxNameLen    = 255
)

// checkMeta checks the metadata fields that are present.
func checkMeta(kind Kind, c *mediaContent) error {
	for _, f := range []struct {
		name  string
		v     *json.Number
		max   int64
		kinds []Kind
	}{
		{"width", c.Width, maxDimension, []Kind{KindImage, KindVideo}},
		{"height", c.Height, maxDimension, []Kind{KindImage, KindVideo}},
		{"duration_ms", c.DurationMS, maxDurationMS, []Kind{KindVoice, KindVideo}},
	} {
		if f.v == nil {
			continue
		}
		if !kindIn(kind, f.kinds) {
			return errcode.Invalid("content."+f.name, fmt.Sprintf("not a field of a %s message", kind))
		}
		n, err := f.v.Int64()
		if err != nil || n < 1 || n > f.max {
			return errcode.Invalid("content."+f.name, fmt.Sprintf("must be an integer from 1 to %d", f.max))
		}
	}
	if c.Thumb != nil && kind != KindImage && kind != KindVideo {
		return errcode.Invalid("content.thumb_key", "only images and videos have a thumbnail")
	}
	if c.Size != nil {
		if n, err := c.Size.Int64(); err != nil || n < 1 {
			return errcode.Invalid("content.size", "must be a positive integer")
		}
	}
	if c.Name != nil {
		if kind != KindFile {
			return errcode.Invalid("content.name", "only a file has a name")
		}
		if !validName(*c.Name) {
			return errcode.Invalid("content.name", fmt.Sprintf("1-%d characters, no control characters or slashes", maxNameLen))
		}
	}
	return nil
}

func kindIn(k Kind, ks []Kind) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

// validName reports whether s is a file name a viewer can show and save:
// 1–255 characters, no control characters, no path separators.
func validName(s string) bool {
	n := utf8.RuneCountInString(s)
	if n < 1 || n > maxNameLen || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == '/' || r == '\\' {
			return false
		}
	}
	return true
}

// parseID reads an id written as a JSON string or number.
func parseID(raw json.RawMessage) (int64, error) {
	var id jsonid.ID
	if err := json.Unmarshal(raw, &id); err != nil || id <= 0 {
		return 0, errors.New("not an id")
	}
	return int64(id), nil
}
