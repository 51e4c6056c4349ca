package testenv

import (
	"context"
	"sync"

	"github.com/sparkim/spark/logic/internal/group"
	"github.com/sparkim/spark/logic/internal/relation"
)

// Notes is a notify.Notifier that records the changes it was told about,
// so tests see that RELATION and GROUP notify exactly after the changes
// that changed something.
type Notes struct {
	mu        sync.Mutex
	groups    []group.Change
	relations []relation.Change
}

// GroupChanged records ch.
func (r *Notes) GroupChanged(_ context.Context, ch group.Change) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.groups = append(r.groups, ch)
	return nil
}

// RelationChanged records ch.
func (r *Notes) RelationChanged(_ context.Context, ch relation.Change) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.relations = append(r.relations, ch)
	return nil
}

// Counts returns how many group and relation changes were recorded.
func (r *Notes) Counts() (int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.groups), len(r.relations)
}
