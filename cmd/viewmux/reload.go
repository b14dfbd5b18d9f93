package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/viewmux/viewmux/aggregator"
	"github.com/viewmux/viewmux/sessions"
)

// reloadDebounce collects the bursts of events editors make when saving.
const reloadDebounce = 250 * time.Millisecond

// reloader loads src again on SIGHUP and when its file changes, and
// applies a valid config. It runs until ctx is done; wait on the returned
// channel for it to finish.
func reloader(ctx context.Context, src configSource, log *slog.Logger, agg *aggregator.Aggregator, srv *sessions.Server) <-chan struct{} {
	path := src.path
	done := make(chan struct{})
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)

	var events <-chan fsnotify.Event
	var watchErrs <-chan error
	var w *fsnotify.Watcher
	if path != "" {
		var err error
		if w, err = fsnotify.NewWatcher(); err == nil {
			// Watch the directory: editors replace the file rather than
			// write it in place, which ends a watch on the file itself.
			if err = w.Add(filepath.Dir(path)); err == nil {
				events, watchErrs = w.Events, w.Errors
			}
		}
		if err != nil {
			log.Warn("not watching the config file; reload with SIGHUP", "path", path, "error", err)
		}
	}
	go func() {
		defer close(done)
		defer signal.Stop(hup)
		if w != nil {
			defer w.Close()
		}
		defer func() {
			if v := recover(); v != nil {
				log.Error("panic in config reloader; reloading is off", "panic", v)
			}
		}()
		var timer <-chan time.Time
		abs, _ := filepath.Abs(path)
		// target is the file path resolves to. A Kubernetes ConfigMap
		// volume updates by swapping the symlink "..data" in the
		// directory, so the file's own name sees no event, only where it
		// leads changes.
		target, _ := filepath.EvalSymlinks(abs)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: reloading config")
				reload(ctx, src, log, agg, srv)
			case ev := <-events:
				if p, _ := filepath.Abs(ev.Name); p == abs && ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename) != 0 {
					timer = time.After(reloadDebounce)
				} else if t, _ := filepath.EvalSymlinks(abs); t != target {
					timer = time.After(reloadDebounce)
				}
			case err := <-watchErrs:
				log.Warn("config watch error", "error", err)
			case <-timer:
				timer = nil
				target, _ = filepath.EvalSymlinks(abs)
				log.Info("config file changed: reloading", "path", path)
				reload(ctx, src, log, agg, srv)
			}
		}
	}()
	return done
}

// reload loads src (the quickstart when it has no file) and applies the
// config if valid; an invalid one is logged with every error and the
// running config stays.
func reload(ctx context.Context, src configSource, log *slog.Logger, agg *aggregator.Aggregator, srv *sessions.Server) {
	cfg, err := src.load()
	if err != nil {
		log.Error("config rejected; keeping the running config", "path", src.path, "error", err)
		return
	}
	if err := srv.Reload(cfg); err != nil {
		log.Error("config rejected; keeping the running config", "path", src.path, "error", err)
		return
	}
	res := agg.Reload(ctx, cfg)
	agg.RefreshPins() // approvals, when the pins' file is not watched
	log.Info("config reloaded", "path", src.path, "added", res.Added, "removed", res.Removed, "restarted", res.Restarted, "kept", len(res.Kept))
}
