package push

import (
	"testing"

	"github.com/sparkim/spark/pkg/errcode"
)

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
