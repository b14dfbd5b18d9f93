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

	"github.com/mcpmux/mcpmux/aggregator"
	"github.com/mcpmux/mcpmux/configs"
	"github.com/mcpmux/mcpmux/sessions"
)

func cmdServe(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlags("serve", stderr)
	configPath := fs.String("config", "", "config file (default: discovered, else the embedded quickstart)")
	listen := fs.String("listen", "", "listen address, overriding server.listen")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	stdio := fs.Bool("stdio", false, "serve one client over stdin/stdout instead of HTTP (logs go to stderr)")
	profile := fs.String("profile", "", "with --stdio: the profile to serve (default: server.default_profile)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	switch {
	case *stdio && *listen != "":
		return usageErr("serve: --stdio and --listen cannot be combined")
	case *stdio:
		return serveStdio(ctx, *configPath, *profile, log) // stdio.go
	case *profile != "":
		return usageErr("serve: --profile needs --stdio (HTTP clients choose their profile per request)")
	}
	start := time.Now()
	src, cfg, err := openConfig(*configPath, configSource{listen: *listen, http: true}, log)
	if err != nil {
		return err
	}
	// server.listen takes effect only on restart, so a reloaded config is
	// checked for exposure against the address being served.
	src.listen = cfg.Server.Listen

	agg, srv, closeAll, err := wire(cfg, log)
	defer closeAll()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Server.Listen, err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	log.Info("listening", "addr", "http://"+ln.Addr().String()+"/mcp")

	if err := agg.Start(ctx); err != nil {
		return &exitError{exitRuntime, err}
	}
	srv.MarkStarted()
	snap := agg.Snapshot()
	log.Info("ready", "tools", len(snap.Tools), "upstreams", len(snap.Upstreams), "duration", time.Since(start))

	reloaded := reloader(ctx, src, log, agg, srv)
	defer func() { <-reloaded }()

	err = <-served
	log.Info("shutting down")
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// checkExposure refuses to serve a non-loopback address without
// authentication unless the config says so explicitly (SPEC §10).
func checkExposure(cfg *configs.Config) error {
	if len(cfg.Auth.Tokens) > 0 || cfg.Server.AllowUnauthenticated {
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
	return fmt.Errorf("server.listen %q is not a loopback address and no [[auth.tokens]] are configured; "+
		"add tokens or set server.allow_unauthenticated = true", cfg.Server.Listen)
}

// startAggregator connects the upstreams for a one-shot command and logs
// nothing unless asked to.
func startAggregator(ctx context.Context, cfg *configs.Config, log *slog.Logger) (*aggregator.Aggregator, error) {
	agg := aggregator.New(cfg, aggregator.Options{Logger: log})
	return agg, agg.Start(ctx)
}

// wire builds the aggregator and the session server for cfg, with the
// audit log open. The returned func closes the upstreams (reaping their
// children) and the audit log; call it whatever the error.
func wire(cfg *configs.Config, log *slog.Logger) (*aggregator.Aggregator, *sessions.Server, func(), error) {
	agg := aggregator.New(cfg, aggregator.Options{Logger: log})
	audit, closeAudit, err := openAudit(cfg)
	closeAll := func() {
		if err := agg.Close(); err != nil {
			log.Error("closing upstreams", "error", err)
		}
		if closeAudit != nil {
			closeAudit()
		}
	}
	if err != nil {
		return nil, nil, closeAll, err
	}
	srv, err := sessions.New(cfg, agg, sessions.Options{Logger: log, Version: version, Audit: audit})
	if err != nil {
		return nil, nil, closeAll, configErr(err)
	}
	return agg, srv, closeAll, nil
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
