package scenario

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fdReserve is kept free of client sockets in this process and in each
// gate: database and Redis pools, gRPC links, log files, the next scenario.
const fdReserve = 1024

// openFiles returns this process's soft RLIMIT_NOFILE (the Go runtime
// raises it to the hard limit at start) and how many descriptors are open.
func openFiles() (limit, open int, err error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 0, 0, fmt.Errorf("scenario: getrlimit: %w", err)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, 0, fmt.Errorf("scenario: %w", err)
	}
	return int(min(rl.Cur, 1<<30)), len(ents), nil
}

// onlineCap is how many of want client connections can be open at once.
// Every one is a descriptor in this process (the group scenario keeps its
// members here, because the pushes they receive are what it measures) and
// one in the gate holding it; the gates share the connections and have the
// same hard limit (inherited; Go raises its soft limit to the hard one at
// start), so this process's limit binds first. Members beyond the cap stay
// offline.
func onlineCap(want, limit, open int) int {
	return max(0, min(want, limit-open-fdReserve))
}
