//go:build !linux

package main

import "time"

// processCPU is only implemented on Linux; elsewhere the CPU figure is left
// out of the report.
func processCPU(int) (time.Duration, bool) { return 0, false }
