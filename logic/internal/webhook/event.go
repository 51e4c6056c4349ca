package webhook

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/jsonid"
)

// EventMessageSent is the type of the events read from t_messages.
const EventMessageSent = "message.sent"

// EventTest is the type of the event TestEndpoint sends.
const EventTest = "webhook.test"

// item is one event due to an endpoint, in the order of its id.
type item struct {
	id        int64
	webhookID string
	typ       string
	body      []byte
}

// envelope is the JSON body of every POST (the Standard Webhooks shape).
type envelope struct {
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// messageSent is the data of a message.sent event.
type messageSent struct {
	MsgID            jsonid.ID       `json:"msg_id"`
	ConversationID   jsonid.ID       `json:"conversation_id"`
	ConversationType string          `json:"conversation_type"`
	GroupID          jsonid.ID       `json:"group_id,omitempty"`
	SenderID         jsonid.ID       `json:"sender_id"`
	SenderDevice     string          `json:"sender_device"`
	ToUserID         jsonid.ID       `json:"to_user_id,omitempty"`
	ClientMsgID      string          `json:"client_msg_id"`
	MessageType      int             `json:"message_type"`
	Content          json.RawMessage `json:"content"`
	CreatedAt        time.Time       `json:"created_at"`
}

func messageItem(m store.WebhookMessage) (item, error) {
	d := messageSent{
		MsgID: jsonid.ID(m.ID), ConversationID: jsonid.ID(m.ConversationID), ConversationType: "p2p",
		SenderID: jsonid.ID(m.SenderID), SenderDevice: m.SenderDevice, ClientMsgID: m.ClientMsgID,
		MessageType: m.MessageType, Content: json.RawMessage(m.Content), CreatedAt: m.CreatedAt.UTC(),
	}
	if !json.Valid(m.Content) {
		d.Content = json.RawMessage("null")
	}
	if m.ConversationType == store.ConversationGroup {
		d.ConversationType = "group"
		d.GroupID = jsonid.ID(m.GroupID.Int64)
	} else if m.UserSmall.Valid {
		d.ToUserID = jsonid.ID(m.UserSmall.Int64)
		if m.UserSmall.Int64 == m.SenderID {
			d.ToUserID = jsonid.ID(m.UserBig.Int64)
		}
	}
	data, err := json.Marshal(d)
	if err != nil {
		return item{}, err
	}
	return newItem(m.ID, "msg_", EventMessageSent, m.CreatedAt, data)
}

func eventItem(e store.WebhookEvent) (item, error) {
	return newItem(e.ID, "evt_", e.Type, e.CreatedAt, e.Data)
}

func newItem(id int64, prefix, typ string, at time.Time, data []byte) (item, error) {
	body, err := json.Marshal(envelope{Type: typ, Timestamp: at.UTC(), Data: data})
	if err != nil {
		return item{}, fmt.Errorf("webhook: event %d: %w", id, err)
	}
	return item{id: id, webhookID: prefix + strconv.FormatInt(id, 10), typ: typ, body: body}, nil
}

// merge returns the messages and events in id order, up to the highest
// id both lists are complete to: a list that came back full (limit rows)
// may have more below the other list's last id. upTo is that id, the
// cursor once every returned item is delivered.
func merge(msgs []store.WebhookMessage, evs []store.WebhookEvent, limit int, bound int64) ([]item, int64, error) {
	upTo := bound
	if len(msgs) == limit {
		upTo = min(upTo, msgs[len(msgs)-1].ID)
	}
	if len(evs) == limit {
		upTo = min(upTo, evs[len(evs)-1].ID)
	}
	out := make([]item, 0, len(msgs)+len(evs))
	i, j := 0, 0
	for {
		var it item
		var err error
		switch {
		case i < len(msgs) && msgs[i].ID <= upTo && (j >= len(evs) || msgs[i].ID < evs[j].ID):
			it, err = messageItem(msgs[i])
			i++
		case j < len(evs) && evs[j].ID <= upTo:
			it, err = eventItem(evs[j])
			j++
		default:
			return out, upTo, nil
		}
		if err != nil {
			return nil, 0, err
		}
		out = append(out, it)
	}
}
