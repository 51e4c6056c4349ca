// Package logging builds the zap logger every process uses: JSON lines on
// stderr. Fields name ids (user_id, device_id, conn_id, real_ip, command,
// conversation_id, msg_id); never content, tokens or passwords.
package logging

import (
	"fmt"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New returns a logger at level ("debug", "info", "warn", "error") with the
// process name as a field.
func New(level, process string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("logging: %w", err)
	}
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.Sampling = nil
	cfg.EncoderConfig.TimeKey = "ts"
	cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	cfg.DisableStacktrace = true
	l, err := cfg.Build()
	if err != nil {
		return nil, fmt.Errorf("logging: %w", err)
	}
	return l.With(zap.String("process", process)), nil
}
