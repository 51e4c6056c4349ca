package framework

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// GaleraProvider is Debian galera-4's wsrep provider library.
const GaleraProvider = "/usr/lib/galera/libgalera_smm.so"

// Galera is a MariaDB Galera cluster on loopback: every node a private
// mariadbd with its own datadir, client port, group port, IST and SST
// ports, running as the mysql user (the rsync state transfer refuses
// root). Reads wait for the node to have applied every earlier write-set
// (wsrep_sync_wait=1), so a client that moves to another node after a
// commit reads its own write.
type Galera struct {
	Nodes []*MySQL
}

// StartGalera starts an n-node cluster: the first node bootstraps it, the
// others join by state transfer (rsync) one after another. It stops them
// when the test ends. Needs root (to start mariadbd as the mysql user),
// galera-4 and rsync.
func StartGalera(t testing.TB, n int) *Galera {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("a Galera cluster needs root to start mariadbd as the mysql user (the rsync state transfer refuses to run as root)")
	}
	if _, err := os.Stat(GaleraProvider); err != nil {
		t.Fatalf("galera provider: %v (apt-get install galera-4)", err)
	}
	if _, err := exec.LookPath("rsync"); err != nil {
		t.Fatalf("rsync: %v (apt-get install rsync)", err)
	}
	server, err := findBinary("mariadbd", "mysqld")
	if err != nil {
		t.Fatalf("no MariaDB server binary (apt-get install mariadb-server): %v", err)
	}
	installer, err := findBinary("mariadb-install-db", "mysql_install_db")
	if err != nil {
		t.Fatalf("no MariaDB datadir installer: %v", err)
	}
	mu, err := user.Lookup("mysql")
	if err != nil {
		t.Fatalf("no mysql user: %v", err)
	}
	uid, _ := strconv.Atoi(mu.Uid)
	gid, _ := strconv.Atoi(mu.Gid)
	// A short directory the mysql user can enter (a test's TempDir is
	// root's, mode 0700), removed at the end.
	root, err := os.MkdirTemp("", "spark-galera-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}

	type ports struct{ client, group, ist, sst int }
	ps := make([]ports, n)
	var members []string
	for i := range ps {
		ps[i] = ports{FreePort(t), FreePort(t), FreePort(t), FreePort(t)}
		members = append(members, "127.0.0.1:"+strconv.Itoa(ps[i].group))
	}
	g := &Galera{}
	for i, p := range ps {
		dir := filepath.Join(root, fmt.Sprintf("node%d", i+1))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		m := &MySQL{Port: p.client, Addr: "127.0.0.1:" + strconv.Itoa(p.client), DataDir: filepath.Join(dir, "data")}
		install := []string{"--no-defaults", "--datadir=" + m.DataDir, "--user=mysql",
			"--auth-root-authentication-method=normal", "--skip-test-db"}
		if out, err := exec.Command(installer, install...).CombinedOutput(); err != nil {
			t.Fatalf("%s node %d: %v\n%s", filepath.Base(installer), i+1, err, out)
		}
		args := []string{"--no-defaults", "--datadir=" + m.DataDir, "--user=mysql",
			"--bind-address=127.0.0.1", "--port=" + strconv.Itoa(p.client),
			"--socket=" + filepath.Join(dir, "mysql.sock"), "--pid-file=" + filepath.Join(dir, "mysql.pid"),
			"--skip-name-resolve", "--max-connections=500", "--performance-schema=OFF",
			"--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M", "--innodb-log-buffer-size=1M",
			"--innodb-flush-log-at-trx-commit=1",
			"--binlog-format=ROW", "--innodb-autoinc-lock-mode=2", "--default-storage-engine=InnoDB",
			"--wsrep-on=ON", "--wsrep-provider=" + GaleraProvider,
			"--wsrep-cluster-name=spark-test", "--wsrep-cluster-address=gcomm://" + strings.Join(members, ","),
			"--wsrep-node-name=node" + strconv.Itoa(i+1), "--wsrep-node-address=127.0.0.1:" + strconv.Itoa(p.group),
			"--wsrep-provider-options=base_port=" + strconv.Itoa(p.group) + ";ist.recv_addr=127.0.0.1:" + strconv.Itoa(p.ist) + ";gcache.size=64M",
			"--wsrep-sst-method=rsync", "--wsrep-sst-receive-address=127.0.0.1:" + strconv.Itoa(p.sst),
			"--wsrep-sync-wait=1",
		}
		if i == 0 {
			args = append(args, "--wsrep-new-cluster")
		}
		m.proc = NewProcess(t, fmt.Sprintf("galera-%d", i+1), server, args, nil)
		start := time.Now()
		if err := m.Start(); err != nil {
			t.Fatalf("galera node %d: %v", i+1, err)
		}
		if err := waitSynced(m, 60*time.Second); err != nil {
			t.Fatalf("galera node %d: %v\n%s", i+1, err, m.proc.Tail(30))
		}
		t.Logf("galera: node %d on %s synced in %v", i+1, m.Addr, time.Since(start).Round(time.Millisecond))
		g.Nodes = append(g.Nodes, m)
	}
	t.Cleanup(func() {
		for _, m := range g.Nodes {
			_ = m.Resume()
			_ = m.proc.Stop()
		}
	})
	return g
}

// waitSynced waits until the node reports itself Synced with the cluster
// (wsrep_local_state_comment), i.e. ready for writes and reads.
func waitSynced(m *MySQL, within time.Duration) error {
	db, err := sql.Open("mysql", m.DSN())
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var state string
	for ctx.Err() == nil {
		var name string
		if err := db.QueryRowContext(ctx, "SHOW STATUS LIKE 'wsrep_local_state_comment'").Scan(&name, &state); err == nil && state == "Synced" {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("not Synced within %v (state %q)", within, state)
}

// ClusterSize is the number of nodes in the primary component, as node i
// sees it.
func (g *Galera) ClusterSize(i int) (int, error) {
	db, err := sql.Open("mysql", g.Nodes[i].DSN())
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var name, v string
	if err := db.QueryRow("SHOW STATUS LIKE 'wsrep_cluster_size'").Scan(&name, &v); err != nil {
		return 0, err
	}
	return strconv.Atoi(v)
}
