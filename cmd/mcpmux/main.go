// Command mcpmux is one MCP endpoint for many MCP servers. This package
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
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/mcpmux/mcpmux/configs"
	"github.com/mcpmux/mcpmux/internal/demo"
	"github.com/mcpmux/mcpmux/internal/redact"
	"github.com/mcpmux/mcpmux/upstream"
)

// version is set at link time (-ldflags "-X main.version=…").
var version = "dev"

// Exit codes (SPEC §2).
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

func usageErr(format string, args ...any) error {
	return &exitError{exitUsage, fmt.Errorf(format, args...)}
}

func configErr(err error) error { return &exitError{exitUsage, err} }

const usage = `mcpmux: one MCP endpoint for many MCP servers

Usage:
  mcpmux [serve] [--config FILE] [--listen ADDR]   serve HTTP (default)
  mcpmux serve --stdio [--profile NAME]            serve one client over stdin/stdout
  mcpmux check [--config FILE]                     validate, connect, report each upstream and profile
  mcpmux tools [--config FILE] [--profile NAME] [--toolsets A,B] [--read-only] [--json]
                                                   print the tools a client would get
  mcpmux import FILE                               convert an mcpServers JSON file to TOML on stdout
  mcpmux init                                      write the quickstart config to ./mcpmux.toml
  mcpmux version                                   print version information

Config: --config, else $MCPMUX_CONFIG, else ./mcpmux.toml, else
$XDG_CONFIG_HOME/mcpmux/config.toml, else the embedded quickstart.
`

func main() {
	// SPEC §8: upstreams' orphaned descendants are reparented to mcpmux
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
	fmt.Fprintln(stderr, "mcpmux:", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitRuntime
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return cmdServe(ctx, args, stderr)
	case "check":
		return cmdCheck(ctx, args, stdout, stderr)
	case "tools":
		return cmdTools(ctx, args, stdout, stderr)
	case "import":
		return cmdImport(args, stdout, stderr)
	case "init":
		return cmdInit(args, stdout, stderr)
	case "version":
		return cmdVersion(args, stdout, stderr)
	case "demo-server":
		return cmdDemo(ctx, args, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return usageErr("unknown command %q", cmd)
	}
}

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("mcpmux "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args and refuses stray positional arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &exitError{exitUsage, err}
	}
	if fs.NArg() > 0 {
		return usageErr("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	return nil
}

// configSource is where a config comes from and what the command line
// changes in it. Its load method is the one place a config is read and
// prepared: at start (through openConfig) and on every reload.
type configSource struct {
	path   string // the config file; "" = the embedded quickstart
	listen string // replaces server.listen; "" keeps the config's
	http   bool   // served over HTTP: the exposure rule (SPEC §10) applies
}

// openConfig finds the config for --config flagPath (SPEC §2), loads it
// with src's overrides and logs where it came from. The returned source
// is src with the file filled in, for reloading. Errors are config errors
// (exit 2).
func openConfig(flagPath string, src configSource, log *slog.Logger) (configSource, *configs.Config, error) {
	path, err := configs.Discover(flagPath, os.Getenv)
	if err != nil {
		return src, nil, configErr(err)
	}
	src.path = path
	cfg, err := src.load()
	if err != nil {
		return src, nil, err
	}
	if path == "" {
		log.Info("no config file found; using the embedded quickstart (run `mcpmux init` to write it out)")
	} else {
		log.Info("config loaded", "path", path)
	}
	return src, cfg, nil
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
	}
	if s.http {
		if err := checkExposure(cfg); err != nil {
			return nil, configErr(err)
		}
	}
	return cfg, nil
}

// lookupEnv resolves ${VAR} in configs: the environment, plus MCPMUX_SELF
// (this executable) unless the environment sets it.
func lookupEnv(name string) (string, bool) {
	if v, ok := os.LookupEnv(name); ok {
		return v, true
	}
	if name == "MCPMUX_SELF" {
		if exe, err := os.Executable(); err == nil {
			return exe, true
		}
	}
	return "", false
}

// newLogger returns a text logger on w at the given level.
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageErr("--log-level: %v", err)
	}
	// Upstream URLs may carry secrets in their queries; every line is
	// redacted, library lines (mcp-go's HTTP errors) included.
	return slog.New(redact.NewHandler(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))), nil
}

func cmdInit(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("init", stderr)
	out := fs.String("output", "mcpmux.toml", "file to write")
	if err := parseFlags(fs, args); err != nil {
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
	fmt.Fprintf(stdout, "wrote %s; edit it, then run `mcpmux check`\n", *out)
	return nil
}

func cmdImport(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("import", stderr)
	if err := fs.Parse(args); err != nil {
		return &exitError{exitUsage, err}
	}
	if fs.NArg() != 1 {
		return usageErr("import: want exactly one FILE, got %d arguments", fs.NArg())
	}
	data, err := os.ReadFile(fs.Arg(0))
	if err != nil {
		return &exitError{exitUsage, fmt.Errorf("import: %w", err)}
	}
	out, err := configs.Import(data)
	if err != nil {
		return &exitError{exitUsage, fmt.Errorf("import %s: %w", fs.Arg(0), err)}
	}
	_, err = stdout.Write(out)
	return err
}

func cmdVersion(args []string, stdout, stderr io.Writer) error {
	if err := parseFlags(newFlags("version", stderr), args); err != nil {
		return err
	}
	commit, modified := "unknown", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = " (modified)"
				}
			}
		}
	}
	fmt.Fprintf(stdout, "mcpmux %s\ncommit %s%s\n%s %s/%s\n", version, commit, modified, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}

// cmdDemo serves the built-in demo MCP server over stdin/stdout.
func cmdDemo(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlags("demo-server", stderr)
	name := fs.String("name", "demo", "server name")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// A closed stderr pipe during shutdown must not kill the process.
	signal.Ignore(syscall.SIGPIPE)
	return demo.Serve(ctx, *name, os.Stdin, os.Stdout, stderr)
}
