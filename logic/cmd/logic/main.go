// Command logic is the logic process: the Gateway streams from the gates,
// the business Api, MySQL and the deliver-queue producer.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"github.com/sparkim/spark/logic/internal/server"
	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/pkg/logging"
	"github.com/sparkim/spark/pkg/tracing"
)

func main() {
	path := flag.String("config", "", "path of the YAML config (empty: defaults and IM_* environment)")
	flag.Parse()
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "logic:", err)
		os.Exit(2)
	}
	log, err := logging.New(cfg.Log.Level, "logic")
	if err != nil {
		fmt.Fprintln(os.Stderr, "logic:", err)
		os.Exit(2)
	}
	defer func() { _ = log.Sync() }()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	stopTracing, err := tracing.Start(ctx, cfg.Tracing, "spark-logic")
	if err != nil {
		log.Error("logic failed", zap.Error(err))
		_ = log.Sync()
		os.Exit(1)
	}
	err = server.Run(ctx, cfg, log)
	tracing.Stop(stopTracing)
	if err != nil {
		log.Error("logic failed", zap.Error(err))
		_ = log.Sync()
		os.Exit(1)
	}
}
