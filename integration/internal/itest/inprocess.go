//go:build unix

package itest

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/viewmux/viewmux/aggregator"
	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/sessions"
	"github.com/viewmux/viewmux/upstream"
)

// inProcessMux is viewmux's HTTP serving run inside the test process: the
// aggregator and the session server wired as cmd/viewmux wires them, on a
// real loopback listener, with real upstream child processes. It exists for
// tests that inject an upstream option the binary has no flag or config key
// for (production code carries no test-only knobs); every other
// test runs the binary. Its methods are safe for concurrent use.
type inProcessMux struct {
	Addr   string // host:port it listens on
	Marker string // value of MarkerEnv in every upstream child's environment
	logs   *SyncBuffer
}

// URL returns the streamable HTTP endpoint.
func (m *inProcessMux) URL() string { return "http://" + m.Addr + "/mcp" }

// PID returns the process that plays viewmux: this one.
func (m *inProcessMux) PID() int { return os.Getpid() }

// Stderr returns everything logged so far, as the binary would have
// written it to stderr.
func (m *inProcessMux) Stderr() string { return m.logs.String() }

// StartInProcessMux parses configTOML, adds MarkerEnv to the env table of
// every stdio upstream (this process does not carry it, so children would
// not inherit it), and serves it with upstreamOpts given to the
// aggregator's upstream hook. It returns once the first connection attempts
// are done, like the binary's /readyz. At cleanup it stops serving, closes
// the upstreams and asserts that no process carrying the marker survives.
func StartInProcessMux(t *testing.T, configTOML string, upstreamOpts func(*configs.Upstream) upstream.Options) *inProcessMux {
	t.Helper()
	cfg, err := configs.Parse("viewmux.toml", []byte(configTOML), os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	m := &inProcessMux{Marker: RandomHex(t, 12), logs: &SyncBuffer{}}
	for _, uc := range cfg.Upstreams {
		if uc.Transport != configs.TransportStdio {
			continue
		}
		if uc.Env == nil {
			uc.Env = make(map[string]string)
		}
		uc.Env[MarkerEnv] = m.Marker
	}
	log := slog.New(slog.NewTextHandler(m.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv, err := sessions.New(cfg, sessions.Options{Logger: log,
		Aggregator: aggregator.Options{Logger: log, Upstream: upstreamOpts}})
	if err != nil {
		t.Fatal(err)
	}
	agg := srv.Aggregator()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m.Addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()

	// Registered before Start, so that it also runs when Start fails.
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil && !errors.Is(err, net.ErrClosed) {
			t.Errorf("serving: %v", err)
		}
		sctx, stop := context.WithTimeout(context.Background(), cfg.Server.ShutdownGrace)
		defer stop()
		if err := srv.Shutdown(sctx); err != nil {
			t.Errorf("closing sessions: %v", err)
		}
		if err := agg.Close(); err != nil {
			t.Errorf("closing upstreams: %v", err)
		}
		if survivors := WaitNoMarked(m.Marker, 2*time.Second); len(survivors) > 0 {
			t.Errorf("processes started by the in-process viewmux survived it:\n%s", DescribeProcs(survivors))
			KillMarked(m.Marker)
		}
		if t.Failed() {
			t.Logf("--- in-process viewmux log ---\n%s", m.Stderr())
		}
	})
	if err := agg.Start(ctx); err != nil {
		t.Fatalf("starting upstreams: %v", err)
	}
	srv.MarkStarted()
	return m
}
