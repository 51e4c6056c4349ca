package stdwebhook

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The specification's published example.
const (
	vecSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vecID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vecTS     = 1614265330
	vecBody   = `{"test": 2432232314}`
	vecSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func mustSecret(t *testing.T, s string) Secret {
	t.Helper()
	sec, err := ParseSecret(s)
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

func TestSignMatchesSpecVector(t *testing.T) {
	tests := []struct {
		name string
		id   string
		ts   int64
		body string
		want string
	}{
		{"spec vector", vecID, vecTS, vecBody, vecSig},
		{"other id", "msg_other", vecTS, vecBody, ""},
		{"other timestamp", vecID, vecTS + 1, vecBody, ""},
		{"other body", vecID, vecTS, `{"test": 2432232315}`, ""},
	}
	sec := mustSecret(t, vecSecret)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Sign(sec, tt.id, tt.ts, []byte(tt.body))
			if tt.want != "" && got != tt.want {
				t.Fatalf("Sign = %q, want %q", got, tt.want)
			}
			if tt.want == "" && got == vecSig {
				t.Fatalf("Sign of changed input %+v still gives the vector's signature", tt)
			}
		})
	}
}

func TestParseSecret(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantLen int
		wantErr bool
	}{
		{"spec vector 24 bytes", vecSecret, 24, false},
		{"64 bytes", Secret(bytes.Repeat([]byte{7}, 64)).String(), 64, false},
		{"no prefix", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 0, true},
		{"wrong prefix", "whsk_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", 0, true},
		{"not base64", "whsec_!!!!", 0, true},
		{"too short", Secret(make([]byte, 23)).String(), 0, true},
		{"too long", Secret(make([]byte, 65)).String(), 0, true},
		{"empty", "", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSecret(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err == nil && len(got) != tt.wantLen {
				t.Fatalf("len = %d, want %d", len(got), tt.wantLen)
			}
		})
	}
}

func TestNewSecretRoundTrips(t *testing.T) {
	a, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewSecret()
	if bytes.Equal(a, b) {
		t.Fatal("two new secrets are equal")
	}
	back, err := ParseSecret(a.String())
	if err != nil || !bytes.Equal(back, a) {
		t.Fatalf("ParseSecret(%q) = %x, %v; want %x", a.String(), back, err, a)
	}
}

func TestSetHeadersSignsWithEverySecret(t *testing.T) {
	oldS := mustSecret(t, vecSecret)
	newS, _ := NewSecret()
	h := http.Header{}
	SetHeaders(h, vecID, vecTS, []byte(vecBody), newS, oldS)
	if h.Get(HeaderID) != vecID || h.Get(HeaderTimestamp) != "1614265330" {
		t.Fatalf("headers = %v", h)
	}
	sigs := strings.Fields(h.Get(HeaderSignature))
	if len(sigs) != 2 || sigs[1] != vecSig || sigs[0] != Sign(newS, vecID, vecTS, []byte(vecBody)) {
		t.Fatalf("signatures = %q", sigs)
	}
}

func TestVerify(t *testing.T) {
	sec := mustSecret(t, vecSecret)
	other, _ := NewSecret()
	at := time.Unix(vecTS, 0)
	hdr := func(id, ts, sig string) http.Header {
		h := http.Header{}
		for k, v := range map[string]string{HeaderID: id, HeaderTimestamp: ts, HeaderSignature: sig} {
			if v != "" {
				h.Set(k, v)
			}
		}
		return h
	}
	tests := []struct {
		name    string
		h       http.Header
		body    string
		now     time.Time
		secrets []Secret
		wantErr bool
	}{
		{"spec vector", hdr(vecID, "1614265330", vecSig), vecBody, at, []Secret{sec}, false},
		{"second of two secrets", hdr(vecID, "1614265330", vecSig), vecBody, at, []Secret{other, sec}, false},
		{"second signature in list", hdr(vecID, "1614265330", "v1,AAAA "+vecSig), vecBody, at, []Secret{sec}, false},
		{"unknown version skipped", hdr(vecID, "1614265330", "v1a,xyz "+vecSig), vecBody, at, []Secret{sec}, false},
		{"4m59s late is fine", hdr(vecID, "1614265330", vecSig), vecBody, at.Add(4*time.Minute + 59*time.Second), []Secret{sec}, false},
		{"6 minutes late", hdr(vecID, "1614265330", vecSig), vecBody, at.Add(6 * time.Minute), []Secret{sec}, true},
		{"6 minutes early", hdr(vecID, "1614265330", vecSig), vecBody, at.Add(-6 * time.Minute), []Secret{sec}, true},
		{"wrong secret", hdr(vecID, "1614265330", vecSig), vecBody, at, []Secret{other}, true},
		{"body changed", hdr(vecID, "1614265330", vecSig), `{"test": 1}`, at, []Secret{sec}, true},
		{"id changed", hdr("msg_x", "1614265330", vecSig), vecBody, at, []Secret{sec}, true},
		{"no id", hdr("", "1614265330", vecSig), vecBody, at, []Secret{sec}, true},
		{"timestamp not a number", hdr(vecID, "soon", vecSig), vecBody, at, []Secret{sec}, true},
		{"no signature", hdr(vecID, "1614265330", ""), vecBody, at, []Secret{sec}, true},
		{"signature not base64", hdr(vecID, "1614265330", "v1,@@@"), vecBody, at, []Secret{sec}, true},
		{"no secrets", hdr(vecID, "1614265330", vecSig), vecBody, at, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Verify(tt.h, []byte(tt.body), tt.now, tt.secrets...)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Verify = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrVerify) {
				t.Fatalf("error %v does not wrap ErrVerify", err)
			}
		})
	}
}

func FuzzVerify(f *testing.F) {
	f.Add(vecID, "1614265330", vecSig, vecBody)
	f.Add("", "x", "v1,", "")
	sec, _ := ParseSecret(vecSecret)
	f.Fuzz(func(t *testing.T, id, ts, sig, body string) {
		h := http.Header{}
		h.Set(HeaderID, id)
		h.Set(HeaderTimestamp, ts)
		h.Set(HeaderSignature, sig)
		err := Verify(h, []byte(body), time.Unix(vecTS, 0), sec)
		if err != nil {
			return
		}
		// A pass must come from a real signature of this id, time and body.
		n, perr := strconv.ParseInt(ts, 10, 64)
		if perr != nil || !strings.Contains(sig, Sign(sec, id, n, []byte(body))[len("v1,"):]) {
			t.Fatalf("Verify passed %q/%q/%q without a real signature", id, ts, sig)
		}
	})
}

func FuzzParseSecret(f *testing.F) {
	f.Add(vecSecret)
	f.Add("whsec_")
	f.Fuzz(func(t *testing.T, s string) {
		sec, err := ParseSecret(s)
		if err != nil {
			return
		}
		if len(sec) < 24 || len(sec) > 64 {
			t.Fatalf("ParseSecret(%q) accepted %d bytes", s, len(sec))
		}
		back, err := ParseSecret(sec.String())
		if err != nil || !bytes.Equal(back, sec) {
			t.Fatalf("round trip of %q failed: %v", s, err)
		}
	})
}
