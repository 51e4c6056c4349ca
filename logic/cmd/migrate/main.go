// Command migrate applies the embedded schema migrations to logic's MySQL
// database (logic.mysql.dsn), creating the database if needed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sparkim/spark/logic/internal/migrate"
	"github.com/sparkim/spark/migrations"
	"github.com/sparkim/spark/pkg/config"
)

func main() {
	path := flag.String("config", "", "path of the YAML config (empty: defaults and IM_* environment)")
	flag.Parse()
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "migrate:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	applied, err := migrate.Up(ctx, cfg.Logic.MySQL.DSN, migrations.Files)
	for _, f := range applied {
		fmt.Printf("applied %s\n", f.Name)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "migrate:", err)
		os.Exit(1)
	}
	if len(applied) == 0 {
		fmt.Println("up to date")
	}
}
