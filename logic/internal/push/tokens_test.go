package push_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sparkim/spark/logic/internal/push"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/pkg/errcode"
)

const apnsTok = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90"

func TestRegistrationValidateNamesTheBadField(t *testing.T) {
	ok := push.Registration{UserID: 7, DeviceID: "ios-1", Platform: "apns", Token: apnsTok, Topic: "com.example.app"}
	tests := []struct {
		name  string
		edit  func(r *push.Registration)
		field string // "" = valid
	}{
		{"apns with topic", func(*push.Registration) {}, ""},
		{"fcm", func(r *push.Registration) { r.Platform, r.Token, r.Topic = "fcm", "fcm:APA91b-x_y.z", "" }, ""},
		{"gateway", func(r *push.Registration) {
			r.Platform, r.Token, r.Topic, r.Gateway = "gateway", "jpush-123", "", "jpush"
		}, ""},
		{"no user", func(r *push.Registration) { r.UserID = 0 }, "user_id"},
		{"no device", func(r *push.Registration) { r.DeviceID = "" }, "device_id"},
		{"unknown platform", func(r *push.Registration) { r.Platform = "hms" }, "platform"},
		{"empty token", func(r *push.Registration) { r.Token = "" }, "token"},
		{"token with a slash", func(r *push.Registration) { r.Platform, r.Topic, r.Token = "fcm", "", "a/b" }, "token"},
		{"token too long", func(r *push.Registration) { r.Platform, r.Topic, r.Token = "fcm", "", strings.Repeat("a", 513) }, "token"},
		{"apns token not hex", func(r *push.Registration) { r.Token = "zz" + apnsTok[2:] }, "token"},
		{"apns without topic", func(r *push.Registration) { r.Topic = "" }, "topic"},
		{"apns with gateway", func(r *push.Registration) { r.Gateway = "x" }, "gateway"},
		{"fcm with sandbox", func(r *push.Registration) { r.Platform, r.Token, r.Topic, r.Sandbox = "fcm", "abc", "", true }, "platform"},
		{"gateway without name", func(r *push.Registration) { r.Platform, r.Token, r.Topic = "gateway", "abc", "" }, "gateway"},
		{"gateway bad name", func(r *push.Registration) { r.Platform, r.Token, r.Topic, r.Gateway = "gateway", "abc", "", "Get UI" }, "gateway"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ok
			tt.edit(&r)
			_, err := r.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("valid registration refused: %v", err)
				}
				return
			}
			code, msg := errcode.Of(err)
			if code != errcode.InvalidArgument || !strings.Contains(msg, tt.field) {
				t.Fatalf("got %s %q, want 40001 naming %s", code, msg, tt.field)
			}
		})
	}
}

// TestTokensRegisterReplacesMovesAndCompareDeletes checks the MySQL side:
// a device has one token (a new one replaces it), a token registered by
// another device or user moves there, and a provider's late "dead token"
// removes nothing once the device registered a new one.
func TestTokensRegisterReplacesMovesAndCompareDeletes(t *testing.T) {
	_, db := testenv.MySQL(t)
	st := store.New(db)
	tok := push.NewTokens(st)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg := func(uid int64, dev, token string) {
		t.Helper()
		if err := tok.Register(ctx, push.Registration{UserID: uid, DeviceID: dev, Platform: "fcm", Token: token}); err != nil {
			t.Fatal(err)
		}
	}
	tokens := func(uid int64) []string {
		t.Helper()
		ts, err := st.PushTokens(ctx, uid)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, x := range ts {
			out = append(out, x.DeviceID+"="+x.Token)
		}
		return out
	}
	reg(1, "a", "t1")
	reg(1, "a", "t2") // replaced
	reg(1, "b", "t3")
	if got := strings.Join(tokens(1), ","); got != "a=t2,b=t3" {
		t.Fatalf("user 1 tokens %s, want a=t2,b=t3", got)
	}
	reg(2, "c", "t3") // the phone of device b signed in as user 2
	if got := strings.Join(tokens(1), ","); got != "a=t2" {
		t.Fatalf("after t3 moved, user 1 has %s, want a=t2", got)
	}
	if gone, err := st.DeletePushToken(ctx, 1, "a", "t1"); err != nil || gone {
		t.Fatalf("dead-token removal of the old token t1 removed the new one (%v, %v)", gone, err)
	}
	if gone, err := st.DeletePushToken(ctx, 1, "a", "t2"); err != nil || !gone {
		t.Fatalf("dead-token removal of t2: %v, %v", gone, err)
	}
	if ok, err := tok.Unregister(ctx, 2, "c"); err != nil || !ok {
		t.Fatalf("unregister: %v %v", ok, err)
	}
	if p, err := tok.Preview(ctx, 1); err != nil || p != "full" {
		t.Fatalf("default preview %q %v, want full", p, err)
	}
	if err := tok.SetPreview(ctx, 1, "sender"); err != nil {
		t.Fatal(err)
	}
	if p, _ := tok.Preview(ctx, 1); p != "sender" {
		t.Fatalf("preview %q after setting sender", p)
	}
	if code, _ := errcode.Of(tok.SetPreview(ctx, 1, "all")); code != errcode.InvalidArgument {
		t.Fatalf("preview all: %s, want 40001", code)
	}
}
