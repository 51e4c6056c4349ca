// Package testenv gives tests a fresh MySQL database (migrated, dropped at
// the end) and a Redis client on a non-zero DB index. Tests skip when the
// servers are unreachable. SPARK_TEST_MYSQL_DSN and SPARK_TEST_REDIS_ADDR
// override the local defaults.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"math/big"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/sparkim/spark/logic/internal/migrate"
	"github.com/sparkim/spark/logic/internal/store"
	"github.com/sparkim/spark/migrations"
)

// Defaults of the test servers.
const (
	DefaultMySQLDSN  = "root@tcp(127.0.0.1:3306)/?parseTime=true&loc=UTC"
	DefaultRedisAddr = "127.0.0.1:6379"
)

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
		t.Skipf("MySQL unreachable at %s (set SPARK_TEST_MYSQL_DSN): %v", cfg.Addr, err)
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

// Redis returns a client on a random DB index 1..15 (never 0). Keys are
// shared with other tests on the machine: use random ids.
func Redis(t testing.TB) *redis.Client {
	t.Helper()
	n, _ := rand.Int(rand.Reader, big.NewInt(15))
	return RedisDB(t, int(n.Int64())+1)
}

// RandomUserID returns a random positive user id, so tests sharing Redis
// never touch each other's keys.
func RandomUserID() int64 {
	n, _ := rand.Int(rand.Reader, big.NewInt(1<<50))
	return n.Int64() + 1
}

// RedisDB returns a client on Redis DB index db, for tests that want a DB
// distinct from the random ones (they still must use random ids).
func RedisDB(t testing.TB, db int) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: env("SPARK_TEST_REDIS_ADDR", DefaultRedisAddr), DB: db})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		t.Skipf("Redis unreachable (set SPARK_TEST_REDIS_ADDR): %v", err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}
