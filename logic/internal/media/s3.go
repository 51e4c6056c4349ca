package media

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/sparkim/spark/pkg/config"
)

// S3 keeps objects in one bucket of an S3 server. Clients upload and
// download with SigV4 presigned URLs straight to and from it; logic only
// signs, and reads an object's size, type and first bytes on complete.
type S3 struct {
	c      *minio.Client
	bucket string
}

// NewS3 returns the store of cfg. It makes no request: Check does.
func NewS3(cfg config.MediaS3) (*S3, error) {
	c, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure: cfg.Secure,
		Region: cfg.Region,
		// Path-style URLs: a bucket name is not a DNS name on a private
		// S3 server.
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		return nil, fmt.Errorf("media: s3 client: %w", err)
	}
	return &S3{c: c, bucket: cfg.Bucket}, nil
}

// Check reports whether the bucket exists and the credentials may see it.
func (s *S3) Check(ctx context.Context) error {
	ok, err := s.c.BucketExists(ctx, s.bucket)
	if err != nil {
		return fmt.Errorf("media: s3 bucket %s: %w", s.bucket, err)
	}
	if !ok {
		return fmt.Errorf("media: s3 bucket %s does not exist", s.bucket)
	}
	return nil
}

// PresignUpload implements Storage: a PUT whose signature covers the
// Content-Length and Content-Type headers, so the store refuses another
// size or type as a signature mismatch.
func (s *S3) PresignUpload(ctx context.Context, key string, size int64, contentType string, ttl time.Duration) (Upload, error) {
	if _, err := KeyKind(key); err != nil {
		return Upload{}, err
	}
	h := http.Header{}
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	h.Set("If-None-Match", "*")
	u, err := s.c.PresignHeader(ctx, http.MethodPut, s.bucket, key, ttl, url.Values{}, h)
	if err != nil {
		return Upload{}, fmt.Errorf("media: presign put %s: %w", key, err)
	}
	// Content-Length is set by every HTTP client from the body; a browser
	// refuses to set it by hand, so only the type is handed out.
	return Upload{Method: http.MethodPut, URL: u.String(), Headers: map[string]string{"Content-Type": contentType, "If-None-Match": "*"},
		Expires: time.Now().Add(ttl)}, nil
}

// PresignDownload implements Storage.
func (s *S3) PresignDownload(ctx context.Context, key string, ttl time.Duration) (string, time.Time, error) {
	if _, err := KeyKind(key); err != nil {
		return "", time.Time{}, err
	}
	q := url.Values{}
	// Served as a download of the stored type, never rendered as a page of
	// the bucket's origin.
	q.Set("response-content-disposition", "attachment")
	u, err := s.c.PresignedGetObject(ctx, s.bucket, key, ttl, q)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("media: presign get %s: %w", key, err)
	}
	return u.String(), time.Now().Add(ttl), nil
}

// notFound reports whether err is the store's "no such key".
func notFound(err error) bool {
	r := minio.ToErrorResponse(err)
	return r.Code == minio.NoSuchKey || r.StatusCode == http.StatusNotFound
}

// Head implements Storage.
func (s *S3) Head(ctx context.Context, key string) (Object, error) {
	if _, err := KeyKind(key); err != nil {
		return Object{}, err
	}
	st, err := s.c.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if notFound(err) {
		return Object{}, ErrNotFound
	}
	if err != nil {
		return Object{}, fmt.Errorf("media: head %s: %w", key, err)
	}
	return Object{Size: st.Size, ContentType: st.ContentType}, nil
}

// ReadHead implements Storage with a ranged GET.
func (s *S3) ReadHead(ctx context.Context, key string, n int64) ([]byte, error) {
	if _, err := KeyKind(key); err != nil {
		return nil, err
	}
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(0, n-1); err != nil {
		return nil, fmt.Errorf("media: read %s: %w", key, err)
	}
	obj, err := s.c.GetObject(ctx, s.bucket, key, opts)
	if err != nil {
		return nil, fmt.Errorf("media: read %s: %w", key, err)
	}
	defer obj.Close()
	b, err := io.ReadAll(io.LimitReader(obj, n))
	if notFound(err) {
		return nil, ErrNotFound
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("media: read %s: %w", key, err)
	}
	return b, nil
}
