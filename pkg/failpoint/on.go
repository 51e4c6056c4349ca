//go:build failpoints

package failpoint

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Enabled reports whether failpoints are compiled in.
const Enabled = true

var (
	mu     sync.RWMutex
	points = map[string]string{}
)

func init() {
	for _, kv := range strings.Split(os.Getenv("SPARK_FAILPOINTS"), ";") {
		if name, action, ok := strings.Cut(strings.TrimSpace(kv), "="); ok {
			points[name] = action
		}
	}
}

// Inject runs the action armed for name, if any. An action armed as
// "N*action" runs N times, then the point disarms itself, so a test can
// make exactly one job fail without racing to disarm it.
func Inject(name string) error {
	mu.RLock()
	action, ok := points[name]
	mu.RUnlock()
	if !ok {
		return nil
	}
	if n, rest, counted := strings.Cut(action, "*"); counted {
		left, err := strconv.Atoi(n)
		if err != nil {
			return nil // malformed count: the point stays inert
		}
		mu.Lock()
		cur, still := points[name]
		if !still || cur != action {
			mu.Unlock()
			return nil // another caller took the last run, or it was re-armed
		}
		if left <= 1 {
			delete(points, name)
		} else {
			points[name] = strconv.Itoa(left-1) + "*" + rest
		}
		mu.Unlock()
		action = rest
	}
	switch {
	case action == "error":
		return fmt.Errorf("%w at %s", ErrInjected, name)
	case action == "exit":
		fmt.Fprintf(os.Stderr, "failpoint %s: exit\n", name)
		os.Exit(137)
	case action == "panic":
		panic("failpoint " + name)
	case strings.HasPrefix(action, "sleep(") && strings.HasSuffix(action, ")"):
		ms, _ := strconv.Atoi(action[len("sleep(") : len(action)-1])
		time.Sleep(time.Duration(ms) * time.Millisecond)
	}
	return nil
}

// Handler serves /debug/failpoints: GET lists, PUT body "name=action" arms,
// DELETE ?name=x disarms.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPut, http.MethodPost:
			b, _ := io.ReadAll(io.LimitReader(r.Body, 1024))
			name, action, ok := strings.Cut(strings.TrimSpace(string(b)), "=")
			if !ok || name == "" {
				http.Error(w, "want name=action", http.StatusBadRequest)
				return
			}
			mu.Lock()
			if action == "off" {
				delete(points, name)
			} else {
				points[name] = action
			}
			mu.Unlock()
		case http.MethodDelete:
			mu.Lock()
			delete(points, r.URL.Query().Get("name"))
			mu.Unlock()
		}
		mu.RLock()
		defer mu.RUnlock()
		for k, v := range points {
			fmt.Fprintf(w, "%s=%s\n", k, v)
		}
	})
}
