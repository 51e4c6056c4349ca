package migrate_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"testing"
	"testing/fstest"
	"time"

	"github.com/sparkim/spark/logic/internal/migrate"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/migrations"
)

func TestLoad(t *testing.T) {
	tests := []struct {
		name    string
		fs      fstest.MapFS
		want    []string
		wantErr bool
	}{
		{"sorted by version", fstest.MapFS{"0002_b.sql": {Data: []byte("b")}, "0001_a.sql": {Data: []byte("a")}}, []string{"0001_a.sql", "0002_b.sql"}, false},
		{"other files ignored", fstest.MapFS{"0001_a.sql": {Data: []byte("a")}, "embed.go": {}, "README.md": {}, "1_x.sql": {}}, []string{"0001_a.sql"}, false},
		{"duplicate version", fstest.MapFS{"0001_a.sql": {}, "0001_b.sql": {}}, nil, true},
		{"embedded files", nil, []string{"0001_init.sql"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var files []migrate.File
			var err error
			if tt.fs == nil {
				files, err = migrate.Load(migrations.Files)
			} else {
				files, err = migrate.Load(tt.fs)
			}
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if tt.fs == nil {
				if len(files) == 0 || files[0].Name != tt.want[0] {
					t.Fatalf("embedded: got %v", files)
				}
				return
			}
			if len(files) != len(tt.want) {
				t.Fatalf("got %d files, want %v", len(files), tt.want)
			}
			for i, f := range files {
				if f.Name != tt.want[i] {
					t.Errorf("file %d = %s, want %s", i, f.Name, tt.want[i])
				}
			}
		})
	}
}

func TestUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v1 := fstest.MapFS{
		"0001_a.sql": {Data: []byte("CREATE TABLE t_a (id INT NOT NULL PRIMARY KEY COMMENT 'id') COMMENT='a';\nINSERT INTO t_a VALUES (1);")},
		"0002_b.sql": {Data: []byte("CREATE TABLE t_b (id INT NOT NULL PRIMARY KEY COMMENT 'id') COMMENT='b';")},
	}
	v2 := fstest.MapFS{"0001_a.sql": v1["0001_a.sql"], "0002_b.sql": v1["0002_b.sql"],
		"0003_c.sql": {Data: []byte("ALTER TABLE t_b ADD COLUMN n INT NOT NULL DEFAULT 0 COMMENT 'n';")}}
	changed := fstest.MapFS{"0001_a.sql": {Data: []byte("CREATE TABLE t_a (id BIGINT NOT NULL PRIMARY KEY);")}, "0002_b.sql": v1["0002_b.sql"]}
	// 0003 rewritten in an equivalent form that names the form applied.
	sum := sha256.Sum256(v2["0003_c.sql"].Data)
	rewritten := fstest.MapFS{"0001_a.sql": v1["0001_a.sql"], "0002_b.sql": v1["0002_b.sql"],
		"0003_c.sql": {Data: []byte("-- replaces-checksum: " + hex.EncodeToString(sum[:]) + "\nALTER TABLE t_b ADD COLUMN n INT NOT NULL DEFAULT 0 COMMENT 'n';\n")}}
	other := sha256.Sum256([]byte("another file"))
	wrongClaim := fstest.MapFS{"0001_a.sql": v1["0001_a.sql"], "0002_b.sql": v1["0002_b.sql"],
		"0003_c.sql": {Data: []byte("-- replaces-checksum: " + hex.EncodeToString(other[:]) + "\nALTER TABLE t_b ADD COLUMN n INT NOT NULL DEFAULT 0 COMMENT 'n';")}}

	dsn := testenv.EmptyDatabase(t) // Up creates it
	steps := []struct {
		name    string
		fs      fstest.MapFS
		applied []string
		err     error
	}{
		{"first run applies all in order", v1, []string{"0001_a.sql", "0002_b.sql"}, nil},
		{"second run is a no-op", v1, nil, nil},
		{"a new file is applied alone", v2, []string{"0003_c.sql"}, nil},
		{"changed applied file is an error", changed, nil, migrate.ErrChecksum},
		{"a rewrite naming another form is an error", wrongClaim, nil, migrate.ErrChecksum},
		{"a rewrite naming the applied form applies nothing", rewritten, nil, nil},
		{"and its record now has the new form's checksum", rewritten, nil, nil},
		{"so the old form is now a changed file", v2, nil, migrate.ErrChecksum},
	}
	for _, st := range steps {
		got, err := migrate.Up(ctx, dsn, st.fs)
		if st.err != nil {
			if !errors.Is(err, st.err) {
				t.Fatalf("%s: err = %v, want %v", st.name, err, st.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		var names []string
		for _, f := range got {
			names = append(names, f.Name)
		}
		if len(names) != len(st.applied) {
			t.Fatalf("%s: applied %v, want %v", st.name, names, st.applied)
		}
		for i := range names {
			if names[i] != st.applied[i] {
				t.Fatalf("%s: applied %v, want %v", st.name, names, st.applied)
			}
		}
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM t_a").Scan(&n); err != nil || n != 1 {
		t.Fatalf("t_a rows = %d (%v), want 1: a migration ran twice?", n, err)
	}
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM t_schema_migrations").Scan(&n); err != nil || n != 3 {
		t.Fatalf("t_schema_migrations rows = %d (%v), want 3", n, err)
	}
}

func TestUpEmbedded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := testenv.EmptyDatabase(t)
	for i, want := range []int{1, 0} {
		got, err := migrate.Up(ctx, dsn, migrations.Files)
		if err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
		if len(got) < want || (want == 0 && len(got) != 0) {
			t.Fatalf("run %d applied %d files", i+1, len(got))
		}
	}
}

// TestEmbeddedComments holds the schema to one rule: every table and
// column the embedded migrations create carries a COMMENT, so the schema
// documents itself in the database too.
func TestEmbeddedComments(t *testing.T) {
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
	queries := []struct {
		what, q string
	}{
		{"table", "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_COMMENT = ''"},
		{"column", "SELECT CONCAT(TABLE_NAME, '.', COLUMN_NAME) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND COLUMN_COMMENT = ''"},
	}
	for _, qq := range queries {
		rows, err := db.QueryContext(ctx, qq.q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				t.Fatal(err)
			}
			t.Errorf("%s %s has no COMMENT", qq.what, name)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
}
