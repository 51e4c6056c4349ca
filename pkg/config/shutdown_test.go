package config

import (
	"testing"
	"time"
)

func TestGateShutdownKickWindow(t *testing.T) {
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if c.Gate.ShutdownKickWindow != 10*time.Second {
		t.Fatalf("default gate.shutdown_kick_window %v, want 10s", c.Gate.ShutdownKickWindow)
	}
	for _, tt := range []struct {
		env     string
		want    time.Duration
		wantErr bool
	}{
		{"0s", 0, false},
		{"2s", 2 * time.Second, false},
		{"-1s", 0, true},
	} {
		t.Setenv("IM_GATE_SHUTDOWN_KICK_WINDOW", tt.env)
		c, err := Load("")
		if (err != nil) != tt.wantErr {
			t.Fatalf("%s: err = %v, want error %v", tt.env, err, tt.wantErr)
		}
		if err == nil && c.Gate.ShutdownKickWindow != tt.want {
			t.Fatalf("%s: loaded %v", tt.env, c.Gate.ShutdownKickWindow)
		}
	}
}
