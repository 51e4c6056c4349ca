//go:build failpoints

package message_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/failpoint"
)

func arm(t *testing.T, spec string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPut, "/debug/failpoints", strings.NewReader(spec))
	w := httptest.NewRecorder()
	failpoint.Handler().ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("arm %s: %d", spec, w.Code)
	}
}

// A send whose enqueue fails gets no SEND_ACK; its retry finds the
// committed row, enqueues it and gets the ack.
func TestSendEnqueueFailure(t *testing.T) {
	e := newEnv(t)
	svc, _ := e.service(t, 27, message.Config{EnqueueRetries: 2})
	u := e.users(t, 2)
	ctx := context.Background()
	from := message.Sender{UserID: u[0], DeviceID: "d"}
	b := body("to_user_id", u[1], "client_msg_id", "fp", "message_type", 1, "content", text("x"))
	steps := []struct {
		name string
		arm  string
		want errcode.Code
	}{
		{"enqueue fails", "logic/send/beforeEnqueue=error", errcode.Busy},
		{"after commit fails", "logic/send/afterCommit=error", errcode.OK}, // a retry is a replay: afterCommit is not on its path
		{"retry succeeds", "", errcode.OK},
	}
	for _, s := range steps {
		arm(t, "logic/send/beforeEnqueue=off")
		arm(t, "logic/send/afterCommit=off")
		if s.arm != "" {
			arm(t, s.arm)
		}
		ack, err := svc.Send(ctx, from, sendReq(b))
		if got := code(err); got != s.want {
			t.Fatalf("%s: code %s (%v), want %s", s.name, got, err, s.want)
		}
		if err == nil && ack == nil {
			t.Fatalf("%s: no ack", s.name)
		}
	}
	arm(t, "logic/send/afterCommit=off")
	var rows int
	if err := e.st.DB().Get(&rows, "SELECT COUNT(*) FROM t_messages WHERE sender_id = ?", u[0]); err != nil || rows != 1 {
		t.Fatalf("%d rows (%v)", rows, err)
	}
	// afterCommit on a fresh send: committed, no ack.
	arm(t, "logic/send/afterCommit=error")
	_, err := svc.Send(ctx, from, sendReq(body("to_user_id", u[1], "client_msg_id", "fp2", "message_type", 1, "content", text("y"))))
	arm(t, "logic/send/afterCommit=off")
	if code(err) != errcode.Busy {
		t.Fatalf("afterCommit: %v", err)
	}
	if _, err := svc.Send(ctx, from, sendReq(body("to_user_id", u[1], "client_msg_id", "fp2", "message_type", 1, "content", text("y")))); err != nil {
		t.Fatalf("retry after afterCommit: %v", err)
	}
}
