// Package members is deliver's cache of group member lists. A group job
// carries the member_version its send was authorized against; the cache
// answers from its copy when that copy is at least as new, and reads the
// whole list again from logic otherwise. Member lists change rarely and
// messages are many, so a 1,000-member group costs one read per change,
// not one per message.
package members

import (
	"context"
	"errors"
	"fmt"
	"sync"

	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// Source pages a group conversation's members (a *logicclient.Pool).
type Source interface {
	GroupMembers(ctx context.Context, conversationID, afterUserID int64, limit int) (*logicv1.GroupMembersReply, error)
}

// Bounds of a read.
const (
	// pageSize is the page read from logic (its maximum).
	pageSize = 1000
	// readAttempts bounds the re-reads when the list changed while it was
	// being paged.
	readAttempts = 3
)

// ErrChanging reports a member list that kept changing while it was read.
var ErrChanging = errors.New("members: the member list changed while it was read")

type entry struct {
	version int64
	ids     []int64
}

// Cache holds member lists by conversation id. It is safe for concurrent
// use.
type Cache struct {
	src    Source
	maxIDs int

	mu      sync.Mutex
	entries map[int64]entry
	held    int // ids held over all entries
}

// New returns a Cache reading from src and holding at most maxIDs member
// ids (deliver.member_cache_ids).
func New(src Source, maxIDs int) (*Cache, error) {
	if maxIDs <= 0 {
		return nil, fmt.Errorf("members: deliver.member_cache_ids %d must be positive", maxIDs)
	}
	return &Cache{src: src, maxIDs: maxIDs, entries: map[int64]entry{}}, nil
}

// Members returns the members of a group conversation at member_version
// minVersion or newer, ascending. The slice is shared: callers must not
// change it.
func (c *Cache) Members(ctx context.Context, conversationID, minVersion int64) ([]int64, error) {
	c.mu.Lock()
	e, ok := c.entries[conversationID]
	c.mu.Unlock()
	if ok && e.version >= minVersion {
		return e.ids, nil
	}
	e, err := c.read(ctx, conversationID)
	if err != nil {
		return nil, err
	}
	if e.version < minVersion {
		// Logic answered from a view older than the job (it cannot be, as
		// logic reads the primary): refuse rather than fan out to a list
		// that may miss members.
		return nil, fmt.Errorf("members: conversation %d read at version %d, the job needs %d", conversationID, e.version, minVersion)
	}
	c.put(conversationID, e)
	return e.ids, nil
}

// read pages the whole list; a list whose version moved between pages is
// read again.
func (c *Cache) read(ctx context.Context, cid int64) (entry, error) {
	for attempt := 0; attempt < readAttempts; attempt++ {
		var (
			e     entry
			after int64
			mixed bool
		)
		for page := 0; ; page++ {
			r, err := c.src.GroupMembers(ctx, cid, after, pageSize)
			if err != nil {
				return entry{}, fmt.Errorf("members: read conversation %d: %w", cid, err)
			}
			if page == 0 {
				e.version = r.MemberVersion
			} else if r.MemberVersion != e.version {
				mixed = true
				break
			}
			e.ids = append(e.ids, r.UserIds...)
			if !r.More || len(r.UserIds) == 0 {
				break
			}
			after = r.UserIds[len(r.UserIds)-1]
		}
		if !mixed {
			return e, nil
		}
	}
	return entry{}, fmt.Errorf("members: conversation %d: %w", cid, ErrChanging)
}

// put stores e, evicting arbitrary other entries while over the bound. A
// list larger than the whole bound is answered but not kept.
func (c *Cache) put(cid int64, e entry) {
	if len(e.ids) > c.maxIDs {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.entries[cid]; ok {
		if old.version > e.version {
			return // a concurrent read stored a newer list
		}
		c.held -= len(old.ids)
		delete(c.entries, cid)
	}
	for k, old := range c.entries { // map iteration order is random
		if c.held+len(e.ids) <= c.maxIDs {
			break
		}
		c.held -= len(old.ids)
		delete(c.entries, k)
	}
	c.entries[cid] = e
	c.held += len(e.ids)
}
