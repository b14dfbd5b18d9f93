//go:build unix

package integration

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// proc is one process as /proc/PID/stat describes it.
type proc struct {
	PID, PPID, PGID, SID int
	State                byte   // R, S, Z, …
	Comm                 string // executable name, at most 15 bytes
}

// readProcStat parses /proc/PID/stat. The comm field is in parentheses and
// may itself contain spaces and parentheses, so the fields after it are
// found from the LAST ')'.
func readProcStat(pid int) (proc, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return proc{}, err
	}
	open, closing := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return proc{}, fmt.Errorf("/proc/%d/stat: malformed %q", pid, b)
	}
	// After ") ": state ppid pgrp session …
	f := strings.Fields(string(b[closing+1:]))
	if len(f) < 4 {
		return proc{}, fmt.Errorf("/proc/%d/stat: malformed %q", pid, b)
	}
	p := proc{PID: pid, Comm: string(b[open+1 : closing]), State: f[0][0]}
	for i, dst := range []*int{&p.PPID, &p.PGID, &p.SID} {
		if *dst, err = strconv.Atoi(f[i+1]); err != nil {
			return proc{}, fmt.Errorf("/proc/%d/stat: field %d: %w", pid, i+2, err)
		}
	}
	return p, nil
}

// listProcs returns every process visible in /proc. Processes that exit
// during the scan are skipped.
func listProcs() ([]proc, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, err := readProcStat(pid); err == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// descendants returns every live descendant of root by following PPID links.
// A grandchild whose parent died has been reparented and is NOT found: use
// markedProcs for leak checks.
func descendants(root int) ([]proc, error) {
	all, err := listProcs()
	if err != nil {
		return nil, err
	}
	children := make(map[int][]proc)
	for _, p := range all {
		children[p.PPID] = append(children[p.PPID], p)
	}
	var out []proc
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

// procsWhere returns the live processes for which keep is true.
func procsWhere(keep func(proc) bool) ([]proc, error) {
	all, err := listProcs()
	if err != nil {
		return nil, err
	}
	var out []proc
	for _, p := range all {
		if keep(p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// inProcessGroup returns the processes whose process group id is pgid.
func inProcessGroup(pgid int) ([]proc, error) {
	return procsWhere(func(p proc) bool { return p.PGID == pgid })
}

// inSession returns the processes whose session id is sid.
func inSession(sid int) ([]proc, error) {
	return procsWhere(func(p proc) bool { return p.SID == sid })
}

// hasEnv reports whether /proc/PID/environ holds exactly KEY=VALUE. The
// environ of a zombie, or of another user's process, reads as empty or
// fails: such a process does not match.
func hasEnv(pid int, key, value string) bool {
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

// markedProcs returns every live process on the machine, other than this
// test process, whose environment carries markerEnv=marker. This finds a
// leaked process however it was reparented, and whatever process group or
// session it moved to; only a process that scrubbed its own environment
// escapes it.
func markedProcs(marker string) []proc {
	self := os.Getpid()
	ps, err := procsWhere(func(p proc) bool {
		return p.PID != self && p.State != 'Z' && hasEnv(p.PID, markerEnv, marker)
	})
	if err != nil {
		return nil // no /proc: leak checks cannot run here
	}
	return ps
}

// waitNoMarked polls markedProcs until none is left or timeout passes, and
// returns what is left.
func waitNoMarked(marker string, timeout time.Duration) []proc {
	deadline := time.Now().Add(timeout)
	for {
		ps := markedProcs(marker)
		if len(ps) == 0 || time.Now().After(deadline) {
			return ps
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// killMarked SIGKILLs every process carrying the marker.
func killMarked(marker string) {
	for _, p := range markedProcs(marker) {
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
}

// cmdline returns the command line of pid, arguments separated by spaces.
func cmdline(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
}

// describeProcs formats processes one per line for failure messages.
func describeProcs(ps []proc) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "  pid=%d ppid=%d pgid=%d sid=%d state=%c comm=%s cmd=%q\n",
			p.PID, p.PPID, p.PGID, p.SID, p.State, p.Comm, cmdline(p.PID))
	}
	return b.String()
}

// commCounts counts processes by executable name.
func commCounts(ps []proc) map[string]int {
	n := make(map[string]int)
	for _, p := range ps {
		n[p.Comm]++
	}
	return n
}

func pids(ps []proc) []int {
	out := make([]int, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.PID)
	}
	slices.Sort(out)
	return out
}

func requireProc(t testing.TB) {
	t.Helper()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skipf("no /proc on this machine: %v", err)
	}
}

// TestProcTree checks the process helpers the leak tests rely on, against a
// tree whose shape is known: sh → {sleep, sh → sleep}.
func TestProcTree(t *testing.T) {
	requireProc(t)
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	marker := randomHex(t, 12)
	// "& wait" keeps each sh alive as the parent of what it started.
	script := fmt.Sprintf(`%[1]s 300 & %[2]s -c '%[1]s 300 & wait' & wait`, sleep, sh)
	cmd := exec.Command(sh, "-c", script)
	cmd.Env = append(envWithout(os.Environ(), markerEnv), markerEnv+"="+marker)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	root := cmd.Process.Pid
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-root, syscall.SIGKILL)
		<-done
		killMarked(marker)
	})

	// The tree is complete when both sleeps are running.
	var tree []proc
	deadline := time.Now().Add(10 * time.Second)
	for {
		tree, err = descendants(root)
		if err != nil {
			t.Fatal(err)
		}
		if commCounts(tree)["sleep"] == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}

	t.Run("descendants", func(t *testing.T) {
		got := commCounts(tree)
		if got["sleep"] != 2 || got["sh"] != 1 || len(tree) != 3 {
			t.Fatalf("descendants(%d) = %v, want 2 sleep + 1 sh:\n%s", root, got, describeProcs(tree))
		}
	})
	t.Run("process group", func(t *testing.T) {
		g, err := inProcessGroup(root)
		if err != nil {
			t.Fatal(err)
		}
		want := append(pids(tree), root)
		slices.Sort(want)
		if got := pids(g); !slices.Equal(got, want) {
			t.Fatalf("inProcessGroup(%d) = %v, want %v", root, got, want)
		}
	})
	t.Run("session", func(t *testing.T) {
		self, err := readProcStat(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		s, err := inSession(self.SID)
		if err != nil {
			t.Fatal(err)
		}
		got := pids(s)
		for _, p := range append(pids(tree), root, os.Getpid()) {
			if !slices.Contains(got, p) {
				t.Errorf("inSession(%d) lacks pid %d", self.SID, p)
			}
		}
	})
	t.Run("marker", func(t *testing.T) {
		want := append(pids(tree), root)
		slices.Sort(want)
		if got := pids(markedProcs(marker)); !slices.Equal(got, want) {
			t.Fatalf("markedProcs = %v, want %v", got, want)
		}
		if got := markedProcs(randomHex(t, 12)); len(got) != 0 {
			t.Fatalf("markedProcs(unused marker) = %v, want none", pids(got))
		}
	})
	t.Run("marker finds reparented grandchildren", func(t *testing.T) {
		// Kill only the two shells: the sleeps are reparented (to init or a
		// subreaper), so descendants no longer finds them, but the marker does.
		for _, p := range tree {
			if p.Comm == "sh" {
				_ = syscall.Kill(p.PID, syscall.SIGKILL)
			}
		}
		_ = syscall.Kill(root, syscall.SIGKILL)
		<-done
		var marked []proc
		deadline := time.Now().Add(5 * time.Second)
		for {
			marked = markedProcs(marker)
			if commCounts(marked)["sh"] == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if got := commCounts(marked); got["sleep"] != 2 || len(marked) != 2 {
			t.Fatalf("after killing the shells, markedProcs = %v, want the 2 orphaned sleeps:\n%s", got, describeProcs(marked))
		}
		for _, p := range marked {
			if p.PPID == root {
				t.Errorf("pid %d still has the dead root %d as parent", p.PID, root)
			}
		}
		killMarked(marker)
		if left := waitNoMarked(marker, 5*time.Second); len(left) != 0 {
			t.Fatalf("killMarked left:\n%s", describeProcs(left))
		}
	})
}

// setsidConfig mounts one required stdio upstream, "sid": a sh wrapper that
// first starts a grandchild that leaves viewmux's process group and session
// with setsid and ignores SIGTERM and SIGHUP, then execs the demo server.
// Only a kill aimed at that process itself ends it.
func setsidConfig(t *testing.T, marker string) string {
	t.Helper()
	for _, tool := range []string{"sh", "setsid", "sleep"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	script := `setsid sh -c 'trap "" TERM HUP; exec sleep 1000' & exec "$0" demo-server --name sid`
	return fmt.Sprintf(`[upstreams.sid]
command = "sh"
args = %s
env = { %s = %s }
required = true
`, tomlArray("-c", script, muxBinary(t)), markerEnv, tomlString(marker))
}

// setsidGrandchild waits for the live marked sleep that leads its own
// session, other than not, and returns it.
func setsidGrandchild(t *testing.T, marker string, not int, logs func() string) proc {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		for _, p := range markedProcs(marker) {
			if p.Comm == "sleep" && p.SID == p.PID && p.PID != not {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no setsid grandchild carrying the marker:\n%s\n--- viewmux stderr ---\n%s", describeProcs(markedProcs(marker)), logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// assertEnded checks that g neither runs nor is left a zombie.
func assertEnded(t *testing.T, g proc) {
	t.Helper()
	now, err := readProcStat(g.PID)
	if err != nil || now.Comm != g.Comm {
		return // gone (a reused pid would be another program)
	}
	if now.State == 'Z' {
		t.Errorf("the setsid grandchild %d is a zombie nobody reaped (parent %d)", g.PID, now.PPID)
	} else {
		t.Errorf("the setsid grandchild survived:\n%s", describeProcs([]proc{now}))
	}
}

// TestSetsidGrandchild checks that with a grandchild that left the
// process group and session (setsid) and ignores SIGTERM: viewmux, a child
// subreaper, ends and reaps it when it is stopped, over HTTP and over
// stdio, and when the upstream's child crashes and is restarted.
func TestSetsidGrandchild(t *testing.T) {
	requireProc(t)
	if runtime.GOOS != "linux" {
		t.Skip("viewmux is a child subreaper on Linux only")
	}

	t.Run("serve, SIGTERM", func(t *testing.T) {
		marker := randomHex(t, 12)
		m := startMuxWith(t, muxOptions{Config: setsidConfig(t, marker), Marker: marker})
		g := setsidGrandchild(t, marker, 0, m.Stderr)
		if err := m.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code, ok := m.Wait(30 * time.Second); !ok || code != 0 {
			t.Fatalf("viewmux after SIGTERM: exited=%v code=%d", ok, code)
		}
		assertEnded(t, g)
		if left := waitNoMarked(marker, time.Second); len(left) > 0 {
			t.Errorf("processes survived viewmux:\n%s", describeProcs(left))
		}
	})

	t.Run("stdio, SIGTERM", func(t *testing.T) {
		marker := randomHex(t, 12)
		dir := t.TempDir()
		cfgPath := filepath.Join(dir, "viewmux.toml")
		if err := os.WriteFile(cfgPath, []byte(setsidConfig(t, marker)), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(muxBinary(t), "serve", "--stdio", "--config", cfgPath)
		cmd.Dir = dir
		cmd.Env = append(envWithout(os.Environ(), "VIEWMUX_CONFIG", markerEnv), markerEnv+"="+marker)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.WaitDelay = 2 * time.Second
		stdin, err := cmd.StdinPipe() // held open: the client is still there
		if err != nil {
			t.Fatal(err)
		}
		defer stdin.Close()
		var stderr syncBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			killMarked(marker)
			if t.Failed() {
				t.Logf("--- viewmux --stdio stderr ---\n%s", stderr.String())
			}
		})
		g := setsidGrandchild(t, marker, 0, stderr.String)
		// Stopped once serving: a stop during startup is a failed start.
		for deadline := time.Now().Add(30 * time.Second); !strings.Contains(stderr.String(), "ready on stdio"); {
			if time.Now().After(deadline) {
				t.Fatal("viewmux --stdio never logged \"ready on stdio\"")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("viewmux --stdio after SIGTERM: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("viewmux --stdio did not exit within 30s of SIGTERM")
		}
		assertEnded(t, g)
		if left := waitNoMarked(marker, time.Second); len(left) > 0 {
			t.Errorf("processes survived viewmux --stdio:\n%s", describeProcs(left))
		}
	})

	t.Run("serve, an orphan without the marker", func(t *testing.T) {
		// The wrapper's subshell starts the grandchild with an empty
		// environment and exits at once: the grandchild is orphaned
		// before any shutdown, carries no marker, and only viewmux's
		// own descendants are left to find it by.
		marker := randomHex(t, 12)
		setsid, _ := exec.LookPath("setsid")
		sleep, _ := exec.LookPath("sleep")
		sh, _ := exec.LookPath("sh")
		for _, p := range []string{setsid, sleep, sh} {
			if p == "" {
				t.Skip("no setsid, sleep or sh")
			}
		}
		arg := fmt.Sprintf("1000.%09d", time.Now().UnixNano()%1e9) // names this sleep
		script := fmt.Sprintf(`(env -i %s %s -c 'trap "" TERM HUP; exec %s %s' &); exec "$0" demo-server --name sid`,
			shQuote(setsid), shQuote(sh), shQuote(sleep), arg)
		cfg := fmt.Sprintf("[upstreams.sid]\ncommand = \"sh\"\nargs = %s\nenv = { %s = %s }\nrequired = true\n",
			tomlArray("-c", script, muxBinary(t)), markerEnv, tomlString(marker))
		m := startMuxWith(t, muxOptions{Config: cfg, Marker: marker})
		var g proc
		deadline := time.Now().Add(15 * time.Second)
		for g.PID == 0 {
			ps, err := procsWhere(func(p proc) bool { return p.Comm == "sleep" && p.State != 'Z' && strings.Contains(cmdline(p.PID), arg) })
			if err != nil {
				t.Fatal(err)
			}
			if len(ps) == 1 {
				g = ps[0]
			} else if time.Now().After(deadline) {
				t.Fatalf("no orphaned sleep %s:\n%s", arg, describeProcs(ps))
			} else {
				time.Sleep(20 * time.Millisecond)
			}
		}
		t.Cleanup(func() {
			if now, err := readProcStat(g.PID); err == nil && now.Comm == g.Comm {
				_ = syscall.Kill(g.PID, syscall.SIGKILL)
			}
		})
		if hasEnv(g.PID, markerEnv, marker) {
			t.Fatalf("the orphan %d carries the marker; env -i did not scrub it", g.PID)
		}
		// A parentless sh subshell leaves the orphan to the nearest
		// subreaper: viewmux.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			now, err := readProcStat(g.PID)
			if err == nil && now.PPID == m.PID() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the orphan's parent is %d, want viewmux %d (a child subreaper)", now.PPID, m.PID())
			}
		}
		if err := m.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code, ok := m.Wait(30 * time.Second); !ok || code != 0 {
			t.Fatalf("viewmux after SIGTERM: exited=%v code=%d", ok, code)
		}
		assertEnded(t, g)
	})

	t.Run("serve, the upstream's child crashes", func(t *testing.T) {
		marker := randomHex(t, 12)
		m := startMuxWith(t, muxOptions{Config: setsidConfig(t, marker), Marker: marker})
		g := setsidGrandchild(t, marker, 0, m.Stderr)
		child := demoChild(t, marker, m.Stderr, "sid", 5*time.Second)
		if err := syscall.Kill(child, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// The crashed child's connection is torn down before the
		// restart, so once the new child has its grandchild, the old one
		// has had its turn.
		setsidGrandchild(t, marker, g.PID, m.Stderr)
		assertEnded(t, g)
		// Orphans that ended are reaped: viewmux keeps no zombie children.
		var zombies []proc
		deadline := time.Now().Add(2 * time.Second)
		for {
			zombies, _ = procsWhere(func(p proc) bool { return p.PPID == m.PID() && p.State == 'Z' })
			if len(zombies) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(zombies) > 0 {
			t.Errorf("viewmux has zombie children:\n%s", describeProcs(zombies))
		}
	})
}
