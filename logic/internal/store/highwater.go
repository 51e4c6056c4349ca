package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/jmoiron/sqlx"
)

// HighWater is msgid.HighWater on t_msgid_machines. It should use its own
// small pool: it is called while a send transaction holds a connection of
// the main pool.
type HighWater struct {
	db *sqlx.DB
}

// NewHighWater returns a HighWater on db.
func NewHighWater(db *sqlx.DB) *HighWater { return &HighWater{db: db} }

// LoadHighWater returns the stored mark of machineID (0 when none).
func (h *HighWater) LoadHighWater(ctx context.Context, machineID int) (int64, error) {
	var v int64
	err := h.db.GetContext(ctx, &v, "SELECT high_water_ms FROM t_msgid_machines WHERE machine_id = ?", machineID)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return v, err
}

// StoreHighWater raises the stored mark of machineID to unixMs (never
// lowers it).
func (h *HighWater) StoreHighWater(ctx context.Context, machineID int, unixMs int64) error {
	_, err := h.db.ExecContext(ctx, `INSERT INTO t_msgid_machines (machine_id, high_water_ms, updated_at) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE high_water_ms = GREATEST(high_water_ms, VALUES(high_water_ms)), updated_at = VALUES(updated_at)`,
		machineID, unixMs, ms(time.Now()))
	return err
}
