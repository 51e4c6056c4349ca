// Package deploy tests the deployment artifacts under deploy/ for real:
// the systemd units are verified by systemd-analyze and their ExecStart
// and EnvironmentFile run a cluster, the container images are built with
// podman and inspected, the compose file loads with compose-go. Every
// check needs its tool (systemd-analyze, podman: make test-deps) and
// fails, never skips, without it.
package deploy

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// root is the repository's top directory.
func root(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.work")); err != nil {
		t.Fatalf("repository root not found from %s: %v", dir, err)
	}
	return dir
}

// unit is a parsed systemd unit file: per section, each key's values in
// file order (Environment= and EnvironmentFile= repeat).
type unit map[string]map[string][]string

// parseUnit reads a unit file, resolving %i to instance.
func parseUnit(t testing.TB, path, instance string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s: bad line %q", path, line)
			}
			v = strings.ReplaceAll(v, "%i", instance)
			u[section][k] = append(u[section][k], v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

// one is the only (or last) value of key in [Service]-like section sec.
func (u unit) one(sec, key string) string {
	vs := u[sec][key]
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// parseEnvFile reads a file in systemd's EnvironmentFile= syntax as far as
// ours use it: KEY=VALUE lines, # comments, a value optionally in double
// quotes.
func parseEnvFile(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var env []string
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.ContainsAny(k, " \t") {
			return nil, fmt.Errorf("%s:%d: not KEY=VALUE: %q", path, i+1, line)
		}
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		env = append(env, k+"="+v)
	}
	return env, nil
}

// envValue is the last value of key in env.
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, _ := strings.Cut(kv, "="); k == key {
			v = val
		}
	}
	return v
}
