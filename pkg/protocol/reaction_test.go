package protocol

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestValidEmojiAcceptsKeyboardEmojisAndRefusesText(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want bool
	}{
		{"thumbs up", "👍", true},
		{"heart with variation selector", "❤️", true},
		{"skin tone", "👍🏽", true},
		{"family of four joined", "👨‍👩‍👧‍👦", true},
		{"flag of two regional indicators", "🇫🇷", true},
		{"subdivision flag with tags", "🏴\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F", true},
		{"keycap", "1️⃣", true},
		{"copyright sign", "©", true},
		{"empty", "", false},
		{"text", "ok", false},
		{"emoji and text", "👍ok", false},
		{"two emojis", "👍👍", false},
		{"three regional indicators", "🇫🇷🇩", false},
		{"space", " 👍", false},
		{"trailing joiner", "👍\u200d", false},
		{"leading joiner", "\u200d👍", false},
		{"double joiner", "👨\u200d\u200d👩", false},
		{"lone skin tone", "🏽", false},
		{"lone variation selector", "\ufe0f", false},
		{"digit without keycap", "1", false},
		{"control character", "👍\n", false},
		{"invalid UTF-8", "\xf0\x9f\x91", false},
		{"over 32 bytes", strings.Repeat("👨\u200d", 5) + "👨", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ValidEmoji(tt.in); got != tt.want {
				t.Errorf("ValidEmoji(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

// FuzzValidEmoji: whatever it accepts is short, valid UTF-8 and free of
// anything a reaction could smuggle text or layout in.
func FuzzValidEmoji(f *testing.F) {
	for _, s := range []string{"👍", "👨‍👩‍👧‍👦", "🇫🇷", "1️⃣", "ok", "👍👍", "\u200d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !ValidEmoji(s) {
			return
		}
		if len(s) > MaxEmojiBytes || !utf8.ValidString(s) {
			t.Fatalf("accepted %q: %d bytes", s, len(s))
		}
		for _, r := range s {
			if r < 0x80 && !(r >= '0' && r <= '9' || r == '#' || r == '*') {
				t.Fatalf("accepted %q with ASCII %q", s, r)
			}
		}
	})
}

func TestMessageReactionsBoundHoldsTheWidestCounts(t *testing.T) {
	for _, kinds := range []int{1, 20, MaxReactionKinds} {
		m := MessageReactions{MsgID: 1<<63 - 1}
		for i := 0; i < kinds; i++ {
			m.Reactions = append(m.Reactions, ReactionCount{Emoji: strings.Repeat("\U0001F600", MaxEmojiBytes/4), Count: 1<<31 - 1, Me: true})
		}
		b, err := Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if len(b)+1 > MessageReactionsBound(kinds) {
			t.Errorf("%d kinds: %d bytes, bound %d", kinds, len(b)+1, MessageReactionsBound(kinds))
		}
	}
}
