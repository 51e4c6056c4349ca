// Package failpoint lets end-to-end tests stop a process exactly at a
// dangerous seam (after commit before enqueue, after the list update before
// the ack, mid-push) instead of hoping a timed kill lands in the window.
//
// In normal builds Inject is a no-op the compiler removes. Built with
// -tags failpoints, points are armed from the SPARK_FAILPOINTS environment
// variable ("name=action;name=action") at start and changed at run time
// through the admin endpoint /debug/failpoints (PUT name=action, DELETE
// name). Actions: "error" (Inject returns ErrInjected), "sleep(ms)",
// "exit" (the process dies on the spot with status 137, like kill -9),
// "panic", and "off"; "N*action" runs the action N times, then disarms.
package failpoint

import "errors"

// ErrInjected is returned by an armed "error" failpoint.
var ErrInjected = errors.New("failpoint: injected error")
