package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sparkim/spark/logic/internal/lease"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/pkg/testredis"
)

func TestLease(t *testing.T) {
	rdb := testenv.RedisDB(t, testredis.LeaseDB)
	ctx := context.Background()
	key := testenv.RandomName("im:test:lease:")
	t.Cleanup(func() { rdb.Del(context.Background(), key) })
	const ttl = 600 * time.Millisecond

	first, err := lease.Acquire(ctx, rdb, key, ttl, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		run  func() error
		want error
	}{
		{"second holder refused", func() error { _, err := lease.Acquire(ctx, rdb, key, ttl, 300*time.Millisecond, nil); return err }, lease.ErrHeld},
		{"renewed past its ttl", func() error {
			time.Sleep(2 * ttl)
			_, err := lease.Acquire(ctx, rdb, key, ttl, 0, nil)
			return err
		}, lease.ErrHeld},
		{"released: free again", func() error {
			if err := first.Release(ctx); err != nil {
				return err
			}
			l, err := lease.Acquire(ctx, rdb, key, ttl, 0, nil)
			if err == nil {
				err = l.Release(ctx)
			}
			return err
		}, nil},
	}
	for _, s := range steps {
		if err := s.run(); !errors.Is(err, s.want) {
			t.Fatalf("%s: err %v, want %v", s.name, err, s.want)
		}
	}

	// A crashed holder's lease (never renewed) is taken after its TTL.
	if err := rdb.Set(ctx, key, "crashed", ttl).Err(); err != nil {
		t.Fatal(err)
	}
	l, err := lease.Acquire(ctx, rdb, key, ttl, 2*ttl, nil)
	if err != nil {
		t.Fatalf("waiting for a crashed holder: %v", err)
	}
	// Taken over behind our back: onLost fires.
	lost := make(chan error, 1)
	_ = l.Release(ctx)
	l, err = lease.Acquire(ctx, rdb, key, ttl, 0, func(err error) { lost <- err })
	if err != nil {
		t.Fatal(err)
	}
	rdb.Set(ctx, key, "thief", 10*time.Second)
	select {
	case err := <-lost:
		if !errors.Is(err, lease.ErrHeld) {
			t.Fatalf("onLost(%v)", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("lost lease not reported")
	}
	_ = l.Release(ctx)
	if v, _ := rdb.Get(ctx, key).Result(); v != "thief" {
		t.Fatalf("release deleted someone else's lease (value %q)", v)
	}
}
