// Command imcli is a small interactive client. It authenticates as a user,
// catches up on what arrived while it was away (SYNC_INBOX, then
// SYNC_MESSAGES per changed conversation, from cursors kept in a state
// file per user and device), prints the conversations with news and the
// missed messages, then prints incoming messages and reads commands from
// stdin: "<to_user_id> <text>" sends a text, "g<group_id> <text>" sends
// to a group, /help lists the rest (friends, blocks and groups over the
// RELATION and GROUP commands). CONTROL_EVENT pushes (friend and
// membership changes) print as one readable line each.
//
// The connection is a client.Session over the -gate addresses: when the
// gate stops (KICK server_shutdown) or the connection drops, imcli signs
// in at the next address, says so, and syncs again; a send whose answer
// was lost goes again with the same client_msg_id.
//
//	imcli -config deploy/dev/im.yaml -user 1001 [-device cli-1001] [-gate 127.0.0.1:8100,127.0.0.1:8101]
//	imcli -config deploy/dev/im.yaml -user 1001 -send-to 1002 -text hi
//	imcli -config deploy/dev/im.yaml -user 1001 -upstream orders -text '{"op":"cancel"}'
//	imcli -user 1001 -api 127.0.0.1:9000 -api-key dev-api-key
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/errcode"
	"github.com/sparkim/spark/pkg/jsonid"
	"github.com/sparkim/spark/pkg/protocol"
	logicv1 "github.com/sparkim/spark/proto/logic/v1"
)

// firstConnectTimeout bounds the wait for the first sign-in: the session
// retries an unreachable gate for ever, but a mistyped address at start
// should end imcli, not leave it silent.
const firstConnectTimeout = 20 * time.Second

type flags struct {
	config, gate, device, api, apiKey, text, state, upstream string
	user, sendTo                                             int64
	ttl                                                      time.Duration
	missed                                                   int
	reconnect, resetState                                    bool
}

const helpText = `commands:
  <to_user_id> <text>     send a text message
  g<group_id> <text>      send a text message to a group
  /list                   conversations: unread, muted/pinned, last message
  /history <conv> [n]     the newest n messages of a conversation (default 20)
  /read <conv>            mark a conversation read up to its newest message
  /recall <msg>           recall one of your messages (within the recall window)
  /edit <msg> <text>      replace the text of one of your messages (within the edit window)
  /react <msg> <emoji>    react to a message with one emoji (/unreact removes it)
  /reactors <msg> <emoji> who reacted to a message with an emoji
  /typing <conv> [kind]   tell the conversation's online members you are typing (or send another signal kind)
  /delete-all <msg>       delete a group message for every member (group owner and admins)
  /reply <conv> <msg> <text>  reply to a message of a conversation, quoting it
  /sync                   catch up now (also runs after login and every reconnect)
  /friends                your friends and the friend requests waiting for you
  /friend-request <uid> [note]  ask a user to be friends
  /accept <uid>           accept a user's friend request
  /block <uid>            block a user (no messages either way)
  /unblock <uid>          unblock a user
  /group-create <name> <uid,uid,...>  create a group you own with these members
  /group-add <gid> <uid,...>          add members (owner and admins)
  /group-leave <gid>      leave a group
  /group-members <gid>    a group's members and roles
  /upstream <service> <body>          send body to a business service (UPSTREAM)
  /send-file <to_user_id|g<group_id>> <path>  upload a file (an image, voice or video by its type) and send it
  /download <conv> <msg> [dir]        save a message's picture, voice, video or file into dir (default .)
  /help                   this text
  /quit                   exit (so does end of input)`

func main() {
	var f flags
	flag.StringVar(&f.config, "config", "", "config file; gives the gate address and logic.jwt_secret")
	flag.Int64Var(&f.user, "user", 0, "user id to log in as (required)")
	flag.StringVar(&f.device, "device", "", "device id (default cli-<user>)")
	flag.StringVar(&f.gate, "gate", "", "gate TCP address, or several comma-separated: a reconnect goes to the next (default gate.tcp_addr of the config)")
	flag.StringVar(&f.api, "api", "", "logic gRPC address: get the token from Api/IssueToken instead of minting it")
	flag.StringVar(&f.apiKey, "api-key", "", "API key for -api")
	flag.Int64Var(&f.sendTo, "send-to", 0, "send one message to this user and exit (no sync)")
	flag.StringVar(&f.text, "text", "", "text of the -send-to message, or body of the -upstream frame")
	flag.StringVar(&f.upstream, "upstream", "", "send one UPSTREAM frame with body -text to this business service and exit (no sync)")
	flag.DurationVar(&f.ttl, "ttl", 24*time.Hour, "lifetime of a minted token")
	flag.StringVar(&f.state, "state", "", "sync state file (default <user config dir>/spark-imcli/<user>-<device>.json)")
	flag.BoolVar(&f.resetState, "reset-state", false, "forget the saved sync state and sync as a fresh device")
	flag.IntVar(&f.missed, "missed", 20, "missed messages shown per conversation after login (0: all)")
	flag.BoolVar(&f.reconnect, "reconnect", true, "reconnect (and sync again) when the connection is lost")
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
		return fmt.Errorf("load config: %w", err)
	}
	if f.gate == "" {
		f.gate = cfg.Gate.TCPAddr
	}
	gates := gateAddrs(f.gate)
	if len(gates) == 0 {
		return errors.New("no gate address (-gate or gate.tcp_addr of the config)")
	}
	a := &app{f: f, cfg: cfg, out: os.Stdout, sent: map[int64]bool{}}
	if f.sendTo != 0 || f.upstream != "" {
		sess, err := a.startSession(ctx, gates)
		if err != nil {
			return err
		}
		defer func() { _ = sess.Close() }()
		go func() {
			for range sess.Pushes() { // the session needs its pushes read
			}
		}()
		if _, err := a.firstConn(ctx, sess, gates); err != nil {
			return err
		}
		if f.upstream != "" {
			return a.upstream(ctx, sess, f.upstream, f.text)
		}
		_, err = a.send(ctx, sess, f.sendTo, f.text)
		return err
	}

	if f.state == "" {
		dir, err := os.UserConfigDir()
		if err != nil {
			return fmt.Errorf("no user config directory for the sync state (use -state): %w", err)
		}
		f.state = filepath.Join(dir, "spark-imcli", client.StateFileName(f.user, f.device))
	}
	if f.resetState {
		if err := os.Remove(f.state); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("reset sync state: %w", err)
		}
	}
	a.runner, err = client.NewSyncRunner(ctx, client.FileStateStore{Path: f.state}, f.user, f.device, client.SyncRunnerOptions{})
	if err != nil {
		return fmt.Errorf("%w (use -reset-state or another -state)", err)
	}
	a.f = f
	sess, err := a.startSession(ctx, gates)
	if err != nil {
		return err
	}
	defer func() { _ = sess.Close() }()
	hint := make(chan struct{}, 1)
	go a.pump(sess, hint)
	lines := make(chan string)
	go readLines(os.Stdin, lines)
	return a.loop(ctx, sess, gates, lines, hint)
}

// gateAddrs splits the -gate list, dropping empty entries.
func gateAddrs(list string) []string {
	var out []string
	for _, g := range strings.Split(list, ",") {
		if g = strings.TrimSpace(g); g != "" {
			out = append(out, g)
		}
	}
	return out
}

// app is one imcli process: its flags, the sync runner that outlives
// connections, and serialized output.
type app struct {
	f      flags
	cfg    *config.Config
	runner *client.SyncRunner

	outMu sync.Mutex
	out   io.Writer

	sentMu sync.Mutex
	sent   map[int64]bool // ids this process sent: not echoed back by sync
	// shown are the control events printed from CONTROL_EVENT pushes, so
	// the sync they trigger does not print their mailbox copies again.
	shown map[string]bool

	kickMu sync.Mutex
	kick   string // the reason of the last KICK the pump saw
}

func (a *app) print(s string) {
	a.outMu.Lock()
	defer a.outMu.Unlock()
	_, _ = io.WriteString(a.out, s)
}

func (a *app) printf(format string, args ...any) { a.print(fmt.Sprintf(format, args...)) }

func (a *app) errorf(format string, args ...any) {
	a.outMu.Lock()
	defer a.outMu.Unlock()
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

// startSession gets the token and starts signing in at the first gate.
func (a *app) startSession(ctx context.Context, gates []string) (*client.Session, error) {
	tok, err := getToken(ctx, a.f, a.cfg)
	if err != nil {
		return nil, err
	}
	so := client.SessionOptions{Addrs: gates, Token: tok, DeviceID: a.f.device, Platform: "cli", AppVersion: "imcli"}
	sess, err := client.StartSession(so)
	if err != nil {
		return nil, fmt.Errorf("start session: %w", err)
	}
	return sess, nil
}

// firstConn waits for the session's first sign-in, bounded by
// firstConnectTimeout.
func (a *app) firstConn(ctx context.Context, sess *client.Session, gates []string) (*client.Conn, error) {
	wctx, cancel := context.WithTimeout(ctx, firstConnectTimeout)
	defer cancel()
	conn, err := sess.Conn(wctx)
	if err != nil {
		if ctx.Err() == nil && wctx.Err() != nil {
			return nil, fmt.Errorf("no gate of %s let us in within %v", strings.Join(gates, ","), firstConnectTimeout)
		}
		return nil, fmt.Errorf("log in: %w", sessionErr(err))
	}
	a.printf("logged in as %d device %s via %s\n", a.f.user, a.f.device, sess.Addr())
	return conn, nil
}

// sessionErr words the error that ended a session.
func sessionErr(err error) error {
	var ke *client.KickError
	if errors.As(err, &ke) {
		return fmt.Errorf("kicked by the server: %s", ke.Reason)
	}
	return err
}

type sessionEnd int

const (
	endQuit sessionEnd = iota
	endLost
	endKicked
)

// loop serves the session's connections until the user quits, the
// server kicks this device for a reason other than its own shutdown, or
// (without -reconnect) the first connection ends. Every connection starts
// with a sync, so a reconnect catches up on what the gap missed.
func (a *app) loop(ctx context.Context, sess *client.Session, gates []string, lines <-chan string, hint chan struct{}) error {
	conn, err := a.firstConn(ctx, sess, gates)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	for {
		addr := sess.Addr()
		_ = a.lastKick() // one of an earlier connection, read late
		end, err := a.session(ctx, sess, conn, lines, hint)
		switch {
		case end == endQuit:
			return nil
		case !a.f.reconnect:
			return err
		case end == endLost:
			a.errorf("%v; reconnecting", err)
		}
		// A KICK other than server_shutdown ends the session: Conn says
		// so. After server_shutdown the KICK line was printed already.
		conn, err = sess.Conn(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return sessionErr(err)
		}
		// The session signs in again by itself (the next address after a
		// stopping gate); say where, since the user chose the gates.
		if next := sess.Addr(); next != addr {
			a.printf("moved from gate %s to gate %s; syncing\n", addr, next)
		} else {
			a.printf("reconnected to gate %s; syncing\n", next)
		}
		a.printf("logged in as %d device %s via %s\n", a.f.user, a.f.device, sess.Addr())
	}
}

// session serves one connection: the sync after login, pushes (each one
// triggers a sync, which prints what is new and moves the cursors),
// heartbeats and stdin commands.
func (a *app) session(ctx context.Context, sess *client.Session, conn *client.Conn, lines <-chan string, hint <-chan struct{}) (sessionEnd, error) {
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	wg.Add(2)
	go func() {
		defer wg.Done()
		heartbeat(sctx, conn, a)
	}()

	a.sync(sctx, conn, true)
	go func() {
		defer wg.Done()
		a.syncer(sctx, conn, hint)
	}()

	for {
		select {
		case <-ctx.Done():
			return endQuit, nil
		case <-conn.Done():
			// The KICK, if any, may still be on its way through the
			// session's pushes; then the message says "closed".
			if reason := a.lastKick(); reason != "" {
				return endKicked, fmt.Errorf("kicked by the server: %s", reason)
			}
			err := conn.Err()
			if err == nil || errors.Is(err, client.ErrClosed) {
				err = io.EOF
			}
			return endLost, fmt.Errorf("connection closed: %w", err)
		case line, ok := <-lines:
			if !ok {
				return endQuit, nil // stdin closed
			}
			if quit := a.command(sctx, sess, conn, strings.TrimSpace(line)); quit {
				return endQuit, nil
			}
		}
	}
}

// pump reads the session's pushes, of every connection: KICK is printed
// and noted, RECALL and DELETE are shown at once, and every push is a hint
// to sync (messages, read marks on other devices, settings): sync brings
// them with the gaps filled.
func (a *app) pump(sess *client.Session, hint chan<- struct{}) {
	for fr := range sess.Pushes() {
		if !fr.IsPush() {
			continue // a late answer to a request that gave up
		}
		switch fr.Command {
		case protocol.CmdKick:
			var k protocol.Kick
			if env, err := fr.Envelope(); err == nil {
				_ = json.Unmarshal(env.Data, &k)
			}
			if k.Reason == "" {
				k.Reason = "unknown"
			}
			a.printf("KICK: %s\n", k.Reason)
			a.kickMu.Lock()
			a.kick = k.Reason
			a.kickMu.Unlock()
			continue
		case protocol.CmdSignal:
			if env, err := fr.Envelope(); err == nil {
				var sg protocol.SignalPush
				if json.Unmarshal(env.Data, &sg) == nil {
					a.print(signalLine(sg))
				}
			}
		case protocol.CmdRecallMessage, protocol.CmdDeleteMessage, protocol.CmdEditMessage, protocol.CmdReaction:
			if e, ok := a.runner.NotePush(fr); ok {
				a.print(eventLine(e))
			}
		case protocol.CmdControlEvent:
			if ev, err := fr.ControlEvent(); err == nil {
				a.noteShown(ev)
				a.print(controlLine(ev))
			}
		}
		select {
		case hint <- struct{}{}:
		default: // a sync is already due
		}
	}
}

// lastKick returns the reason of the last KICK, and forgets it.
func (a *app) lastKick() string {
	a.kickMu.Lock()
	defer a.kickMu.Unlock()
	r := a.kick
	a.kick = ""
	return r
}

// syncer runs a sync for each burst of hints.
func (a *app) syncer(ctx context.Context, conn *client.Conn, hint <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hint:
			a.sync(ctx, conn, false)
		}
	}
}

// sync runs the sync sequence and prints it: after login the changed
// conversations and the missed messages, later only what is new.
func (a *app) sync(ctx context.Context, conn *client.Conn, login bool) {
	res, err := a.runner.Sync(ctx, conn)
	a.fillEdits(ctx, conn, &res)
	var b strings.Builder
	if login {
		a.formatLoginSync(&b, res)
	} else {
		a.formatMessages(&b, res, 0)
		for _, cid := range res.Removed {
			fmt.Fprintf(&b, "[conv %d] you are no longer a member\n", cid)
		}
	}
	a.print(b.String())
	if err != nil && ctx.Err() == nil {
		var ce *client.CodeError
		if errors.As(err, &ce) && ce.Code == errcode.InvalidArgument {
			// Cursors of another cluster or an older server version.
			a.errorf("sync: %v (the saved state %s may be stale: -reset-state)", err, a.f.state)
			return
		}
		a.errorf("sync: %v", err)
	}
}

func (a *app) formatLoginSync(b *strings.Builder, res client.SyncResult) {
	n := res.NewMessages()
	events := 0
	for _, e := range res.Events {
		if eventLine(e) != "" {
			events++
		}
	}
	// A conversation that changed only by a read mark or a flag is not
	// news; /list shows it.
	var news []client.Conversation
	for _, c := range res.Changed {
		if c.Unread > 0 || len(res.Messages[c.ConversationID.Int64()]) > 0 {
			news = append(news, c)
		}
	}
	if len(news) == 0 && n == 0 && events == 0 && len(res.Removed) == 0 {
		fmt.Fprintf(b, "sync: nothing new (%d conversations; /list)\n", len(a.runner.Conversations()))
		return
	}
	fmt.Fprintf(b, "sync: %d conversations with news, %d new messages, %d events\n", len(news), n, events)
	if len(news) > 0 {
		b.WriteString("conversations:\n")
		for _, c := range news {
			b.WriteString(conversationLine(c))
		}
	}
	for _, cid := range res.Removed {
		fmt.Fprintf(b, "[conv %d] you are no longer a member\n", cid)
	}
	if n > 0 {
		b.WriteString("missed messages:\n")
	}
	a.formatMessages(b, res, a.f.missed)
}

// formatMessages writes the new messages (at most limit per conversation,
// the newest; 0 = all) and the events.
func (a *app) formatMessages(b *strings.Builder, res client.SyncResult, limit int) {
	for _, cid := range res.ConversationIDs() {
		var ms []protocol.Message
		a.sentMu.Lock()
		for _, m := range res.Messages[cid] {
			if !a.sent[m.MsgID.Int64()] {
				ms = append(ms, m)
			}
		}
		a.sentMu.Unlock()
		if limit > 0 && len(ms) > limit {
			fmt.Fprintf(b, "[conv %d] … %d earlier messages (/history %d %d)\n", cid, len(ms)-limit, cid, len(ms))
			ms = ms[len(ms)-limit:]
		}
		for _, m := range ms {
			b.WriteString(messageLine(m))
		}
	}
	for _, e := range res.Events {
		if e.EventType == client.EventFriend || e.EventType == client.EventMembership {
			if a.takeShown(client.ControlEvent{EventType: e.EventType, ConversationID: e.ConversationID, Payload: e.Payload}) {
				continue // printed when its CONTROL_EVENT came
			}
		}
		b.WriteString(eventLine(e))
	}
}

// shownKey identifies a control event by its type, conversation and
// payload (compacted, so the push and the mailbox copy compare equal).
func shownKey(ev client.ControlEvent) string {
	var p bytes.Buffer
	if json.Compact(&p, ev.Payload) != nil {
		p.Reset()
		p.Write(ev.Payload)
	}
	return fmt.Sprintf("%d/%d/%s", ev.EventType, ev.ConversationID, p.Bytes())
}

// noteShown records a control event printed from its push.
func (a *app) noteShown(ev client.ControlEvent) {
	a.sentMu.Lock()
	defer a.sentMu.Unlock()
	if a.shown == nil || len(a.shown) > 4096 {
		a.shown = map[string]bool{}
	}
	a.shown[shownKey(ev)] = true
}

// takeShown reports (and forgets) whether ev was printed from its push.
func (a *app) takeShown(ev client.ControlEvent) bool {
	a.sentMu.Lock()
	defer a.sentMu.Unlock()
	k := shownKey(ev)
	if !a.shown[k] {
		return false
	}
	delete(a.shown, k)
	return true
}

// command runs one stdin line; it reports whether to quit.
func (a *app) command(ctx context.Context, sess *client.Session, conn *client.Conn, line string) (quit bool) {
	if line == "" {
		return false
	}
	fields := strings.Fields(line)
	idList := func(i int, what string) ([]int64, bool) {
		if len(fields) <= i {
			a.errorf("usage: %s … <%s,%s,...>", fields[0], what, what)
			return nil, false
		}
		var out []int64
		for _, f := range strings.Split(fields[i], ",") {
			v, err := strconv.ParseInt(f, 10, 64)
			if err != nil || v <= 0 {
				a.errorf("%s: %q is not a %s id", fields[0], f, what)
				return nil, false
			}
			out = append(out, v)
		}
		return out, true
	}
	idArg := func(i int, what string) (int64, bool) {
		if len(fields) <= i {
			a.errorf("usage: %s <%s>", fields[0], what)
			return 0, false
		}
		v, err := strconv.ParseInt(fields[i], 10, 64)
		if err != nil || v <= 0 {
			a.errorf("%s: %q is not a %s id", fields[0], fields[i], what)
			return 0, false
		}
		return v, true
	}
	switch fields[0] {
	case "/quit", "/exit":
		return true
	case "/help":
		a.print(helpText + "\n")
	case "/list":
		a.list()
	case "/sync":
		a.sync(ctx, conn, true)
	case "/history":
		cid, ok := idArg(1, "conv")
		if !ok {
			return false
		}
		n := 20
		if len(fields) > 2 {
			v, err := strconv.Atoi(fields[2])
			if err != nil || v <= 0 {
				a.errorf("/history: %q is not a count", fields[2])
				return false
			}
			n = v
		}
		a.history(ctx, conn, cid, n)
	case "/read":
		cid, ok := idArg(1, "conv")
		if !ok {
			return false
		}
		reply, err := a.runner.MarkRead(ctx, conn, cid)
		if err != nil {
			a.errorf("read: %v", err)
			return false
		}
		c, _ := a.runner.Conversation(cid)
		a.printf("read conv %d up to #%d (unread %d)\n", cid, reply.MsgID, c.Unread)
	case "/recall":
		mid, ok := idArg(1, "msg")
		if !ok {
			return false
		}
		if err := conn.Recall(ctx, 0, mid); err != nil {
			a.errorf("recall: %v", err)
			return false
		}
		a.runner.NoteEvent(client.EventRecall, mid) // no echo from the mailbox
		a.printf("recalled #%d\n", mid)
	case "/edit":
		mid, ok := idArg(1, "msg")
		if !ok {
			return false
		}
		if len(fields) < 3 {
			a.errorf("usage: /edit <msg> <text>")
			return false
		}
		content, err := client.TextContent(strings.Join(fields[2:], " "))
		if err != nil {
			a.errorf("edit: %v", err)
			return false
		}
		r, err := conn.Edit(ctx, 0, mid, content)
		if err != nil {
			a.errorf("edit: %v", err)
			return false
		}
		a.printf("edited #%d (version %d)\n", mid, r.Version)
	case "/react", "/unreact":
		mid, ok := idArg(1, "msg")
		if !ok {
			return false
		}
		if len(fields) != 3 {
			a.errorf("usage: %s <msg> <emoji>", fields[0])
			return false
		}
		react := conn.React
		if fields[0] == "/unreact" {
			react = conn.Unreact
		}
		r, err := react(ctx, 0, mid, fields[2])
		if err != nil {
			a.errorf("%s: %v", fields[0][1:], err)
			return false
		}
		a.printf("#%d %s %d\n", mid, r.Emoji, r.Count)
	case "/reactors":
		mid, ok := idArg(1, "msg")
		if !ok {
			return false
		}
		if len(fields) != 3 {
			a.errorf("usage: /reactors <msg> <emoji>")
			return false
		}
		page, err := conn.Reactors(ctx, 0, mid, fields[2], 0, 0)
		if err != nil {
			a.errorf("reactors: %v", err)
			return false
		}
		users := make([]string, 0, len(page.Users))
		for _, u := range page.Users {
			users = append(users, u.UserID.String())
		}
		more := ""
		if page.More {
			more = " …"
		}
		a.printf("#%d %s %d: %s%s\n", mid, page.Emoji, page.Count, strings.Join(users, " "), more)
	case "/typing":
		cid, ok := idArg(1, "conv")
		if !ok {
			return false
		}
		kind := protocol.SignalTyping
		if len(fields) > 2 {
			kind = fields[2]
		}
		n, err := conn.Signal(ctx, cid, kind, nil)
		if err != nil {
			a.errorf("typing: %v", err)
			return false
		}
		a.printf("%s sent to %d connections\n", kind, n)
	case "/delete-all":
		mid, ok := idArg(1, "msg")
		if !ok {
			return false
		}
		if err := conn.DeleteForEveryone(ctx, 0, mid); err != nil {
			a.errorf("delete-all: %v", err)
			return false
		}
		a.runner.NoteEvent(client.EventDelete, mid) // no echo from the mailbox
		a.printf("deleted #%d for everyone\n", mid)
	case "/reply":
		cid, ok := idArg(1, "conv")
		if !ok {
			return false
		}
		mid, ok := idArg(2, "msg")
		if !ok {
			return false
		}
		if len(fields) < 4 {
			a.errorf("usage: /reply <conv> <msg> <text>")
			return false
		}
		if _, err := a.reply(ctx, sess, cid, mid, strings.Join(fields[3:], " ")); err != nil {
			a.errorf("reply: %v", err)
			return false
		}
	case "/friends":
		a.friends(ctx, conn)
	case "/friend-request", "/accept", "/block", "/unblock":
		uid, ok := idArg(1, "user")
		if !ok {
			return false
		}
		var (
			changed bool
			err     error
		)
		switch fields[0] {
		case "/friend-request":
			_, rest, _ := strings.Cut(line, " ")
			_, note, _ := strings.Cut(strings.TrimSpace(rest), " ")
			changed, err = conn.RequestFriend(ctx, uid, strings.TrimSpace(note))
		case "/accept":
			changed, err = conn.AcceptFriend(ctx, uid)
		case "/block":
			changed, err = conn.Block(ctx, uid)
		default:
			changed, err = conn.Unblock(ctx, uid)
		}
		if err != nil {
			a.errorf("%s: %v", fields[0][1:], err)
			return false
		}
		a.printf("%s %d: %s\n", fields[0][1:], uid, map[bool]string{true: "done", false: "nothing to change"}[changed])
	case "/group-create":
		if len(fields) < 3 {
			a.errorf("usage: /group-create <name> <uid,uid,...>")
			return false
		}
		members, ok := idList(2, "user")
		if !ok {
			return false
		}
		ch, err := conn.CreateGroup(ctx, client.NewGroup{Name: fields[1], MemberIDs: members})
		if err != nil {
			a.errorf("group-create: %v", err)
			return false
		}
		a.printf("created group %d %q conv %d with %d members\n", ch.Group.GroupID, ch.Group.Name, ch.Group.ConversationID, ch.Group.MemberCount)
	case "/group-add":
		gid, ok := idArg(1, "group")
		if !ok {
			return false
		}
		users, ok := idList(2, "user")
		if !ok {
			return false
		}
		ch, err := conn.AddGroupMembers(ctx, gid, users)
		if err != nil {
			a.errorf("group-add: %v", err)
			return false
		}
		a.printf("group %d: added %s (%d members)\n", gid, idsText(ch.Added), ch.Group.MemberCount)
	case "/group-leave":
		gid, ok := idArg(1, "group")
		if !ok {
			return false
		}
		if _, err := conn.LeaveGroup(ctx, gid); err != nil {
			a.errorf("group-leave: %v", err)
			return false
		}
		a.printf("left group %d\n", gid)
	case "/group-members":
		gid, ok := idArg(1, "group")
		if !ok {
			return false
		}
		a.groupMembers(ctx, conn, gid)
	case "/send-file":
		if len(fields) < 3 {
			a.errorf("usage: /send-file <to_user_id|g<group_id>> <path>")
			return false
		}
		id, group, ok := parseTarget(fields[1])
		if !ok {
			a.errorf("usage: /send-file <to_user_id|g<group_id>> <path>")
			return false
		}
		_, rest, _ := strings.Cut(line, " ")
		_, path, _ := strings.Cut(strings.TrimSpace(rest), " ")
		if err := a.sendFile(ctx, sess, conn, id, group, strings.TrimSpace(path)); err != nil {
			a.errorf("send-file: %v", err)
			return false
		}
	case "/download":
		cid, ok := idArg(1, "conv")
		if !ok {
			return false
		}
		mid, ok := idArg(2, "msg")
		if !ok {
			return false
		}
		dir := "."
		if len(fields) > 3 {
			dir = fields[3]
		}
		if err := a.download(ctx, conn, cid, mid, dir); err != nil {
			a.errorf("download: %v", err)
			return false
		}
	case "/upstream":
		_, rest, _ := strings.Cut(line, " ")
		service, body, found := strings.Cut(strings.TrimSpace(rest), " ")
		if !found || service == "" {
			a.errorf("usage: /upstream <service> <body>")
			return false
		}
		if err := a.upstream(ctx, sess, service, body); err != nil {
			a.errorf("%v", err)
		}
	default:
		if strings.HasPrefix(fields[0], "/") {
			a.errorf("unknown command %s\n%s", fields[0], helpText)
			return false
		}
		to, text, found := strings.Cut(line, " ")
		id, group, ok := parseTarget(to)
		if !found || !ok {
			a.errorf("usage: <to_user_id> <text> or g<group_id> <text>   (/help for commands)")
			return false
		}
		var ack protocol.SendAck
		var err error
		if group {
			ack, err = a.sendGroup(ctx, sess, id, text)
		} else {
			ack, err = a.send(ctx, sess, id, text)
		}
		if err != nil {
			a.errorf("send: %v", err)
			return false
		}
		// Catch up on the conversation now: the cursor moves past the
		// message just sent, and anything that came in meanwhile shows.
		ms, err := a.runner.SyncConversation(ctx, conn, ack.ConversationID.Int64())
		var b strings.Builder
		a.formatMessages(&b, client.SyncResult{Messages: map[int64][]protocol.Message{ack.ConversationID.Int64(): ms}}, 0)
		a.print(b.String())
		if err != nil {
			a.errorf("sync after send: %v", err)
		}
	}
	return false
}

// upstream sends one UPSTREAM frame, again on the next connection with
// the same upstream_id if the answer was lost (queued once), and prints
// the queued id.
func (a *app) upstream(ctx context.Context, sess *client.Session, service, body string) error {
	r, err := sess.Upstream(ctx, service, body, "")
	if err != nil {
		return err
	}
	a.printf("upstream %s queued: id %d\n", service, r.ID.Int64())
	return nil
}

func (a *app) list() {
	convs := a.runner.Conversations()
	var b strings.Builder
	fmt.Fprintf(&b, "conversations (%d):\n", len(convs))
	for _, c := range convs {
		b.WriteString(conversationLine(c))
	}
	a.print(b.String())
}

func (a *app) history(ctx context.Context, conn *client.Conn, cid int64, n int) {
	ms, total, err := client.History(ctx, conn, cid, n, 0)
	if err != nil {
		a.errorf("history: %v", err)
		return
	}
	ids := make([]int64, 0, len(ms))
	for _, m := range ms {
		ids = append(ids, m.MsgID.Int64())
	}
	reactions := map[int64]string{}
	if len(ids) > 0 {
		rs, err := conn.Reactions(ctx, cid, ids[max(0, len(ids)-protocol.MaxReactionMsgIDs):])
		if err != nil {
			a.errorf("reactions: %v", err)
		}
		for _, r := range rs {
			reactions[r.MsgID.Int64()] = reactionsText(r.Reactions)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "history of conv %d: %d of %d messages\n", cid, len(ms), total)
	for _, m := range ms {
		line := messageLine(m)
		if r := reactions[m.MsgID.Int64()]; r != "" {
			line = strings.TrimSuffix(line, "\n") + "  " + r + "\n"
		}
		b.WriteString(line)
	}
	a.print(b.String())
}

// send sends a text to a user through the session: a send whose
// connection ends before the answer goes again, with the same
// client_msg_id, on the next one.
func (a *app) send(ctx context.Context, sess *client.Session, to int64, text string) (protocol.SendAck, error) {
	content, err := client.TextContent(text)
	if err != nil {
		return protocol.SendAck{}, err
	}
	ack, err := sess.Send(ctx, protocol.SendRequest{ToUserID: jsonid.ID(to), MessageType: 1, Content: content})
	return a.recordSent(ack, err)
}

// reply sends a text into a conversation as a reply to one of its
// messages.
func (a *app) reply(ctx context.Context, sess *client.Session, cid, replyTo int64, text string) (protocol.SendAck, error) {
	content, err := client.TextContent(text)
	if err != nil {
		return protocol.SendAck{}, err
	}
	ack, err := sess.Send(ctx, protocol.SendRequest{ConversationID: jsonid.ID(cid), ReplyTo: jsonid.ID(replyTo), MessageType: 1, Content: content})
	return a.recordSent(ack, err)
}

// sendGroup is send to a group.
func (a *app) sendGroup(ctx context.Context, sess *client.Session, groupID int64, text string) (protocol.SendAck, error) {
	content, err := client.TextContent(text)
	if err != nil {
		return protocol.SendAck{}, err
	}
	ack, err := sess.Send(ctx, protocol.SendRequest{GroupID: jsonid.ID(groupID), MessageType: 1, Content: content})
	return a.recordSent(ack, err)
}

// recordSent records and prints a message this process sent.
func (a *app) recordSent(ack protocol.SendAck, err error) (protocol.SendAck, error) {
	if err != nil {
		return ack, err
	}
	a.sentMu.Lock()
	a.sent[ack.MsgID.Int64()] = true
	a.sentMu.Unlock()
	a.printf("sent msg_id=%d conv=%d\n", ack.MsgID, ack.ConversationID)
	return ack, nil
}

// friends prints the friend list and the requests waiting for an answer
// (every page of each).
func (a *app) friends(ctx context.Context, conn *client.Conn) {
	var fs []client.Friend
	for after := int64(0); ; {
		p, err := conn.Friends(ctx, after, 0)
		if err != nil {
			a.errorf("friends: %v", err)
			return
		}
		fs = append(fs, p.Friends...)
		if !p.More {
			break
		}
		after = p.Next.Int64()
	}
	var reqs []protocol.FriendRequest
	for after := int64(0); ; {
		p, err := conn.FriendRequests(ctx, after, 0)
		if err != nil {
			a.errorf("friend requests: %v", err)
			return
		}
		reqs = append(reqs, p.Requests...)
		if !p.More {
			break
		}
		after = p.Next.Int64()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "friends (%d):\n", len(fs))
	for _, f := range fs {
		if f.Remark != "" {
			fmt.Fprintf(&b, "  %d (%s)\n", f.UserID, f.Remark)
		} else {
			fmt.Fprintf(&b, "  %d\n", f.UserID)
		}
	}
	if len(reqs) > 0 {
		fmt.Fprintf(&b, "friend requests (%d; /accept <uid>):\n", len(reqs))
		for _, r := range reqs {
			if r.Note != "" {
				fmt.Fprintf(&b, "  %d: %s\n", r.UserID, oneLine(r.Note, 60))
			} else {
				fmt.Fprintf(&b, "  %d\n", r.UserID)
			}
		}
	}
	a.print(b.String())
}

// groupMembers prints every member of a group with their role and mute.
func (a *app) groupMembers(ctx context.Context, conn *client.Conn, gid int64) {
	var ms []client.GroupMember
	for after := int64(0); ; {
		p, err := conn.GroupMembers(ctx, gid, after, 0)
		if err != nil {
			a.errorf("group-members: %v", err)
			return
		}
		ms = append(ms, p.Members...)
		if !p.More {
			break
		}
		after = p.Next.Int64()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "group %d members (%d):\n", gid, len(ms))
	for _, m := range ms {
		fmt.Fprintf(&b, "  %d %s", m.UserID, m.Role)
		if m.MuteUntil > time.Now().UnixMilli() {
			fmt.Fprintf(&b, " muted until %s", time.UnixMilli(m.MuteUntil).Format("2006-01-02 15:04"))
		}
		b.WriteByte('\n')
	}
	a.print(b.String())
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

func heartbeat(ctx context.Context, conn *client.Conn, a *app) {
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-conn.Done():
			return
		case <-t.C:
			if _, err := conn.Heartbeat(ctx); err != nil && ctx.Err() == nil {
				a.errorf("heartbeat: %v", err)
			}
		}
	}
}

// conversationLine renders a list entry:
//
//	conv 7301 p2p 1002 unread 3 pinned muted | 1002: see you
func conversationLine(c client.Conversation) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  conv %d ", c.ConversationID)
	if c.ConversationType == protocol.ConversationGroup {
		fmt.Fprintf(&b, "group %d", c.GroupID)
	} else {
		fmt.Fprintf(&b, "p2p %d", c.PeerID)
	}
	fmt.Fprintf(&b, " unread %d", c.Unread)
	if c.Pinned {
		b.WriteString(" pinned")
	}
	if c.Muted {
		b.WriteString(" muted")
	}
	switch p := c.Preview; {
	case p == nil:
		b.WriteString(" | (no messages)")
	case p.Recalled:
		fmt.Fprintf(&b, " | %d: (recalled)", p.SenderID)
	default:
		fmt.Fprintf(&b, " | %d: %s", p.SenderID, oneLine(p.Text, 60))
	}
	b.WriteByte('\n')
	return b.String()
}

// parseTarget reads a send target: a user id, or g and a group id.
func parseTarget(s string) (id int64, group bool, ok bool) {
	group = strings.HasPrefix(s, "g")
	id, err := strconv.ParseInt(strings.TrimPrefix(s, "g"), 10, 64)
	return id, group, err == nil && id > 0
}

// reactionsText renders a message's counts: [👍 2* ❤️ 1], * marking
// the user's own.
func reactionsText(rs []protocol.ReactionCount) string {
	parts := make([]string, 0, len(rs))
	for _, r := range rs {
		p := fmt.Sprintf("%s %d", r.Emoji, r.Count)
		if r.Me {
			p += "*"
		}
		parts = append(parts, p)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// messageLine renders a message: [conv 7301] 15:04:05 #7302 1002: hello
func messageLine(m protocol.Message) string {
	at := ""
	if m.CreatedAt > 0 {
		at = time.UnixMilli(m.CreatedAt).Format("15:04:05") + " "
	}
	return fmt.Sprintf("[conv %d] %s#%d %d: %s\n", m.ConversationID, at, m.MsgID, m.SenderID, messageText(m))
}

// eventLine renders a mailbox event (or the push standing for one).
func eventLine(e client.MailboxEvent) string {
	switch e.EventType {
	case client.EventRecall:
		return fmt.Sprintf("[conv %d] #%d was recalled\n", e.ConversationID, e.MsgID)
	case client.EventDelete:
		var d protocol.DeleteRequest
		if json.Unmarshal(e.Payload, &d) == nil && d.ForEveryone {
			return fmt.Sprintf("[conv %d] #%d was deleted for everyone\n", e.ConversationID, e.MsgID)
		}
		return fmt.Sprintf("[conv %d] #%d was deleted for you\n", e.ConversationID, e.MsgID)
	case client.EventEdit:
		var ed protocol.EditPush
		_ = json.Unmarshal(e.Payload, &ed)
		if len(ed.Content) > 0 {
			return fmt.Sprintf("[conv %d] #%d edited: %s\n", e.ConversationID, e.MsgID,
				messageText(protocol.Message{MessageType: protocol.MessageText, Content: ed.Content}))
		}
		return fmt.Sprintf("[conv %d] #%d was edited (version %d)\n", e.ConversationID, e.MsgID, ed.Version)
	case client.EventReaction:
		var r protocol.ReactionPush
		_ = json.Unmarshal(e.Payload, &r)
		verb := "removed"
		if r.Added {
			verb = "reacted"
		}
		return fmt.Sprintf("[conv %d] #%d %d %s %s (%d)\n", e.ConversationID, e.MsgID, r.UserID, verb, r.Emoji, r.Count)
	case client.EventKick:
		var k protocol.KickPayload
		_ = json.Unmarshal(e.Payload, &k)
		return fmt.Sprintf("while away: kicked (%s)\n", k.Reason)
	case client.EventMissedMessage:
		return "" // the messages themselves came with the sync
	case client.EventMembership, client.EventFriend:
		return controlLine(client.ControlEvent{EventType: e.EventType, ConversationID: e.ConversationID, Payload: e.Payload})
	}
	return fmt.Sprintf("event %d conv %d msg %d: %s\n", e.EventType, e.ConversationID, e.MsgID, e.Payload)
}

// controlLine renders a friend or membership change (a CONTROL_EVENT push
// or its mailbox copy):
//
//	friend: 1002 asks to be your friend (/accept 1002)
//	[group 55] members removed by 1001
func controlLine(ev client.ControlEvent) string {
	var p struct {
		Kind       string    `json:"kind"`
		UserID     jsonid.ID `json:"user_id"`
		Action     string    `json:"action"`
		GroupID    jsonid.ID `json:"group_id"`
		OperatorID jsonid.ID `json:"operator_id"`
		Role       *int      `json:"role"`
		MuteUntil  *int64    `json:"mute_until"`
	}
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		return fmt.Sprintf("event %d conv %d: %s\n", ev.EventType, ev.ConversationID, ev.Payload)
	}
	switch ev.EventType {
	case client.EventFriend:
		u := p.UserID
		switch p.Kind {
		case "request":
			return fmt.Sprintf("friend: %d asks to be your friend (/accept %d)\n", u, u)
		case "accepted":
			return fmt.Sprintf("friend: you and %d are friends now\n", u)
		case "rejected":
			return fmt.Sprintf("friend: you turned down %d's request\n", u)
		case "removed":
			return fmt.Sprintf("friend: you and %d are no longer friends\n", u)
		case "remark":
			return fmt.Sprintf("friend: your remark for %d changed\n", u)
		case "blocked":
			return fmt.Sprintf("friend: you blocked %d\n", u)
		case "unblocked":
			return fmt.Sprintf("friend: you unblocked %d\n", u)
		}
		return fmt.Sprintf("friend: %s %d\n", p.Kind, u)
	case client.EventMembership:
		what := map[string]string{
			"added": "members added", "removed": "members removed", "left": "a member left",
			"role": "a role changed", "muted": "a member's mute changed", "mute_all": "mute-all switched",
			"updated": "the group info changed", "dissolved": "the group was dissolved",
		}[p.Action]
		if what == "" {
			what = p.Action
		}
		if p.Role != nil && p.Action == "role" {
			what += " to " + map[int]string{0: "member", 1: "admin", 2: "owner"}[*p.Role]
		}
		if p.MuteUntil != nil && *p.MuteUntil > 0 {
			what += " (until " + time.UnixMilli(*p.MuteUntil).Format("2006-01-02 15:04") + ")"
		}
		return fmt.Sprintf("[group %d] %s by %d (conv %d)\n", p.GroupID, what, p.OperatorID, ev.ConversationID)
	}
	return fmt.Sprintf("event %d conv %d: %s\n", ev.EventType, ev.ConversationID, ev.Payload)
}

// idsText renders ids as "1, 2, 3" ("none" for none).
func idsText(ids []jsonid.ID) string {
	if len(ids) == 0 {
		return "none"
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = id.String()
	}
	return strings.Join(parts, ", ")
}

func messageText(m protocol.Message) string {
	switch m.Status {
	case protocol.StatusRecalled:
		return "(recalled)"
	case protocol.StatusDeleted:
		return "(deleted)"
	}
	if m.MessageType == 1 {
		var c struct {
			Text  string `json:"text"`
			Reply *struct {
				MsgID    string `json:"msg_id"`
				SenderID string `json:"sender_id"`
				Text     string `json:"text"`
				Recalled bool   `json:"recalled"`
			} `json:"reply_to"`
		}
		if json.Unmarshal(m.Content, &c) == nil {
			switch {
			case c.Reply != nil && c.Reply.Recalled:
				return fmt.Sprintf("[re #%s: (recalled)] %s", c.Reply.MsgID, c.Text)
			case c.Reply != nil:
				return fmt.Sprintf("[re #%s %s: %s] %s", c.Reply.MsgID, c.Reply.SenderID, oneLine(c.Reply.Text, 30), c.Text)
			}
			return c.Text
		}
	}
	return string(m.Content)
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func readLines(r io.Reader, out chan<- string) {
	defer close(out)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		out <- sc.Text()
	}
}

// fillEdits fetches the new text of the messages a sync reported edited
// (their mailbox events carry only ids and the version), so the edits
// print with their text.
func (a *app) fillEdits(ctx context.Context, conn *client.Conn, res *client.SyncResult) {
	byConv := map[int64][]int64{}
	for _, e := range res.Events {
		if e.EventType == client.EventEdit && len(byConv[e.ConversationID.Int64()]) < 100 {
			byConv[e.ConversationID.Int64()] = append(byConv[e.ConversationID.Int64()], e.MsgID.Int64())
		}
	}
	content := map[int64]protocol.Message{}
	for cid, ids := range byConv {
		ms, err := conn.MessagesByID(ctx, cid, ids)
		if err != nil {
			a.errorf("edited messages of conv %d: %v", cid, err)
			continue
		}
		for _, m := range ms {
			content[m.MsgID.Int64()] = m
		}
	}
	for i, e := range res.Events {
		m, ok := content[e.MsgID.Int64()]
		if e.EventType != client.EventEdit || !ok || len(m.Content) == 0 {
			continue
		}
		if p, err := json.Marshal(protocol.EditPush{MsgID: m.MsgID, ConversationID: m.ConversationID, SenderID: m.SenderID,
			Version: m.Version, EditedAt: m.EditedAt, Content: m.Content}); err == nil {
			res.Events[i].Payload = p
		}
	}
}

// signalLine renders a SIGNAL push.
func signalLine(sg protocol.SignalPush) string {
	switch sg.Kind {
	case protocol.SignalTyping:
		return fmt.Sprintf("[conv %d] %d is typing…\n", sg.ConversationID, sg.SenderID)
	case protocol.SignalTypingStop:
		return fmt.Sprintf("[conv %d] %d stopped typing\n", sg.ConversationID, sg.SenderID)
	}
	return fmt.Sprintf("[conv %d] %d signals %s %s\n", sg.ConversationID, sg.SenderID, sg.Kind, sg.Payload)
}
