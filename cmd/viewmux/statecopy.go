package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/viewmux/viewmux/internal/pins"
	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/internal/statedir"
	"github.com/viewmux/viewmux/internal/termsafe"
	"github.com/viewmux/viewmux/upstream/oauth"
)

// stateSubcommands are what `viewmux state` takes first, for completions.
var stateSubcommands = []string{"copy"}

// cmdState is `viewmux state copy --to URL|--from URL`.
func cmdState(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("state", stdout)
	configPath := fs.String("config", "", "read the config from `FILE` (default: discovered, else the embedded quickstart)")
	to := fs.String("to", "", "copy: from server.state_dir into the store at `URL` (redis:// or rediss://)")
	from := fs.String("from", "", "copy: from the store at `URL` into server.state_dir")
	overwrite := fs.Bool("overwrite", false, "copy: replace documents the destination holds already, when they differ")
	sub, operands, err := fs.parseSubcommand(args)
	if err != nil {
		return err
	}
	switch sub {
	case "copy":
		if len(operands) > 0 {
			return fs.usageErr(fmt.Errorf("copy: unexpected argument %q", operands[0]))
		}
		if (*to == "") == (*from == "") {
			return fs.usageErr(errors.New("copy: want one of --to URL or --from URL"))
		}
	case "":
		return fs.usageErr(errors.New("want a subcommand: copy"))
	default:
		return fs.usageErr(fmt.Errorf("unknown subcommand %q: want copy", sub))
	}
	_, cfg, err := openConfig(*configPath, configSource{})
	if err != nil {
		return err
	}
	if cfg.Server.StateDir == "" {
		return configErr(fmt.Errorf("%s: %w", cfg.Source, statedir.ErrNoDir))
	}
	url := *to + *from
	remote, err := state.OpenRedis(state.RedisOptions{URL: url, Prefix: cfg.State.KeyPrefix, Timeout: cfg.State.Timeout})
	if err != nil {
		return configErr(err)
	}
	defer remote.Close()
	sealer, err := oauth.NewSealer(cfg.State)
	if err != nil {
		return configErr(fmt.Errorf("%s: %w", cfg.Source, err))
	}
	files := state.OpenFiles(cfg.Server.StateDir)
	c := stateCopy{sealer: sealer, overwrite: *overwrite, out: stdout}
	if *to != "" {
		c.src, c.dst = files, remote
	} else {
		c.src, c.dst = remote, files
	}
	return c.run(ctx)
}

// stateCopy copies the documents viewmux keeps from one store to another:
// the pins as they are, each login opened and sealed again for where it
// goes (a shared store holds logins sealed only). What else a state
// directory holds is not viewmux's shared state, and is named and left
// alone.
type stateCopy struct {
	src, dst  state.Store
	sealer    *state.Sealer // cfg's [state] key; nil = none
	overwrite bool
	out       io.Writer
}

func (c stateCopy) run(ctx context.Context) error {
	fmt.Fprintf(c.out, "copying state from %s %s to %s %s\n", c.src.Engine(), c.src.Where(), c.dst.Engine(), c.dst.Where())
	entries, err := c.src.List(ctx, "")
	if err != nil {
		return fmt.Errorf("reading %s %s: %w", c.src.Engine(), c.src.Where(), err)
	}
	// Every document is read and converted before any is written: a login
	// that cannot be sealed for the destination stops the copy with
	// nothing written.
	type doc struct {
		key, kind string
		val       []byte
	}
	var docs []doc
	other := 0
	for _, e := range entries {
		d := doc{key: e.Key}
		switch {
		case d.key == pins.FileName:
			d.kind = "pins"
		case oauth.IsLoginKey(d.key):
			d.kind = "login"
		default:
			fmt.Fprintf(c.out, "  left alone  %s (not a pin or a login: not copied)\n", termsafe.Escape(d.key))
			other++
			continue
		}
		if d.val, err = c.src.Get(ctx, d.key); err != nil {
			return fmt.Errorf("reading %s: %w", d.key, err)
		}
		if d.val == nil {
			continue // removed since the listing
		}
		if d.kind == "login" {
			if d.val, err = oauth.ResealLogin(d.key, d.val, c.sealer, c.sealer, c.dst.Engine() == "files"); err != nil {
				return fmt.Errorf("nothing copied: %w", err)
			}
		}
		docs = append(docs, d)
	}
	var copied, same, skipped int
	for _, d := range docs {
		outcome := "copied"
		err := c.dst.Update(ctx, d.key, func(cur []byte) ([]byte, error) {
			switch {
			case cur == nil:
				outcome = "copied"
			case bytes.Equal(cur, d.val) || d.kind == "login" && c.sameLogin(d.key, cur, d.val):
				outcome = "unchanged"
				return nil, state.ErrUnchanged
			case !c.overwrite:
				outcome = "skipped"
				return nil, state.ErrUnchanged
			default:
				outcome = "replaced"
			}
			return d.val, nil
		})
		if err != nil {
			return fmt.Errorf("writing %s to %s %s: %w", d.key, c.dst.Engine(), c.dst.Where(), err)
		}
		switch outcome {
		case "unchanged":
			same++
		case "skipped":
			skipped++
			fmt.Fprintf(c.out, "  skipped     %s (%s): the destination holds another version; --overwrite replaces it\n", termsafe.Escape(d.key), d.kind)
			continue
		default:
			copied++
		}
		fmt.Fprintf(c.out, "  %-11s %s (%s)\n", outcome, termsafe.Escape(d.key), d.kind)
	}
	fmt.Fprintf(c.out, "%d copied, %d already there, %d skipped, %d left alone\n", copied, same, skipped, other)
	if skipped > 0 {
		return &exitError{1, fmt.Errorf("%d documents differ at the destination and were not replaced", skipped)}
	}
	return nil
}

// sameLogin reports whether two documents of key hold the same login:
// sealing twice gives different bytes.
func (c stateCopy) sameLogin(key string, a, b []byte) bool {
	pa, err := oauth.ResealLogin(key, a, c.sealer, nil, true)
	if err != nil {
		return false
	}
	pb, err := oauth.ResealLogin(key, b, c.sealer, nil, true)
	return err == nil && bytes.Equal(pa, pb)
}
