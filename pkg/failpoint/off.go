//go:build !failpoints

package failpoint

import "net/http"

// Enabled reports whether failpoints are compiled in.
const Enabled = false

// Inject returns nil: failpoints are compiled out.
func Inject(string) error { return nil }

// Handler returns nil: there is nothing to control.
func Handler() http.Handler { return nil }
