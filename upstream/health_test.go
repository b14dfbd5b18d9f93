package upstream

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestHealthAfterAKilledChild(t *testing.T) {
	cfg := stdioConfig(t, "healthy", "serve")
	cfg.Env[envStderr] = "1"
	u := New(cfg, fastOptions(&logSink{}))
	if h := u.Health(); h.Connects != 0 || h.Restarts != 0 || h.LastError != nil || h.Transport != "" {
		t.Fatalf("Health before Start = %+v, want nothing recorded", h)
	}
	startUpstream(t, u)
	h := u.Health()
	if h.State != StateUp || h.Transport != "stdio" || h.Protocol == "" || h.Connects != 1 || h.Restarts != 0 || h.LastError != nil {
		t.Fatalf("Health after Start = %+v, want up over stdio, a protocol, 1 connect, 0 restarts, no error", h)
	}
	before := whoami(t, u)
	waitFor(t, 5*time.Second, "the child's stderr lines", func() bool {
		return slices.Contains(u.current().proc.tail.snapshot(), "hello from stderr")
	})
	if err := syscall.Kill(before.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "the reconnect", func() bool {
		h := u.Health()
		return h.State == StateUp && h.Connects == 2
	})
	h = u.Health()
	if h.Restarts != 1 {
		t.Errorf("Restarts = %d after one kill, want 1", h.Restarts)
	}
	if h.LastError == nil || !strings.Contains(h.LastError.Error(), `upstream "healthy": connection lost`) || !strings.Contains(h.LastError.Error(), "signal: killed") || h.LastErrorAt.IsZero() {
		t.Errorf("LastError = %v at %v, want the lost connection naming the upstream and the child's exit status", h.LastError, h.LastErrorAt)
	}
	if !slices.Contains(h.Stderr, "hello from stderr") {
		t.Errorf("Stderr = %q, want the dead child's lines", h.Stderr)
	}
}

func TestHealthOfAChildThatDiesAtStart(t *testing.T) {
	cfg := stdioConfig(t, "doomed", "serve")
	cfg.Command, cfg.Args = "sh", []string{"-c", `echo '<b>boom</b>' >&2; exit 3`}
	opts := fastOptions(&logSink{})
	opts.MinBackoff = time.Hour // one attempt only
	u := New(cfg, opts)
	t.Cleanup(func() { u.Close() })
	if err := u.Start(context.Background()); err == nil {
		t.Fatal("Start succeeded for a child that exits at once")
	}
	h := u.Health()
	if h.State == StateUp || h.Connects != 0 || h.Restarts != 0 || h.Transport != "" {
		t.Errorf("Health = %+v, want not up, no connect, no restart", h)
	}
	if h.LastError == nil || !strings.Contains(h.LastError.Error(), `upstream "doomed"`) || strings.Contains(h.LastError.Error(), "stderr|") {
		t.Errorf("LastError = %v, want the attempt's error naming the upstream, without the stderr lines in it", h.LastError)
	}
	if !slices.Equal(h.Stderr, []string{"<b>boom</b>"}) {
		t.Errorf("Stderr = %q, want the child's one line", h.Stderr)
	}
}
