package push

import (
	"net/http"
	"testing"
	"time"

	"github.com/sparkim/spark/pkg/errcode"
)

// FuzzRetryAfter feeds arbitrary Retry-After values to the parser the
// providers' 429 and 503 answers go through: it never panics and never
// answers a negative wait.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"", "0", "7", "-1", "120", "Wed, 21 Oct 2015 07:28:00 GMT", "Fri, 04 Dec 2099 00:00:00 GMT", "1e9", "99999999999999999999", "\xff"} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 4, 22, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{}
		h.Set("Retry-After", v)
		if d := retryAfter(h, now); d < 0 {
			t.Fatalf("Retry-After %q read as %v", v, d)
		}
	})
}

// FuzzRegistrationValidate feeds arbitrary registrations to the check
// both front doors run: it never panics, a refusal is a 40001, and an
// accepted one names a known platform.
func FuzzRegistrationValidate(f *testing.F) {
	f.Add(int64(7), "ios-1", "apns", "a1b2c3d4e5f60718293a4b5c6d7e8f90", "com.example", true, "")
	f.Add(int64(7), "a", "fcm", "x:y_z.-", "", false, "")
	f.Add(int64(7), "a", "gateway", "t", "", false, "jpush")
	f.Add(int64(-1), "", "hms", "a/b", "..", true, "Get UI")
	f.Fuzz(func(t *testing.T, uid int64, dev, platform, token, topic string, sandbox bool, gateway string) {
		r := Registration{UserID: uid, DeviceID: dev, Platform: platform, Token: token, Topic: topic, Sandbox: sandbox, Gateway: gateway}
		pt, err := r.Validate()
		if err != nil {
			if c, _ := errcode.Of(err); c != errcode.InvalidArgument {
				t.Fatalf("%+v: %v is %s, want 40001", r, err, c)
			}
			return
		}
		if PlatformName(pt.Platform) != platform || len(pt.Token) > 512 || pt.Token == "" {
			t.Fatalf("%+v accepted as %+v", r, pt)
		}
	})
}
