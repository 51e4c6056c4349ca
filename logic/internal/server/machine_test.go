package server_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sparkim/spark/logic/internal/server"
	"github.com/sparkim/spark/logic/internal/testenv"
	"github.com/sparkim/spark/pkg/rediskey"
)

// Two logic processes configured with logic.machine_id -1 lease two
// different free machine ids from Redis, hold them while they run and
// release them when they stop.
func TestRunWithAutoMachineIDLeasesDistinctFreeIDsAndReleasesThem(t *testing.T) {
	rdb := testenv.Redis(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type proc struct {
		done    chan error
		logs    *observer.ObservedLogs
		machine int
	}
	procs := make([]*proc, 2)
	for i := range procs {
		cfg := testConfig(t)
		cfg.Logic.MachineID = server.AutoMachineID
		core, logs := observer.New(zap.InfoLevel)
		p := &proc{done: make(chan error, 1), logs: logs, machine: -1}
		go func() { p.done <- server.Run(ctx, cfg, zap.New(core)) }()
		procs[i] = p
	}
	for i, p := range procs {
		for deadline := time.Now().Add(15 * time.Second); p.machine < 0; time.Sleep(20 * time.Millisecond) {
			for _, e := range p.logs.FilterMessage("ready to serve").All() {
				if id, ok := e.ContextMap()["machine_id"].(int64); ok {
					p.machine = int(id)
				}
			}
			select {
			case err := <-p.done:
				t.Fatalf("process %d returned before ready: %v", i, err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("process %d: no ready line", i)
			}
		}
		if n, err := rdb.Exists(ctx, rediskey.MachineLease(p.machine)).Result(); err != nil || n != 1 {
			t.Fatalf("process %d runs with machine id %d but its lease key exists %d times (%v)", i, p.machine, n, err)
		}
	}
	if procs[0].machine == procs[1].machine {
		t.Fatalf("both processes run with machine id %d", procs[0].machine)
	}
	cancel()
	for i, p := range procs {
		select {
		case err := <-p.done:
			if err != nil {
				t.Fatalf("process %d after shutdown: %v", i, err)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("process %d did not stop", i)
		}
		if n, err := rdb.Exists(context.Background(), rediskey.MachineLease(p.machine)).Result(); err != nil || n != 0 {
			t.Fatalf("process %d stopped but the lease on machine id %d is still there (%d, %v)", i, p.machine, n, err)
		}
	}
	t.Logf("machine ids %d and %d leased and released", procs[0].machine, procs[1].machine)
}
