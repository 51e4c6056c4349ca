package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
)

// maxDownload bounds what /download writes: the largest kind (video).
const maxDownload = 200 << 20

// mediaKindOf picks the media kind and message type of a file from the
// type its first bytes show (the server sniffs the same way): pictures
// and voice and video the server accepts go as such, anything else as a
// file.
func mediaKindOf(data []byte) (kind, contentType string, messageType int) {
	ct := http.DetectContentType(data)
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	switch ct {
	case "image/jpeg", "image/png", "image/gif", "image/webp":
		return "image", ct, protocol.MessageImage
	case "audio/ogg", "audio/mpeg", "audio/wave", "audio/webm", "application/ogg":
		if ct == "application/ogg" {
			ct = "audio/ogg"
		}
		return "voice", ct, protocol.MessageVoice
	case "video/mp4", "video/webm":
		return "video", ct, protocol.MessageVideo
	}
	return "file", "application/octet-stream", protocol.MessageFile
}

// sendFile uploads the file at path and sends it to a user or a group.
func (a *app) sendFile(ctx context.Context, sess *client.Session, conn *client.Conn, to int64, group bool, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if len(data) == 0 {
		return errors.New("the file is empty")
	}
	kind, ct, mt := mediaKindOf(data)
	obj, err := conn.Upload(ctx, nil, kind, ct, data)
	if err != nil {
		return err
	}
	c := map[string]any{"t": mt, "key": obj.Key, "size": obj.Size, "content_type": obj.ContentType}
	if mt == protocol.MessageFile {
		c["name"] = filepath.Base(path)
	}
	content, err := json.Marshal(c)
	if err != nil {
		return err
	}
	req := protocol.SendRequest{MessageType: mt, Content: content}
	if group {
		req.GroupID = jsonid.ID(to)
	} else {
		req.ToUserID = jsonid.ID(to)
	}
	ack, err := a.recordSent(sess.Send(ctx, req))
	if err != nil {
		return err
	}
	a.printf("sent %s %s (%d bytes, %s) as msg_id=%d\n", kind, obj.Key, obj.Size, obj.ContentType, ack.MsgID)
	return nil
}

// download saves the media of a message into dir, named after the file's
// name or its key.
func (a *app) download(ctx context.Context, conn *client.Conn, cid, mid int64, dir string) error {
	url, _, err := conn.DownloadURL(ctx, mid, cid, "")
	if err != nil {
		return err
	}
	data, ct, err := client.Fetch(ctx, nil, url, maxDownload)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("%d", mid)
	if ext := extension(ct); ext != "" {
		name += ext
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		return err
	}
	a.printf("saved #%d (%d bytes, %s) to %s\n", mid, len(data), ct, p)
	return nil
}

// extension is a file extension for the content types media carry.
func extension(ct string) string {
	switch ct {
	case "image/jpeg":
		return ".jpg"
	case "image/png":
		return ".png"
	case "image/gif":
		return ".gif"
	case "image/webp":
		return ".webp"
	case "audio/ogg":
		return ".ogg"
	case "audio/mpeg":
		return ".mp3"
	case "video/mp4":
		return ".mp4"
	case "video/webm":
		return ".webm"
	}
	return ""
}
