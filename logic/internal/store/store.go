// Package store is logic's MySQL access (sqlx): users, P2P conversations,
// messages and the MsgId high-water marks. Every hot-path query is keyed by
// conversation_id or user_id.
package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
)

// Store wraps the database.
type Store struct {
	db *sqlx.DB
	// webhookIDs issues t_webhook_events ids; nil: no events recorded.
	webhookIDs func(context.Context) (int64, error)
}

// New wraps an open database.
func New(db *sqlx.DB) *Store { return &Store{db: db} }

// DB returns the underlying database.
func (s *Store) DB() *sqlx.DB { return s.db }

// NormalizeDSN turns on what the store relies on: interpolateParams (one
// round trip per statement), multiStatements (several statements in one
// round trip: the group commit's two, decision 92; every argument is
// still escaped by interpolateParams), parseTime, and UTC.
//
// It refuses session settings that would break the store's guarantees: an
// isolation level other than REPEATABLE READ (a READ UNCOMMITTED sync
// would see messages that roll back; the read rules are written for
// snapshot reads) and autocommit off (a single statement would stay
// uncommitted, holding its locks, until the connection closes).
func NormalizeDSN(dsn string) (string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("store: parse dsn: %w", err)
	}
	for k, v := range cfg.Params {
		val := strings.ToUpper(strings.Trim(v, "'\""))
		switch strings.ToLower(k) {
		case "transaction_isolation", "tx_isolation":
			if val != IsolationRequired {
				return "", fmt.Errorf("store: dsn sets %s=%s; Spark runs only at %s (docs/operations.md, \"Database engines\")", k, v, IsolationRequired)
			}
		case "autocommit":
			if val != "1" && val != "TRUE" && val != "ON" {
				return "", fmt.Errorf("store: dsn sets autocommit=%s; Spark needs autocommit on", v)
			}
		}
	}
	cfg.InterpolateParams = true
	cfg.MultiStatements = true
	cfg.ParseTime = true
	if cfg.Loc == nil {
		cfg.Loc = time.UTC
	}
	return cfg.FormatDSN(), nil
}

// Open opens (without connecting) a pool for dsn.
func Open(dsn string, maxOpen, maxIdle int) (*sqlx.DB, error) {
	n, err := NormalizeDSN(dsn)
	if err != nil {
		return nil, err
	}
	db, err := sqlx.Open("mysql", n)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if maxOpen > 0 {
		db.SetMaxOpenConns(maxOpen)
	}
	if maxIdle > 0 {
		db.SetMaxIdleConns(maxIdle)
	}
	db.SetConnMaxLifetime(30 * time.Minute)
	db.SetConnMaxIdleTime(5 * time.Minute)
	return db, nil
}

// Ping checks the database is reachable.
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// IsolationRequired is the transaction isolation the store is written
// for, as the server names it.
const IsolationRequired = "REPEATABLE-READ"

// ErrIsolation is a server whose sessions run at another isolation level.
var ErrIsolation = errors.New("store: wrong transaction isolation")

// CheckIsolation asks the server the isolation its sessions get (the
// server's default, or the DSN's) and refuses any other than
// REPEATABLE-READ: MySQL 8 and MariaDB 11.1+ name the variable
// transaction_isolation, older MariaDB tx_isolation; TiDB has both.
func (s *Store) CheckIsolation(ctx context.Context) error {
	var level string
	err := s.db.QueryRowContext(ctx, "SELECT @@SESSION.transaction_isolation").Scan(&level)
	if err != nil {
		if err2 := s.db.QueryRowContext(ctx, "SELECT @@SESSION.tx_isolation").Scan(&level); err2 != nil {
			return fmt.Errorf("store: read the session isolation: %w", err)
		}
	}
	if !strings.EqualFold(level, IsolationRequired) {
		return fmt.Errorf("%w: the server gives sessions %s; Spark runs only at %s (set transaction_isolation on the server, or leave it at its default)",
			ErrIsolation, level, IsolationRequired)
	}
	return nil
}

// ms converts a time to the DATETIME(3) value the schema stores (UTC, ms).
func ms(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }
