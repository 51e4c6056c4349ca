package message

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/dialog"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
)

// replySnapshot is the snapshot a reply to msgID in conversation cid
// carries: the original's id, sender, type and preview text. The original
// must be a normal message of the same conversation: 40401 otherwise, so
// a forged or foreign id reveals nothing, and a recalled or deleted
// original cannot be quoted (its content is gone).
func (s *Service) replySnapshot(ctx context.Context, cid, msgID int64) ([]byte, error) {
	orig, err := s.store.GetMessage(ctx, msgID, cid)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errcode.New(errcode.NotFound, "reply_to: no such message in this conversation")
	}
	if err != nil {
		return nil, errcode.Unavailable("reply_to lookup", err)
	}
	if orig.Status != store.MessageNormal {
		return nil, errcode.New(errcode.NotFound, "reply_to: the message was recalled or deleted")
	}
	return json.Marshal(dialog.PreviewOf(orig.ID, orig.SenderID, orig.MessageType, orig.Content))
}

// addReply sets the reply snapshot into content and checks the size rule
// again, since the snapshot makes the message longer.
func (s *Service) addReply(req *SendRequest, content, snap []byte) ([]byte, error) {
	out, err := protocol.WithReply(content, snap)
	if err != nil {
		return nil, errcode.Wrap(errcode.InvalidArgument, "content", err)
	}
	if !protocol.MessageFits(len(out), len(req.ClientMsgID), s.cfg.MaxFrameSize) || len(out) > protocol.MaxContentBytes {
		return nil, errcode.New(errcode.TooLarge, "message with its reply_to snapshot over the size rule")
	}
	return out, nil
}
