package framework

import (
	"database/sql"
	"testing"
)

// TestGaleraThreeNodesReplicateAndSurviveTheWritersKill starts three
// nodes, writes on the first, reads the row on the third, kills the
// first and writes on the second: the two left keep a primary component.
func TestGaleraThreeNodesReplicateAndSurviveTheWritersKill(t *testing.T) {
	g := StartGalera(t, 3)
	open := func(i int) *sql.DB {
		db, err := sql.Open("mysql", g.Nodes[i].DSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	w, r := open(0), open(2)
	for _, q := range []string{"CREATE DATABASE g", "CREATE TABLE g.t (id INT PRIMARY KEY, v INT)", "INSERT INTO g.t VALUES (1, 10)"} {
		if _, err := w.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var v int
	if err := r.QueryRow("SELECT v FROM g.t WHERE id = 1").Scan(&v); err != nil || v != 10 {
		t.Fatalf("node 3 reads %d, %v; want 10", v, err)
	}
	if err := g.Nodes[0].Kill(); err != nil {
		t.Fatal(err)
	}
	w2 := open(1)
	if _, err := w2.Exec("INSERT INTO g.t VALUES (2, 20)"); err != nil {
		t.Fatalf("write on node 2 after the writer's kill: %v", err)
	}
	if err := r.QueryRow("SELECT v FROM g.t WHERE id = 2").Scan(&v); err != nil || v != 20 {
		t.Fatalf("node 3 reads %d, %v after the failover; want 20", v, err)
	}
	if n, err := g.ClusterSize(1); err != nil || n != 2 {
		t.Fatalf("cluster size %d, %v; want 2", n, err)
	}
}
