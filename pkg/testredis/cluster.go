package testredis

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterMasters is how many masters a test Redis Cluster has: three is
// the fewest a Redis Cluster is built with, and enough that keys of
// one operation land on different nodes unless they share a hash tag.
const ClusterMasters = 3

// ClusterNodeArgs are the redis-server arguments of one cluster node on
// loopback: port for clients, busPort for the cluster bus (Redis ≥ 7;
// the default port+10000 may be out of range or taken), its nodes.conf
// and data in dir. The node timeout is short so a stopped node is noticed
// within a test's patience.
func ClusterNodeArgs(port, busPort int, dir string) []string {
	return []string{
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
		"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(busPort),
		"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
		"--cluster-node-timeout", "3000", "--save", "", "--loglevel", "warning",
	}
}

// FreePorts returns n distinct loopback ports that were free a moment ago.
func FreePorts(n int) ([]int, error) {
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// CreateCluster joins the empty cluster-enabled servers at addrs into one
// cluster of masters without replicas, the 16384 slots spread evenly in
// address order, and waits until every node reports cluster_state:ok.
// It does what redis-cli --cluster create does, without that tool's
// whole-second waits: every e2e test on a cluster forms one, and those
// waits cost about 3 s a test.
func CreateCluster(ctx context.Context, addrs []string) error {
	const slots = 16384
	clients := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		clients[i] = redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		defer clients[i].Close()
	}
	for i, c := range clients {
		lo, hi := i*slots/len(addrs), (i+1)*slots/len(addrs)-1
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return fmt.Errorf("redis cluster: slots %d-%d to %s: %w", lo, hi, addrs[i], err)
		}
		// Distinct epochs up front, as redis-cli sets them, so the nodes
		// need no epoch collision round before they agree.
		if err := c.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("redis cluster: config epoch of %s: %w", addrs[i], err)
		}
	}
	// Every node meets every other one, so none waits for gossip to learn
	// of a third.
	for i, c := range clients {
		for j, a := range addrs {
			if i == j {
				continue
			}
			host, port, err := net.SplitHostPort(a)
			if err != nil {
				return fmt.Errorf("redis cluster: address %s: %w", a, err)
			}
			bus, err := clients[j].ConfigGet(ctx, "cluster-port").Result()
			if err != nil {
				return fmt.Errorf("redis cluster: bus port of %s: %w", a, err)
			}
			args := []any{"CLUSTER", "MEET", host, port}
			if b := bus["cluster-port"]; b != "" && b != "0" {
				args = append(args, b)
			}
			if err := c.Do(ctx, args...).Err(); err != nil {
				return fmt.Errorf("redis cluster: %s meets %s: %w", addrs[i], a, err)
			}
		}
	}
	return WaitClusterOK(ctx, addrs)
}

// WaitClusterOK waits until every node at addrs answers CLUSTER INFO with
// cluster_state:ok and knows all len(addrs) nodes: only then does each
// one route every slot, so a client may start. It is also what a test
// waits for after restarting the nodes.
func WaitClusterOK(ctx context.Context, addrs []string) error {
	want := "cluster_known_nodes:" + strconv.Itoa(len(addrs))
	var last string
	for {
		ok := true
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
			info, err := c.ClusterInfo(ctx).Result()
			_ = c.Close()
			if err != nil {
				ok, last = false, fmt.Sprintf("%s: %v", a, err)
				break
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, want) {
				ok, last = false, a+": "+strings.Join(strings.Fields(info)[:min(6, len(strings.Fields(info)))], " ")
				break
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis cluster %s not ok: %w (last: %s)", strings.Join(addrs, " "), ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// StartCluster starts a private Redis Cluster of ClusterMasters masters on
// loopback for one test and returns its node addresses; the nodes are
// killed when the test ends. Unit tests use it to run the scripts and
// pipelines they check against a cluster too, where every key of a script
// must hash to one slot. A missing redis-server fails the test.
func StartCluster(t testing.TB) []string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found (make services installs it): %v", err)
	}
	ports, err := FreePorts(2 * ClusterMasters)
	if err != nil {
		t.Fatal(err)
	}
	addrs := make([]string, 0, ClusterMasters)
	for i := range ClusterMasters {
		dir := t.TempDir()
		port, bus := ports[2*i], ports[2*i+1]
		var out bytes.Buffer
		cmd := exec.Command(bin, ClusterNodeArgs(port, bus, dir)...)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatalf("start redis cluster node: %v", err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() && out.Len() > 0 {
				t.Logf("redis cluster node %d output:\n%s", port, out.String())
			}
		})
		addr := "127.0.0.1:" + strconv.Itoa(port)
		if err := waitPing(addr, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := CreateCluster(ctx, addrs); err != nil {
		t.Fatal(err)
	}
	return addrs
}

// OpenCluster starts a private cluster (StartCluster) and returns a
// cluster client of it, closed when the test ends.
func OpenCluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: StartCluster(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func waitPing(addr string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	var err error
	for ctx.Err() == nil {
		if err = c.Ping(ctx).Err(); err == nil {
			return nil
		}
		time.Sleep(30 * time.Millisecond)
	}
	return fmt.Errorf("redis on %s did not answer PING within %v: %v", addr, within, err)
}

// Masters returns how many distinct masters of rdb's cluster hold keys,
// so a cluster test can show its keys did not all land on one node.
func Masters(ctx context.Context, rdb *redis.ClusterClient, keys ...string) (int, error) {
	seen := map[string]bool{}
	for _, k := range keys {
		m, err := rdb.MasterForKey(ctx, k)
		if err != nil {
			return 0, fmt.Errorf("master of %s: %w", k, err)
		}
		seen[m.Options().Addr] = true
	}
	return len(seen), nil
}
