package main

import (
	"os"
	"runtime/debug"
	"testing"
)

// TestTuneGC: serving sets viewmux's collector target unless GOGC is set,
// which wins.
func TestTuneGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	old, had := os.LookupEnv("GOGC")
	defer func() {
		if had {
			os.Setenv("GOGC", old)
		} else {
			os.Unsetenv("GOGC")
		}
	}()

	os.Unsetenv("GOGC")
	tuneGC()
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Errorf("without GOGC: GC percent %d, want %d", got, gcPercent)
	}
	os.Setenv("GOGC", "50")
	tuneGC()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set: GC percent changed to %d; the environment must win", got)
	}
}
