// Package store is logic's MySQL access (sqlx): users, P2P conversations,
// messages and the MsgId high-water marks. Every hot-path query is keyed by
// conversation_id or user_id.
package store

import (
	"context"
	"fmt"
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
func NormalizeDSN(dsn string) (string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("store: parse dsn: %w", err)
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

// ms converts a time to the DATETIME(3) value the schema stores (UTC, ms).
func ms(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }
