package webhook

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/metricname"
)

func TestScheduleDelay(t *testing.T) {
	s := Schedule{Base: 5 * time.Second, MaxInterval: 12 * time.Hour, For: 72 * time.Hour}
	tests := []struct {
		attempts int
		want     time.Duration
	}{
		{1, 5 * time.Second},
		{2, 20 * time.Second},
		{3, 80 * time.Second},
		{4, 320 * time.Second},
		{7, 5 * time.Second * 4096},
		{8, 12 * time.Hour},
		{50, 12 * time.Hour},
	}
	for _, tt := range tests {
		if got := s.Delay(tt.attempts); got != tt.want {
			t.Errorf("Delay(%d) = %v, want %v", tt.attempts, got, tt.want)
		}
	}
}

// The default schedule spans about three days: the attempt that would
// fall past 72 h is the one that marks the endpoint dead, after seconds,
// minutes and hours of waits.
func TestScheduleSpansThreeDays(t *testing.T) {
	s := Schedule{Base: 5 * time.Second, MaxInterval: 12 * time.Hour, For: 72 * time.Hour}
	since := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := since
	var attempts int
	for attempts = 1; ; attempts++ {
		next, dead := s.Next(attempts, since, now, 0)
		if dead {
			break
		}
		now = next
	}
	if span := now.Sub(since); span < 60*time.Hour || span > 72*time.Hour {
		t.Fatalf("last retry %v after the first failure, want 60-72 h", span)
	}
	if attempts < 10 || attempts > 16 {
		t.Fatalf("%d attempts before dead", attempts)
	}
}

func TestScheduleNextHonoursRetryAfter(t *testing.T) {
	s := Schedule{Base: time.Second, MaxInterval: time.Hour, For: 72 * time.Hour}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		retryAfter time.Duration
		want       time.Duration
	}{
		{"none", 0, time.Second},
		{"shorter than the schedule is ignored", 500 * time.Millisecond, time.Second},
		{"longer lengthens the wait", 2 * time.Minute, 2 * time.Minute},
		{"capped at the max interval", 5 * time.Hour, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next, dead := s.Next(1, now, now, tt.retryAfter)
			if dead || next.Sub(now) != tt.want {
				t.Fatalf("Next = %v (dead %v), want +%v", next.Sub(now), dead, tt.want)
			}
		})
	}
	if _, dead := s.Next(3, now.Add(-72*time.Hour), now, 0); !dead {
		t.Fatal("an attempt past For is not dead")
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"", 0, false},
		{"120", 2 * time.Minute, true},
		{" 7 ", 7 * time.Second, true},
		{"0", 0, true},
		{"-5", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
		{"99999999999999999999", 0, false},
		{"999999999999", 365 * 24 * time.Hour, true},
		{"Thu, 01 Jan 2026 12:01:00 GMT", time.Minute, true},
		{"Thu, 01 Jan 2026 11:00:00 GMT", 0, true},
	}
	for _, tt := range tests {
		got, ok := ParseRetryAfter(tt.in, now)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.wantOK)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	f.Add("120")
	f.Add("Thu, 01 Jan 2026 12:01:00 GMT")
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := ParseRetryAfter(s, time.Now())
		if d < 0 || (!ok && d != 0) {
			t.Fatalf("ParseRetryAfter(%q) = %v, %v", s, d, ok)
		}
	})
}

func TestPublicAddr(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"8.8.8.8", true},
		{"2606:4700:4700::1111", true},
		{"127.0.0.1", false},
		{"::1", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"192.168.1.1", false},
		{"169.254.169.254", false}, // cloud metadata
		{"100.64.0.1", false},
		{"0.0.0.0", false},
		{"::", false},
		{"224.0.0.1", false},
		{"fc00::1", false},
		{"fe80::1", false},
		{"::ffff:127.0.0.1", false},
		{"::ffff:10.0.0.1", false},
		{"198.18.0.1", false},
		{"240.0.0.1", false},
		{"255.255.255.255", false},
	}
	for _, tt := range tests {
		if got := PublicAddr(netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("PublicAddr(%s) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}

func TestCheckURL(t *testing.T) {
	ctx := context.Background()
	// A resolver that answers every name from a fake DNS server would
	// need a network; names here are IP literals or "localhost", which
	// the system resolver answers from /etc/hosts.
	tests := []struct {
		name         string
		url          string
		allowPrivate bool
		wantErr      error // nil: accepted; errBad: refused, not for its address
	}{
		{"public ip", "https://8.8.8.8/hook", false, nil},
		{"loopback refused", "http://127.0.0.1:9000/hook", false, ErrPrivateAddress},
		{"loopback allowed by config", "http://127.0.0.1:9000/hook", true, nil},
		{"metadata refused", "http://169.254.169.254/latest/meta-data", false, ErrPrivateAddress},
		{"private v6 refused", "http://[fd00::1]/x", false, ErrPrivateAddress},
		{"mapped loopback refused", "http://[::ffff:127.0.0.1]/x", false, ErrPrivateAddress},
		{"localhost resolves to loopback", "http://localhost:8080/x", false, ErrPrivateAddress},
		{"ftp", "ftp://8.8.8.8/x", false, errBad},
		{"no host", "http:///x", false, errBad},
		{"credentials", "https://user:pw@8.8.8.8/x", false, errBad},
		{"not a url", "http://[::1", false, errBad},
		{"too long", "https://8.8.8.8/" + strings.Repeat("a", 2048), false, errBad},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckURL(ctx, tt.url, tt.allowPrivate, net.DefaultResolver)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.wantErr == ErrPrivateAddress && !errors.Is(err, ErrPrivateAddress):
				t.Fatalf("err = %v, want ErrPrivateAddress", err)
			case tt.wantErr == errBad && (err == nil || errors.Is(err, ErrPrivateAddress)):
				t.Fatalf("err = %v, want a refusal of the URL itself", err)
			}
		})
	}
}

var errBad = errors.New("bad url")

func TestDialControlRefusesPrivate(t *testing.T) {
	tests := []struct {
		addr    string
		wantErr bool
	}{
		{"8.8.8.8:443", false},
		{"127.0.0.1:80", true},
		{"[::1]:80", true},
		{"10.0.0.1:80", true},
		{"nonsense", true},
	}
	for _, tt := range tests {
		if err := dialControl("tcp", tt.addr, nil); (err != nil) != tt.wantErr {
			t.Errorf("dialControl(%s) = %v, wantErr %v", tt.addr, err, tt.wantErr)
		}
	}
}

func TestMergeOrdersByIDUpToTheCompleteBound(t *testing.T) {
	msg := func(id int64) store.WebhookMessage {
		return store.WebhookMessage{Message: store.Message{ID: id, ConversationID: 1, Content: []byte(`{"t":1}`)}, ConversationType: 1}
	}
	ev := func(id int64) store.WebhookEvent {
		return store.WebhookEvent{ID: id, Type: store.EventGroupCreated, Data: json.RawMessage(`{}`)}
	}
	tests := []struct {
		name     string
		msgs     []store.WebhookMessage
		evs      []store.WebhookEvent
		limit    int
		wantIDs  []int64
		wantUpTo int64
	}{
		{"both short: all, up to the bound", []store.WebhookMessage{msg(1), msg(4)}, []store.WebhookEvent{ev(2), ev(3)}, 3, []int64{1, 2, 3, 4}, 100},
		{"messages full: events past them wait", []store.WebhookMessage{msg(1), msg(2)}, []store.WebhookEvent{ev(5)}, 2, []int64{1, 2}, 2},
		{"events full: messages past them wait", []store.WebhookMessage{msg(9)}, []store.WebhookEvent{ev(3), ev(4)}, 2, []int64{3, 4}, 4},
		{"both full", []store.WebhookMessage{msg(1), msg(6)}, []store.WebhookEvent{ev(2), ev(3)}, 2, []int64{1, 2, 3}, 3},
		{"nothing", nil, nil, 2, nil, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, upTo, err := merge(tt.msgs, tt.evs, tt.limit, 100)
			if err != nil {
				t.Fatal(err)
			}
			var ids []int64
			for _, it := range items {
				ids = append(ids, it.id)
			}
			if !slices.Equal(ids, tt.wantIDs) || upTo != tt.wantUpTo {
				t.Fatalf("merge = %v up to %d, want %v up to %d", ids, upTo, tt.wantIDs, tt.wantUpTo)
			}
		})
	}
}

func TestMessageItem(t *testing.T) {
	p2p := store.WebhookMessage{
		Message: store.Message{ID: 1 << 40, ConversationID: 7, SenderID: 1002, ClientMsgID: "c1", MessageType: 1,
			Content: []byte(`{"t":1,"text":"hi"}`), CreatedAt: time.Unix(1700000000, 0)},
		ConversationType: 1, UserSmall: sql.NullInt64{Int64: 1001, Valid: true}, UserBig: sql.NullInt64{Int64: 1002, Valid: true},
	}
	it, err := messageItem(p2p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"message.sent","timestamp":"2023-11-14T22:13:20Z","data":{"msg_id":"1099511627776","conversation_id":"7",` +
		`"conversation_type":"p2p","sender_id":"1002","sender_device":"","to_user_id":"1001","client_msg_id":"c1","message_type":1,` +
		`"content":{"t":1,"text":"hi"},"created_at":"2023-11-14T22:13:20Z"}}`
	if string(it.body) != want || it.webhookID != "msg_1099511627776" {
		t.Fatalf("item %s %s\nwant %s", it.webhookID, it.body, want)
	}
	grp := p2p
	grp.ConversationType, grp.UserSmall, grp.GroupID = store.ConversationGroup, sql.NullInt64{}, sql.NullInt64{Int64: 55, Valid: true}
	it, _ = messageItem(grp)
	if !strings.Contains(string(it.body), `"conversation_type":"group","group_id":"55"`) || strings.Contains(string(it.body), "to_user_id") {
		t.Fatalf("group item %s", it.body)
	}
}

func TestSubscription(t *testing.T) {
	tests := []struct {
		events, typ     string
		has, hasOtherTo bool
	}{
		{"", "message.sent", true, true},
		{"message.sent", "message.sent", true, false},
		{"message.sent,group.created", "group.created", true, true},
		{"message.sent", "group.created", false, true},
		{"group.created", "group.created", true, false},
		// A device's upstream frames reach only an endpoint naming their
		// service.
		{"", "upstream.orders", false, true},
		{"upstream.orders", "upstream.orders", true, false},
		{"upstream.orders", "upstream.chat", false, true},
		{"message.sent,upstream.orders", "upstream.orders", true, true},
	}
	for _, tt := range tests {
		s := subscriptions(tt.events)
		if s.has(tt.typ) != tt.has || s.hasOtherThan(tt.typ) != tt.hasOtherTo {
			t.Errorf("%q: has(%s) = %v, hasOtherThan = %v; want %v, %v", tt.events, tt.typ, s.has(tt.typ), s.hasOtherThan(tt.typ), tt.has, tt.hasOtherTo)
		}
	}
}

func TestSigningSecretsDuringGrace(t *testing.T) {
	now := time.Now()
	cur, old := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	tests := []struct {
		name  string
		until sql.NullTime
		want  int
	}{
		{"in grace", sql.NullTime{Time: now.Add(time.Minute), Valid: true}, 2},
		{"grace over", sql.NullTime{Time: now.Add(-time.Minute), Valid: true}, 1},
		{"never rotated", sql.NullTime{}, 1},
	}
	for _, tt := range tests {
		ep := store.WebhookEndpoint{Secret: cur, OldSecret: old, OldSecretUntil: tt.until}
		got, err := signingSecrets(ep, now)
		if err != nil || len(got) != tt.want {
			t.Errorf("%s: %d secrets, %v; want %d", tt.name, len(got), err, tt.want)
		}
	}
}

// The dispatcher's metrics follow the scheme (spark_logic_webhook_…).
func TestMetricNamesFollowScheme(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.Deliveries.WithLabelValues("ok")
	m.Lag.WithLabelValues("1")
	if err := metricname.CheckGathered("logic", reg); err != nil {
		t.Error(err)
	}
}
