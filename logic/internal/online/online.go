// Package online is the domain of who is connected right now: the devices
// of users from the route table (im:route:{uid}), kicking all of a user's
// connections, transient pushes to online devices and broadcasts to every
// connection, and the list of live gates with their connection counts.
// Nothing here touches MySQL: what it pushes is never stored, and a device
// that is offline simply does not get it.
//
// The business API adapts onto it (PushToUsers, Broadcast, GetPresence,
// ListGates, and the kicks of RevokeTokens / DisableUser); errors a caller
// should show are *errcode.Error.
package online

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/gatepush"
	"github.com/sparkim/spark/pkg/envelope"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/rediskey"
	"github.com/sparkim/spark/pkg/route"
	gatev1 "github.com/sparkim/spark/proto/gate/v1"
)

// Limits of one call.
const (
	// MaxUsers bounds the users of one Devices or Push call, so one call
	// stays one bounded pipeline.
	MaxUsers = 1000
	// MaxPayload bounds a transient payload (JSON bytes): the TRANSIENT
	// frame must fit the clients' 64 KiB frame limit with room to spare.
	MaxPayload = 32 << 10
)

// Device is one online device of a user.
type Device struct {
	DeviceID string
	GateID   string
	ConnID   uint64
	SinceMs  int64
	// RealIP is the client's address as its gate saw it; empty when the
	// route entry predates it or was restored by Rebind.
	RealIP string
}

// PushResult sums what the gates reported for a push or a broadcast.
type PushResult struct {
	// Delivered counts connections the frame was queued for, Dropped those
	// whose outbound queue was full.
	Delivered, Dropped int
	// FailedGates are gates whose RPC failed (or that are unknown).
	FailedGates []string
}

// Gate is a live gate with its counters.
type Gate struct {
	gatepush.Gate
	Connections, Authenticated uint64
	// Version is the gate's build version from its Stats.
	Version string
	// Err is why the counters could not be read (empty when they were).
	Err string
}

// Service is the online-devices service. It is safe for concurrent use.
type Service struct {
	rdb     redis.Cmdable
	reg     *gatepush.Registry
	clients *gatepush.Clients
	timeout time.Duration
	ids     *envelope.IDSource
	log     *zap.Logger
}

// New returns a Service; timeout bounds each gate RPC.
func New(rdb redis.Cmdable, reg *gatepush.Registry, clients *gatepush.Clients, timeout time.Duration, log *zap.Logger) *Service {
	if log == nil {
		log = zap.NewNop()
	}
	if timeout <= 0 {
		timeout = 3 * time.Second
	}
	return &Service{rdb: rdb, reg: reg, clients: clients, timeout: timeout, ids: envelope.NewIDSource(), log: log}
}

// checkUsers validates user ids and returns them without duplicates, in
// the order given.
func checkUsers(field string, uids []int64) ([]int64, error) {
	if len(uids) == 0 {
		return nil, errcode.Invalid(field, "empty")
	}
	out := make([]int64, 0, len(uids))
	seen := make(map[int64]bool, len(uids))
	for _, u := range uids {
		if u <= 0 {
			return nil, errcode.Invalid(field, fmt.Sprintf("%d is not a user id", u))
		}
		if !seen[u] {
			seen[u] = true
			out = append(out, u)
		}
	}
	if len(out) > MaxUsers {
		return nil, errcode.Invalid(field, fmt.Sprintf("more than %d users in one call", MaxUsers))
	}
	return out, nil
}

// Devices returns the online devices of each user (a user with none is
// offline and absent from the map), by device id. Route values that do
// not parse are skipped. Errors: 40001 naming user_ids, 50301.
func (s *Service) Devices(ctx context.Context, uids []int64) (map[int64][]Device, error) {
	uids, err := checkUsers("user_ids", uids)
	if err != nil {
		return nil, err
	}
	return s.devices(ctx, uids)
}

func (s *Service) devices(ctx context.Context, uids []int64) (map[int64][]Device, error) {
	cmds := make([]*redis.MapStringStringCmd, len(uids))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, u := range uids {
			cmds[i] = p.HGetAll(ctx, rediskey.Route(u))
		}
		return nil
	}); err != nil {
		return nil, errcode.Unavailable("online: read routes", err)
	}
	out := make(map[int64][]Device, len(uids))
	for i, u := range uids {
		for dev, v := range cmds[i].Val() {
			e, err := route.Parse(v)
			if err != nil {
				s.log.Warn("malformed route value", zap.Int64("user_id", u), zap.String("device_id", dev), zap.Error(err))
				continue
			}
			out[u] = append(out[u], Device{DeviceID: dev, GateID: e.GateID, ConnID: e.ConnID, SinceMs: e.SinceMs, RealIP: e.RealIP})
		}
		slices.SortFunc(out[u], func(a, b Device) int {
			if a.DeviceID < b.DeviceID {
				return -1
			}
			if a.DeviceID > b.DeviceID {
				return 1
			}
			return 0
		})
	}
	return out, nil
}

// byGate groups the devices of users into Push targets per gate.
func byGate(devs map[int64][]Device) map[string][]*gatev1.Target {
	out := map[string][]*gatev1.Target{}
	for u, ds := range devs {
		for _, d := range ds {
			out[d.GateID] = append(out[d.GateID], &gatev1.Target{ConnId: d.ConnID, UserId: u, DeviceId: d.DeviceID})
		}
	}
	return out
}

// client returns the Push client of a gate.
func (s *Service) client(ctx context.Context, gateID string) (gatev1.PushClient, error) {
	addr, err := s.reg.PushAddr(ctx, gateID)
	if err != nil {
		return nil, err
	}
	return s.clients.Get(addr)
}

// eachGate runs fn for every gate in parallel, each bounded by the
// service's timeout, and returns the gates whose fn failed.
func (s *Service) eachGate(ctx context.Context, gates []string, fn func(ctx context.Context, gateID string) error) []string {
	var (
		mu     sync.Mutex
		failed []string
		wg     sync.WaitGroup
	)
	for _, g := range gates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gctx, cancel := context.WithTimeout(ctx, s.timeout)
			defer cancel()
			if err := fn(gctx, g); err != nil {
				s.log.Warn("gate call failed", zap.String("gate_id", g), zap.Error(err))
				mu.Lock()
				failed = append(failed, g)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.Sort(failed)
	return failed
}

// KickUser sends KICK{reason} to every live connection of the user and
// closes them, all gates at once, and returns how many were kicked. A
// route naming a gate that is gone is skipped (its connections died with
// it); a gate that could not be reached is 50301, so the caller retries.
func (s *Service) KickUser(ctx context.Context, uid int64, reason string) (int, error) {
	return s.Kick(ctx, uid, "", reason)
}

// Kick is KickUser limited to one device when deviceID is set.
func (s *Service) Kick(ctx context.Context, uid int64, deviceID, reason string) (int, error) {
	if uid <= 0 {
		return 0, errcode.Invalid("user_id", "must be a positive id")
	}
	devs, err := s.devices(ctx, []int64{uid})
	if err != nil {
		return 0, err
	}
	if deviceID != "" {
		devs[uid] = slices.DeleteFunc(devs[uid], func(d Device) bool { return d.DeviceID != deviceID })
	}
	targets := byGate(devs)
	var mu sync.Mutex
	kicked := 0
	failed := s.eachGate(ctx, mapKeys(targets), func(ctx context.Context, g string) error {
		c, err := s.client(ctx, g)
		if errors.Is(err, gatepush.ErrUnknownGate) {
			return nil
		}
		if err != nil {
			return err
		}
		rep, err := c.Kick(ctx, &gatev1.KickRequest{Targets: targets[g], Reason: reason})
		if err != nil {
			return err
		}
		mu.Lock()
		kicked += int(rep.GetKicked())
		mu.Unlock()
		return nil
	})
	if len(failed) > 0 {
		return kicked, errcode.Wrap(errcode.Busy, "some connections could not be kicked; retry",
			fmt.Errorf("online: kick user %d: gates %v failed", uid, failed))
	}
	return kicked, nil
}

// transientBody validates a business payload (a JSON object) and returns
// the TRANSIENT envelope {"code":"0",…,"data":{"payload":…}}.
func (s *Service) transientBody(payload []byte) ([]byte, error) {
	if len(payload) > MaxPayload {
		return nil, errcode.Invalid("payload", fmt.Sprintf("over %d bytes", MaxPayload))
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(payload, &obj); err != nil || obj == nil {
		return nil, errcode.Invalid("payload", "must be a JSON object")
	}
	data, err := protocol.Marshal(struct {
		Payload json.RawMessage `json:"payload"`
	}{payload})
	if err != nil {
		return nil, errcode.Invalid("payload", "must be a JSON object")
	}
	return envelope.OK(s.ids.Next(), data), nil
}

// Push sends payload (a JSON object) as a TRANSIENT (18) push to every
// online device of the users: one Push RPC per gate, gates in parallel.
// Nothing is stored; offline devices never get it. Errors: 40001 naming
// user_ids or payload, 50301 when the route table cannot be read.
func (s *Service) Push(ctx context.Context, uids []int64, payload []byte) (PushResult, error) {
	uids, err := checkUsers("user_ids", uids)
	if err != nil {
		return PushResult{}, err
	}
	body, err := s.transientBody(payload)
	if err != nil {
		return PushResult{}, err
	}
	devs, err := s.devices(ctx, uids)
	if err != nil {
		return PushResult{}, err
	}
	targets := byGate(devs)
	var (
		mu  sync.Mutex
		res PushResult
	)
	res.FailedGates = s.eachGate(ctx, mapKeys(targets), func(ctx context.Context, g string) error {
		c, err := s.client(ctx, g)
		if errors.Is(err, gatepush.ErrUnknownGate) {
			return nil // a stale route: the gate and its connections are gone
		}
		if err != nil {
			return err
		}
		rep, err := c.Push(ctx, &gatev1.PushRequest{Targets: targets[g], Command: uint32(protocol.CmdTransient), Body: body})
		if err != nil {
			return err
		}
		mu.Lock()
		res.Delivered += int(rep.GetDelivered())
		res.Dropped += len(rep.GetDropped())
		mu.Unlock()
		return nil
	})
	return res, nil
}

// Broadcast sends payload (a JSON object) as a TRANSIENT (18) push to
// every authenticated connection of every live gate.
func (s *Service) Broadcast(ctx context.Context, payload []byte) (PushResult, error) {
	body, err := s.transientBody(payload)
	if err != nil {
		return PushResult{}, err
	}
	gates, err := s.reg.List(ctx)
	if err != nil {
		return PushResult{}, errcode.Unavailable("online: list gates", err)
	}
	addrs := make(map[string]string, len(gates))
	ids := make([]string, 0, len(gates))
	for _, g := range gates {
		addrs[g.ID] = g.PushAddr
		ids = append(ids, g.ID)
	}
	var (
		mu  sync.Mutex
		res PushResult
	)
	res.FailedGates = s.eachGate(ctx, ids, func(ctx context.Context, g string) error {
		c, err := s.clients.Get(addrs[g])
		if err != nil {
			return err
		}
		rep, err := c.Broadcast(ctx, &gatev1.BroadcastRequest{Command: uint32(protocol.CmdTransient), Body: body})
		if err != nil {
			return err
		}
		mu.Lock()
		res.Delivered += int(rep.GetDelivered())
		res.Dropped += int(rep.GetDropped())
		mu.Unlock()
		return nil
	})
	return res, nil
}

// Gates lists the live gates with their client addresses and their
// connection counts (each gate's Stats, in parallel; a gate whose Stats
// failed is listed with Err set).
func (s *Service) Gates(ctx context.Context) ([]Gate, error) {
	gates, err := s.reg.List(ctx)
	if err != nil {
		return nil, errcode.Unavailable("online: list gates", err)
	}
	out := make([]Gate, len(gates))
	var wg sync.WaitGroup
	for i, g := range gates {
		out[i].Gate = g
		wg.Add(1)
		go func() {
			defer wg.Done()
			gctx, cancel := context.WithTimeout(ctx, s.timeout)
			defer cancel()
			c, err := s.clients.Get(g.PushAddr)
			var st *gatev1.StatsReply
			if err == nil {
				st, err = c.Stats(gctx, &gatev1.StatsRequest{})
			}
			if err != nil {
				out[i].Err = err.Error()
				return
			}
			out[i].Connections, out[i].Authenticated, out[i].Version = st.GetConnections(), st.GetAuthenticated(), st.GetVersion()
		}()
	}
	wg.Wait()
	return out, nil
}

func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// PushSignal sends data (a SIGNAL push's data) as a SIGNAL (32) push to
// the online devices of the users except the sending device, and returns
// how many connections it was queued for. The gates drop a signal before
// any other push when a connection falls behind (decision 102); a gate that
// fails is skipped, since a lost signal is harmless.
func (s *Service) PushSignal(ctx context.Context, uids []int64, exceptUser int64, exceptDevice string, data []byte) (int, error) {
	if len(uids) == 0 {
		return 0, nil
	}
	devs, err := s.devices(ctx, uids)
	if err != nil {
		return 0, err
	}
	devs[exceptUser] = slices.DeleteFunc(devs[exceptUser], func(d Device) bool { return d.DeviceID == exceptDevice })
	targets := byGate(devs)
	body := envelope.OK(s.ids.Next(), data)
	var (
		mu        sync.Mutex
		delivered int
	)
	s.eachGate(ctx, mapKeys(targets), func(ctx context.Context, g string) error {
		c, err := s.client(ctx, g)
		if errors.Is(err, gatepush.ErrUnknownGate) {
			return nil
		}
		if err != nil {
			return err
		}
		rep, err := c.Push(ctx, &gatev1.PushRequest{Targets: targets[g], Command: uint32(protocol.CmdSignal), Body: body})
		if err != nil {
			return err
		}
		mu.Lock()
		delivered += int(rep.GetDelivered())
		mu.Unlock()
		return nil
	})
	return delivered, nil
}
