// Command imctl is the operator's CLI. It reads the cluster through the
// business API (logic.v1.Api on logic.grpc_addr, with an x-api-key) and
// the processes' admin HTTP ports. Output is a table, or JSON with -o json (the field
// names are stable: scripts may rely on them).
//
//	imctl [-config im.yaml] [-api 127.0.0.1:9000] [-api-key KEY] [-o json] <command>
//
//	gates                          live gates: version, addresses, connection counts, start time
//	where <user>                   the user's online devices: gate, device, connection, since, real IP
//	kick <user> [device]           KICK the user's connections (or one device's) and close them
//	drain <gate> [-window 10s]     the gate fails readiness, refuses new clients and kicks its own over the window
//	token issue <user> [-device D] [-ttl 24h]   mint a client token
//	token revoke <user>            revoke every token of the user so far (kicks them too)
//	send-system <to> <text>        a text message from the system account to a user
//	queue-lag [-deliver-admin a,b] deliver's queue per partition: length, pending, oldest age
//	push-queue [-logic-admin a,b]  the offline-push queue per partition, the same figures
//	webhooks                       webhook endpoints: status, how far behind, attempts, last error
//
// Defaults come from the config file (and its IM_* environment
// overrides, as for every process): -api from logic.grpc_addr, -api-key
// from the first of logic.api_keys, the cluster secret (drain) from
// cluster.secret, -deliver-admin from deliver.admin_addr, -logic-admin
// from logic.admin_addr.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/sparkim/spark/pkg/clusterauth"
	"github.com/sparkim/spark/pkg/config"
	gatev1 "github.com/sparkim/spark/proto/gate/v1"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// callTimeout bounds one command: an operator at a terminal wants an
// answer or an error, not a hang on an unreachable address.
const callTimeout = 15 * time.Second

const usage = `usage: imctl [flags] <command> [args]

commands:
  gates                          live gates with versions and connection counts
  where <user>                   where the user is online (gate, device, since, real IP)
  kick <user> [device] [-reason R]  kick the user's connections, or one device's
  drain <gate> [-window 10s]     the gate refuses new clients and kicks its own over the window
  token issue <user> [-device D] [-ttl 24h]  mint a client token
  token revoke <user>            revoke the user's tokens (kicks them)
  send-system <to_user> <text>   send a text as the system account
  queue-lag [-deliver-admin a,b] deliver queue length, pending and oldest age per partition
  push-queue [-logic-admin a,b]  offline-push queue length, pending and oldest age per partition
  webhooks                       webhook endpoints: status, how far behind, attempts, last error

flags:
`

type globals struct {
	config, api, apiKey, output string
}

func main() {
	var g globals
	fs := flag.NewFlagSet("imctl", flag.ExitOnError)
	fs.StringVar(&g.config, "config", "", "config file: defaults for -api, -api-key, the cluster secret and deliver's admin address")
	fs.StringVar(&g.api, "api", "", "logic gRPC address (default logic.grpc_addr of the config)")
	fs.StringVar(&g.apiKey, "api-key", "", "business API key (default the first of logic.api_keys)")
	fs.StringVar(&g.output, "o", "table", "output: table or json")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() == 0 {
		fs.Usage()
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := run(ctx, g, fs.Args(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "imctl:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is a command line that names no valid command or lacks an
// argument (exit status 2, like flag's).
type usageError string

func (e usageError) Error() string { return string(e) }

// ctl holds what every command needs.
type ctl struct {
	g   globals
	cfg *config.Config
	out io.Writer
}

func run(ctx context.Context, g globals, args []string, out io.Writer) error {
	if g.output != "table" && g.output != "json" {
		return usageError(fmt.Sprintf("-o %q: want table or json", g.output))
	}
	cfg, err := config.Load(g.config)
	if err != nil {
		return fmt.Errorf("load config: %w", err)
	}
	if g.api == "" {
		g.api = cfg.Logic.GRPCAddr
	}
	if g.apiKey == "" && len(cfg.Logic.APIKeys) > 0 {
		g.apiKey = cfg.Logic.APIKeys[0]
	}
	c := &ctl{g: g, cfg: cfg, out: out}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "gates":
		return c.gates(ctx, rest)
	case "where":
		return c.where(ctx, rest)
	case "drain":
		return c.drain(ctx, rest)
	case "kick":
		return c.kick(ctx, rest)
	case "token":
		if len(rest) == 0 {
			return usageError("token: want issue or revoke")
		}
		switch rest[0] {
		case "issue":
			return c.tokenIssue(ctx, rest[1:])
		case "revoke":
			return c.tokenRevoke(ctx, rest[1:])
		}
		return usageError(fmt.Sprintf("token %s: want issue or revoke", rest[0]))
	case "send-system":
		return c.sendSystem(ctx, rest)
	case "queue-lag":
		return c.queueLag(ctx, rest)
	case "push-queue":
		return c.pushQueue(ctx, rest)
	case "webhooks":
		return c.webhooks(ctx, rest)
	}
	return usageError(fmt.Sprintf("unknown command %q (imctl -h lists them)", cmd))
}

// parseInterspersed parses fs from args that may mix flags and
// positional arguments ("token issue 7 -ttl 1h"), returning the
// positional ones in order.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usageError(err.Error())
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func subFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func userArg(name, s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, usageError(fmt.Sprintf("%s: %q is not a user id", name, s))
	}
	return id, nil
}

// api dials the business API; the caller closes the connection.
func (c *ctl) api() (logicv1.ApiClient, func(), error) {
	if c.g.api == "" {
		return nil, nil, errors.New("no API address (-api or logic.grpc_addr)")
	}
	cc, err := grpc.NewClient(c.g.api, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("dial api %s: %w", c.g.api, err)
	}
	return logicv1.NewApiClient(cc), func() { _ = cc.Close() }, nil
}

func (c *ctl) keyed(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-api-key", c.g.apiKey)
}

// emit writes v as indented JSON, or the table rows under header.
func (c *ctl) emit(v any, header []string, rows [][]string) error {
	if c.g.output == "json" {
		enc := json.NewEncoder(c.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// dash shows an unknown value as "-" in a table.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func msTime(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

// Gate is one row of "gates".
type Gate struct {
	GateID        string   `json:"gate_id"`
	ClientAddrs   []string `json:"client_addrs"`
	PushAddr      string   `json:"push_addr"`
	StartedAtMs   int64    `json:"started_at_ms"`
	Connections   uint64   `json:"connections"`
	Authenticated uint64   `json:"authenticated"`
	Version       string   `json:"version"`
	Error         string   `json:"error,omitempty"`
}

func (c *ctl) listGates(ctx context.Context, api logicv1.ApiClient) ([]Gate, error) {
	r, err := api.ListGates(c.keyed(ctx), &logicv1.ListGatesRequest{})
	if err != nil {
		return nil, fmt.Errorf("ListGates: %w", err)
	}
	gates := make([]Gate, 0, len(r.GetGates()))
	for _, g := range r.GetGates() {
		gates = append(gates, Gate{GateID: g.GetGateId(), ClientAddrs: g.GetClientAddrs(), PushAddr: g.GetPushAddr(),
			StartedAtMs: g.GetStartedAtMs(), Connections: g.GetConnections(), Authenticated: g.GetAuthenticated(), Version: g.GetVersion(), Error: g.GetError()})
	}
	return gates, nil
}

func (c *ctl) gates(ctx context.Context, args []string) error {
	if len(args) != 0 {
		return usageError("gates takes no arguments")
	}
	api, done, err := c.api()
	if err != nil {
		return err
	}
	defer done()
	gates, err := c.listGates(ctx, api)
	if err != nil {
		return err
	}
	rows := make([][]string, 0, len(gates))
	for _, g := range gates {
		rows = append(rows, []string{g.GateID, dash(g.Version), strconv.FormatUint(g.Connections, 10), strconv.FormatUint(g.Authenticated, 10),
			msTime(g.StartedAtMs), strings.Join(g.ClientAddrs, ","), g.PushAddr, g.Error})
	}
	return c.emit(gates, []string{"GATE", "VERSION", "CONNECTIONS", "AUTHENTICATED", "STARTED", "CLIENT_ADDRS", "PUSH_ADDR", "ERROR"}, rows)
}

// Device is one online device of a user, a row of "where".
type Device struct {
	UserID   int64  `json:"user_id"`
	DeviceID string `json:"device_id"`
	GateID   string `json:"gate_id"`
	ConnID   uint64 `json:"conn_id"`
	SinceMs  int64  `json:"since_ms"`
	// RealIP is the client's address as its gate saw it; empty when unknown.
	RealIP string `json:"real_ip"`
}

func presence(ctx context.Context, c *ctl, api logicv1.ApiClient, user int64) ([]Device, error) {
	r, err := api.GetPresence(c.keyed(ctx), &logicv1.GetPresenceRequest{UserIds: []int64{user}})
	if err != nil {
		return nil, fmt.Errorf("GetPresence: %w", err)
	}
	devs := []Device{}
	for _, u := range r.GetUsers() {
		for _, d := range u.GetDevices() {
			devs = append(devs, Device{UserID: u.GetUserId(), DeviceID: d.GetDeviceId(), GateID: d.GetGateId(), ConnID: d.GetConnId(), SinceMs: d.GetSinceMs(), RealIP: d.GetRealIp()})
		}
	}
	return devs, nil
}

func (c *ctl) where(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return usageError("where <user>")
	}
	user, err := userArg("where", args[0])
	if err != nil {
		return err
	}
	api, done, err := c.api()
	if err != nil {
		return err
	}
	defer done()
	devs, err := presence(ctx, c, api, user)
	if err != nil {
		return err
	}
	rows := make([][]string, 0, len(devs))
	for _, d := range devs {
		rows = append(rows, []string{strconv.FormatInt(d.UserID, 10), d.DeviceID, d.GateID, strconv.FormatUint(d.ConnID, 10), msTime(d.SinceMs), dash(d.RealIP)})
	}
	return c.emit(devs, []string{"USER", "DEVICE", "GATE", "CONN", "SINCE", "REAL_IP"}, rows)
}

// KickResult is the answer of "kick".
type KickResult struct {
	UserID   int64  `json:"user_id"`
	DeviceID string `json:"device_id,omitempty"`
	Reason   string `json:"reason"`
	Kicked   uint32 `json:"kicked"`
}

// kick calls the business API's KickUser: logic finds the user's
// connections and has each one's gate KICK and close them. A gate that
// cannot be reached fails the call (50301), and running it again kicks
// what is left.
func (c *ctl) kick(ctx context.Context, args []string) error {
	fs := subFlags("kick")
	reason := fs.String("reason", "kicked", "KICK reason the client sees")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usageError("kick <user> [device] [-reason R]")
	}
	user, err := userArg("kick", pos[0])
	if err != nil {
		return err
	}
	res := KickResult{UserID: user, Reason: *reason}
	if len(pos) == 2 {
		res.DeviceID = pos[1]
	}
	api, done, err := c.api()
	if err != nil {
		return err
	}
	defer done()
	r, err := api.KickUser(c.keyed(ctx), &logicv1.KickUserRequest{UserId: user, DeviceId: res.DeviceID, Reason: res.Reason})
	if err != nil {
		return fmt.Errorf("KickUser: %w", err)
	}
	res.Kicked = r.GetKicked()
	rows := [][]string{{strconv.FormatInt(user, 10), res.DeviceID, strconv.FormatUint(uint64(res.Kicked), 10)}}
	return c.emit(res, []string{"USER", "DEVICE", "KICKED"}, rows)
}

// DrainResult is the answer of "drain".
type DrainResult struct {
	GateID      string `json:"gate_id"`
	WindowMs    int64  `json:"window_ms"`
	Connections uint32 `json:"connections"`
}

// drain asks a gate, through its Push service (the cluster secret
// authenticates the call; decision 96), to fail readiness, refuse new
// connections and kick its clients spread over the window so they
// reconnect to the other gates. It returns at once; "gates" shows the
// connections leaving.
func (c *ctl) drain(ctx context.Context, args []string) error {
	fs := subFlags("drain")
	window := fs.Duration("window", 0, "spread the kicks over this long (0: the gate's gate.shutdown_kick_window)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *window < 0 {
		return usageError("drain <gate> [-window 10s]")
	}
	api, done, err := c.api()
	if err != nil {
		return err
	}
	defer done()
	gates, err := c.listGates(ctx, api)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(gates, func(g Gate) bool { return g.GateID == pos[0] })
	if i < 0 {
		return fmt.Errorf("gate %q is not in ListGates", pos[0])
	}
	if err := config.RequireSecret("cluster.secret", c.cfg.Cluster.Secret); err != nil {
		return err
	}
	cc, err := grpc.NewClient(gates[i].PushAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), clusterauth.Credentials(c.cfg.Cluster.Secret))
	if err != nil {
		return fmt.Errorf("dial %s: %w", gates[i].PushAddr, err)
	}
	defer func() { _ = cc.Close() }()
	r, err := gatev1.NewPushClient(cc).Drain(ctx, &gatev1.DrainRequest{WindowMs: window.Milliseconds()})
	if err != nil {
		return fmt.Errorf("Drain: %w", err)
	}
	res := DrainResult{GateID: pos[0], WindowMs: window.Milliseconds(), Connections: r.GetConnections()}
	return c.emit(res, []string{"GATE", "WINDOW_MS", "CONNECTIONS"}, [][]string{{res.GateID, strconv.FormatInt(res.WindowMs, 10), strconv.FormatUint(uint64(res.Connections), 10)}})
}

// Token is the answer of "token issue".
type Token struct {
	UserID      int64  `json:"user_id"`
	DeviceID    string `json:"device_id"`
	Token       string `json:"token"`
	ExpiresAtMs int64  `json:"expires_at_ms"`
}

func (c *ctl) tokenIssue(ctx context.Context, args []string) error {
	fs := subFlags("token issue")
	device := fs.String("device", "", "bind the token to this device (default: any device)")
	ttl := fs.Duration("ttl", 24*time.Hour, "lifetime of the token")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("token issue <user> [-device D] [-ttl 24h]")
	}
	user, err := userArg("token issue", pos[0])
	if err != nil {
		return err
	}
	api, done, err := c.api()
	if err != nil {
		return err
	}
	defer done()
	r, err := api.IssueToken(c.keyed(ctx), &logicv1.IssueTokenRequest{UserId: user, DeviceId: *device, TtlSeconds: int64(*ttl / time.Second)})
	if err != nil {
		return fmt.Errorf("IssueToken: %w", err)
	}
	t := Token{UserID: user, DeviceID: *device, Token: r.GetToken(), ExpiresAtMs: r.GetExpiresAtMs()}
	return c.emit(t, []string{"USER", "DEVICE", "EXPIRES", "TOKEN"},
		[][]string{{strconv.FormatInt(user, 10), *device, msTime(t.ExpiresAtMs), t.Token}})
}

// Revocation is the answer of "token revoke".
type Revocation struct {
	UserID       int64  `json:"user_id"`
	ValidAfterMs int64  `json:"valid_after_ms"`
	Kicked       uint32 `json:"kicked"`
}

func (c *ctl) tokenRevoke(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return usageError("token revoke <user>")
	}
	user, err := userArg("token revoke", args[0])
	if err != nil {
		return err
	}
	api, done, err := c.api()
	if err != nil {
		return err
	}
	defer done()
	r, err := api.RevokeTokens(c.keyed(ctx), &logicv1.RevokeTokensRequest{UserId: user})
	if err != nil {
		return fmt.Errorf("RevokeTokens: %w", err)
	}
	v := Revocation{UserID: user, ValidAfterMs: r.GetValidAfterMs(), Kicked: r.GetKicked()}
	return c.emit(v, []string{"USER", "VALID_AFTER", "KICKED"},
		[][]string{{strconv.FormatInt(user, 10), msTime(v.ValidAfterMs), strconv.FormatUint(uint64(v.Kicked), 10)}})
}

// Sent is the answer of "send-system".
type Sent struct {
	MsgID          int64  `json:"msg_id"`
	ConversationID int64  `json:"conversation_id"`
	ServerTimeMs   int64  `json:"server_time_ms"`
	ClientMsgID    string `json:"client_msg_id"`
}

func (c *ctl) sendSystem(ctx context.Context, args []string) error {
	fs := subFlags("send-system")
	id := fs.String("client-msg-id", "", "idempotency key: the same id sends once (default imctl-<time>)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usageError("send-system <to_user> <text>")
	}
	to, err := userArg("send-system", pos[0])
	if err != nil {
		return err
	}
	if *id == "" {
		*id = "imctl-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	content, err := json.Marshal(struct {
		T    int    `json:"t"`
		Text string `json:"text"`
	}{1, pos[1]})
	if err != nil {
		return err
	}
	api, done, err := c.api()
	if err != nil {
		return err
	}
	defer done()
	r, err := api.SendMessage(c.keyed(ctx), &logicv1.SendMessageRequest{System: true, ToUserId: to, ClientMsgId: *id, MessageType: 1, Content: string(content)})
	if err != nil {
		return fmt.Errorf("SendMessage: %w", err)
	}
	s := Sent{MsgID: r.GetMsgId(), ConversationID: r.GetConversationId(), ServerTimeMs: r.GetServerTimeMs(), ClientMsgID: r.GetClientMsgId()}
	return c.emit(s, []string{"MSG_ID", "CONVERSATION", "SERVER_TIME", "CLIENT_MSG_ID"},
		[][]string{{strconv.FormatInt(s.MsgID, 10), strconv.FormatInt(s.ConversationID, 10), msTime(s.ServerTimeMs), s.ClientMsgID}})
}
