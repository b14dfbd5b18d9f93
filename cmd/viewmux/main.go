// Command viewmux is one MCP endpoint for many MCP servers. This package
// parses flags and wires the packages together; the work happens elsewhere.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"reflect"
	"strings"
	"syscall"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/demo"
	"github.com/viewmux/viewmux/internal/termsafe"
	"github.com/viewmux/viewmux/upstream"
)

// Exit codes.
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
)

// exitError carries the exit code an error should end the process with.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// hintError is an error with a hint that run prints on the line after it:
// where to find help.
type hintError struct {
	err  error
	hint string
}

func (e *hintError) Error() string { return e.err.Error() }
func (e *hintError) Unwrap() error { return e.err }

// hintedUsageErr is err as a usage error (exit 2) followed by hint.
func hintedUsageErr(err error, hint string) error {
	return &exitError{exitUsage, &hintError{err, hint}}
}

func usageErr(format string, args ...any) error {
	return &exitError{exitUsage, fmt.Errorf(format, args...)}
}

func configErr(err error) error { return &exitError{exitUsage, err} }

func main() {
	// Upstreams' orphaned descendants are reparented to viewmux
	// (Linux), and none outlives it.
	endDescendants := upstream.BecomeSubreaper(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	code := run(os.Args[1:], os.Stdout, os.Stderr)
	endDescendants()
	os.Exit(code)
}

// run executes one command and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := dispatch(ctx, args, stdout, stderr)
	if err == nil {
		return exitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	// The error may quote an upstream or a child (serve's failed start):
	// its escape sequences are shown, not run by the terminal.
	fmt.Fprintln(stderr, "viewmux:", termsafe.Escape(err.Error()))
	if he := (*hintError)(nil); errors.As(err, &he) {
		fmt.Fprintln(stderr, he.hint)
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitRuntime
}

// dispatch runs the command args name: `viewmux COMMAND [FLAGS]`, or serve
// when args is empty or starts with a flag. --help, -h and --version are
// commands of their own when they come first.
func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return cmdServe(ctx, nil, stdout, stderr, true)
	}
	switch args[0] {
	case "-h", "-help", "--help":
		topHelp(stdout)
		return nil
	case "-version", "--version":
		return cmdVersion(args[1:], stdout, stderr)
	}
	if strings.HasPrefix(args[0], "-") {
		return cmdServe(ctx, args, stdout, stderr, true)
	}
	c, ok := lookupCommand(args[0])
	if !ok {
		return unknownCommand(args[0])
	}
	return c.run(ctx, args[1:], stdout, stderr)
}

// configSource is where a config comes from and what the command line
// changes in it. Its load method is the one place a config is read and
// prepared: at start (through openConfig) and on every reload.
type configSource struct {
	path   string // the config file; "" = the embedded quickstart
	listen string // replaces server.listen; "" keeps the config's
	http   bool   // served over HTTP: the exposure rule applies
}

// openConfig finds the config for --config flagPath and loads it
// with src's overrides. The returned source is src with the file filled
// in, for reloading and for logLoaded. Errors are config errors (exit 2).
func openConfig(flagPath string, src configSource) (configSource, *configs.Config, error) {
	path, err := configs.Discover(flagPath, os.Getenv)
	if err != nil {
		return src, nil, configErr(err)
	}
	src.path = path
	cfg, err := src.load()
	if err != nil {
		return src, nil, err
	}
	return src, cfg, nil
}

// logLoaded logs where the config came from, and configWarnings. It is
// separate from openConfig because the logger's format depends on the
// config.
func (s configSource) logLoaded(log *slog.Logger, cfg *configs.Config) {
	if s.path == "" {
		log.Info("no config file found; using the embedded quickstart (run `viewmux init` to write it out)")
	} else {
		log.Info("config loaded", "path", s.path)
	}
	for _, w := range configWarnings(cfg) {
		log.Warn(w)
	}
}

// configWarnings names what is valid in cfg but almost certainly not meant:
// a config that sets nothing, or one that mounts no upstream. Both pass
// validation, and both serve every client an empty tool list.
func configWarnings(cfg *configs.Config) []string {
	if len(cfg.Upstreams) > 0 {
		return nil
	}
	if len(cfg.Profiles) == 0 && len(cfg.Auth.Tokens) == 0 && reflect.ValueOf(cfg.Filter).IsZero() {
		return []string{fmt.Sprintf("config %s is empty: no upstream, no profile; every client gets an empty tool list (with no config file at all, viewmux serves its embedded quickstart; `viewmux init` writes it out)", cfg.Source)}
	}
	return []string{fmt.Sprintf("config %s mounts no upstream: every client gets an empty tool list; add an [upstreams.NAME] table with a command or a url", cfg.Source)}
}

// load reads and parses the config, applies the overrides and, when it is
// served over HTTP, refuses an unauthenticated non-loopback address. ${VAR}
// resolves through lookupEnv. Errors are config errors (exit 2), each
// naming file:line.
func (s configSource) load() (*configs.Config, error) {
	source, data := configs.QuickstartSource, configs.Quickstart()
	if s.path != "" {
		var err error
		if data, err = os.ReadFile(s.path); err != nil {
			return nil, configErr(fmt.Errorf("config: %w", err))
		}
		source = s.path
	}
	cfg, err := configs.Parse(source, data, lookupEnv)
	if err != nil {
		return nil, configErr(err)
	}
	if s.listen != "" {
		cfg.Server.Listen = s.listen
		if o := cfg.Auth.OAuth; o != nil && o.AudienceFromListen {
			// The audience defaults to the address viewmux listens on.
			aud, ok := configs.DefaultAudience(s.listen)
			if !ok {
				return nil, configErr(fmt.Errorf("--listen %q names no host clients reach viewmux at, and [auth.oauth] in %s sets no audience; set auth.oauth.audience to that URL", s.listen, source))
			}
			o.Audience = aud
		}
	}
	if s.http {
		if err := checkExposure(cfg); err != nil {
			return nil, configErr(err)
		}
	}
	return cfg, nil
}

// lookupEnv resolves ${VAR} in configs: the environment, plus VIEWMUX_SELF
// (this executable) unless the environment sets it.
func lookupEnv(name string) (string, bool) {
	if v, ok := os.LookupEnv(name); ok {
		return v, true
	}
	if name == "VIEWMUX_SELF" {
		if exe, err := os.Executable(); err == nil {
			return exe, true
		}
	}
	return "", false
}

func cmdInit(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("init", stdout)
	out := fs.String("output", "viewmux.toml", "`FILE` to write")
	if err := fs.parse(args); err != nil {
		return err
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return &exitError{exitRuntime, fmt.Errorf("init: %s already exists; not overwriting it", *out)}
		}
		return fmt.Errorf("init: %w", err)
	}
	if _, err := f.Write(configs.Quickstart()); err != nil {
		f.Close()
		return fmt.Errorf("init: writing %s: %w", *out, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("init: writing %s: %w", *out, err)
	}
	fmt.Fprintf(stdout, "wrote %s; edit it, then run `viewmux check`\n", *out)
	return nil
}

// cmdDemo serves the built-in demo MCP server over stdin/stdout.
func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("demo-server", stdout)
	name := fs.String("name", "demo", "server `NAME`")
	if err := fs.parse(args); err != nil {
		return err
	}
	// A closed stderr pipe during shutdown must not kill the process.
	signal.Ignore(syscall.SIGPIPE)
	return demo.Serve(ctx, *name, os.Stdin, os.Stdout, stderr)
}
