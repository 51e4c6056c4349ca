package server

import (
	"testing"
	"time"
)

func TestInflight(t *testing.T) {
	now := time.Now()
	req := func(conn, id uint64, age time.Duration) *pendingReq {
		return &pendingReq{key: reqKey{conn: conn, req: id}, sent: now.Add(-age)}
	}
	t.Run("bounded", func(t *testing.T) {
		f := newInflight(2)
		if !f.add(req(1, 1, 0)) || !f.add(req(1, 2, 0)) {
			t.Fatal("add under the bound failed")
		}
		if f.add(req(1, 3, 0)) {
			t.Fatal("add over the bound succeeded")
		}
		if f.take(reqKey{conn: 1, req: 1}) == nil || !f.add(req(1, 3, 0)) {
			t.Fatal("answering did not free a slot")
		}
	})
	t.Run("same key answered in order", func(t *testing.T) {
		f := newInflight(10)
		a, b := req(1, 7, 0), req(1, 7, 0)
		f.add(a)
		f.add(b)
		if f.take(a.key) != a || f.take(a.key) != b || f.take(a.key) != nil {
			t.Fatal("duplicate keys not FIFO")
		}
	})
	t.Run("each request leaves once", func(t *testing.T) {
		f := newInflight(10)
		old, young := req(1, 1, time.Minute), req(1, 2, 0)
		f.add(old)
		f.add(young)
		exp := f.expire(now.Add(-time.Second))
		if len(exp) != 1 || exp[0] != old {
			t.Fatalf("expired %v", exp)
		}
		if f.remove(old) || f.take(old.key) != nil {
			t.Fatal("expired request still pending")
		}
		if d := f.drain(); len(d) != 1 || d[0] != young {
			t.Fatalf("drain %v", d)
		}
		if f.remove(young) || f.len() != 0 {
			t.Fatal("drained request still pending")
		}
	})
}
