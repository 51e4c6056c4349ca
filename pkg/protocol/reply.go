package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// ReplyKey is the top-level key of a reply's content that holds the
// server's snapshot of the message replied to (decision "Replies carry a
// server-written snapshot in their content"). A client never writes it:
// it names the original in SEND_MESSAGE's reply_to.
const ReplyKey = "reply_to"

// splitObject splits a compact JSON object into its top-level members in
// order, so a key can be replaced without losing the others' order.
func splitObject(obj []byte) (keys []string, vals []json.RawMessage, err error) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil, fmt.Errorf("content is not a JSON object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		keys, vals = append(keys, k), append(vals, v)
	}
	return keys, vals, nil
}

// HasReplyKey reports whether a compact content object sets ReplyKey at
// its top level.
func HasReplyKey(content []byte) bool {
	if !bytes.Contains(content, []byte(`"`+ReplyKey+`"`)) {
		return false
	}
	keys, _, err := splitObject(content)
	if err != nil {
		return false
	}
	for _, k := range keys {
		if k == ReplyKey {
			return true
		}
	}
	return false
}

// WithReply returns content with ReplyKey set to snap (replacing one a
// before-send hook's rewrite may carry), appended last.
func WithReply(content, snap []byte) ([]byte, error) {
	keys, vals, err := splitObject(content)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if k == ReplyKey {
			continue
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vals[i])
		b.WriteByte(',')
	}
	b.WriteString(`"` + ReplyKey + `":`)
	b.Write(snap)
	b.WriteByte('}')
	return b.Bytes(), nil
}

// ReplyOf reads the id of the message a stored content replies to (0 for
// none), without decoding more than the snapshot.
func ReplyOf(content []byte) int64 {
	if !bytes.Contains(content, []byte(`"`+ReplyKey+`"`)) {
		return 0
	}
	var c struct {
		Reply *struct {
			MsgID json.Number `json:"msg_id"`
		} `json:"reply_to"`
	}
	if json.Unmarshal(content, &c) != nil || c.Reply == nil {
		return 0
	}
	id, err := c.Reply.MsgID.Int64()
	if err != nil {
		return 0
	}
	return id
}

// RecalledReply returns content with its reply snapshot reduced to the
// original's id and "recalled": what a reply shows once its original was
// recalled or deleted for everyone, so the quoted text goes with it.
func RecalledReply(content []byte, origID int64) []byte {
	out, err := WithReply(content, []byte(`{"msg_id":"`+strconv.FormatInt(origID, 10)+`","recalled":true}`))
	if err != nil {
		return content
	}
	return out
}

// ReplySnapshot returns the raw value of ReplyKey in a compact content
// object, or nil when it has none: an edit keeps the snapshot its message
// was sent with.
func ReplySnapshot(content []byte) []byte {
	if !bytes.Contains(content, []byte(`"`+ReplyKey+`"`)) {
		return nil
	}
	keys, vals, err := splitObject(content)
	if err != nil {
		return nil
	}
	for i, k := range keys {
		if k == ReplyKey {
			return vals[i]
		}
	}
	return nil
}
