package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// These tests count the process's goroutines, so none of them may run in
// parallel with another test.

// TestServeStopsWhenServingFails closes the listener under a ready server:
// Serve fails without any signal or cancellation, and Run must still stop
// the config reloader and close the upstreams before it returns.
func TestServeStopsWhenServingFails(t *testing.T) {
	requireProc(t)
	base := goroutineBaseline()
	path := writeConfig(t, "[server]\nlisten = \"127.0.0.1:0\"\n\n"+demoUpstream(t, "demo", "demo-server", "--name", "demo"))
	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	src, cfg, err := openConfig(path, configSource{http: true})
	if err != nil {
		t.Fatal(err)
	}
	src.listen = cfg.Server.Listen

	lns := make(chan net.Listener, 1)
	listen := func(addr string) (net.Listener, error) {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			lns <- ln
		}
		return ln, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // only a backstop: the test never cancels before Run returns
	done := make(chan error, 1)
	go func() {
		done <- httpRun{cfg: cfg, src: src, log: log, start: time.Now(), listen: listen}.Run(ctx)
	}()

	var ln net.Listener
	select {
	case ln = <-lns:
	case err := <-done:
		t.Fatalf("Run returned before listening: %v\n--- log ---\n%s", err, logs)
	case <-time.After(10 * time.Second):
		t.Fatalf("Run did not listen within 10s\n--- log ---\n%s", logs)
	}
	waitReady(t, ln.Addr().String(), logs)
	if kids := children(t); len(kids) != 1 {
		t.Fatalf("want the one demo upstream child while serving, got %v", kids)
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}

	select {
	case err := <-done:
		t.Logf("Run returned %v after its listener was closed", err)
	case <-time.After(10 * time.Second):
		dump := goroutineDump()
		cancel() // let it go, so that later tests count from a clean slate
		<-done
		t.Fatalf("Run did not return within 10s of Serve failing\n--- log ---\n%s\n--- goroutines ---\n%s", logs, dump)
	}
	if kids := children(t); len(kids) > 0 {
		t.Errorf("upstream children left after Run returned: %v", kids)
	}
	waitGoroutines(t, base)
}

// TestServeRequiredUpstreamFails runs `viewmux serve` with a required
// upstream whose child exits at once: it must return exit 1 naming the
// upstream, with its listener closed and nothing it started still running.
func TestServeRequiredUpstreamFails(t *testing.T) {
	requireProc(t)
	base := goroutineBaseline()
	path := writeConfig(t, demoUpstream(t, "demo", "demo-server", "--name", "demo")+"\n"+
		demoUpstream(t, "broken", "demo-server", "--no-such-flag")+"required = true\n")
	stderr := &lockedBuffer{}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // only a backstop: the test never cancels before cmdServe returns
	done := make(chan error, 1)
	go func() {
		done <- cmdServe(ctx, []string{"--config", path, "--listen", "127.0.0.1:0", "--log-level", "debug"}, io.Discard, stderr, false)
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("cmdServe did not return within 20s of a required upstream failing\n--- stderr ---\n%s", stderr)
	}

	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitRuntime {
		t.Fatalf("cmdServe returned %v, want an exit %d error\n--- stderr ---\n%s", err, exitRuntime, stderr)
	}
	if !strings.Contains(err.Error(), `required upstream "broken"`) {
		t.Errorf("the error does not name the upstream: %v", err)
	}
	if n := strings.Count(err.Error(), `upstream "broken"`); n != 1 {
		t.Errorf("the error names the upstream %d times, want once: %v", n, err)
	}
	m := regexp.MustCompile(`msg=listening addr=http://(\S+)/mcp`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no listening address in the log:\n%s", stderr)
	}
	if c, err := net.DialTimeout("tcp", m[1], time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after cmdServe returned", m[1])
	}
	if kids := children(t); len(kids) > 0 {
		t.Errorf("upstream children left after cmdServe returned: %v", kids)
	}
	waitGoroutines(t, base)
}

// demoUpstream returns the TOML of a stdio upstream that runs this test
// binary as viewmux with args.
func demoUpstream(t *testing.T, name string, args ...string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = strconv.Quote(a)
	}
	return fmt.Sprintf("[upstreams.%s]\ncommand = %q\nargs = [%s]\nenv = { %s = \"1\" }\n",
		name, exe, strings.Join(quoted, ", "), asViewmuxEnv)
}

// waitReady polls GET /readyz on addr until it answers 200.
func waitReady(t *testing.T, addr string, logs fmt.Stringer) {
	t.Helper()
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := client.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/readyz did not answer 200 within 15s (last: %v)\n--- log ---\n%s", addr, err, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// goroutineBaseline starts the goroutines that live as long as the process
// once something uses them (os/signal's watcher), then counts goroutines.
func goroutineBaseline() int {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGHUP)
	signal.Stop(c)
	return runtime.NumGoroutine()
}

// waitGoroutines waits up to 5s for the goroutine count to fall back to
// base, and fails with every goroutine's stack if it does not.
func waitGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left running, %d before:\n%s", runtime.NumGoroutine(), base, goroutineDump())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func goroutineDump() string {
	var b bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&b, 1)
	return b.String()
}

func requireProc(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skipf("no /proc on this machine: %v", err)
	}
}

// children returns this process's child processes, zombies included, as
// "pid (state)".
func children(t *testing.T) []string {
	t.Helper()
	self := os.Getpid()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) >= 2 && f[1] == strconv.Itoa(self) {
			out = append(out, e.Name()+" ("+f[0]+")")
		}
	}
	return out
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers and readers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
