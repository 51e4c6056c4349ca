package gateway

import (
	"testing"
	"time"

	"github.com/sparkim/spark/pkg/protocol"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// BenchmarkFinish is the per-request bookkeeping of a successful send
// (envelope, metrics, the debug log line that is off in production).
func BenchmarkFinish(b *testing.B) {
	h := &Handler{}
	h.init()
	req := &logicv1.Request{Command: uint32(protocol.CmdSendMessage), ConnId: 7, RealIp: "10.0.0.1",
		Session: &logicv1.Session{UserId: 42, DeviceId: "phone"}}
	data := []byte(`{"msg_id":"1","client_msg_id":"c","conversation_id":"2","server_time":3}`)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		resp := &logicv1.Response{}
		h.finish(req, "gate-1", resp, data, nil, time.Now())
	}
}
