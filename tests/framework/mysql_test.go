package framework

import (
	"context"
	"database/sql"
	"testing"
	"time"
)

// TestPrivateMySQLKeepsCommittedRowsAcrossStopAndKill checks what the
// outage tests rely on: the private server answers on its DSN, refuses
// while stopped, and comes back on the same port with every committed row
// after both a clean stop and a kill -9.
func TestPrivateMySQLKeepsCommittedRowsAcrossStopAndKill(t *testing.T) {
	m := StartMySQL(t)
	db, err := sql.Open("mysql", m.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		"CREATE DATABASE keep", "CREATE TABLE keep.t (id INT PRIMARY KEY)", "INSERT INTO keep.t VALUES (1)",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, tc := range []struct {
		name string
		down func() error
		row  int
	}{
		{"stop", m.Stop, 2},
		{"kill", m.Kill, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.down(); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if m.Running() {
				t.Fatal("server still running after " + tc.name)
			}
			if err := db.Ping(); err == nil {
				t.Fatal("ping succeeded while the server is down")
			}
			if err := m.Start(); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec("INSERT INTO keep.t VALUES (?)", tc.row); err != nil {
				t.Fatalf("insert after restart: %v", err)
			}
			var n int
			if err := db.QueryRow("SELECT COUNT(*) FROM keep.t").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != tc.row {
				t.Fatalf("rows after %s and restart = %d, want %d", tc.name, n, tc.row)
			}
		})
	}
}

// TestPrivateMySQLPauseHangsQueriesUntilResume checks the hung-server mode:
// while paused a query gets no answer (its context ends it), and after
// Resume the same pool answers again.
func TestPrivateMySQLPauseHangsQueriesUntilResume(t *testing.T) {
	m := StartMySQL(t)
	db, err := sql.Open("mysql", m.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	err = db.QueryRowContext(ctx, "SELECT 1").Scan(new(int))
	cancel()
	if err == nil {
		t.Fatal("a paused server answered")
	}
	if err := m.Resume(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.QueryRowContext(ctx, "SELECT 1").Scan(new(int)); err != nil {
		t.Fatalf("after Resume: %v", err)
	}
}
