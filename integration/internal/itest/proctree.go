//go:build unix

package itest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Proc is one process as /proc/PID/stat describes it.
type Proc struct {
	PID, PPID, PGID, SID int
	State                byte   // R, S, Z, …
	Comm                 string // executable name, at most 15 bytes
}

// ReadProcStat parses /proc/PID/stat. The comm field is in parentheses and
// may itself contain spaces and parentheses, so the fields after it are
// found from the LAST ')'.
func ReadProcStat(pid int) (Proc, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Proc{}, err
	}
	open, closing := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return Proc{}, fmt.Errorf("/proc/%d/stat: malformed %q", pid, b)
	}
	// After ") ": state ppid pgrp session …
	f := strings.Fields(string(b[closing+1:]))
	if len(f) < 4 {
		return Proc{}, fmt.Errorf("/proc/%d/stat: malformed %q", pid, b)
	}
	p := Proc{PID: pid, Comm: string(b[open+1 : closing]), State: f[0][0]}
	for i, dst := range []*int{&p.PPID, &p.PGID, &p.SID} {
		if *dst, err = strconv.Atoi(f[i+1]); err != nil {
			return Proc{}, fmt.Errorf("/proc/%d/stat: field %d: %w", pid, i+2, err)
		}
	}
	return p, nil
}

// listProcs returns every process visible in /proc. Processes that exit
// during the scan are skipped.
func listProcs() ([]Proc, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []Proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, err := ReadProcStat(pid); err == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// Descendants returns every live descendant of root by following PPID links.
// A grandchild whose parent died has been reparented and is NOT found: use
// MarkedProcs for leak checks.
func Descendants(root int) ([]Proc, error) {
	all, err := listProcs()
	if err != nil {
		return nil, err
	}
	children := make(map[int][]Proc)
	for _, p := range all {
		children[p.PPID] = append(children[p.PPID], p)
	}
	var out []Proc
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			out = append(out, c)
			queue = append(queue, c.PID)
		}
	}
	return out, nil
}

// ProcsWhere returns the live processes for which keep is true.
func ProcsWhere(keep func(Proc) bool) ([]Proc, error) {
	all, err := listProcs()
	if err != nil {
		return nil, err
	}
	var out []Proc
	for _, p := range all {
		if keep(p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// HasEnv reports whether /proc/PID/environ holds exactly KEY=VALUE. The
// environ of a zombie, or of another user's process, reads as empty or
// fails: such a process does not match.
func HasEnv(pid int, key, value string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return false
	}
	want := []byte(key + "=" + value)
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		if bytes.Equal(kv, want) {
			return true
		}
	}
	return false
}

// MarkedProcs returns every live process on the machine, other than this
// test process, whose environment carries MarkerEnv=marker. This finds a
// leaked process however it was reparented, and whatever process group or
// session it moved to; only a process that scrubbed its own environment
// escapes it.
func MarkedProcs(marker string) []Proc {
	self := os.Getpid()
	ps, err := ProcsWhere(func(p Proc) bool {
		return p.PID != self && p.State != 'Z' && HasEnv(p.PID, MarkerEnv, marker)
	})
	if err != nil {
		return nil // no /proc: leak checks cannot run here
	}
	return ps
}

// WaitNoMarked polls MarkedProcs until none is left or timeout passes, and
// returns what is left.
func WaitNoMarked(marker string, timeout time.Duration) []Proc {
	deadline := time.Now().Add(timeout)
	for {
		ps := MarkedProcs(marker)
		if len(ps) == 0 || time.Now().After(deadline) {
			return ps
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// KillMarked SIGKILLs every process carrying the marker.
func KillMarked(marker string) {
	for _, p := range MarkedProcs(marker) {
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
}

// Cmdline returns the command line of pid, arguments separated by spaces.
func Cmdline(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
}

// DescribeProcs formats processes one per line for failure messages.
func DescribeProcs(ps []Proc) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "  pid=%d ppid=%d pgid=%d sid=%d state=%c comm=%s cmd=%q\n",
			p.PID, p.PPID, p.PGID, p.SID, p.State, p.Comm, Cmdline(p.PID))
	}
	return b.String()
}

func RequireProc(t testing.TB) {
	t.Helper()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skipf("no /proc on this machine: %v", err)
	}
}
