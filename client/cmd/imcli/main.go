// Command imcli is a small interactive client: it authenticates as a user,
// prints incoming messages and kicks, and sends a text message for every
// stdin line "<to_user_id> <text>".
//
//	imcli -config deploy/dev/im.yaml -user 1001 [-device cli-1001] [-gate 127.0.0.1:8100]
//	imcli -config deploy/dev/im.yaml -user 1001 -send-to 1002 -text hi
//	imcli -user 1001 -api 127.0.0.1:9000 -api-key dev-api-key
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/protocol"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

type flags struct {
	config, gate, device, api, apiKey, text string
	user, sendTo                            int64
	ttl                                     time.Duration
}

func main() {
	var f flags
	flag.StringVar(&f.config, "config", "", "config file; gives the gate address and logic.jwt_secret")
	flag.Int64Var(&f.user, "user", 0, "user id to log in as (required)")
	flag.StringVar(&f.device, "device", "", "device id (default cli-<user>)")
	flag.StringVar(&f.gate, "gate", "", "gate TCP address (default gate.tcp_addr of the config)")
	flag.StringVar(&f.api, "api", "", "logic gRPC address: get the token from Api/IssueToken instead of minting it")
	flag.StringVar(&f.apiKey, "api-key", "", "API key for -api")
	flag.Int64Var(&f.sendTo, "send-to", 0, "send one message to this user and exit")
	flag.StringVar(&f.text, "text", "", "text of the -send-to message")
	flag.DurationVar(&f.ttl, "ttl", 24*time.Hour, "lifetime of a minted token")
	flag.Parse()
	if f.user <= 0 {
		fmt.Fprintln(os.Stderr, "imcli: -user is required")
		flag.Usage()
		os.Exit(2)
	}
	if f.device == "" {
		f.device = "cli-" + strconv.FormatInt(f.user, 10)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, f); err != nil {
		fmt.Fprintln(os.Stderr, "imcli:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, f flags) error {
	cfg, err := config.Load(f.config)
	if err != nil {
		return err
	}
	if f.gate == "" {
		f.gate = cfg.Gate.TCPAddr
	}
	tok, err := getToken(ctx, f, cfg)
	if err != nil {
		return err
	}
	conn, err := client.Dial(ctx, f.gate, client.Options{})
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	auth, err := conn.Auth(ctx, tok, f.device, "cli", "imcli")
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	fmt.Printf("logged in as %d device %s via %s\n", auth.UserID, auth.DeviceID, f.gate)

	if f.sendTo != 0 {
		return send(ctx, conn, f.sendTo, f.text)
	}

	go printPushes(conn)
	go heartbeat(ctx, conn)
	lines := make(chan string)
	go readLines(os.Stdin, lines)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-conn.Done():
			if err := conn.Err(); err != nil && !errors.Is(err, client.ErrClosed) {
				return fmt.Errorf("connection closed: %w", err)
			}
			return nil
		case line, ok := <-lines:
			if !ok {
				return nil // stdin closed
			}
			to, text, found := strings.Cut(strings.TrimSpace(line), " ")
			if strings.TrimSpace(line) == "" {
				continue
			}
			uid, perr := strconv.ParseInt(to, 10, 64)
			if !found || perr != nil || uid <= 0 {
				fmt.Fprintln(os.Stderr, "usage: <to_user_id> <text>")
				continue
			}
			if err := send(ctx, conn, uid, text); err != nil {
				fmt.Fprintln(os.Stderr, "send:", err)
			}
		}
	}
}

func getToken(ctx context.Context, f flags, cfg *config.Config) (string, error) {
	if f.api == "" {
		if err := config.RequireSecret("logic.jwt_secret", cfg.Logic.JWTSecret); err != nil {
			return "", fmt.Errorf("%w (or use -api with -api-key)", err)
		}
		return client.DevToken(cfg.Logic.JWTSecret, f.user, f.device, f.ttl)
	}
	cc, err := grpc.NewClient(f.api, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", fmt.Errorf("dial api %s: %w", f.api, err)
	}
	defer func() { _ = cc.Close() }()
	cctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "x-api-key", f.apiKey), 10*time.Second)
	defer cancel()
	reply, err := logicv1.NewApiClient(cc).IssueToken(cctx, &logicv1.IssueTokenRequest{
		UserId: f.user, DeviceId: f.device, TtlSeconds: int64(f.ttl / time.Second),
	})
	if err != nil {
		return "", fmt.Errorf("IssueToken: %w", err)
	}
	return reply.GetToken(), nil
}

func send(ctx context.Context, conn *client.Conn, to int64, text string) error {
	ack, err := conn.SendText(ctx, to, text)
	if err != nil {
		return err
	}
	fmt.Printf("sent msg_id=%d conv=%d\n", ack.MsgID, ack.ConversationID)
	return nil
}

func heartbeat(ctx context.Context, conn *client.Conn) {
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-conn.Done():
			return
		case <-t.C:
			if _, err := conn.Heartbeat(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "heartbeat:", err)
			}
		}
	}
}

func printPushes(conn *client.Conn) {
	for fr := range conn.Pushes() {
		switch fr.Command {
		case protocol.CmdMessage:
			m, err := fr.Message()
			if err != nil {
				fmt.Fprintln(os.Stderr, "bad MESSAGE push:", err)
				continue
			}
			fmt.Printf("[conv %d] %d: %s\n", m.ConversationID, m.SenderID, messageText(m))
		case protocol.CmdKick:
			var k protocol.Kick
			if env, err := fr.Envelope(); err == nil {
				_ = json.Unmarshal(env.Data, &k)
			}
			fmt.Printf("KICK: %s\n", k.Reason)
		default:
			fmt.Printf("push command %d: %s\n", fr.Command, fr.Body)
		}
	}
}

func messageText(m protocol.Message) string {
	if m.MessageType == 1 {
		var c struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(m.Content, &c) == nil {
			return c.Text
		}
	}
	return string(m.Content)
}

func readLines(r io.Reader, out chan<- string) {
	defer close(out)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		out <- sc.Text()
	}
}
