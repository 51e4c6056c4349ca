package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparkim/spark/client"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/tests/framework"
)

// imcliArgs are the flags that point the imcli binary at cluster gate g as
// user on its own state file.
func imcliArgs(t *testing.T, c *framework.Cluster, gate int, user int64, state string) []string {
	t.Helper()
	if _, err := os.Stat(c.Bins.IMCli); err != nil {
		t.Fatalf("imcli binary: %v (make build-failpoints builds it into bin/failpoints)", err)
	}
	return []string{"-config", c.Config, "-gate", c.Gates[gate].TCPAddr, "-user", fmt.Sprint(user), "-state", state}
}

// runIMCli runs imcli to the end of stdin and returns its stdout; a
// failure exit fails the test.
func runIMCli(t *testing.T, ctx context.Context, c *framework.Cluster, user int64, state, stdin string) string {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(rctx, c.Bins.IMCli, append(imcliArgs(t, c, 0, user, state), "-reconnect=false")...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("imcli stdin %q\nstdout:\n%s\nstderr:\n%s", stdin, stdout.String(), stderr.String())
	if err != nil {
		t.Fatalf("imcli: %v", err)
	}
	if stderr.Len() > 0 {
		t.Fatalf("imcli wrote errors:\n%s", stderr.String())
	}
	return stdout.String()
}

// inOrder fails unless every part occurs in out, each after the previous.
func inOrder(t *testing.T, out string, parts ...string) {
	t.Helper()
	rest := out
	for _, p := range parts {
		i := strings.Index(rest, p)
		if i < 0 {
			t.Fatalf("output lacks %q after the previous parts:\n%s", p, out)
		}
		rest = rest[i+len(p):]
	}
}

// waitList polls the conversation list of a probe device of the user (a
// fresh cursor each time, so it consumes nothing) until conv shows unread
// and lastMsgID: deliver has caught up.
func waitList(t *testing.T, ctx context.Context, probe *client.Conn, conv, unread, lastMsgID int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var cv client.Conversation
	for time.Now().Before(deadline) {
		p, err := probe.SyncInbox(ctx, "0", "0", 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Conversations {
			if c.ConversationID.Int64() == conv {
				cv = c
			}
		}
		if cv.Unread == unread && cv.LastMsgID.Int64() == lastMsgID {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("conversation %d: unread %d last %s, want %d and %d", conv, cv.Unread, cv.LastMsgID, unread, lastMsgID)
}

// B quits imcli; A sends while B is away and recalls a message B had
// seen, and B deletes another one on a second device. B's next imcli login
// lists the conversation with the right unread and prints exactly the
// missed messages, the recall and the delete; /list, /history and /read
// work; the login after that has nothing new, because the cursors were
// saved.
func TestIMCliShowsWhatArrivedWhileAway(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 1, Partitions: 4})
	ctx := ctxT(t, 3*time.Minute)
	const userA, userB = 32001, 32002
	state := filepath.Join(t.TempDir(), "imcli-b.json")
	a := c.Login(t, 0, userA, "a")
	probe := c.Login(t, 0, userB, "probe")

	first, err := a.Send(ctx, sendTo(userB, "away-0", text(t, "before you left")))
	if err != nil {
		t.Fatal(err)
	}
	doomed, err := a.Send(ctx, sendTo(userB, "away-1", text(t, "delete me later")))
	if err != nil {
		t.Fatal(err)
	}
	conv := first.ConversationID.Int64()
	waitList(t, ctx, probe, conv, 2, doomed.MsgID.Int64())
	out := runIMCli(t, ctx, c, userB, state, "")
	inOrder(t, out, "logged in as 32002 device cli-32002",
		"sync: 1 conversations with news, 2 new messages, 0 events",
		"conversations:", fmt.Sprintf("conv %d p2p %d unread 2 | %d: delete me later", conv, userA, userA),
		"missed messages:", fmt.Sprintf("#%s %d: before you left", first.MsgID, userA),
		fmt.Sprintf("#%s %d: delete me later", doomed.MsgID, userA))

	// B is away: three messages; the first one B saw is recalled, the
	// second deleted by B on another device.
	var acks []protocol.SendAck
	for i, s := range []string{"two", "three", "four"} {
		ack, err := a.Send(ctx, sendTo(userB, fmt.Sprintf("away-%d", i+2), text(t, s)))
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, ack)
	}
	if err := a.Recall(ctx, conv, first.MsgID.Int64()); err != nil {
		t.Fatal(err)
	}
	if err := probe.Delete(ctx, conv, doomed.MsgID.Int64()); err != nil {
		t.Fatal(err)
	}
	last := acks[2].MsgID.Int64()
	// Unread is the three new ones: the recalled and the deleted message
	// no longer count.
	waitList(t, ctx, probe, conv, 3, last)

	out = runIMCli(t, ctx, c, userB, state, fmt.Sprintf("/list\n/history %d\n/read %d\n/list\n", conv, conv))
	inOrder(t, out,
		"sync: 1 conversations with news, 3 new messages, 2 events",
		fmt.Sprintf("conv %d p2p %d unread 3 | %d: four", conv, userA, userA),
		"missed messages:",
		fmt.Sprintf("#%s %d: two", acks[0].MsgID, userA),
		fmt.Sprintf("#%s %d: three", acks[1].MsgID, userA),
		fmt.Sprintf("#%s %d: four", acks[2].MsgID, userA),
		fmt.Sprintf("[conv %d] #%s was recalled", conv, first.MsgID),
		fmt.Sprintf("[conv %d] #%s was deleted for you", conv, doomed.MsgID),
		// /list
		"conversations (1):", fmt.Sprintf("conv %d p2p %d unread 3 |", conv, userA),
		// /history: the recalled message as a tombstone, the deleted one gone
		fmt.Sprintf("history of conv %d: 4 of 4 messages", conv),
		fmt.Sprintf("#%s %d: (recalled)", first.MsgID, userA),
		fmt.Sprintf("#%s %d: two", acks[0].MsgID, userA),
		fmt.Sprintf("#%s %d: four", acks[2].MsgID, userA),
		// /read, then /list
		fmt.Sprintf("read conv %d up to #%d (unread 0)", conv, last),
		"conversations (1):", fmt.Sprintf("conv %d p2p %d unread 0 | %d: four", conv, userA, userA))
	for _, gone := range []string{"before you left", "delete me later"} {
		if strings.Contains(out, gone) {
			t.Fatalf("%q is shown again:\n%s", gone, out)
		}
	}
	if got := strings.Count(out, fmt.Sprintf("#%s %d: two", acks[0].MsgID, userA)); got != 2 {
		t.Fatalf("message two shown %d times, want twice (missed, /history)", got)
	}
	var mark int64
	if err := c.DB().QueryRow("SELECT last_read_msg_id FROM t_conversation_members WHERE conversation_id = ? AND user_id = ?", conv, userB).Scan(&mark); err != nil || mark != last {
		t.Fatalf("last_read_msg_id %d (%v), want %d", mark, err, last)
	}

	// The cursors were saved: the next login has nothing new.
	waitList(t, ctx, probe, conv, 0, last)
	out = runIMCli(t, ctx, c, userB, state, "/list\n")
	inOrder(t, out, "sync: nothing new (1 conversations; /list)",
		"conversations (1):", fmt.Sprintf("conv %d p2p %d unread 0 | %d: four", conv, userA, userA))
	if strings.Contains(out, "was recalled") || strings.Contains(out, "was deleted") || strings.Contains(out, "missed messages") {
		t.Fatalf("old news shown again:\n%s", out)
	}
	b, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	var st client.SyncState
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	if st.UserID != userB || st.DeviceID != "cli-32002" || st.LastMsgIDs[conv].Int64() != last || st.MailboxSeq <= 0 || st.DialogCursor == "0" {
		t.Fatalf("saved state %s", b)
	}
}

// lineLog collects a process's output lines and waits for one.
type lineLog struct {
	mu     sync.Mutex
	buf    strings.Builder
	notify chan struct{}
}

func newLineLog(r io.Reader) *lineLog {
	l := &lineLog{notify: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			l.mu.Lock()
			l.buf.WriteString(sc.Text() + "\n")
			close(l.notify)
			l.notify = make(chan struct{})
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *lineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// wait returns once s occurs n times.
func (l *lineLog) wait(t *testing.T, s string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		l.mu.Lock()
		got, ch := strings.Count(l.buf.String(), s), l.notify
		l.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no %d× %q within %v; output:\n%s", n, s, timeout, l.String())
		}
	}
}

// A running imcli shows live messages, loses its gate (kill -9), and after
// reconnecting runs the sync again: the message sent while it was cut off
// shows, once.
func TestIMCliSyncsAgainAfterReconnect(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2, Partitions: 4})
	ctx := ctxT(t, 3*time.Minute)
	const userA, userB = 33001, 33002
	a := c.Login(t, 1, userA, "a")
	probe := c.Login(t, 1, userB, "probe")

	stdin, out, exited := startIMCli(t, ctx, c, imcliArgs(t, c, 0, userB, filepath.Join(t.TempDir(), "b.json")))
	out.wait(t, "sync: nothing new", 1, 20*time.Second)

	live, err := a.Send(ctx, sendTo(userB, "rc-live", text(t, "while online")))
	if err != nil {
		t.Fatal(err)
	}
	out.wait(t, fmt.Sprintf("#%s %d: while online", live.MsgID, userA), 1, 20*time.Second)

	g := c.Gates[0]
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	cut, err := a.Send(ctx, sendTo(userB, "rc-cut", text(t, "while cut off")))
	if err != nil {
		t.Fatal(err)
	}
	waitList(t, ctx, probe, cut.ConversationID.Int64(), 2, cut.MsgID.Int64())
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	out.wait(t, "logged in as 33002", 2, 60*time.Second)
	out.wait(t, fmt.Sprintf("#%s %d: while cut off", cut.MsgID, userA), 1, 20*time.Second)
	inOrder(t, out.String(), "logged in as", "logged in as", "sync: 1 conversations with news, 1 new messages",
		fmt.Sprintf("conv %d p2p %d unread 2", cut.ConversationID, userA), "missed messages:",
		fmt.Sprintf("#%s %d: while cut off", cut.MsgID, userA))
	if n := strings.Count(out.String(), "while online"); n != 1 {
		t.Fatalf("the live message shown %d times, want once", n)
	}

	// Commands still work on the new connection.
	if _, err := io.WriteString(stdin, fmt.Sprintf("/read %d\n/quit\n", cut.ConversationID)); err != nil {
		t.Fatal(err)
	}
	out.wait(t, fmt.Sprintf("read conv %d up to #%s (unread 0)", cut.ConversationID, cut.MsgID), 1, 20*time.Second)
	expectExit(t, exited)
}

// startIMCli starts the imcli binary with args, its stdin a pipe and its
// stdout a lineLog; exited gets its exit. The cleanup closes stdin, kills
// an imcli that does not end within 10 s and logs the output.
func startIMCli(t *testing.T, ctx context.Context, c *framework.Cluster, args []string) (stdin io.WriteCloser, out *lineLog, exited chan error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, c.Bins.IMCli, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out = newLineLog(stdout)
	exited = make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = stdin.Close()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
		t.Logf("imcli stdout:\n%s\nstderr:\n%s", out.String(), stderr.String())
	})
	return stdin, out, exited
}

// expectExit waits for imcli to exit with status 0 after /quit.
func expectExit(t *testing.T, exited chan error) {
	t.Helper()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("imcli exit: %v", err)
		}
		exited <- nil // for the cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("imcli did not quit")
	}
}

// lockedBuffer is a bytes.Buffer written by the process's stderr copier
// and read by the test's cleanup.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// imcli on a list of two gates: SIGTERM on the gate it is on (KICK
// server_shutdown) moves it to the other gate, where it says so, syncs
// (the message sent during the move shows, once) and goes on: live
// messages arrive and its own sends are answered.
func TestIMCliMovesToTheOtherGateWhenItsGateStops(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 2, Partitions: 4})
	ctx := ctxT(t, 3*time.Minute)
	const userA, userB = 34001, 34002
	a := c.Login(t, 1, userA, "a")
	g0, g1 := c.Gates[0].TCPAddr, c.Gates[1].TCPAddr
	args := imcliArgs(t, c, 0, userB, filepath.Join(t.TempDir(), "b.json"))
	for i := range args {
		if args[i] == "-gate" {
			args[i+1] = g0 + "," + g1
		}
	}
	stdin, out, exited := startIMCli(t, ctx, c, args)
	out.wait(t, fmt.Sprintf("logged in as %d device cli-%d via %s", userB, userB, g0), 1, 20*time.Second)
	out.wait(t, "sync: nothing new", 1, 20*time.Second)

	before, err := a.Send(ctx, sendTo(userB, "mv-before", text(t, "before the move")))
	if err != nil {
		t.Fatal(err)
	}
	out.wait(t, fmt.Sprintf("#%s %d: before the move", before.MsgID, userA), 1, 20*time.Second)

	if err := c.Gates[0].Stop(); err != nil {
		t.Fatalf("SIGTERM gate 0: %v", err)
	}
	during, err := a.Send(ctx, sendTo(userB, "mv-during", text(t, "during the move")))
	if err != nil {
		t.Fatal(err)
	}
	out.wait(t, fmt.Sprintf("moved from gate %s to gate %s; syncing", g0, g1), 1, 30*time.Second)
	out.wait(t, fmt.Sprintf("logged in as %d device cli-%d via %s", userB, userB, g1), 1, 20*time.Second)
	out.wait(t, fmt.Sprintf("#%s %d: during the move", during.MsgID, userA), 1, 20*time.Second)

	after, err := a.Send(ctx, sendTo(userB, "mv-after", text(t, "after the move")))
	if err != nil {
		t.Fatal(err)
	}
	out.wait(t, fmt.Sprintf("#%s %d: after the move", after.MsgID, userA), 1, 20*time.Second)
	if _, err := io.WriteString(stdin, fmt.Sprintf("%d hello from gate 1\n", userA)); err != nil {
		t.Fatal(err)
	}
	out.wait(t, "sent msg_id=", 1, 20*time.Second)
	inOrder(t, out.String(), "KICK: server_shutdown", "moved from gate", "logged in as", "after the move", "sent msg_id=")
	for _, ack := range []protocol.SendAck{before, during, after} {
		if n := strings.Count(out.String(), fmt.Sprintf("#%s %d:", ack.MsgID, userA)); n != 1 {
			t.Fatalf("message %s shown %d times, want once:\n%s", ack.MsgID, n, out.String())
		}
	}
	if _, err := io.WriteString(stdin, "/quit\n"); err != nil {
		t.Fatal(err)
	}
	expectExit(t, exited)
}

// The client's SyncRunner against the real server with small pages: a
// device that was away gets every message once, the list matches the
// server's, and a runner restarted from its state file fetches only what
// came after.
func TestSyncRunnerCatchesUpWithSmallPages(t *testing.T) {
	t.Parallel()
	c := framework.NewCluster(t, framework.Options{Gates: 1, Partitions: 4})
	ctx := ctxT(t, 3*time.Minute)
	const userB, peers, each = 34000, 4, 5
	store := client.FileStateStore{Path: filepath.Join(t.TempDir(), "runner.json")}
	opts := client.SyncRunnerOptions{InboxLimit: 2, MessagesLimit: 2}
	probe := c.Login(t, 0, userB, "probe")

	sendRound := func(round int) map[int64]bool {
		sent := map[int64]bool{}
		for p := 1; p <= peers; p++ {
			pc := c.Login(t, 0, userB+int64(p), fmt.Sprintf("peer-%d", round))
			for k := 0; k < each; k++ {
				ack, err := pc.Send(ctx, sendTo(userB, fmt.Sprintf("sr-%d-%d-%d", round, p, k), text(t, fmt.Sprintf("round %d peer %d #%d", round, p, k))))
				if err != nil {
					t.Fatal(err)
				}
				sent[ack.MsgID.Int64()] = true
				if k == each-1 {
					waitList(t, ctx, probe, ack.ConversationID.Int64(), int64(each*(round+1)), ack.MsgID.Int64())
				}
			}
			_ = pc.Close()
		}
		return sent
	}
	check := func(res client.SyncResult, want map[int64]bool) {
		t.Helper()
		got := map[int64]bool{}
		for cid, ms := range res.Messages {
			for _, m := range ms {
				if got[m.MsgID.Int64()] || !want[m.MsgID.Int64()] || m.ConversationID.Int64() != cid {
					t.Fatalf("message %s of conversation %s: duplicate or not expected", m.MsgID, m.ConversationID)
				}
				got[m.MsgID.Int64()] = true
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%d messages, want %d", len(got), len(want))
		}
	}

	want := sendRound(0)
	b := c.Login(t, 0, userB, "b")
	r, err := client.NewSyncRunner(ctx, store, userB, "b", opts)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Sync(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	check(res, want)
	if len(res.Changed) != peers {
		t.Fatalf("%d conversations changed, want %d", len(res.Changed), peers)
	}
	_ = b.Close()

	want = sendRound(1)
	b = c.Login(t, 0, userB, "b")
	r, err = client.NewSyncRunner(ctx, store, userB, "b", opts)
	if err != nil {
		t.Fatal(err)
	}
	if res, err = r.Sync(ctx, b); err != nil {
		t.Fatal(err)
	}
	check(res, want)
	// The runner's list is the server's.
	p, err := probe.SyncInbox(ctx, "0", "0", 100)
	if err != nil {
		t.Fatal(err)
	}
	server := map[int64]client.Conversation{}
	for _, cv := range p.Conversations {
		server[cv.ConversationID.Int64()] = cv
	}
	for _, cv := range r.Conversations() {
		s := server[cv.ConversationID.Int64()]
		if cv.Unread != 2*each || cv.Unread != s.Unread || cv.LastMsgID != s.LastMsgID {
			t.Fatalf("conversation %s: unread %d last %s; server unread %d last %s", cv.ConversationID, cv.Unread, cv.LastMsgID, s.Unread, s.LastMsgID)
		}
		if st := r.State(); st.LastMsgIDs[cv.ConversationID.Int64()] != cv.LastMsgID {
			t.Fatalf("conversation %s: cursor %s, last %s", cv.ConversationID, st.LastMsgIDs[cv.ConversationID.Int64()], cv.LastMsgID)
		}
	}
	if len(r.Conversations()) != peers || len(server) != peers {
		t.Fatalf("runner has %d conversations, server %d, want %d", len(r.Conversations()), len(server), peers)
	}
	if res, err = r.Sync(ctx, b); err != nil || res.NewMessages() != 0 || len(res.Changed) != 0 {
		t.Fatalf("a sync with nothing new: %+v %v", res, err)
	}
}
