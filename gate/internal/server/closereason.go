package server

// closeReason is why the gate closed a client connection. It is recorded
// once per connection (the first reason wins, later ones are its
// consequences), written in the close log line and in the Closed event
// logic gets, and indexes the spark_gate_connections_closed_total counters, so
// logs, logic and metrics can never name one cause two ways.
type closeReason uint8

const (
	// closePeer is the zero value: the gate recorded no reason, so the
	// client (or the network) closed.
	closePeer closeReason = iota
	closeAuthTimeout
	closeIdleTimeout
	// closeBadFrame: a byte stream that is not Spark frames.
	closeBadFrame
	closeBadGzip
	closeReadFailed
	closeWriteFailed
	// closeAfterAnswer: a frame queued as the connection's last was
	// written.
	closeAfterAnswer
	// closeByLogic: logic's answer asked for the close (a failed AUTH).
	closeByLogic
	// closeAnswersNotRead: the outbound queue filled with answers the
	// client did not read.
	closeAnswersNotRead
	// closeKicked: a KICK was queued; Conn.kickedFor says why.
	closeKicked
	closeShutdown
	// closeKickLate: a shutdown KICK was not written within the write
	// timeout.
	closeKickLate
	// closeBeforeAuth: logic bound a session to a connection already
	// gone (only ever a Closed event's reason, never a close's).
	closeBeforeAuth
	// closeWSClient: the client sent a WebSocket close frame.
	closeWSClient
	// closeWSProtocol: the client broke the WebSocket rules (the close
	// frame it was sent says which).
	closeWSProtocol
	// closeTest is for tests that close a connection by hand.
	closeTest

	numCloseReasons
)

// closeReasons spell each reason twice: text as logs and Closed events
// have always read it, label as the metric's reason label (Prometheus
// label values are short snake_case words).
var closeReasons = [numCloseReasons]struct{ text, label string }{
	closePeer:           {"peer closed", "peer_closed"},
	closeAuthTimeout:    {"auth timeout", "auth_timeout"},
	closeIdleTimeout:    {"idle timeout", "idle_timeout"},
	closeBadFrame:       {"bad frame", "bad_frame"},
	closeBadGzip:        {"bad gzip body", "bad_gzip"},
	closeReadFailed:     {"read failed", "read_failed"},
	closeWriteFailed:    {"write failed", "write_failed"},
	closeAfterAnswer:    {"closed after answer", "after_answer"},
	closeByLogic:        {"closed by logic", "by_logic"},
	closeAnswersNotRead: {"answers not read: outbound queue full", "answers_not_read"},
	closeKicked:         {"kicked", "kicked"},
	closeShutdown:       {"server shutting down", "shutdown"},
	closeKickLate:       {"server shutting down: kick not written in time", "shutdown_kick_late"},
	closeBeforeAuth:     {"closed before auth completed", "before_auth"},
	closeWSClient:       {"client closed", "ws_client_closed"},
	closeWSProtocol:     {"ws protocol error", "ws_protocol_error"},
	closeTest:           {"test", "test"},
}

// String implements fmt.Stringer.
func (r closeReason) String() string {
	if r < numCloseReasons {
		return closeReasons[r].text
	}
	return "unknown"
}

// label is the reason as the metric's label value.
func (r closeReason) label() string {
	if r < numCloseReasons {
		return closeReasons[r].label
	}
	return "unknown"
}
