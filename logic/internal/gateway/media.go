package gateway

import (
	"context"
	"fmt"

	"github.com/sparkim/spark/logic/internal/media"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
)

// mediaCommand answers MEDIA (23): uploads, completes and downloads of
// the session's user by presigned URL (docs/protocol.md "Media").
func (h *Handler) mediaCommand(ctx context.Context, user int64, body []byte) ([]byte, error) {
	if h.Media == nil {
		return nil, errcode.New(errcode.Internal, "media is not configured")
	}
	var r protocol.MediaRequest
	if err := decodeFields(body, &r); err != nil {
		return nil, err
	}
	switch r.Op {
	case protocol.MediaOpUpload:
		g, err := h.Media.Upload(ctx, media.UploadRequest{UserID: user, Kind: r.Kind, Size: r.Size, ContentType: r.ContentType})
		if err != nil {
			return nil, err
		}
		return protocol.Marshal(protocol.MediaUploadReply{Key: g.Key, Method: g.Upload.Method, URL: g.Upload.URL,
			Headers: g.Upload.Headers, ExpiresAt: g.Upload.Expires.UnixMilli()})
	case protocol.MediaOpComplete:
		rec, err := h.Media.Complete(ctx, user, r.Key)
		if err != nil {
			return nil, err
		}
		return protocol.Marshal(protocol.MediaObject{Key: rec.Key, Kind: rec.Kind, Size: rec.Size, ContentType: rec.ContentType})
	case protocol.MediaOpDownload:
		d, err := h.Media.Download(ctx, media.DownloadRequest{UserID: user, MsgID: int64(r.MsgID),
			ConversationID: int64(r.ConversationID), Key: r.Key})
		if err != nil {
			return nil, err
		}
		return protocol.Marshal(protocol.MediaDownloadReply{Key: d.Key, URL: d.URL, ExpiresAt: d.Expires.UnixMilli()})
	case "":
		return nil, errcode.Invalid("op", "required")
	}
	return nil, errcode.Invalid("op", fmt.Sprintf("unknown op %q (upload, complete, download)", r.Op))
}
