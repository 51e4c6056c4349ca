// Package migrate applies the embedded schema files (migrations.Files) to
// MySQL in name order, each once, recording them in t_schema_migrations.
package migrate

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"time"

	_ "github.com/go-sql-driver/mysql" // driver

	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/pkg/retry"
)

// LockName is the MySQL advisory lock held while migrating, so two migrate
// runs never interleave.
const LockName = "spark_migrate"

const createTable = `CREATE TABLE IF NOT EXISTS t_schema_migrations (
    version     INT          NOT NULL PRIMARY KEY COMMENT 'number prefix of the migration file',
    name        VARCHAR(255) NOT NULL COMMENT 'file name of the migration',
    checksum    CHAR(64)     NOT NULL COMMENT 'SHA-256 (hex) of the file as applied',
    applied_at  DATETIME(3)  NOT NULL COMMENT 'when the migration was applied'
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='schema migrations applied to this database'`

var fileRe = regexp.MustCompile(`^(\d{4})_[A-Za-z0-9_.-]+\.sql$`)

// File is one migration file.
type File struct {
	Version  int
	Name     string
	Checksum string
	SQL      string
	// Replaces are the checksums of earlier forms of the file that a
	// database may have applied: the file names them in lines
	// "-- replaces-checksum: <sha256 hex>" when it was rewritten into an
	// equivalent form (the same schema, statements another engine also
	// runs). A database that applied one of them is up to date, and its
	// record takes the new checksum.
	Replaces []string
}

// replacesRe matches a file's declaration of an earlier form it replaces.
var replacesRe = regexp.MustCompile(`(?m)^-- replaces-checksum: ([0-9a-f]{64})\s*$`)

// lockRetry asks again for the migration lock while the engine answers a
// lock conflict, for up to about a minute.
var lockRetry = retry.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2, Jitter: true,
	Attempts: 40, Retryable: store.IsRetryable}

// ErrChecksum reports an applied migration whose file changed since.
var ErrChecksum = errors.New("migrate: checksum mismatch")

// Load reads the migration files of fsys (top level, NNNN_*.sql), sorted.
func Load(fsys fs.FS) ([]File, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("migrate: list files: %w", err)
	}
	var out []File
	seen := map[int]string{}
	for _, e := range entries {
		m := fileRe.FindStringSubmatch(e.Name())
		if e.IsDir() || m == nil {
			continue
		}
		v, _ := strconv.Atoi(m[1])
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrate: %s and %s share version %d", prev, e.Name(), v)
		}
		seen[v] = e.Name()
		b, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("migrate: read %s: %w", e.Name(), err)
		}
		sum := sha256.Sum256(b)
		f := File{Version: v, Name: e.Name(), Checksum: hex.EncodeToString(sum[:]), SQL: string(b)}
		for _, m := range replacesRe.FindAllStringSubmatch(f.SQL, -1) {
			f.Replaces = append(f.Replaces, m[1])
		}
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Up creates the database of dsn if needed and applies every migration of
// fsys not applied yet. It returns the files it applied (none when the
// schema is up to date). A changed checksum of an applied file is an error.
func Up(ctx context.Context, dsn string, fsys fs.FS) ([]File, error) {
	files, err := Load(fsys)
	if err != nil {
		return nil, err
	}
	if err := EnsureDatabase(ctx, dsn); err != nil {
		return nil, err
	}
	mdsn, err := withMultiStatements(dsn)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("mysql", mdsn)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	defer db.Close()
	// GET_LOCK is per session: keep everything on one connection.
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: connect: %w", err)
	}
	defer conn.Close()
	var got sql.NullInt64
	// TiDB answers a GET_LOCK that contends with another session's as a
	// lock conflict (1105 "pessimistic lock retry limit reached") where
	// MySQL waits: asked again, as every store retry does.
	if err := retry.Do(ctx, lockRetry, func(ctx context.Context) error {
		return conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 30)", LockName).Scan(&got)
	}); err != nil {
		return nil, fmt.Errorf("migrate: GET_LOCK: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		return nil, fmt.Errorf("migrate: another migration holds lock %q", LockName)
	}
	defer func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK(?)", LockName)
	}()
	if _, err := conn.ExecContext(ctx, createTable); err != nil {
		return nil, fmt.Errorf("migrate: create t_schema_migrations: %w", err)
	}
	applied := map[int]string{}
	rows, err := conn.QueryContext(ctx, "SELECT version, checksum FROM t_schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("migrate: read t_schema_migrations: %w", err)
	}
	for rows.Next() {
		var v int
		var sum string
		if err := rows.Scan(&v, &sum); err != nil {
			rows.Close()
			return nil, fmt.Errorf("migrate: read t_schema_migrations: %w", err)
		}
		applied[v] = sum
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("migrate: read t_schema_migrations: %w", err)
	}
	var done []File
	for _, f := range files {
		if sum, ok := applied[f.Version]; ok {
			switch {
			case sum == f.Checksum:
			case slices.Contains(f.Replaces, sum):
				// Applied in an earlier, equivalent form: the schema is
				// the same, so only the record moves to the file as it is.
				if _, err := conn.ExecContext(ctx, "UPDATE t_schema_migrations SET checksum = ? WHERE version = ? AND checksum = ?",
					f.Checksum, f.Version, sum); err != nil {
					return done, fmt.Errorf("migrate: record %s's new form: %w", f.Name, err)
				}
			default:
				return done, fmt.Errorf("%w: %s was applied with checksum %s, the file now has %s", ErrChecksum, f.Name, sum, f.Checksum)
			}
			continue
		}
		if _, err := conn.ExecContext(ctx, f.SQL); err != nil {
			return done, fmt.Errorf("migrate: apply %s: %w", f.Name, err)
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO t_schema_migrations (version, name, checksum, applied_at) VALUES (?, ?, ?, ?)",
			f.Version, f.Name, f.Checksum, time.Now().UTC().Truncate(time.Millisecond)); err != nil {
			return done, fmt.Errorf("migrate: record %s: %w", f.Name, err)
		}
		done = append(done, f)
	}
	return done, nil
}
