package api

import (
	"context"

	"github.com/sparkim/spark/logic/internal/media"
	"github.com/sparkim/spark/pkg/errcode"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// mediaService is the media service, or the INTERNAL of a logic built
// without it.
func (s *Server) mediaService(method string) (*media.Service, error) {
	if s.media == nil {
		return nil, s.statusOf(method, errcode.New(errcode.Internal, "media is not configured"))
	}
	return s.media, nil
}

// CreateUpload hands out an upload for a user.
func (s *Server) CreateUpload(ctx context.Context, req *logicv1.CreateUploadRequest) (*logicv1.CreateUploadReply, error) {
	m, err := s.mediaService("CreateUpload")
	if err != nil {
		return nil, err
	}
	if err := positive("user_id", req.UserId); err != nil {
		return nil, err
	}
	g, err := m.Upload(ctx, media.UploadRequest{UserID: req.UserId, Kind: req.Kind, Size: req.Size, ContentType: req.ContentType})
	if err != nil {
		return nil, s.statusOf("CreateUpload", err)
	}
	return &logicv1.CreateUploadReply{Key: g.Key, Method: g.Upload.Method, Url: g.Upload.URL,
		Headers: g.Upload.Headers, ExpiresAtMs: g.Upload.Expires.UnixMilli()}, nil
}

// CompleteUpload checks a user's uploaded object and makes it usable.
func (s *Server) CompleteUpload(ctx context.Context, req *logicv1.CompleteUploadRequest) (*logicv1.MediaObject, error) {
	m, err := s.mediaService("CompleteUpload")
	if err != nil {
		return nil, err
	}
	if err := positive("user_id", req.UserId); err != nil {
		return nil, err
	}
	rec, err := m.Complete(ctx, req.UserId, req.Key)
	if err != nil {
		return nil, s.statusOf("CompleteUpload", err)
	}
	return &logicv1.MediaObject{Key: rec.Key, Kind: rec.Kind, Size: rec.Size, ContentType: rec.ContentType}, nil
}

// GetDownloadUrl issues a short-lived GET of media the user can see.
func (s *Server) GetDownloadUrl(ctx context.Context, req *logicv1.GetDownloadUrlRequest) (*logicv1.GetDownloadUrlReply, error) {
	m, err := s.mediaService("GetDownloadUrl")
	if err != nil {
		return nil, err
	}
	if err := positive("user_id", req.UserId); err != nil {
		return nil, err
	}
	d, err := m.Download(ctx, media.DownloadRequest{UserID: req.UserId, MsgID: req.MsgId, ConversationID: req.ConversationId, Key: req.Key})
	if err != nil {
		return nil, s.statusOf("GetDownloadUrl", err)
	}
	return &logicv1.GetDownloadUrlReply{Key: d.Key, Url: d.URL, ExpiresAtMs: d.Expires.UnixMilli()}, nil
}
