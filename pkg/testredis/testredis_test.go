package testredis

import (
	"context"
	"testing"
	"time"
)

// Every Open of one test binary reaches the same private server, which
// starts empty.
func TestOpenSharesOnePrivateServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, b := Open(t), Open(t)
	if a.Options().Addr != b.Options().Addr {
		t.Fatalf("two Opens reached %s and %s, want one server", a.Options().Addr, b.Options().Addr)
	}
	if err := a.Set(ctx, "im:test:testredis", "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := b.Get(ctx, "im:test:testredis").Result(); err != nil || v != "x" {
		t.Fatalf("the second client reads %q (%v), want the first one's key", v, err)
	}
	// Nothing is written to disk: the server is thrown away with the binary.
	for _, tc := range []struct{ param, want string }{
		{"save", ""},
		{"appendonly", "no"},
	} {
		t.Run(tc.param, func(t *testing.T) {
			got, err := a.ConfigGet(ctx, tc.param).Result()
			if err != nil || got[tc.param] != tc.want {
				t.Fatalf("CONFIG GET %s = %v (%v), want %q", tc.param, got, err, tc.want)
			}
		})
	}
}
