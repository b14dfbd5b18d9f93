package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/viewmux/viewmux/aggregator"
	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/audit"
	"github.com/viewmux/viewmux/internal/pins"
	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/internal/statedir"
	"github.com/viewmux/viewmux/internal/termsafe"
	"github.com/viewmux/viewmux/sessions"
)

// pinsSubcommands are what `viewmux pins` takes first, for completions.
var pinsSubcommands = []string{"list", "approve"}

// exitPending is the exit code of `viewmux pins list` when changes are
// waiting for approval, so that a script can tell them from an error (1).
const exitPending = 3

// cmdPins is `viewmux pins list|approve`.
func cmdPins(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("pins", stdout)
	configPath := fs.String("config", "", "read the config from `FILE` (default: discovered, else the embedded quickstart)")
	asJSON := fs.Bool("json", false, "list: print the pending changes as a JSON array")
	upstream := fs.String("upstream", "", "approve: every pending change of the upstream `NAME`")
	all := fs.Bool("all", false, "approve: every pending change")
	sub, operands, err := fs.parseSubcommand(args) // flags may come before or after TOOL
	if err != nil {
		return err
	}
	switch sub {
	case "list":
		if len(operands) > 0 {
			return fs.usageErr(fmt.Errorf("list: unexpected argument %q", operands[0]))
		}
		if *upstream != "" || *all {
			return fs.usageErr(errors.New("list: --upstream and --all are approve's"))
		}
	case "approve":
		n := len(operands)
		if *upstream != "" {
			n++
		}
		if *all {
			n++
		}
		if n != 1 {
			return fs.usageErr(errors.New("approve: want one of TOOL, --upstream NAME or --all"))
		}
		if *asJSON {
			return fs.usageErr(errors.New("approve: --json is list's"))
		}
	case "":
		return fs.usageErr(errors.New("want a subcommand: list or approve"))
	default:
		return fs.usageErr(fmt.Errorf("unknown subcommand %q: want list or approve", sub))
	}
	_, cfg, err := openConfig(*configPath, configSource{})
	if err != nil {
		return err
	}
	if !hasStateStore(cfg) {
		return configErr(fmt.Errorf("%s: %w", cfg.Source, statedir.ErrNoDir))
	}
	if cfg.Server.Pin == configs.PinOff {
		fmt.Fprintf(stderr, "viewmux: note: server.pin is \"off\" in %s: nothing is being pinned\n", cfg.Source)
	}
	st, err := openState(cfg)
	if err != nil {
		return configErr(err)
	}
	defer st.Close()
	store := pins.NewOn(st)
	if sub == "list" {
		return pinsList(store, *asJSON, stdout)
	}
	sel := pins.Selector{All: *all, Upstream: *upstream}
	if len(operands) == 1 {
		sel.Tool = operands[0]
	}
	return pinsApprove(cfg, store, sel, stdout)
}

// pinsList prints the pending changes; it exits exitPending when there
// are any.
func pinsList(store *pins.Store, asJSON bool, stdout io.Writer) error {
	pending, err := store.Pending()
	if err != nil {
		return err
	}
	if asJSON {
		if pending == nil {
			pending = []pins.Pending{}
		}
		b, err := json.MarshalIndent(pending, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		for _, p := range pending {
			// An upstream chose these names and definitions: its escape
			// sequences are shown, not run by the terminal.
			fmt.Fprintf(stdout, "%s (upstream %s, tool %s): %s, seen %s\n", termsafe.Escape(p.Exposed),
				termsafe.Escape(p.Upstream), termsafe.Escape(p.Tool), p.Kind, p.Seen)
			if p.Previous != "" {
				fmt.Fprintf(stdout, "  pinned %s, now %s\n", pins.ShortHash(p.Previous), pins.ShortHash(p.Hash))
			} else {
				fmt.Fprintf(stdout, "  new %s\n", pins.ShortHash(p.Hash))
			}
			for _, l := range strings.Split(strings.TrimSuffix(p.Diff, "\n"), "\n") {
				fmt.Fprintf(stdout, "  %s\n", termsafe.Escape(l))
			}
			fmt.Fprintln(stdout)
		}
		if len(pending) == 0 {
			fmt.Fprintf(stdout, "no pending changes (%s)\n", store.Path())
		} else {
			fmt.Fprintf(stdout, "approve with: viewmux pins approve TOOL | --upstream NAME | --all\n")
		}
	}
	if len(pending) > 0 {
		return &exitError{exitPending, fmt.Errorf("pins: %d change(s) waiting for approval", len(pending))}
	}
	return nil
}

// pinsApprove approves what sel chooses and audits each approval in
// [audit] path, when the config has one.
func pinsApprove(cfg *configs.Config, store *pins.Store, sel pins.Selector, stdout io.Writer) error {
	approved, err := store.Approve(sel)
	if err != nil {
		return err
	}
	if len(approved) == 0 {
		what := fmt.Sprintf("tool %q", sel.Tool)
		switch {
		case sel.All:
			what = "any tool"
		case sel.Upstream != "":
			what = fmt.Sprintf("upstream %q", sel.Upstream)
		}
		return &exitError{exitRuntime, fmt.Errorf("pins approve: no pending change for %s (see `viewmux pins list`)", what)}
	}
	if cfg.Audit.Path != "" {
		f, err := os.OpenFile(cfg.Audit.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("audit.path: %w (the approvals are recorded in %s)", err, store.Path())
		}
		var werr error
		log := audit.New(f, false, func(err error) { werr = err })
		now := time.Now().UTC()
		for _, ev := range approved {
			log.Write(sessions.PinRecord(now, ev), nil)
		}
		if err := f.Close(); err != nil && werr == nil {
			werr = err
		}
		if werr != nil {
			return fmt.Errorf("audit.path: %w (the approvals are recorded in %s)", werr, store.Path())
		}
	}
	for _, ev := range approved {
		fmt.Fprintf(stdout, "approved %s (upstream %s, tool %s): %s\n", termsafe.Escape(ev.Exposed),
			termsafe.Escape(ev.Upstream), termsafe.Escape(ev.Tool), pins.ShortHash(ev.Hash))
	}
	fmt.Fprintf(stdout, "running servers using %s pick this up without a restart\n", store.Path())
	return nil
}

// newPins returns the pins of store st for a server; nil when nothing is
// pinned (server.pin, like every [server] key, takes effect on restart).
func newPins(cfg *configs.Config, st state.Store) *pins.Store {
	if !hasStateStore(cfg) || cfg.Server.Pin == configs.PinOff {
		return nil
	}
	return pins.NewOn(st)
}

// pinsDebounce collects the events of one write of the state file (a
// temporary file, then a rename).
const pinsDebounce = 100 * time.Millisecond

// pinsWatcher reads the pins again whenever their document changes (an
// approval by `viewmux pins approve`, or by another replica on a shared
// store), until ctx is done. It watches
// nothing when pinning is off at start (a reload that turns it on picks
// approvals up at the next reload, or SIGHUP). Wait on the returned
// channel for it to finish.
func pinsWatcher(ctx context.Context, cfg *configs.Config, log *slog.Logger, agg *aggregator.Aggregator) <-chan struct{} {
	done := make(chan struct{})
	store := agg.Pins()
	if store == nil || cfg.Server.Pin == configs.PinOff {
		close(done)
		return done
	}
	changes := store.Changes(ctx)
	go func() {
		defer close(done)
		defer func() {
			if v := recover(); v != nil {
				log.Error("panic in the pins' watcher; approvals are picked up on SIGHUP", "panic", v)
			}
		}()
		var timer <-chan time.Time
		for {
			select {
			case _, ok := <-changes:
				if !ok {
					return // ctx is done
				}
				timer = time.After(pinsDebounce)
			case <-timer:
				timer = nil
				agg.RefreshPins()
			}
		}
	}()
	return done
}
