//go:build !linux

package upstream

import (
	"log/slog"
	"os/exec"
	"syscall"
	"time"
)

// Elsewhere than Linux there is no child subreaper: children are ended by
// their process group only (see descendants_linux.go).

var children childTable

type childTable struct{}

func (childTable) start(cmd *exec.Cmd, _ *process) error { return cmd.Start() }
func (childTable) forget(int, *process)                  {}

// BecomeSubreaper does nothing on this system; the returned func neither.
func BecomeSubreaper(*slog.Logger) (end func()) { return func() {} }

type procStat struct{}

func (*process) strays() []procStat                      { return nil }
func mergeProcs(ps, _ []procStat) []procStat             { return ps }
func anyAlive([]procStat) bool                           { return false }
func signalAll([]procStat, syscall.Signal)               {}
func waitReaped([]procStat, time.Duration) (reaped bool) { return true }
