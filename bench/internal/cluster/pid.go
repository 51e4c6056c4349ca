package cluster

import "github.com/sparkim/spark/bench/internal/procstat"

// listenerPID is procstat.ListenerPID with 0 for "not visible" (a remote or
// foreign storage server: its CPU is then left out of the report).
func listenerPID(port int) int {
	pid, err := procstat.ListenerPID(port)
	if err != nil {
		return 0
	}
	return pid
}
