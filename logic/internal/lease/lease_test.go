package lease_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/logic/internal/lease"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/msgid"
)

func TestLease(t *testing.T) {
	rdb := testenv.Redis(t)
	ctx := context.Background()
	key := testenv.RandomName("im:test:lease:")
	t.Cleanup(func() { rdb.Del(context.Background(), key) })
	const ttl = 600 * time.Millisecond

	first, err := lease.Acquire(ctx, rdb, key, lease.Options{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		run  func() error
		want error
	}{
		{"second holder refused", func() error {
			_, err := lease.Acquire(ctx, rdb, key, lease.Options{TTL: ttl, Wait: 300 * time.Millisecond})
			return err
		}, lease.ErrHeld},
		{"renewed past its ttl", func() error {
			time.Sleep(2 * ttl)
			_, err := lease.Acquire(ctx, rdb, key, lease.Options{TTL: ttl})
			return err
		}, lease.ErrHeld},
		{"still certainly held after renewals", first.Check, nil},
		{"released: free again", func() error {
			if err := first.Release(ctx); err != nil {
				return err
			}
			l, err := lease.Acquire(ctx, rdb, key, lease.Options{TTL: ttl})
			if err == nil {
				err = l.Release(ctx)
			}
			return err
		}, nil},
		{"released: not held by the releaser", first.Check, lease.ErrNotHeld},
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
	l, err := lease.Acquire(ctx, rdb, key, lease.Options{TTL: ttl, Wait: 2 * ttl})
	if err != nil {
		t.Fatalf("waiting for a crashed holder: %v", err)
	}
	// Taken over behind our back: onLost fires and Check fails at once.
	lost := make(chan error, 1)
	_ = l.Release(ctx)
	l, err = lease.Acquire(ctx, rdb, key, lease.Options{TTL: ttl, OnLost: func(err error) { lost <- err }})
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
	if err := l.Check(); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("Check after a takeover: %v, want ErrNotHeld", err)
	}
	_ = l.Release(ctx)
	if v, _ := rdb.Get(ctx, key).Result(); v != "thief" {
		t.Fatalf("release deleted someone else's lease (value %q)", v)
	}
}

// sequence is a stand-in generator: each id is one above the larger of
// the floor and the last.
type sequence struct{ last int64 }

func (s *sequence) NextAfter(_ context.Context, floor int64) (int64, error) {
	s.last = max(s.last, floor) + 1
	return s.last, nil
}

// A holder cut off from Redis stops issuing ids (50301) at TTL - Margin
// after its last renewal, before the key expires and another process can
// take the machine id; that process then gets it.
func TestGuardedIDsStopBeforeTheLeaseCanExpireWhenRenewalsFail(t *testing.T) {
	rdb := testenv.Redis(t)
	ctx := context.Background()
	key := testenv.RandomName("im:test:lease:")
	t.Cleanup(func() { rdb.Del(context.Background(), key) })
	const ttl, margin = 1500 * time.Millisecond, 500 * time.Millisecond

	// A client of its own, closed below: every later renewal fails as if
	// Redis were unreachable from this process only.
	opt := *rdb.Options()
	own := redis.NewClient(&opt)
	l, err := lease.Acquire(ctx, own, key, lease.Options{TTL: ttl, Margin: margin})
	if err != nil {
		t.Fatal(err)
	}
	ids := lease.Guard(&sequence{}, l, nil)
	if _, err := ids.Next(ctx); err != nil {
		t.Fatalf("id while held: %v", err)
	}
	cut := time.Now()
	_ = own.Close()

	var stopped time.Duration
	for {
		_, err := ids.Next(ctx)
		if err != nil {
			stopped = time.Since(cut)
			if code, _ := errcode.Of(err); code != errcode.Busy || !errors.Is(err, lease.ErrNotHeld) {
				t.Fatalf("refusal %v (code %s), want 50301 wrapping ErrNotHeld", err, code)
			}
			break
		}
		if time.Since(cut) > ttl {
			t.Fatal("ids still issued a whole TTL after the last renewal")
		}
		time.Sleep(5 * time.Millisecond)
	}
	pttl, err := rdb.PTTL(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	// The key was last renewed before the cut, so it dies before cut+TTL;
	// issuance stopped at least (nearly) margin before that.
	if stopped > ttl-margin+100*time.Millisecond || pttl < margin-200*time.Millisecond {
		t.Fatalf("ids stopped %v after the cut with the key's PTTL %v left; want at most %v after and about %v left", stopped, pttl, ttl-margin, margin)
	}
	t.Logf("ids stopped %v after the last renewal, %v before the key expired", stopped, pttl)

	second, err := lease.Acquire(ctx, rdb, key, lease.Options{TTL: ttl, Wait: 2 * ttl})
	if err != nil {
		t.Fatalf("second holder after the lapse: %v", err)
	}
	if err := second.Check(); err != nil {
		t.Fatalf("second holder: %v", err)
	}
	_ = second.Release(ctx)
	if err := l.Release(ctx); err == nil {
		t.Fatal("release through a closed client reported success")
	}
}

// A lease that expired while Redis was unreachable (or flushed) and is
// taken again runs OnRetake before ids flow again, and ids then continue
// above the floor it raised.
func TestGuardedIDsResumeAboveTheRaisedFloorAfterALapsedLeaseIsRetaken(t *testing.T) {
	rdb := testenv.Redis(t)
	ctx := context.Background()
	key := testenv.RandomName("im:test:lease:")
	t.Cleanup(func() { rdb.Del(context.Background(), key) })
	const ttl = 600 * time.Millisecond
	mark := time.Now().Add(time.Second).UnixMilli()
	var floor lease.Floor
	retakes := make(chan struct{}, 4)
	l, err := lease.Acquire(ctx, rdb, key, lease.Options{TTL: ttl, OnRetake: func(context.Context) error {
		floor.RaiseToMs(mark)
		retakes <- struct{}{}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	ids := lease.Guard(&sequence{}, l, &floor)
	before, err := ids.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, key).Err(); err != nil { // as FLUSHALL would
		t.Fatal(err)
	}
	select {
	case <-retakes:
	case <-time.After(2 * ttl):
		t.Fatal("expired lease not retaken")
	}
	after, err := ids.Next(ctx)
	if err != nil {
		t.Fatalf("after the retake: %v", err)
	}
	if after <= lease.FloorAfterMs(mark) || before >= after {
		t.Fatalf("ids %d then %d, want the second above the floor %d", before, after, lease.FloorAfterMs(mark))
	}
}

func TestFloorAfterMsIsTheLastIDOfItsMillisecond(t *testing.T) {
	ms := msgid.Epoch.Add(1234567 * time.Millisecond).UnixMilli()
	tests := []struct {
		name string
		id   int64
		want bool // id > FloorAfterMs(ms)
	}{
		{"last sequence and machine of the millisecond", (1234567<<12|4095)<<10 | 1023, false},
		{"first id of the next millisecond", (1234568 << 22), true},
		{"the millisecond's first id", 1234567 << 22, false},
	}
	f := lease.FloorAfterMs(ms)
	if got := msgid.TimeOf(f).UnixMilli(); got != ms {
		t.Fatalf("floor of %d is of millisecond %d", ms, got)
	}
	for _, tt := range tests {
		if got := tt.id > f; got != tt.want {
			t.Errorf("%s: id %d > floor %d is %v, want %v", tt.name, tt.id, f, got, tt.want)
		}
	}
	if got := lease.FloorAfterMs(msgid.Epoch.UnixMilli() - 1); got != 0 {
		t.Errorf("floor before the epoch %d, want 0", got)
	}
}

// AcquireFree takes the first key not held, from its start index on and
// wrapping, and refuses when every key is held.
func TestAcquireFreeTakesTheFirstKeyNotHeldFromItsStart(t *testing.T) {
	rdb := testenv.Redis(t)
	ctx := context.Background()
	prefix := testenv.RandomName("im:test:leasefree:")
	keyOf := func(i int) string { return prefix + ":" + strconv.Itoa(i) }
	t.Cleanup(func() {
		for i := range 4 {
			rdb.Del(context.Background(), keyOf(i))
		}
	})
	tests := []struct {
		name    string
		held    []int
		start   int
		want    int
		wantErr error
	}{
		{"start free", nil, 2, 2, nil},
		{"skips held ones", []int{1, 2}, 1, 3, nil},
		{"wraps past the end", []int{3}, 3, 0, nil},
		{"negative start wraps too", []int{}, -1, 3, nil},
		{"all held", []int{0, 1, 2, 3}, 0, 0, lease.ErrHeld},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range 4 {
				rdb.Del(ctx, keyOf(i))
			}
			for _, i := range tt.held {
				rdb.Set(ctx, keyOf(i), "other", time.Minute)
			}
			l, got, err := lease.AcquireFree(ctx, rdb, keyOf, 4, tt.start, lease.Options{TTL: time.Second})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			defer l.Release(ctx)
			if got != tt.want || l.Key() != keyOf(tt.want) || l.Check() != nil {
				t.Fatalf("took %d (%s, check %v), want %d", got, l.Key(), l.Check(), tt.want)
			}
		})
	}
}
