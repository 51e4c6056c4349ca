package protocol

import "github.com/sparkim/spark/pkg/jsonid"

// UpstreamRequest is the body of UPSTREAM (22): Body goes, unread, to the
// business service named Service. UpstreamID, when set, makes a retry
// idempotent: the same user, service and upstream_id are queued once.
type UpstreamRequest struct {
	Service    string `json:"service"`
	Body       string `json:"body"`
	UpstreamID string `json:"upstream_id,omitempty"`
}

// UpstreamReply is the answer of UPSTREAM: ID is the queued item's id
// (what the service sees), Duplicate is true when an earlier request
// with the same upstream_id had queued it.
type UpstreamReply struct {
	ID        jsonid.ID `json:"id"`
	Duplicate bool      `json:"duplicate"`
}
