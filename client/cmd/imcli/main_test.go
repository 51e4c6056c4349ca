package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/protocol"
)

func TestConversationLine(t *testing.T) {
	for _, tc := range []struct {
		c    client.Conversation
		want string
	}{
		{client.Conversation{ConversationID: 7, ConversationType: protocol.ConversationP2P, PeerID: 1002, Unread: 3,
			Preview: &client.Preview{SenderID: 1002, Text: "see\nyou"}}, "  conv 7 p2p 1002 unread 3 | 1002: see you\n"},
		{client.Conversation{ConversationID: 8, ConversationType: protocol.ConversationGroup, GroupID: 55, Muted: true, Pinned: true,
			Preview: &client.Preview{SenderID: 9, Recalled: true}}, "  conv 8 group 55 unread 0 pinned muted | 9: (recalled)\n"},
		{client.Conversation{ConversationID: 9, ConversationType: protocol.ConversationP2P, PeerID: 3}, "  conv 9 p2p 3 unread 0 | (no messages)\n"},
	} {
		if got := conversationLine(tc.c); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

func TestMessageAndEventLines(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{messageLine(protocol.Message{MsgID: 5, ConversationID: 7, SenderID: 1002, MessageType: 1, Content: json.RawMessage(`{"t":1,"text":"hi"}`)}), "[conv 7] #5 1002: hi\n"},
		{messageLine(protocol.Message{MsgID: 6, ConversationID: 7, SenderID: 1002, MessageType: 1, Status: protocol.StatusRecalled}), "[conv 7] #6 1002: (recalled)\n"},
		{messageLine(protocol.Message{MsgID: 7, ConversationID: 7, SenderID: 1, MessageType: 2, Content: json.RawMessage(`{"t":2,"key":"k"}`)}), "[conv 7] #7 1: {\"t\":2,\"key\":\"k\"}\n"},
		{eventLine(client.MailboxEvent{EventType: client.EventRecall, ConversationID: 7, MsgID: 5}), "[conv 7] #5 was recalled\n"},
		{eventLine(client.MailboxEvent{EventType: client.EventEdit, ConversationID: 7, MsgID: 5, Payload: json.RawMessage(`{"msg_id":"5","version":2}`)}), "[conv 7] #5 was edited (version 2)\n"},
		{eventLine(client.MailboxEvent{EventType: client.EventEdit, ConversationID: 7, MsgID: 5, Payload: json.RawMessage(`{"msg_id":"5","version":2,"content":{"t":1,"text":"new"}}`)}), "[conv 7] #5 edited: new\n"},
		{signalLine(protocol.SignalPush{ConversationID: 7, SenderID: 1002, Kind: "typing"}), "[conv 7] 1002 is typing…\n"},
		{eventLine(client.MailboxEvent{EventType: client.EventDelete, ConversationID: 7, MsgID: 6}), "[conv 7] #6 was deleted for you\n"},
		{eventLine(client.MailboxEvent{EventType: client.EventKick, Payload: json.RawMessage(`{"reason":"revoked"}`)}), "while away: kicked (revoked)\n"},
		{eventLine(client.MailboxEvent{EventType: client.EventMissedMessage, ConversationID: 7, MsgID: 5}), ""},
		{eventLine(client.MailboxEvent{EventType: 42, ConversationID: 1, MsgID: 2, Payload: json.RawMessage(`{}`)}), "event 42 conv 1 msg 2: {}\n"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestControlLine(t *testing.T) {
	for _, tc := range []struct {
		ev   client.ControlEvent
		want string
	}{
		{client.ControlEvent{EventType: client.EventFriend, Payload: json.RawMessage(`{"kind":"request","user_id":"1002"}`)},
			"friend: 1002 asks to be your friend (/accept 1002)\n"},
		{client.ControlEvent{EventType: client.EventFriend, Payload: json.RawMessage(`{"kind":"accepted","user_id":"1001"}`)},
			"friend: you and 1001 are friends now\n"},
		{client.ControlEvent{EventType: client.EventMembership, ConversationID: 8,
			Payload: json.RawMessage(`{"action":"removed","group_id":"55","operator_id":"1001","member_version":3}`)},
			"[group 55] members removed by 1001 (conv 8)\n"},
		{client.ControlEvent{EventType: client.EventMembership, ConversationID: 8,
			Payload: json.RawMessage(`{"action":"role","group_id":"55","operator_id":"1001","member_version":4,"role":1}`)},
			"[group 55] a role changed to admin by 1001 (conv 8)\n"},
		{client.ControlEvent{EventType: client.EventMembership, ConversationID: 8, Payload: json.RawMessage(`not json`)},
			"event 3 conv 8: not json\n"},
	} {
		if got := controlLine(tc.ev); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
	// A mailbox copy of a friend event prints the same line as its push.
	e := client.MailboxEvent{EventType: client.EventFriend, Payload: json.RawMessage(`{"kind":"blocked","user_id":"7"}`)}
	if got := eventLine(e); got != "friend: you blocked 7\n" {
		t.Errorf("event line %q", got)
	}
}

// A control event printed from its push is not printed again when the
// sync it triggers brings its mailbox copy (payload spacing aside).
func TestShownControlEventsNotRepeated(t *testing.T) {
	a := &app{}
	a.noteShown(client.ControlEvent{EventType: client.EventFriend, Payload: json.RawMessage(`{"kind":"request", "user_id":"5"}`)})
	var b strings.Builder
	a.formatMessages(&b, client.SyncResult{Events: []client.MailboxEvent{
		{EventType: client.EventFriend, Payload: json.RawMessage(`{"kind":"request","user_id":"5"}`)},
		{EventType: client.EventFriend, Payload: json.RawMessage(`{"kind":"request","user_id":"6"}`)},
	}}, 0)
	if got := b.String(); got != "friend: 6 asks to be your friend (/accept 6)\n" {
		t.Fatalf("printed %q", got)
	}
}

func TestGateAddrsSplitsTheCommaListAndDropsEmptyEntries(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"127.0.0.1:8100", []string{"127.0.0.1:8100"}},
		{"127.0.0.1:8100,127.0.0.1:8101", []string{"127.0.0.1:8100", "127.0.0.1:8101"}},
		{" a:1 , ,b:2,", []string{"a:1", "b:2"}},
		{"", nil},
	} {
		if got := gateAddrs(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("gateAddrs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestParseTargetReadsUsersAndGroups(t *testing.T) {
	tests := []struct {
		in        string
		id        int64
		group, ok bool
	}{
		{"1002", 1002, false, true},
		{"g77", 77, true, true},
		{"g", 0, true, false},
		{"0", 0, false, false},
		{"g-3", -3, true, false},
		{"bob", 0, false, false},
	}
	for _, tt := range tests {
		id, group, ok := parseTarget(tt.in)
		if ok != tt.ok || ok && (id != tt.id || group != tt.group) {
			t.Errorf("parseTarget(%q) = %d, %v, %v; want %d, %v, %v", tt.in, id, group, ok, tt.id, tt.group, tt.ok)
		}
	}
}
