package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/viewmux/viewmux/aggregator"
	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/pins"
	"github.com/viewmux/viewmux/internal/redact"
	"github.com/viewmux/viewmux/internal/tracing"
	"github.com/viewmux/viewmux/sessions"
)

// cmdServe is `viewmux serve`; implicit is set when no command was named
// (bare `viewmux`, or `viewmux --flag …`).
func cmdServe(ctx context.Context, args []string, stdout, stderr io.Writer, implicit bool) error {
	fs := newFlags("serve", stdout)
	fs.implicit = implicit
	configPath := fs.String("config", "", "read the config from `FILE` (default: discovered, else the embedded quickstart)")
	listen := fs.String("listen", "", "`ADDR` to listen on, overriding server.listen")
	logs := addLogFlags(fs, "info")
	stdio := fs.Bool("stdio", false, "serve one client over stdin/stdout instead of HTTP (logs go to stderr)")
	profile := fs.String("profile", "", "with --stdio: the `NAME` of the profile to serve (default: server.default_profile)")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := logs.check(fs); err != nil {
		return err
	}
	tuneGC() // gc.go
	switch {
	case *stdio && *listen != "":
		return fs.usageErr(errors.New("--stdio and --listen cannot be combined"))
	case *stdio:
		return serveStdio(ctx, *configPath, *profile, logs, stderr) // stdio.go
	case *profile != "":
		return fs.usageErr(errors.New("--profile needs --stdio (HTTP clients choose their profile per request)"))
	}
	start := time.Now()
	src, cfg, log, secrets, err := logs.open(*configPath, configSource{listen: *listen, http: true}, stderr)
	if err != nil {
		return err
	}
	// server.listen takes effect only on restart, so a reloaded config is
	// checked for exposure against the address being served.
	src.listen = cfg.Server.Listen
	return httpRun{cfg: cfg, src: src, log: log, secrets: secrets, start: start, listen: listenTCP}.Run(ctx)
}

// listenTCP is httpRun.listen for the real server.
func listenTCP(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

// httpRun is `viewmux serve` over HTTP once the command line is parsed and
// the config loaded.
type httpRun struct {
	cfg *configs.Config
	src configSource // loaded again on SIGHUP and when its file changes
	log *slog.Logger
	// secrets is the set log masks; the aggregator replaces it at a
	// reload (nil: the aggregator keeps its own).
	secrets *redact.Live
	start   time.Time // when the command began, for the ready log
	// listen opens the listener for cfg.Server.Listen.
	listen func(addr string) (net.Listener, error)
}

// Run serves until ctx is done (exit 0), serving fails, or a required
// upstream fails to start (exit 1). On every return the HTTP server has
// shut down and closed its listener, the reloader has stopped, and the
// upstreams are closed with their children reaped.
func (r httpRun) Run(ctx context.Context) error {
	agg, srv, closeAll, err := wire(r.cfg, r.log, r.secrets)
	defer closeAll()
	if err != nil {
		return err
	}
	ln, err := r.listen(r.cfg.Server.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", r.cfg.Server.Listen, err)
	}

	// Every goroutine started below ends with ctx, which is cancelled and
	// the goroutines waited for on each return, before closeAll closes the
	// upstreams they use.
	ctx, cancel := context.WithCancel(ctx)
	var running []<-chan struct{}
	defer func() {
		cancel()
		for _, done := range running {
			<-done
		}
	}()

	served := make(chan struct{})
	var serveErr error
	go func() {
		defer close(served)
		serveErr = srv.Serve(ctx, ln) // closes ln
	}()
	running = append(running, served)
	r.log.Info("listening", "addr", "http://"+ln.Addr().String()+"/mcp")

	if err := agg.Start(ctx); err != nil {
		// It may quote a child's stderr: no configured secret is shown.
		return &exitError{exitRuntime, errors.New(agg.Redact(err.Error()))}
	}
	srv.MarkStarted()
	snap := agg.Snapshot()
	r.log.Info("ready", "tools", len(snap.Tools), "upstreams", len(snap.Upstreams), "duration", time.Since(r.start))

	running = append(running, reloader(ctx, r.src, r.log, agg, srv))
	running = append(running, pinsWatcher(ctx, r.cfg, r.log, agg))

	<-served
	r.log.Info("shutting down")
	if serveErr != nil && !errors.Is(serveErr, net.ErrClosed) {
		return serveErr
	}
	return nil
}

// checkExposure refuses to serve a non-loopback address without
// authentication unless the config says so explicitly.
func checkExposure(cfg *configs.Config) error {
	if cfg.Auth.Required() || cfg.Server.AllowUnauthenticated {
		return nil
	}
	host, _, err := net.SplitHostPort(cfg.Server.Listen)
	if err != nil {
		return fmt.Errorf("server.listen %q: %w", cfg.Server.Listen, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("server.listen %q is not a loopback address and neither [[auth.tokens]] nor [auth.oauth] is configured; "+
		"add tokens or set server.allow_unauthenticated = true", cfg.Server.Listen)
}

// startAggregator connects the upstreams for a one-shot command and logs
// nothing unless asked to. It applies pinned definitions as a server
// would (a quarantined tool is left out), without recording anything.
func startAggregator(ctx context.Context, cfg *configs.Config, log *slog.Logger) (*aggregator.Aggregator, error) {
	var store *pins.Store
	if hasStateStore(cfg) && cfg.Server.Pin != configs.PinOff {
		st, err := openState(cfg)
		if err != nil {
			return nil, configErr(err)
		}
		// The command's process ends with it; the store's connections
		// go with the process.
		store = pins.NewReadOnlyOn(st)
	}
	agg := aggregator.New(cfg, aggregator.Options{Logger: log, Pins: store})
	return agg, agg.Start(ctx)
}

// wire builds the aggregator and the session server for cfg, with the
// audit log open and traces exported when the OTEL_* variables ask for
// them. The returned func shuts the session server down (which also stops
// the background work sessions.New started), closes the upstreams
// (reaping their children) and the audit log, and exports the last spans;
// call it whatever the error, after everything using them has stopped.
// secrets is the set log masks, which the aggregator keeps current (nil:
// none is shared).
func wire(cfg *configs.Config, log *slog.Logger, secrets *redact.Live) (*aggregator.Aggregator, *sessions.Server, func(), error) {
	var srv *sessions.Server
	var traces *tracing.Provider
	audit, closeAudit, err := openAudit(cfg)
	closeAll := func() {
		if srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownGrace)
			if err := srv.Shutdown(ctx); err != nil {
				log.Error("closing sessions", "error", err)
			}
			cancel()
			if err := srv.Aggregator().Close(); err != nil {
				log.Error("closing upstreams", "error", err)
			}
		}
		if closeAudit != nil {
			closeAudit()
		}
		// Last, so that the spans of requests answered during shutdown
		// are exported too.
		ctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
		if err := traces.Shutdown(ctx); err != nil {
			log.Warn("exporting the last traces", "error", err)
		}
		cancel()
	}
	if err != nil {
		return nil, nil, closeAll, err
	}
	if traces, err = startTraces(log); err != nil {
		return nil, nil, closeAll, configErr(err)
	}
	st, err := openStateLogged(cfg, log)
	if err != nil {
		return nil, nil, closeAll, configErr(err)
	}
	srv, err = sessions.New(cfg, sessions.Options{Logger: log, Version: version(), Audit: audit, Tracer: traces.Tracer(),
		Aggregator: aggregator.Options{Logger: log, Secrets: secrets, Pins: newPins(cfg, st), State: st}})
	if err != nil {
		st.Close()
		return nil, nil, closeAll, configErr(err)
	}
	prevClose := closeAll
	closeAll = func() { prevClose(); st.Close() }
	return srv.Aggregator(), srv, closeAll, nil
}

// traceFlushTimeout bounds the export of the last spans at exit.
const traceFlushTimeout = 5 * time.Second

// startTraces starts the trace exporter the standard OTEL_* variables ask
// for (internal/tracing), or returns nil when they ask for none. The
// OpenTelemetry SDK's own errors (a collector that cannot be reached) are
// logged as warnings: its error handler is process-wide, so it is set
// here, at the top.
func startTraces(log *slog.Logger) (*tracing.Provider, error) {
	p, err := tracing.New(context.Background(), os.Getenv, version())
	if err != nil || p == nil {
		return nil, err
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("OpenTelemetry", "error", err)
	}))
	log.Info("exporting traces", "protocol", p.Protocol)
	return p, nil
}

// openAudit opens the [audit] log for appending, or returns a nil writer
// when none is configured. The returned func closes it.
func openAudit(cfg *configs.Config) (io.Writer, func(), error) {
	if cfg.Audit.Path == "" {
		return nil, func() {}, nil
	}
	f, err := os.OpenFile(cfg.Audit.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("audit.path: %w", err)
	}
	return f, func() { f.Close() }, nil
}
