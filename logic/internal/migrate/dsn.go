package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// EnsureDatabase creates the database named in dsn if it does not exist,
// connecting without a database name first.
func EnsureDatabase(ctx context.Context, dsn string) error {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return fmt.Errorf("migrate: parse dsn: %w", err)
	}
	name := cfg.DBName
	if name == "" {
		return fmt.Errorf("migrate: the dsn names no database")
	}
	if strings.ContainsAny(name, "`\x00") {
		return fmt.Errorf("migrate: bad database name %q", name)
	}
	cfg.DBName = ""
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS `"+name+"` DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		return fmt.Errorf("migrate: create database %s: %w", name, err)
	}
	return nil
}

// withMultiStatements returns dsn with multiStatements and parseTime on.
func withMultiStatements(dsn string) (string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("migrate: parse dsn: %w", err)
	}
	cfg.MultiStatements = true
	cfg.ParseTime = true
	return cfg.FormatDSN(), nil
}
