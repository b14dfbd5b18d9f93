package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/viewmux/viewmux/sessions/grant"
)

// serveStdio is `viewmux serve --stdio`: it serves the one client that
// launched it over stdin/stdout and listens on nothing. Stdout carries
// JSON-RPC only: it is taken over before anything else runs, and file
// descriptor 1 is pointed at stderr, so a stray write to os.Stdout (or by a
// library) lands in the logs instead of corrupting the protocol. When stdin
// ends, or a signal comes, it answers every request it read (within
// server.shutdown_grace), closes the upstreams and returns nil.
func serveStdio(ctx context.Context, configPath, profile string, logs logFlags, stderr io.Writer) error {
	out, err := takeStdout()
	if err != nil {
		return err
	}
	defer out.Close()
	// A client that goes away closes our pipes: report EPIPE as an error
	// instead of dying of SIGPIPE mid-shutdown.
	signal.Ignore(syscall.SIGPIPE)

	start := time.Now()
	src, cfg, log, secrets, err := logs.open(configPath, configSource{}, stderr)
	if err != nil {
		return err
	}
	agg, srv, closeAll, err := wire(cfg, log, secrets)
	defer closeAll()
	if err != nil {
		return err
	}
	// An unknown profile is a usage error, found before any upstream starts.
	if _, err := srv.Resolver().ResolveLocal(grant.Selection{Profile: profile}); err != nil {
		if errors.Is(err, grant.ErrUnknownProfile) {
			return configErr(fmt.Errorf("--profile: %w", err))
		}
		return configErr(err)
	}
	// Serve once the upstreams have had their first attempt, so the
	// client's first tools/list is complete; its initialize waits in the
	// pipe meanwhile.
	if err := agg.Start(ctx); err != nil {
		// It may quote a child's stderr: no configured secret is shown.
		return &exitError{exitRuntime, errors.New(agg.Redact(err.Error()))}
	}
	srv.MarkStarted()
	snap := agg.Snapshot()
	log.Info("ready on stdio", "profile", profile, "tools", len(snap.Tools), "upstreams", len(snap.Upstreams), "duration", time.Since(start))

	rctx, stopReload := context.WithCancel(ctx)
	reloaded := reloader(rctx, src, log, agg, srv)
	pinsWatched := pinsWatcher(rctx, cfg, log, agg)
	defer func() {
		stopReload()
		<-reloaded
		<-pinsWatched
	}()

	// ServeStdio returns at the end of stdin or, after a signal, once
	// every request it read is answered.
	err = srv.ServeStdio(ctx, profile, os.Stdin, out)
	switch {
	case ctx.Err() != nil:
		log.Info("signalled; stdio requests answered, shutting down")
	case err != nil:
		// A reload that removed the profile ended the session; run
		// reports err.
	default:
		log.Info("stdio client gone; shutting down")
	}
	return err
}
