package api

import (
	"context"
	"encoding/json"
	"net/http"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/online"
	"github.com/sparkim/spark/pkg/protocol"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// GetPresence lists each asked user's online devices, in request order
// (duplicates once).
func (s *Server) GetPresence(ctx context.Context, req *logicv1.GetPresenceRequest) (*logicv1.GetPresenceReply, error) {
	if len(req.UserIds) == 0 {
		return nil, invalid("user_ids", "empty")
	}
	devs, err := s.online.Devices(ctx, req.UserIds)
	if err != nil {
		return nil, s.statusOf("GetPresence", err)
	}
	out := &logicv1.GetPresenceReply{}
	seen := map[int64]bool{}
	for _, u := range req.UserIds {
		if seen[u] {
			continue
		}
		seen[u] = true
		p := &logicv1.Presence{UserId: u}
		for _, d := range devs[u] {
			p.Devices = append(p.Devices, &logicv1.Device{DeviceId: d.DeviceID, GateId: d.GateID, ConnId: d.ConnID, SinceMs: d.SinceMs, RealIp: d.RealIP})
		}
		out.Users = append(out.Users, p)
	}
	return out, nil
}

// ListGates lists the live gates with their client addresses and
// connection counts.
func (s *Server) ListGates(ctx context.Context, _ *logicv1.ListGatesRequest) (*logicv1.ListGatesReply, error) {
	gates, err := s.online.Gates(ctx)
	if err != nil {
		return nil, s.statusOf("ListGates", err)
	}
	out := &logicv1.ListGatesReply{}
	for _, g := range gates {
		out.Gates = append(out.Gates, gateOf(g))
	}
	return out, nil
}

func gateOf(g online.Gate) *logicv1.GateInfo {
	return &logicv1.GateInfo{
		GateId: g.ID, ClientAddrs: g.ClientAddrs, PushAddr: g.PushAddr, StartedAtMs: g.StartedAtMs,
		Connections: g.Connections, Authenticated: g.Authenticated, Error: g.Err, Version: g.Version,
	}
}

// GateJSON is one gate in logic's admin /gates answer (the same facts as
// ListGates, for load balancers and clients' "iplist" without gRPC).
type GateJSON struct {
	GateID        string   `json:"gate_id"`
	ClientAddrs   []string `json:"client_addrs"`
	PushAddr      string   `json:"push_addr"`
	StartedAtMs   int64    `json:"started_at_ms"`
	Connections   uint64   `json:"connections"`
	Authenticated uint64   `json:"authenticated"`
	Version       string   `json:"version"`
	Error         string   `json:"error,omitempty"`
}

// GatesHandler serves the live gates as JSON {"gates":[…]} on the admin
// port (no API key: the admin port is bound to loopback by default and
// carries nothing secret).
func GatesHandler(o *online.Service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gates, err := o.Gates(r.Context())
		if err != nil {
			http.Error(w, "gates unavailable", http.StatusServiceUnavailable)
			return
		}
		out := struct {
			Gates []GateJSON `json:"gates"`
		}{Gates: make([]GateJSON, 0, len(gates))}
		for _, g := range gates {
			addrs := g.ClientAddrs
			if addrs == nil {
				addrs = []string{}
			}
			out.Gates = append(out.Gates, GateJSON{
				GateID: g.ID, ClientAddrs: addrs, PushAddr: g.PushAddr, StartedAtMs: g.StartedAtMs,
				Connections: g.Connections, Authenticated: g.Authenticated, Error: g.Err, Version: g.Version,
			})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
}

// maxKickReason bounds KickUser's reason, as AUTH bounds its labels.
const maxKickReason = 64

// KickUser kicks every live connection of the user, or of one device,
// with the reason the client sees in KICK.
func (s *Server) KickUser(ctx context.Context, req *logicv1.KickUserRequest) (*logicv1.KickUserReply, error) {
	if err := positive("user_id", req.UserId); err != nil {
		return nil, err
	}
	if req.DeviceId != "" && !protocol.ValidDeviceID(req.DeviceId) {
		return nil, invalid("device_id", "must be 1-64 of [A-Za-z0-9._-]")
	}
	if len(req.Reason) > maxKickReason || !utf8.ValidString(req.Reason) {
		return nil, invalid("reason", "at most 64 bytes of UTF-8")
	}
	reason := req.Reason
	if reason == "" {
		reason = "kicked"
	}
	n, err := s.online.Kick(ctx, req.UserId, req.DeviceId, reason)
	if err != nil {
		return nil, s.statusOf("KickUser", err)
	}
	s.log.Info("user kicked", zap.Int64("user_id", req.UserId), zap.String("device_id", req.DeviceId), zap.String("reason", reason), zap.Int("kicked", n))
	return &logicv1.KickUserReply{Kicked: uint32(n)}, nil
}
