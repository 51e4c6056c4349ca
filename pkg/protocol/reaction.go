package protocol

import (
	"unicode/utf8"

	"github.com/sparkim/spark/pkg/jsonid"
)

// REACTION (25) ops.
const (
	// ReactionOpAdd adds the caller's Emoji to MsgID; answered with the
	// emoji's count (ReactionChange).
	ReactionOpAdd = "add"
	// ReactionOpRemove removes it.
	ReactionOpRemove = "remove"
	// ReactionOpGet answers the counts and "reacted by me" of the MsgIDs
	// of ConversationID (ReactionsReply).
	ReactionOpGet = "get"
	// ReactionOpUsers answers a page of who reacted to MsgID with Emoji,
	// after user id After (ReactorsReply).
	ReactionOpUsers = "users"
)

// Reaction bounds every deployment shares; the per-message and per-user
// caps are configuration (logic.reaction_kinds, logic.reactions_per_user).
const (
	// MaxEmojiBytes is the longest emoji in UTF-8 bytes: enough for a
	// family of four joined by ZWJs (25) or a subdivision flag (28).
	MaxEmojiBytes = 32
	// MaxReactionMsgIDs is the most messages one get asks about.
	MaxReactionMsgIDs = 100
	// MaxReactorsLimit is the largest page of users; 0 asks for
	// DefaultReactorsLimit.
	MaxReactorsLimit     = 100
	DefaultReactorsLimit = 50
	// MaxReactionKinds is the highest logic.reaction_kinds may be set to,
	// so that one message's counts always fit in a get answer's page.
	MaxReactionKinds = 50
)

// ReactionRequest is the body of REACTION (25). ConversationID is required
// by get and optional otherwise (it must then be the message's).
type ReactionRequest struct {
	Op             string      `json:"op"`
	ConversationID jsonid.ID   `json:"conversation_id,omitempty"`
	MsgID          jsonid.ID   `json:"msg_id,omitempty"`
	Emoji          string      `json:"emoji,omitempty"`
	MsgIDs         []jsonid.ID `json:"msg_ids,omitempty"`
	After          jsonid.ID   `json:"after,omitempty"`
	Limit          int         `json:"limit,omitempty"`
}

// ReactionChange answers add and remove: the emoji's count on the message
// now. Changed is false for a remove of a reaction the caller did not have
// (an add of one it has is refused 40902).
type ReactionChange struct {
	MsgID          jsonid.ID `json:"msg_id"`
	ConversationID jsonid.ID `json:"conversation_id"`
	Emoji          string    `json:"emoji"`
	Count          int       `json:"count"`
	Changed        bool      `json:"changed"`
}

// ReactionPush is the data of a REACTION push and the payload of mailbox
// event REACTION (8): UserID added (Added) or removed Emoji, whose count is
// now Count.
type ReactionPush struct {
	MsgID          jsonid.ID `json:"msg_id"`
	ConversationID jsonid.ID `json:"conversation_id"`
	UserID         jsonid.ID `json:"user_id"`
	Emoji          string    `json:"emoji"`
	Added          bool      `json:"added"`
	Count          int       `json:"count"`
}

// ReactionCount is one emoji's count on a message; Me says the asking
// user is among them.
type ReactionCount struct {
	Emoji string `json:"emoji"`
	Count int    `json:"count"`
	Me    bool   `json:"me,omitempty"`
}

// MessageReactions are one message's counts, in the order the emojis
// were first used.
type MessageReactions struct {
	MsgID     jsonid.ID       `json:"msg_id"`
	Reactions []ReactionCount `json:"reactions"`
}

// ReactionsReply answers get: the asked messages that have reactions, in
// id order. More says the page stopped at the frame limit: the ids from
// NextMsgID on were not answered and are asked again.
type ReactionsReply struct {
	ConversationID jsonid.ID          `json:"conversation_id"`
	Messages       []MessageReactions `json:"messages"`
	More           bool               `json:"more"`
	NextMsgID      jsonid.ID          `json:"next_msg_id,omitempty"`
}

// Reactor is one user who reacted, and when.
type Reactor struct {
	UserID    jsonid.ID `json:"user_id"`
	ReactedAt int64     `json:"reacted_at"`
}

// ReactorsReply answers users: a page of who reacted with Emoji, by user
// id; Next is the After of the next page when More.
type ReactorsReply struct {
	MsgID          jsonid.ID `json:"msg_id"`
	ConversationID jsonid.ID `json:"conversation_id"`
	Emoji          string    `json:"emoji"`
	Count          int       `json:"count"`
	Users          []Reactor `json:"users"`
	More           bool      `json:"more"`
	Next           jsonid.ID `json:"next,omitempty"`
}

// MessageReactionsBound is the most bytes a MessageReactions of kinds
// emojis takes in a get answer (its comma included): every emoji at
// MaxEmojiBytes, every count and id at its widest.
func MessageReactionsBound(kinds int) int {
	const entry = len(`{"emoji":"","count":2147483647,"me":true},`) + MaxEmojiBytes
	const head = len(`{"msg_id":"9223372036854775807","reactions":[]},`)
	return head + kinds*entry
}

// ValidEmoji reports whether s is one emoji as keyboards write them: a
// pictograph (or a keycap, or a flag of two regional indicators) with the
// modifiers, variation selectors, tags and zero-width joiners that build
// skin tones, families and subdivision flags; at most MaxEmojiBytes. Text,
// spaces, controls and stray joiners are refused, so a reaction cannot
// carry a message.
func ValidEmoji(s string) bool {
	if s == "" || len(s) > MaxEmojiBytes || !utf8.ValidString(s) {
		return false
	}
	keycap := false
	for _, r := range s {
		if r == 0x20E3 {
			keycap = true
		}
	}
	bases := 0
	var first rune // the first base, for a flag's pair
	for i, r := range s {
		switch {
		case pictograph(r) || keycap && (r >= '0' && r <= '9' || r == '#' || r == '*'):
			// A base after the first must follow a joiner, except the
			// second regional indicator of a flag; two bases side by side
			// are two emojis.
			if bases > 0 && !afterJoiner(s, i) && !(bases == 1 && regional(first) && regional(r) && i == utf8.RuneLen(first)) {
				return false
			}
			if bases == 0 {
				first = r
			}
			bases++
		case r == 0x200D: // ZWJ: between two bases
			if bases == 0 || afterJoiner(s, i) || i+3 >= len(s) {
				return false
			}
		case r == 0xFE0F || r == 0xFE0E || r == 0x20E3 || r >= 0x1F3FB && r <= 0x1F3FF || r >= 0xE0020 && r <= 0xE007F:
			// Variation selector, keycap, skin tone, tag: they modify
			// the base before.
			if bases == 0 || afterJoiner(s, i) {
				return false
			}
		default:
			return false
		}
	}
	return bases > 0
}

// afterJoiner reports whether the rune at byte i follows a ZWJ.
func afterJoiner(s string, i int) bool {
	r, _ := utf8.DecodeLastRuneInString(s[:i])
	return r == 0x200D
}

func regional(r rune) bool { return r >= 0x1F1E6 && r <= 0x1F1FF }

// pictograph reports whether r starts an emoji: the Unicode blocks that
// hold Extended_Pictographic characters, and the handful of older symbols
// that have an emoji presentation.
func pictograph(r rune) bool {
	switch {
	case r >= 0x1F3FB && r <= 0x1F3FF: // skin tones modify, they do not start
		return false
	case r >= 0x1F000 && r <= 0x1FAFF, r >= 0x2600 && r <= 0x27BF, r >= 0x2B05 && r <= 0x2B55,
		r >= 0x2190 && r <= 0x21FF, r >= 0x2300 && r <= 0x23FF, r >= 0x25A0 && r <= 0x25FF, r >= 0x2934 && r <= 0x2935:
		return true
	}
	switch r {
	case 0x00A9, 0x00AE, 0x203C, 0x2049, 0x2122, 0x2139, 0x24C2, 0x3030, 0x303D, 0x3297, 0x3299:
		return true
	}
	return false
}
