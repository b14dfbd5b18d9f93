//go:build unix

package lifecycle

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// inProcessGroup returns the processes whose process group id is pgid.
func inProcessGroup(pgid int) ([]itest.Proc, error) {
	return itest.ProcsWhere(func(p itest.Proc) bool { return p.PGID == pgid })
}

// inSession returns the processes whose session id is sid.
func inSession(sid int) ([]itest.Proc, error) {
	return itest.ProcsWhere(func(p itest.Proc) bool { return p.SID == sid })
}

// commCounts counts processes by executable name.
func commCounts(ps []itest.Proc) map[string]int {
	n := make(map[string]int)
	for _, p := range ps {
		n[p.Comm]++
	}
	return n
}

func pids(ps []itest.Proc) []int {
	out := make([]int, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.PID)
	}
	slices.Sort(out)
	return out
}

// TestProcTree checks the process helpers the leak tests rely on, against a
// tree whose shape is known: sh → {sleep, sh → sleep}.
func TestProcTree(t *testing.T) {
	itest.RequireProc(t)
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	marker := itest.RandomHex(t, 12)
	// "& wait" keeps each sh alive as the parent of what it started.
	script := fmt.Sprintf(`%[1]s 300 & %[2]s -c '%[1]s 300 & wait' & wait`, sleep, sh)
	cmd := exec.Command(sh, "-c", script)
	cmd.Env = append(itest.EnvWithout(os.Environ(), itest.MarkerEnv), itest.MarkerEnv+"="+marker)
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
		itest.KillMarked(marker)
	})

	// The tree is complete when both sleeps are running.
	var tree []itest.Proc
	deadline := time.Now().Add(10 * time.Second)
	for {
		tree, err = itest.Descendants(root)
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
			t.Fatalf("descendants(%d) = %v, want 2 sleep + 1 sh:\n%s", root, got, itest.DescribeProcs(tree))
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
		self, err := itest.ReadProcStat(os.Getpid())
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
		if got := pids(itest.MarkedProcs(marker)); !slices.Equal(got, want) {
			t.Fatalf("markedProcs = %v, want %v", got, want)
		}
		if got := itest.MarkedProcs(itest.RandomHex(t, 12)); len(got) != 0 {
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
		var marked []itest.Proc
		deadline := time.Now().Add(5 * time.Second)
		for {
			marked = itest.MarkedProcs(marker)
			if commCounts(marked)["sh"] == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if got := commCounts(marked); got["sleep"] != 2 || len(marked) != 2 {
			t.Fatalf("after killing the shells, markedProcs = %v, want the 2 orphaned sleeps:\n%s", got, itest.DescribeProcs(marked))
		}
		for _, p := range marked {
			if p.PPID == root {
				t.Errorf("pid %d still has the dead root %d as parent", p.PID, root)
			}
		}
		itest.KillMarked(marker)
		if left := itest.WaitNoMarked(marker, 5*time.Second); len(left) != 0 {
			t.Fatalf("killMarked left:\n%s", itest.DescribeProcs(left))
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
`, itest.TomlArray("-c", script, itest.MuxBinary(t)), itest.MarkerEnv, itest.TomlString(marker))
}

// setsidGrandchild waits for the live marked sleep that leads its own
// session, other than not, and returns it.
func setsidGrandchild(t *testing.T, marker string, not int, logs func() string) itest.Proc {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		for _, p := range itest.MarkedProcs(marker) {
			if p.Comm == "sleep" && p.SID == p.PID && p.PID != not {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no setsid grandchild carrying the marker:\n%s\n--- viewmux stderr ---\n%s", itest.DescribeProcs(itest.MarkedProcs(marker)), logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// assertEnded checks that g neither runs nor is left a zombie.
func assertEnded(t *testing.T, g itest.Proc) {
	t.Helper()
	now, err := itest.ReadProcStat(g.PID)
	if err != nil || now.Comm != g.Comm {
		return // gone (a reused pid would be another program)
	}
	if now.State == 'Z' {
		t.Errorf("the setsid grandchild %d is a zombie nobody reaped (parent %d)", g.PID, now.PPID)
	} else {
		t.Errorf("the setsid grandchild survived:\n%s", itest.DescribeProcs([]itest.Proc{now}))
	}
}

// TestSetsidGrandchild checks that with a grandchild that left the
// process group and session (setsid) and ignores SIGTERM: viewmux, a child
// subreaper, ends and reaps it when it is stopped, over HTTP and over
// stdio, and when the upstream's child crashes and is restarted.
func TestSetsidGrandchild(t *testing.T) {
	t.Parallel()
	itest.RequireProc(t)
	if runtime.GOOS != "linux" {
		t.Skip("viewmux is a child subreaper on Linux only")
	}

	t.Run("serve, SIGTERM", func(t *testing.T) {
		marker := itest.RandomHex(t, 12)
		m := itest.StartMuxWith(t, itest.MuxOptions{Config: setsidConfig(t, marker), Marker: marker})
		g := setsidGrandchild(t, marker, 0, m.Stderr)
		if err := m.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code, ok := m.Wait(30 * time.Second); !ok || code != 0 {
			t.Fatalf("viewmux after SIGTERM: exited=%v code=%d", ok, code)
		}
		assertEnded(t, g)
		if left := itest.WaitNoMarked(marker, time.Second); len(left) > 0 {
			t.Errorf("processes survived viewmux:\n%s", itest.DescribeProcs(left))
		}
	})

	t.Run("stdio, SIGTERM", func(t *testing.T) {
		marker := itest.RandomHex(t, 12)
		dir := t.TempDir()
		cfgPath := filepath.Join(dir, "viewmux.toml")
		if err := os.WriteFile(cfgPath, []byte(setsidConfig(t, marker)), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(itest.MuxBinary(t), "serve", "--stdio", "--config", cfgPath)
		cmd.Dir = dir
		cmd.Env = append(itest.EnvWithout(os.Environ(), "VIEWMUX_CONFIG", itest.MarkerEnv), itest.MarkerEnv+"="+marker)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.WaitDelay = 2 * time.Second
		stdin, err := cmd.StdinPipe() // held open: the client is still there
		if err != nil {
			t.Fatal(err)
		}
		defer stdin.Close()
		var stderr itest.SyncBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			itest.KillMarked(marker)
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
		if left := itest.WaitNoMarked(marker, time.Second); len(left) > 0 {
			t.Errorf("processes survived viewmux --stdio:\n%s", itest.DescribeProcs(left))
		}
	})

	t.Run("serve, an orphan without the marker", func(t *testing.T) {
		// The wrapper's subshell starts the grandchild with an empty
		// environment and exits at once: the grandchild is orphaned
		// before any shutdown, carries no marker, and only viewmux's
		// own descendants are left to find it by.
		marker := itest.RandomHex(t, 12)
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
			itest.ShQuote(setsid), itest.ShQuote(sh), itest.ShQuote(sleep), arg)
		cfg := fmt.Sprintf("[upstreams.sid]\ncommand = \"sh\"\nargs = %s\nenv = { %s = %s }\nrequired = true\n",
			itest.TomlArray("-c", script, itest.MuxBinary(t)), itest.MarkerEnv, itest.TomlString(marker))
		m := itest.StartMuxWith(t, itest.MuxOptions{Config: cfg, Marker: marker})
		var g itest.Proc
		deadline := time.Now().Add(15 * time.Second)
		for g.PID == 0 {
			ps, err := itest.ProcsWhere(func(p itest.Proc) bool {
				return p.Comm == "sleep" && p.State != 'Z' && strings.Contains(itest.Cmdline(p.PID), arg)
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(ps) == 1 {
				g = ps[0]
			} else if time.Now().After(deadline) {
				t.Fatalf("no orphaned sleep %s:\n%s", arg, itest.DescribeProcs(ps))
			} else {
				time.Sleep(20 * time.Millisecond)
			}
		}
		t.Cleanup(func() {
			if now, err := itest.ReadProcStat(g.PID); err == nil && now.Comm == g.Comm {
				_ = syscall.Kill(g.PID, syscall.SIGKILL)
			}
		})
		if itest.HasEnv(g.PID, itest.MarkerEnv, marker) {
			t.Fatalf("the orphan %d carries the marker; env -i did not scrub it", g.PID)
		}
		// A parentless sh subshell leaves the orphan to the nearest
		// subreaper: viewmux.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			now, err := itest.ReadProcStat(g.PID)
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
		marker := itest.RandomHex(t, 12)
		m := itest.StartMuxWith(t, itest.MuxOptions{Config: setsidConfig(t, marker), Marker: marker})
		g := setsidGrandchild(t, marker, 0, m.Stderr)
		child := itest.DemoChild(t, marker, m.Stderr, "sid", 5*time.Second)
		if err := syscall.Kill(child, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// The crashed child's connection is torn down before the
		// restart, so once the new child has its grandchild, the old one
		// has had its turn.
		setsidGrandchild(t, marker, g.PID, m.Stderr)
		assertEnded(t, g)
		// Orphans that ended are reaped: viewmux keeps no zombie children.
		var zombies []itest.Proc
		deadline := time.Now().Add(2 * time.Second)
		for {
			zombies, _ = itest.ProcsWhere(func(p itest.Proc) bool { return p.PPID == m.PID() && p.State == 'Z' })
			if len(zombies) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(zombies) > 0 {
			t.Errorf("viewmux has zombie children:\n%s", itest.DescribeProcs(zombies))
		}
	})
}
