// Command imgalera starts a private MariaDB Galera cluster on loopback
// (tests/framework.StartGalera: three nodes, the first bootstrapping,
// wsrep_sync_wait=1), prints the first node's server DSN as one line on
// stdout once every node is synced, and stops the nodes on SIGTERM or
// SIGINT. make test-galera runs the store, logic and e2e suites against
// it (deploy/galera/test-galera.sh). Needs root, galera-4 and rsync.
//
//	go run ./tests/cmd/imgalera -nodes 3
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sparkim/spark/tests/framework"
)

func main() {
	nodes := flag.Int("nodes", 3, "nodes in the cluster")
	flag.Parse()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "imgalera: "+format+"\n", args...) }
	tb := framework.NewCommandTB("imgalera", logf)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	started := make(chan *framework.Galera, 1)
	go func() {
		// Fatal ends this goroutine, as it ends a test.
		defer close(started)
		started <- framework.StartGalera(tb, *nodes)
	}()
	g, ok := <-started
	if !ok || tb.Failed() {
		tb.RunCleanups()
		fmt.Fprintln(os.Stderr, "imgalera: the cluster did not start:", tb.Failure())
		os.Exit(1)
	}
	for i, n := range g.Nodes {
		logf("node %d on %s", i+1, n.Addr)
	}
	fmt.Println(g.Nodes[0].DSN())
	<-stop
	tb.RunCleanups()
}
