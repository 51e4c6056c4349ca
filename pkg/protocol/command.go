// Package protocol defines the client commands and the JSON bodies they
// carry (docs/protocol.md §4). Ids in bodies use jsonid.ID: written as strings,
// read from strings or numbers.
package protocol

// Command numbers of the Spark frame.
const (
	CmdAuth             uint16 = 1
	CmdHeartbeat        uint16 = 2
	CmdGenerateMsgID    uint16 = 3
	CmdSendMessage      uint16 = 4
	CmdSendAck          uint16 = 5
	CmdMessage          uint16 = 6
	CmdPushAck          uint16 = 7
	CmdReadMessage      uint16 = 8
	CmdRecallMessage    uint16 = 9
	CmdSyncInbox        uint16 = 10
	CmdSyncInboxFinish  uint16 = 11
	CmdSyncMessages     uint16 = 12
	CmdSyncMessagesDone uint16 = 13
	CmdKick             uint16 = 14
	CmdDeleteMessage    uint16 = 15
	// CmdConversationSettings (ours): mute / pin a conversation; also
	// pushed to the user's other devices.
	CmdConversationSettings uint16 = 16
	// CmdControlEvent (ours, push only): a membership or friend change,
	// `{"event_type","conversation_id","payload"}` like a mailbox event
	// without its seq; the mailbox holds the ones sync must replay.
	CmdControlEvent uint16 = 17
	// CmdTransient (ours, push only): the business API's PushToUsers and
	// Broadcast, `{"payload"}` with the business's JSON object; never
	// stored, online devices only.
	CmdTransient uint16 = 18
	// CmdRelation (ours, request): friends and blocks for the signed-in
	// user, `{"op", …}` (RelationRequest; the Relation* ops). One command
	// per domain with an op field keeps the command space small and lets a
	// domain grow ops without new numbers (docs/decisions.md 52). The
	// changes answer `{"changed"}`, the lists a page.
	CmdRelation uint16 = 19
	// CmdGroup (ours, request): groups with the signed-in user as the
	// actor, `{"op", …}` (GroupRequest; the Group* ops). The changes answer
	// `{"group","changed","added","removed"}`, info `{"group"}`, members a
	// page.
	CmdGroup uint16 = 20
	// CmdPushSettings (ours, request): the session's device registers or
	// removes its offline-push token, and the user reads or sets the
	// notification preview, `{"op", …}` (PushRequest; the PushOp* ops).
	CmdPushSettings uint16 = 21
	// CmdUpstream (ours, request): a frame for a named business service,
	// `{"service","body","upstream_id"?}` (UpstreamRequest), answered
	// `{"id","duplicate"}` once it is durably queued for the service to
	// pull or receive as a webhook.
	CmdUpstream uint16 = 22
	// CmdMedia (ours, request): uploads and downloads of pictures, voice,
	// video and files by presigned URL, `{"op", …}` (MediaRequest; the
	// MediaOp* ops): upload answers the request to make, complete the
	// checked object, download a short-lived GET (decision 103).
	CmdMedia uint16 = 23
	// CmdEditMessage (ours, request and push): the sender replaces a text
	// message's content, `{"msg_id","conversation_id"?,"content"}`
	// (EditRequest), answered `{"msg_id","conversation_id","version",
	// "edited_at"}` and pushed with the new content (EditPush) to the
	// members' other devices; offline ones get mailbox event EDIT (7).
	CmdEditMessage uint16 = 24
	// CmdReaction (ours, request and push): emoji reactions to a message,
	// `{"op", …}` (ReactionRequest; the ReactionOp* ops): add and remove
	// answer the emoji's count and push ReactionPush to the members'
	// other devices (offline ones get mailbox event REACTION, 8); get
	// answers the counts and "reacted by me" of up to 100 messages, users
	// a page of who reacted with one emoji (decision 107).
	CmdReaction uint16 = 25
	// CmdSignal (ours, request and push): a transient signal into a
	// conversation — typing or the application's own — `{"conversation_id",
	// "kind","payload"?}` (SignalRequest), answered `{"delivered"}` and
	// pushed as `{"conversation_id","sender_id","device_id","kind",
	// "payload"?}` (SignalPush) to the other online devices of its members;
	// never stored (decision 102). 26–31 are reserved for other issue-24
	// commands, so the numbers have a gap.
	CmdSignal uint16 = 32
)

// MaxKnownCommand is the highest command number the server understands;
// numbers below it without a Cmd constant are reserved and answered as
// unknown.
const MaxKnownCommand = CmdSignal

// Conversation types.
const (
	ConversationP2P   = 1
	ConversationGroup = 2
)

// Message status values in sync answers.
const (
	StatusNormal   = 1
	StatusRecalled = 2
	// StatusDeleted is a message deleted for everyone (decision 98).
	StatusDeleted = 3
)

// Mailbox event types (t_mailbox_events.event_type).
const (
	EventRecall        = 1
	EventKick          = 2
	EventMembership    = 3
	EventFriend        = 4
	EventMissedMessage = 5
	// EventDelete: the user deleted msg_id of conversation_id for
	// themselves on another device (delete-for-me, DELETE_MESSAGE 15), so
	// a device that was away drops it too; with for_everyone in its
	// payload, it was deleted for every member (decision 98).
	EventDelete = 6
	// EventEdit: msg_id of conversation_id was edited; the payload is the
	// EDIT_MESSAGE push (EditPush), the new content included.
	EventEdit = 7
	// EventReaction: a member added or removed a reaction to msg_id of
	// conversation_id; the payload is the REACTION push (ReactionPush).
	EventReaction = 8
)

// MaxEventType is the highest mailbox event type; the mailbox refuses
// others.
const MaxEventType = EventReaction
