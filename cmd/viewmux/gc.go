package main

import (
	"os"
	"runtime/debug"
)

// gcPercent is the garbage collector's target (GOGC) viewmux serves with
// when GOGC is not set. viewmux's live heap is small and it allocates per
// message, so at Go's default of 100 the collector took about a seventh of
// its CPU per forwarded call in the load tool; at 200 the heap may grow to
// three times the live data instead of two, a few megabytes here
// (docs/operations.md, "Garbage collection").
const gcPercent = 200

// tuneGC sets gcPercent unless the environment sets GOGC, which always
// wins (as does GOMEMLIMIT, which the runtime applies on its own).
func tuneGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercent)
	}
}
