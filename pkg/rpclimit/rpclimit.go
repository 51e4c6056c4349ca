// Package rpclimit sets the message-size limits of every gRPC link of the
// cluster (gate ⇄ logic streams, logic → gate and deliver → gate pushes,
// deliver → logic, the business API) explicitly, one value on both ends,
// so a limit is never gRPC's default by accident (4 MiB to receive,
// unlimited to send: a sender could build a message its peer refuses,
// breaking a stream shared by thousands of connections). Senders keep
// well below it: the streams batch at most 256 KiB, a PushBatch call at
// most PushBatchBytes, and every frame is at most max_frame_size.
package rpclimit

import "google.golang.org/grpc"

// MaxMessageBytes is the largest gRPC message any link sends or accepts.
const MaxMessageBytes = 8 << 20

// PushBatchBytes bounds one PushBatch request; deliver splits larger
// batches into several calls, in order.
const PushBatchBytes = 2 << 20

// DialOption applies the limit to every call on a client connection.
func DialOption() grpc.DialOption {
	return grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes))
}

// ServerOptions apply the limit to a server.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(MaxMessageBytes), grpc.MaxSendMsgSize(MaxMessageBytes)}
}
