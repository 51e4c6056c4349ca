package consumer

import (
	"testing"

	queuev1 "github.com/sparkim/spark/proto/queue/v1"
)

func TestMarksDone(t *testing.T) {
	tests := []struct {
		name string
		job  *queuev1.DeliverJob
		want bool
	}{
		{"undecodable entry", nil, false},
		{"message", &queuev1.DeliverJob{Kind: queuev1.JobKind_JOB_KIND_MESSAGE, MsgId: 1}, true},
		{"kind unset is a message (first logic version)", &queuev1.DeliverJob{MsgId: 1}, true},
		{"signal", &queuev1.DeliverJob{Kind: queuev1.JobKind_JOB_KIND_SIGNAL, MsgId: 1, Command: 9}, false},
		{"unknown kind", &queuev1.DeliverJob{Kind: queuev1.JobKind(42), MsgId: 1}, false},
	}
	for _, tt := range tests {
		if got := MarksDone(tt.job); got != tt.want {
			t.Errorf("%s: MarksDone = %v, want %v", tt.name, got, tt.want)
		}
	}
}
