// Package dialog is the per-user conversation list in Redis: which
// conversations changed (for SYNC_INBOX), their unread counts, previews and
// flags. Deliver applies new messages to it incrementally; logic reads it,
// invalidates entries on reads, recalls, deletes and settings changes, and
// rebuilds missing entries from MySQL (the cold path). Redis holds no
// message bodies, only a short preview.
//
// Keys of a user (all in the user's hash-tag slot):
//
//	im:dialog:{uid}        ZSET  conversation_id → change version
//	im:dver:{uid}          STRING the user's change-version counter
//	im:dconv:{uid}:<cid>   HASH  one conversation's state (see State)
//	im:dbuilt:{uid}        STRING epoch; present once the ZSET holds every
//	                       membership (after a Redis flush it is rebuilt)
//
// The change version is a per-user counter bumped atomically with every
// change, so a sync cursor ("<epoch>.<version>") is exact: a change made
// while a sync is paging gets a version above every one the sync has seen.
package dialog

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sparkim/spark/pkg/rediskey"
)

// ListKey is the ZSET of a user's conversations by change version.
func ListKey(uid int64) string {
	return rediskey.Prefix + "dialog:{" + strconv.FormatInt(uid, 10) + "}"
}

// VersionKey is the user's change-version counter.
func VersionKey(uid int64) string {
	return rediskey.Prefix + "dver:{" + strconv.FormatInt(uid, 10) + "}"
}

// StateKey is the HASH of one conversation's state for a user.
func StateKey(uid, cid int64) string {
	return rediskey.Prefix + "dconv:{" + strconv.FormatInt(uid, 10) + "}:" + strconv.FormatInt(cid, 10)
}

// BuiltKey holds the epoch of a user's list once it is complete.
func BuiltKey(uid int64) string {
	return rediskey.Prefix + "dbuilt:{" + strconv.FormatInt(uid, 10) + "}"
}

// Keys returns the three keys every script takes, in order: state, list,
// version counter.
func Keys(uid, cid int64) []string {
	return []string{StateKey(uid, cid), ListKey(uid), VersionKey(uid)}
}

// State hash fields.
const (
	FieldType      = "type"        // 1 P2P, 2 group
	FieldPeer      = "peer"        // peer user id (P2P)
	FieldGroup     = "group"       // group id (group)
	FieldLastMsgID = "last_msg_id" // newest message id
	FieldLastMsgAt = "last_msg_at" // Unix ms of the newest message
	FieldUnread    = "unread"      // messages from others after last_read
	FieldLastRead  = "last_read"   // the member's last_read_msg_id
	FieldMuted     = "muted"       // "1" when muted
	FieldPinned    = "pinned"      // "1" when pinned
	FieldHiddenAt  = "hidden_at"   // last_msg_id when hidden (0: not)
	FieldPreview   = "preview"     // Preview as JSON
	// FieldBase is the newest message id a cold rebuild counted; messages
	// at or below it are never applied again.
	FieldBase = "base"
	// FieldAppliedPrefix prefixes one field per message counted as unread
	// above base ("a:<msg_id>"), so a redelivered job never counts twice;
	// FieldAppliedCount is how many there are. A rebuild starts them over.
	FieldAppliedPrefix = "a:"
	FieldAppliedCount  = "applied_n"
)

// MaxApplied bounds the counted ids a state records. Past it the state is
// dropped and the next sync recomputes it from MySQL (one COUNT), which
// keeps a long-unread conversation's hash small without ever forgetting an
// id that a redelivery could bring again.
const MaxApplied = 1000

// PreviewTextLen is how many characters of a text message a preview keeps.
const PreviewTextLen = 50

// Preview is the short form of a conversation's newest message.
type Preview struct {
	MsgID       string `json:"msg_id"`
	MessageType int    `json:"message_type"`
	Text        string `json:"text"`
	SenderID    string `json:"sender_id"`
	Recalled    bool   `json:"recalled,omitempty"`
}

var placeholders = map[int]string{
	2: "[image]", 3: "[voice]", 4: "[video]", 5: "[sticker]", 6: "[gif]", 7: "[file]", 8: "[location]",
}

// PreviewText is what a preview shows of a message: the first
// PreviewTextLen characters of a text or system message's "text", a
// placeholder for media.
func PreviewText(messageType int, text string) string {
	if p, ok := placeholders[messageType]; ok {
		return p
	}
	if utf8.RuneCountInString(text) <= PreviewTextLen {
		return text
	}
	n := 0
	for i := range text {
		if n == PreviewTextLen {
			return text[:i]
		}
		n++
	}
	return text
}

// PreviewOf builds the preview of a message from its stored content. Only
// text-bearing types have their content read; content that is not an
// object with a string "text" previews as empty rather than failing, since
// unread and order matter more than the preview.
func PreviewOf(msgID, senderID int64, messageType int, content []byte) Preview {
	var text string
	if _, media := placeholders[messageType]; !media && len(content) > 0 {
		var c struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(content, &c) == nil {
			text = c.Text
		}
	}
	return Preview{
		MsgID:       strconv.FormatInt(msgID, 10),
		MessageType: messageType,
		Text:        PreviewText(messageType, text),
		SenderID:    strconv.FormatInt(senderID, 10),
	}
}

// Cursor is a position in a user's change log.
type Cursor struct {
	Epoch   string
	Version int64
}

// ErrBadCursor reports a malformed dialog cursor.
var ErrBadCursor = errors.New("dialog: malformed cursor")

// ParseCursor reads "", "0" (a fresh device) or "<epoch>.<version>".
func ParseCursor(s string) (Cursor, error) {
	if s == "" || s == "0" {
		return Cursor{}, nil
	}
	epoch, ver, ok := strings.Cut(s, ".")
	if !ok || epoch == "" || len(epoch) > 32 || strings.ContainsAny(epoch, ". ") {
		return Cursor{}, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	v, err := strconv.ParseInt(ver, 10, 64)
	if err != nil || v < 0 {
		return Cursor{}, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	return Cursor{Epoch: epoch, Version: v}, nil
}

// String encodes the cursor; the zero cursor is "0".
func (c Cursor) String() string {
	if c.Epoch == "" {
		return "0"
	}
	return c.Epoch + "." + strconv.FormatInt(c.Version, 10)
}

// From returns the version to page from for a list whose current epoch is
// epoch: a cursor from another epoch (the list was rebuilt) starts over.
func (c Cursor) From(epoch string) int64 {
	if c.Epoch != epoch {
		return 0
	}
	return c.Version
}
