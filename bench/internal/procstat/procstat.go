// Package procstat reads a process's memory and CPU from /proc, and finds
// the process listening on a TCP port, so every memory and CPU figure of a
// report comes from the kernel rather than from the process's own view.
package procstat

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// RSS returns VmRSS of pid in bytes.
func RSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("procstat: %w", err)
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if f := strings.Fields(string(line)); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("procstat: VmRSS %q: %w", f[1], err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("procstat: no VmRSS for pid %d", pid)
}

// CPU returns utime+stime of pid (its own threads, not its children).
func CPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("procstat: %w", err)
	}
	// The command name may hold spaces and parentheses: fields start after
	// the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("procstat: malformed stat of pid %d", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// After ')' field 0 is state (field 3 of stat(5)); utime is 14, stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("procstat: short stat of pid %d", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("procstat: stat of pid %d: bad utime/stime", pid)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// ListenerPID returns the pid of the process with a listening TCP socket
// on port (IPv4 or IPv6), or an error when none is visible.
func ListenerPID(port int) (int, error) {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || fs[3] != "0A" { // 0A = LISTEN
				continue
			}
			j := strings.LastIndexByte(fs[1], ':')
			p, err := strconv.ParseInt(fs[1][j+1:], 16, 32)
			if err == nil && int(p) == port {
				inodes["socket:["+fs[9]+"]"] = true
			}
		}
		_ = fh.Close()
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("procstat: nothing listens on port %d", port)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd")
	for _, dir := range procs {
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			l, err := os.Readlink(filepath.Join(dir, e.Name()))
			if err == nil && inodes[l] {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("procstat: no visible process owns the listener on port %d", port)
}
