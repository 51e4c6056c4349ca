package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sparkim/spark/pkg/jsonid"
)

// SyncState is what a device remembers between sessions so that its next
// sync fetches only what is new (docs/protocol.md §8 Sync): the two SYNC_INBOX
// cursors, the SYNC_MESSAGES cursor of every conversation, and the
// conversation list itself, because SYNC_INBOX answers only the
// conversations that changed since the cursor.
type SyncState struct {
	// UserID and DeviceID name the owner; cursors are only meaningful for
	// the (user, device) that earned them.
	UserID   jsonid.ID `json:"user_id"`
	DeviceID string    `json:"device_id"`
	// DialogCursor and MailboxSeq are the SYNC_INBOX cursors ("0" fresh).
	DialogCursor string    `json:"dialog_cursor"`
	MailboxSeq   jsonid.ID `json:"mailbox_seq"`
	// LastMsgIDs is the SYNC_MESSAGES cursor per conversation id: the last
	// id scanned (deleted-for-me messages included).
	LastMsgIDs map[int64]jsonid.ID `json:"last_msg_ids"`
	// Conversations is the conversation list as of the last sync.
	Conversations map[int64]Conversation `json:"conversations"`
}

// NewSyncState returns the state of a device that never synced.
func NewSyncState(userID int64, deviceID string) SyncState {
	return SyncState{
		UserID: jsonid.ID(userID), DeviceID: deviceID, DialogCursor: "0",
		LastMsgIDs: map[int64]jsonid.ID{}, Conversations: map[int64]Conversation{},
	}
}

// clone returns a deep copy, so a caller never shares maps with a runner.
func (s SyncState) clone() SyncState {
	out := s
	out.LastMsgIDs = make(map[int64]jsonid.ID, len(s.LastMsgIDs))
	for k, v := range s.LastMsgIDs {
		out.LastMsgIDs[k] = v
	}
	out.Conversations = make(map[int64]Conversation, len(s.Conversations))
	for k, v := range s.Conversations {
		if v.Preview != nil {
			p := *v.Preview
			v.Preview = &p
		}
		out.Conversations[k] = v
	}
	return out
}

// StateStore persists a SyncState between sessions; a SyncRunner saves
// after every step so an interrupted sync resumes instead of repeating.
type StateStore interface {
	// Load returns the saved state; ok is false when nothing was saved yet.
	Load(ctx context.Context) (state SyncState, ok bool, err error)
	// Save replaces the saved state.
	Save(ctx context.Context, state SyncState) error
}

// FileStateStore keeps a SyncState in a small JSON file, replaced
// atomically (write to a temporary file, then rename) so a crash never
// leaves a torn file that would lose every cursor.
type FileStateStore struct {
	Path string
}

// Load reads the file; a missing file is a fresh device.
func (s FileStateStore) Load(_ context.Context) (SyncState, bool, error) {
	b, err := os.ReadFile(s.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return SyncState{}, false, nil
	}
	if err != nil {
		return SyncState{}, false, fmt.Errorf("client: read sync state: %w", err)
	}
	var st SyncState
	if err := json.Unmarshal(b, &st); err != nil {
		return SyncState{}, false, fmt.Errorf("client: decode sync state %s: %w", s.Path, err)
	}
	if st.LastMsgIDs == nil {
		st.LastMsgIDs = map[int64]jsonid.ID{}
	}
	if st.Conversations == nil {
		st.Conversations = map[int64]Conversation{}
	}
	if st.DialogCursor == "" {
		st.DialogCursor = "0"
	}
	return st, true, nil
}

// Save writes the state, creating the directory (0700) and the file (0600):
// the state names the user's conversations. It saves even when ctx is
// done: a sync cut short by the user quitting must still keep the cursors
// of what it fetched and showed.
func (s FileStateStore) Save(_ context.Context, st SyncState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("client: encode sync state: %w", err)
	}
	dir := filepath.Dir(s.Path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("client: create sync state directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(s.Path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("client: create sync state: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // no-op after the rename
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("client: write sync state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("client: write sync state: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.Path); err != nil {
		return fmt.Errorf("client: replace sync state: %w", err)
	}
	return nil
}

// StateFileName is the file name of a (user, device) state inside a
// directory: cursors belong to one device of one user, so two devices of a
// user on the same machine must not share them. Characters other than
// letters, digits, '-' and '_' become '_', so the name never leaves the
// directory whatever the device id.
func StateFileName(userID int64, deviceID string) string {
	safe := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, deviceID)
	return strconv.FormatInt(userID, 10) + "-" + safe + ".json"
}
