package message

import (
	"context"
	"errors"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/errcode"
)

// findPair returns the conversation of a pair, 0 when they never talked.
func (s *Service) findPair(ctx context.Context, a, b int64) (int64, error) {
	small, big := store.Pair(a, b)
	if id, ok := s.pairs.Get([2]int64{small, big}); ok {
		return id, nil
	}
	id, err := s.store.FindP2P(ctx, a, b)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, busy("find conversation", err)
	}
	s.pairs.Put([2]int64{small, big}, id)
	s.convs.Put(id, store.P2P{ConversationID: id, UserSmall: small, UserBig: big})
	return id, nil
}

// pairOf returns the pair of a P2P conversation: 40401 when there is no
// such conversation, 40301 when it is not a P2P one.
func (s *Service) pairOf(ctx context.Context, conv int64) (store.P2P, error) {
	if p, ok := s.convs.Get(conv); ok {
		return p, nil
	}
	p, err := s.store.P2PByConversation(ctx, conv)
	if errors.Is(err, store.ErrNotFound) {
		_, terr := s.store.ConversationType(ctx, conv)
		if errors.Is(terr, store.ErrNotFound) {
			return store.P2P{}, errcode.New(errcode.NotFound, "conversation not found")
		}
		if terr != nil {
			return store.P2P{}, busy("conversation type", terr)
		}
		return store.P2P{}, errcode.New(errcode.Forbidden, "not a P2P conversation of yours")
	}
	if err != nil {
		return store.P2P{}, busy("conversation", err)
	}
	s.convs.Put(conv, p)
	s.pairs.Put([2]int64{p.UserSmall, p.UserBig}, conv)
	return p, nil
}

// userExists reports whether a user has a t_users row; positive answers
// are cached.
func (s *Service) userExists(ctx context.Context, uid int64) (bool, error) {
	if _, ok := s.users.Get(uid); ok {
		return true, nil
	}
	ok, err := s.store.UserExists(ctx, uid)
	if err != nil {
		return false, busy("user lookup", err)
	}
	if ok {
		s.users.Put(uid, struct{}{})
	}
	return ok, nil
}
