// Package testenv gives tests a fresh MySQL database (migrated, dropped at
// the end) and a client of the test binary's private Redis (pkg/testredis).
// Tests fail, never skip, when a server is unreachable or does not start:
// a skipped test passes in CI without checking anything.
// SPARK_TEST_MYSQL_DSN overrides the local MySQL.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/logic/internal/clientwire"
	"github.com/sparkim/spark/logic/internal/message"
	"github.com/sparkim/spark/logic/internal/migrate"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/migrations"
	"github.com/sparkim/spark/pkg/protocol"
	"github.com/sparkim/spark/pkg/testredis"
)

// DefaultMySQLDSN is the test MySQL server when SPARK_TEST_MYSQL_DSN is
// unset.
const DefaultMySQLDSN = "root@tcp(127.0.0.1:3306)/?parseTime=true&loc=UTC"

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// RandomName returns prefix plus 12 random hex characters.
func RandomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// EmptyDatabase returns the DSN of a fresh, empty database spark_t_<random>
// that is dropped when the test ends.
func EmptyDatabase(t testing.TB) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(env("SPARK_TEST_MYSQL_DSN", DefaultMySQLDSN))
	if err != nil {
		t.Fatalf("SPARK_TEST_MYSQL_DSN: %v", err)
	}
	cfg.DBName = ""
	root, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := root.PingContext(ctx); err != nil {
		root.Close()
		t.Fatalf("test MySQL unreachable at %s (set SPARK_TEST_MYSQL_DSN, or run `make services`): %v", cfg.Addr, err)
	}
	name := RandomName("spark_t_")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = root.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`")
		root.Close()
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}

// MySQL returns a migrated fresh database: its DSN and an open pool.
func MySQL(t testing.TB) (string, *sqlx.DB) {
	t.Helper()
	dsn := EmptyDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := migrate.Up(ctx, dsn, migrations.Files); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	db, err := store.Open(dsn, 64, 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return dsn, db
}

// RandomUserID returns a random positive user id, so tests sharing Redis
// never touch each other's keys.
func RandomUserID() int64 {
	n, _ := rand.Int(rand.Reader, big.NewInt(1<<50))
	return n.Int64() + 1
}

// Redis returns a client of the test binary's private Redis
// (testredis.Open). Tests still use random ids: a package's own tests
// share it.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	return testredis.Open(t)
}

// Wire decodes a client request body into its typed request the way the
// gateway adapter does: tests write bodies as JSON, the domain services
// take the typed form. A body that does not decode is a mistake in the
// test, so it panics.
func Wire[T any](b []byte) T {
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		panic(fmt.Sprintf("test body %s does not decode into %T: %v", b, v, err))
	}
	return v
}

// SendRequest is Wire for SEND_MESSAGE bodies.
func SendRequest(b []byte) message.SendRequest {
	return clientwire.SendRequest(Wire[protocol.SendRequest](b))
}
