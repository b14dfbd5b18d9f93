package main

import (
	"fmt"
	"log/slog"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/state"
)

// openState opens the store cfg's [state] table names: the Redis or Valkey
// server of state.url, or else the files of server.state_dir. Opening
// does not wait for the server: one that is down makes the store report
// itself down until it answers.
func openState(cfg *configs.Config) (state.Store, error) { return openStateLogged(cfg, nil) }

// openStateLogged is openState for a server: log hears when the store
// stops answering, once a minute while it does not, and when it is back.
func openStateLogged(cfg *configs.Config, log *slog.Logger) (state.Store, error) {
	if cfg.State.URL == "" {
		f := state.OpenFiles(cfg.Server.StateDir)
		f.Logger = log
		return f, nil
	}
	st, err := state.OpenRedis(state.RedisOptions{URL: cfg.State.URL, Prefix: cfg.State.KeyPrefix, Timeout: cfg.State.Timeout, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("%s: [state]: %w", cfg.Source, err)
	}
	return st, nil
}

// hasStateStore reports whether cfg keeps its state anywhere: a shared
// store, or a state directory.
func hasStateStore(cfg *configs.Config) bool {
	return cfg.State.URL != "" || cfg.Server.StateDir != ""
}
