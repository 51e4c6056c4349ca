package client

import (
	"context"
	"fmt"

	"github.com/sparkim/spark/pkg/protocol"
)

// CmdUpstream (22) sends a frame to a named business service.
const CmdUpstream = protocol.CmdUpstream

// Upstream sends body to the business service named service and returns
// once the server has durably queued it. upstreamID, when not empty,
// makes a retry safe: the same user, service and upstreamID are queued
// once, and a retry's reply has Duplicate set and the first one's ID.
// NewClientMsgID makes a good one; reuse it for every retry of the frame.
func (c *Conn) Upstream(ctx context.Context, service, body, upstreamID string) (protocol.UpstreamReply, error) {
	var out protocol.UpstreamReply
	req := protocol.UpstreamRequest{Service: service, Body: body, UpstreamID: upstreamID}
	if _, err := c.call(ctx, CmdUpstream, req, &out); err != nil {
		return out, fmt.Errorf("client: upstream to %s: %w", service, err)
	}
	return out, nil
}
