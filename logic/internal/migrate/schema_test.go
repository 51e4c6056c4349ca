package migrate_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/sparkim/spark/logic/internal/migrate"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/migrations"
)

// TestEmbeddedSchema applies the embedded migrations and checks what every
// file must keep true: each table and column has a COMMENT (the schema documents itself),
// every table is utf8mb4_bin, and the tables the code relies on exist.
func TestEmbeddedSchema(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := testenv.EmptyDatabase(t)
	if _, err := migrate.Up(ctx, dsn, migrations.Files); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	tables := map[string]bool{}
	rows, err := db.QueryContext(ctx, `SELECT table_name, table_comment, table_collation FROM information_schema.tables
WHERE table_schema = DATABASE()`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, comment, collation string
		if err := rows.Scan(&name, &comment, &collation); err != nil {
			t.Fatal(err)
		}
		tables[name] = true
		if comment == "" {
			t.Errorf("table %s has no COMMENT", name)
		}
		if collation != "utf8mb4_bin" {
			t.Errorf("table %s is %s, want utf8mb4_bin", name, collation)
		}
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"t_users", "t_conversations", "t_conversation_members", "t_messages", "t_mailbox_events", "t_mailbox_seqs", "t_groups"} {
		if !tables[want] {
			t.Errorf("table %s missing after the embedded migrations", want)
		}
	}

	rows, err = db.QueryContext(ctx, `SELECT table_name, column_name FROM information_schema.columns
WHERE table_schema = DATABASE() AND column_comment = ''`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var table, column string
		if err := rows.Scan(&table, &column); err != nil {
			t.Fatal(err)
		}
		t.Errorf("column %s.%s has no COMMENT", table, column)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}
