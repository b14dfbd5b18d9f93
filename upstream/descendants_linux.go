//go:build linux

package upstream

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// No child or grandchild survives viewmux, not even one that left its
// process group with setsid. Signalling the group is not enough for those,
// so on Linux viewmux is a child subreaper (orphaned descendants are
// reparented to it instead of to init) and ends descendants one by one,
// found in /proc:
//
//   - when a stdio child is shut down, everything below it (found by
//     parentage while it lives) and every process carrying its marker
//     (childMarkerEnv, inherited by everything it starts, so an orphan
//     whose parent already died is still attributed to it);
//   - when viewmux exits (the func BecomeSubreaper returns), every
//     descendant left.
//
// Orphans reparented to viewmux are reaped here, by pid, one at a time
// (waitid(P_PID)), never with wait(-1): os/exec reaps our own children,
// and reaping one of them here would steal its exit status.

// childMarkerEnv is set in every stdio child's environment to a value
// unique to that child within this viewmux (viewmux's pid, a sequence
// number), to attribute orphans to the child that started them.
const childMarkerEnv = "VIEWMUX_CHILD"

// children is the set of stdio children os/exec started and has not yet
// reaped, with the lock that keeps them apart from orphans being reaped.
//
// It is package state, against the repository's habit, because what it
// mirrors is per process too: the kernel's subreaper attribute and the set
// of this process's children. Every Upstream (and every Aggregator) of the
// process shares them, whatever created it.
var children = childTable{procs: make(map[int]*process)}

// markerNonce makes this viewmux's markers its own: a SIGKILLed viewmux's
// orphans carry markers too, and a later viewmux that reuses its pid must
// not take them for its children's.
var markerNonce = rand.Text()[:12]

type childTable struct {
	// mu is held while a child is started and registered, and while an
	// orphan is checked and reaped, so a pid that os/exec will wait for is
	// never reaped here, even if it exits before Start returns.
	mu    sync.Mutex
	procs map[int]*process // by pid
	seq   uint64           // last marker sequence number
}

// start starts cmd with a fresh marker and registers its process as p.
func (c *childTable) start(cmd *exec.Cmd, p *process) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	p.marker = fmt.Sprintf("%d.%s.%d", os.Getpid(), markerNonce, c.seq)
	cmd.Env = append(cmd.Env, childMarkerEnv+"="+p.marker) // later entries win
	if err := cmd.Start(); err != nil {
		return err
	}
	c.procs[cmd.Process.Pid] = p
	if st, err := readStat(cmd.Process.Pid); err == nil {
		p.started = st.start
	}
	return nil
}

// forget unregisters p once os/exec has reaped it. A pid since reused by
// another child of ours stays registered.
func (c *childTable) forget(pid int, p *process) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.procs[pid] == p {
		delete(c.procs, pid)
	}
}

// reap reaps those of pids that are exited orphans of ours: children of
// this process, zombies, and not started by os/exec. It reports how many
// of pids are still children of ours that have not been reaped.
func (c *childTable) reap(pids []int) (left int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	self := os.Getpid()
	for _, pid := range pids {
		st, err := readStat(pid)
		if err != nil || st.ppid != self || c.procs[pid] != nil {
			continue // gone, not ours to reap, or os/exec's
		}
		if st.state != 'Z' {
			left++
			continue
		}
		var info unix.Siginfo
		err = unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG, nil)
		if err != nil && !errors.Is(err, unix.ECHILD) {
			left++
		}
	}
	return left
}

// reapOrphans reaps every exited orphan of ours.
func (c *childTable) reapOrphans() {
	self := os.Getpid()
	var zombies []int
	for _, st := range scanProcs() {
		if st.ppid == self && st.state == 'Z' {
			zombies = append(zombies, st.pid)
		}
	}
	if len(zombies) > 0 {
		c.reap(zombies)
	}
}

// BecomeSubreaper makes this process a child subreaper, so that
// descendants whose parent dies are reparented to it, and reaps those
// orphans as they exit. Call it once, from main, before any upstream
// starts. The returned func ends every descendant still running (SIGTERM,
// up to 3s, SIGKILL, reap) and must be called once, after every Upstream is
// closed. Errors are logged to log (nil = discarded); viewmux then still
// ends the descendants it can find.
func BecomeSubreaper(log *slog.Logger) (end func()) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		log.Warn("cannot become a child subreaper; orphaned grandchildren of upstreams go to init", "err", err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-sigs:
				children.reapOrphans()
			}
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(stop)
		<-done
		endDescendants(log, defaultTermWait)
	}
}

// endDescendants ends every descendant of this process: SIGTERM, up to
// termWait for them to go, SIGKILL, and reaps the orphans among them. Our
// own children are signalled too (Close should have ended them already),
// but left for os/exec to reap.
func endDescendants(log *slog.Logger, termWait time.Duration) {
	self := os.Getpid()
	tree := func() []procStat { return below(scanProcs(), self) }
	ds := tree()
	if len(ds) == 0 {
		return
	}
	log.Warn("descendants still running at exit; ending them", "count", len(ds))
	signalAll(ds, syscall.SIGTERM)
	waitGone(ds, termWait)
	ds = mergeProcs(ds, tree())
	signalAll(ds, syscall.SIGKILL)
	waitReaped(ds, killWait)
}

// strays returns what belongs to p's child but may be outside its process
// group: every process below the child while it lives (setsid keeps the
// parent), and every process carrying p's marker (the child's orphans, now
// under a subreaper or init). The child itself is not included.
func (p *process) strays() []procStat {
	all := scanProcs()
	var out []procStat
	if child, ok := all[p.pgid]; ok && p.started != 0 && child.start == p.started {
		out = below(all, p.pgid)
	}
	if p.marker == "" {
		return out
	}
	seen := make(map[int]bool, len(out))
	for _, s := range out {
		seen[s.pid] = true
	}
	self := os.Getpid()
	want := []byte(childMarkerEnv + "=" + p.marker)
	for pid, st := range all {
		if seen[pid] || pid == p.pgid || pid == self || st.state == 'Z' {
			continue
		}
		if hasEnvEntry(pid, want) {
			out = append(out, st)
		}
	}
	return out
}

// anyAlive reports whether any of ps still runs.
func anyAlive(ps []procStat) bool {
	for _, s := range ps {
		if alive(s) {
			return true
		}
	}
	return false
}

// procStat is what /proc/PID/stat tells about one process.
type procStat struct {
	pid, ppid int
	state     byte
	start     uint64 // start time in clock ticks since boot: with pid, names one process
}

// readStat parses /proc/PID/stat. The command name is in parentheses and
// may contain anything, so fields are counted from the last ')'.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	// After ") ": state(3) ppid(4) pgrp(5) session(6) tty(7) tpgid(8)
	// flags(9) minflt(10) cminflt(11) majflt(12) cmajflt(13) utime(14)
	// stime(15) cutime(16) cstime(17) priority(18) nice(19) threads(20)
	// itrealvalue(21) starttime(22).
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	st := procStat{pid: pid, state: f[0][0]}
	if st.ppid, err = strconv.Atoi(string(f[1])); err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: ppid: %w", pid, err)
	}
	if st.start, err = strconv.ParseUint(string(f[19]), 10, 64); err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: starttime: %w", pid, err)
	}
	return st, nil
}

// scanProcs reads every process in /proc; those that exit meanwhile are
// skipped. Without /proc it returns nothing.
func scanProcs() map[int]procStat {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make(map[int]procStat, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(pid); err == nil {
			out[pid] = st
		}
	}
	return out
}

// below returns the processes of all below root, by parentage.
func below(all map[int]procStat, root int) []procStat {
	kids := make(map[int][]procStat)
	for _, st := range all {
		kids[st.ppid] = append(kids[st.ppid], st)
	}
	var out []procStat
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, k := range kids[pid] {
			out = append(out, k)
			queue = append(queue, k.pid)
		}
	}
	return out
}

// hasEnvEntry reports whether pid's initial environment holds the entry
// kv exactly. Another user's process, or a zombie, does not.
func hasEnvEntry(pid int, kv []byte) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	for e := range bytes.SplitSeq(b, []byte{0}) {
		if bytes.Equal(e, kv) {
			return true
		}
	}
	return false
}

// mergeProcs adds to ps those of more it does not hold yet.
func mergeProcs(ps, more []procStat) []procStat {
	have := make(map[procStat]bool, len(ps))
	for _, s := range ps {
		have[procStat{pid: s.pid, start: s.start}] = true
	}
	for _, s := range more {
		if !have[procStat{pid: s.pid, start: s.start}] {
			ps = append(ps, s)
		}
	}
	return ps
}

// alive reports whether the process s names still runs: same pid, same
// start time, not a zombie.
func alive(s procStat) bool {
	st, err := readStat(s.pid)
	return err == nil && st.start == s.start && st.state != 'Z' && st.state != 'X'
}

// signalAll sends sig to each process of ps that is still the one found
// (pid and start time), so a pid reused meanwhile is left alone.
func signalAll(ps []procStat, sig syscall.Signal) {
	for _, s := range ps {
		if alive(s) {
			_ = syscall.Kill(s.pid, sig) // ESRCH: it just went
		}
	}
}

// waitGone waits up to d until none of ps runs.
func waitGone(ps []procStat, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for anyAlive(ps) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(groupPoll)
	}
	return true
}

// waitReaped waits up to d until none of ps runs and those that are our
// orphans are reaped.
func waitReaped(ps []procStat, d time.Duration) bool {
	pids := make([]int, len(ps))
	for i, s := range ps {
		pids[i] = s.pid
	}
	deadline := time.Now().Add(d)
	for {
		left := children.reap(pids)
		if left == 0 && !anyAlive(ps) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(groupPoll)
	}
}
