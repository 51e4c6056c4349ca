package members

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sparkim/spark/pkg/config"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// fakeSource serves member lists by conversation; bump, when set, is
// called before every page (to change the list mid-read).
type fakeSource struct {
	lists   map[int64][]int64
	version map[int64]int64
	calls   int
	bump    func(page int)
	err     error
}

func (f *fakeSource) GroupMembers(_ context.Context, cid, after int64, limit int) (*logicv1.GroupMembersReply, error) {
	if f.bump != nil {
		f.bump(f.calls)
	}
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	var page []int64
	for _, id := range f.lists[cid] {
		if id > after && len(page) < limit {
			page = append(page, id)
		}
	}
	more := len(page) == limit && page[len(page)-1] != f.lists[cid][len(f.lists[cid])-1]
	return &logicv1.GroupMembersReply{UserIds: page, More: more, MemberVersion: f.version[cid]}, nil
}

func ids(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i + 1)
	}
	return out
}

func TestMembersCache(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		size      int   // members of conversation 1
		cached    int64 // version held before the call (0: none)
		current   int64 // version logic has
		min       int64 // the job's member_version
		bump      bool  // the list changes once during the first read
		always    bool  // the list changes on every page
		srcErr    error
		wantCalls int
		wantErr   error
		wantLen   int
	}{
		{"first read pages the whole list", 2500, 0, 3, 3, false, false, nil, 3, nil, 2500},
		{"a cached list as new as the job is used", 10, 3, 3, 3, false, false, nil, 0, nil, 10},
		{"a cached list newer than the job is used", 10, 5, 5, 3, false, false, nil, 0, nil, 10},
		{"a cached list older than the job is read again", 10, 2, 3, 3, false, false, nil, 1, nil, 10},
		{"a list that changed mid-read is read again", 2500, 0, 3, 3, true, false, nil, 5, nil, 2500},
		{"a list that never stops changing is an error", 2500, 0, 3, 3, false, true, nil, 6, ErrChanging, 0},
		{"logic failing is an error", 10, 0, 3, 3, false, false, errors.New("down"), 1, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := &fakeSource{lists: map[int64][]int64{1: ids(tt.size)}, version: map[int64]int64{1: tt.current}, err: tt.srcErr}
			c := newCache(t, src, config.Default().Deliver.MemberCacheIDs)
			if tt.cached > 0 {
				c.put(1, entry{version: tt.cached, ids: ids(tt.size)})
			}
			switch {
			case tt.bump:
				src.bump = func(page int) {
					if page == 1 {
						src.version[1]++
					}
				}
			case tt.always:
				src.bump = func(int) { src.version[1]++ }
			}
			got, err := c.Members(ctx, 1, tt.min)
			if src.calls != tt.wantCalls {
				t.Fatalf("%d calls to logic, want %d", src.calls, tt.wantCalls)
			}
			switch {
			case tt.srcErr != nil || tt.wantErr != nil:
				if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
					t.Fatalf("err %v, want %v", err, tt.wantErr)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if len(got) != tt.wantLen || fmt.Sprint(got[:3]) != "[1 2 3]" {
				t.Fatalf("%d members (%v...), want %d", len(got), got[:min(3, len(got))], tt.wantLen)
			}
		})
	}
}

func TestMembersCacheStaysWithinItsBound(t *testing.T) {
	ctx := context.Background()
	src := &fakeSource{lists: map[int64][]int64{}, version: map[int64]int64{}}
	for cid := int64(1); cid <= 10; cid++ {
		src.lists[cid] = ids(100)
		src.version[cid] = 1
	}
	src.lists[99] = ids(1000) // larger than the whole bound
	src.version[99] = 1
	c := newCache(t, src, 350)
	for cid := int64(1); cid <= 10; cid++ {
		if _, err := c.Members(ctx, cid, 1); err != nil {
			t.Fatal(err)
		}
		if c.held > 350 {
			t.Fatalf("%d ids held after conversation %d, bound 350", c.held, cid)
		}
	}
	if got, err := c.Members(ctx, 99, 1); err != nil || len(got) != 1000 {
		t.Fatalf("an oversized list: %d members, %v", len(got), err)
	}
	if _, kept := c.entries[99]; kept || c.held > 350 {
		t.Fatalf("an oversized list was kept (held %d)", c.held)
	}
}

// newCache is New for a bound the test knows to be valid.
func newCache(t *testing.T, src Source, maxIDs int) *Cache {
	t.Helper()
	c, err := New(src, maxIDs)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewRefusesABoundBelowOne(t *testing.T) {
	for _, n := range []int{0, -1} {
		if _, err := New(&fakeSource{}, n); err == nil {
			t.Errorf("New(src, %d) accepted a bound below one", n)
		}
	}
}
