package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/viewmux/viewmux/configs"
)

// command is one of viewmux's commands.
type command struct {
	name    string
	summary string // one line, for `viewmux --help`
	usage   string // the usage lines of `viewmux NAME --help`, without "Usage: "
	about   string // what the command does, for `viewmux NAME --help`; may be ""
	hidden  bool   // left out of `viewmux --help` (demo-server)
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands returns every command, in the order help lists them.
func commands() []command {
	return []command{
		{
			name:    "serve",
			summary: "serve every upstream as one MCP endpoint over HTTP, or one client over stdio (the default command)",
			usage: "viewmux [serve] [--config FILE] [--listen ADDR] [--log-level LEVEL] [--log-format FORMAT]\n" +
				"       viewmux serve --stdio [--profile NAME] [--config FILE]",
			about: "Serves streamable HTTP at /mcp, legacy SSE at /sse and websocket at /ws, plus\n" +
				"/healthz, /readyz and /metrics. With --stdio it serves the one client that\n" +
				"launched it over stdin/stdout and logs only to stderr. Bare `viewmux` is\n" +
				"`viewmux serve`. SIGHUP, or a change to the config file, reloads the config.",
			run: func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
				return cmdServe(ctx, args, stdout, stderr, false)
			},
		},
		{
			name:    "check",
			summary: "validate the config, connect to every upstream, and report upstreams and profiles",
			usage:   "viewmux check [--config FILE] [--no-connect] [--log-level LEVEL] [--log-format FORMAT]",
			about: "Prints each upstream's state, tools and estimated tokens (with the last stderr\n" +
				"lines of a child that died), and each profile's tools, estimated tokens and\n" +
				"shared filter instance. Exits 1 if anything is wrong, 2 if the config is invalid.\n" +
				"With --no-connect it only validates: no upstream is contacted, no child started.",
			run: cmdCheck,
		},
		{
			name:    "tools",
			summary: "print the tools a client would get",
			usage:   "viewmux tools [--config FILE] [--profile NAME] [--toolsets A,B] [--tools A,B] [--read-only] [--json]",
			about:   "Connects to every upstream and prints the tools/list a client with this\nprofile and narrowing would see.",
			run:     cmdTools,
		},
		{
			name:    "import",
			summary: "convert MCP client configs (FILE... or --scan) to viewmux TOML on stdout; --strict fails on any loss",
			usage:   "viewmux import [--strict] FILE...\n       viewmux import [--strict] --scan",
			about: "Reads Claude Desktop, Claude Code (.mcp.json, ~/.claude.json), Cursor, VS Code\n" +
				"(mcp.json, settings.json), Windsurf, TBXark mcp-proxy and mcp-hub files, merges\n" +
				"them into one config and names on stderr everything it could not carry over.\n" +
				"--scan reads every such file found where its client keeps it.",
			run: func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
				return cmdImport(args, stdout, stderr)
			},
		},
		{
			name:    "init",
			summary: "write the quickstart config to ./viewmux.toml",
			usage:   "viewmux init [--output FILE]",
			about:   "Writes the embedded quickstart config; refuses to overwrite a file.",
			run: func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
				return cmdInit(args, stdout, stderr)
			},
		},
		{
			name:    "pins",
			summary: "list pending changes of pinned tool definitions, or approve them",
			usage: "viewmux pins list [--config FILE] [--json]\n" +
				"       viewmux pins approve [--config FILE] TOOL|--upstream NAME|--all",
			about: "With server.pin = \"warn\" or \"quarantine\", a tool definition that changed\n" +
				"after its upstream's first sight, or a new tool, waits for approval. list prints\n" +
				"each with its diff and exits 3 when any is waiting (0 when none); approve pins\n" +
				"the chosen ones (TOOL is the exposed name, or UPSTREAM/TOOL) and audits it.\n" +
				"Running servers using the same state_dir pick approvals up without a restart.",
			run: cmdPins,
		},
		{
			name:    "state",
			summary: "copy a state directory into a shared state store, or back",
			usage: "viewmux state copy [--config FILE] [--overwrite] --to URL\n" +
				"       viewmux state copy [--config FILE] [--overwrite] --from URL",
			about: "--to copies what server.state_dir holds (pins.json, and each oauth-*.json login)\n" +
				"into the Redis or Valkey store at URL, with [state] key_prefix; --from copies it\n" +
				"back. Logins are opened and sealed again with [state] encryption_key, which a\n" +
				"shared store requires. It names every document it copied, found already there,\n" +
				"or skipped: a document the destination holds in another version is kept unless\n" +
				"--overwrite (exit 1 when any was skipped). Other files are left alone.",
			run: cmdState,
		},
		{
			name:    "auth",
			summary: "log in to an oauth = true upstream, show each one's login, or log out",
			usage: "viewmux auth login [--config FILE] [--no-browser] [--port PORT] UPSTREAM\n" +
				"       viewmux auth status [--config FILE] [--json]\n" +
				"       viewmux auth logout [--config FILE] UPSTREAM",
			about: "login prints the upstream's authorization URL (and opens a browser when one is\n" +
				"available; --no-browser only prints it), takes the callback on a loopback\n" +
				"redirect URI and stores the tokens in server.state_dir (oauth-UPSTREAM.json,\n" +
				"0600). A running server with the same state_dir uses the new login without a\n" +
				"restart. status lists each oauth upstream: logged in, expiry, scopes; never a\n" +
				"token. logout removes the stored tokens.",
			run: cmdAuth,
		},
		{
			name:    "version",
			summary: "print the version, commit and Go version",
			usage:   "viewmux version\n       viewmux --version",
			run: func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
				return cmdVersion(args, stdout, stderr)
			},
		},
		{
			name:    "completion",
			summary: "print a shell completion script: viewmux completion bash|zsh|fish",
			usage:   "viewmux completion bash|zsh|fish",
			about: "Writes a completion script for the shell to stdout. Load it with:\n" +
				"  bash: source <(viewmux completion bash)   (or save it in /etc/bash_completion.d/)\n" +
				"  zsh:  viewmux completion zsh > \"${fpath[1]}/_viewmux\"   (or source <(viewmux completion zsh))\n" +
				"  fish: viewmux completion fish > ~/.config/fish/completions/viewmux.fish",
			run: func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
				return cmdCompletion(args, stdout)
			},
		},
		{
			name:    "help",
			summary: "show this help, or a command's: viewmux help COMMAND",
			usage:   "viewmux help [COMMAND]\n       viewmux COMMAND --help",
			run:     cmdHelp,
		},
		{
			name:    "man",
			summary: "print the man page (roff) to stdout",
			usage:   "viewmux man",
			about:   "Writes viewmux(1), made from this help, to stdout: viewmux man > viewmux.1",
			hidden:  true,
			run: func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
				return cmdMan(args, stdout)
			},
		},
		{
			name:    "oauth-client",
			summary: "connect to an OAuth-protected MCP server whose authorization server approves by itself (conformance)",
			usage:   "viewmux oauth-client [--client-metadata-url URL] [--timeout DURATION] URL",
			hidden:  true,
			run:     cmdOAuthClient,
		},
		{
			name:    "demo-server",
			summary: "serve the built-in demo MCP server over stdio",
			usage:   "viewmux demo-server [--name NAME]",
			hidden:  true,
			run:     cmdDemo,
		},
	}
}

// lookupCommand returns the command called name.
func lookupCommand(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// topHelp is `viewmux --help`.
func topHelp(w io.Writer) {
	fmt.Fprint(w, "viewmux: one MCP endpoint for many MCP servers\n\nUsage: viewmux [COMMAND] [FLAGS]\n\nCommands:\n")
	width := 0
	for _, c := range commands() {
		if !c.hidden {
			width = max(width, len(c.name))
		}
	}
	for _, c := range commands() {
		if !c.hidden {
			fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.summary)
		}
	}
	fmt.Fprint(w, `
Run 'viewmux COMMAND --help' for a command's flags. With no command, viewmux
serves (flags are serve's); 'viewmux --version' prints the version.

Config: --config, else $VIEWMUX_CONFIG, else ./viewmux.toml, else
$XDG_CONFIG_HOME/viewmux/config.toml, else the embedded quickstart.
`)
}

func cmdHelp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	switch {
	case len(args) == 0 || len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help"):
		topHelp(stdout)
		return nil
	case len(args) == 1:
		c, ok := lookupCommand(args[0])
		if !ok {
			return unknownCommand(args[0])
		}
		return c.run(ctx, []string{"--help"}, stdout, stderr)
	}
	return hintedUsageErr(fmt.Errorf("help: want at most one COMMAND, got %q", args), "Run 'viewmux --help' for every command.")
}

// unknownCommand is the usage error for `viewmux NAME` with no such command.
func unknownCommand(name string) error {
	msg := fmt.Sprintf("unknown command %q", name)
	if s := closestCommand(name); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	return hintedUsageErr(errors.New(msg), "Run 'viewmux --help' for every command.")
}

// closestCommand returns the listed command name is likely a typo of, or "".
func closestCommand(name string) string {
	var names []string
	for _, c := range commands() {
		if !c.hidden {
			names = append(names, c.name)
		}
	}
	return configs.Suggest(name, names)
}

// flags is the flag set of one command. Help goes to out; errors are
// returned by parse, never printed by the flag package.
type flags struct {
	*flag.FlagSet
	cmd command
	out io.Writer
	// implicit is set for bare `viewmux --flag …`: serve, named by nobody.
	implicit bool
}

// newFlags returns the flag set of the command called name; its help is
// written to out.
func newFlags(name string, out io.Writer) *flags {
	c, ok := lookupCommand(name)
	if !ok {
		panic(fmt.Sprintf("newFlags: no command %q", name))
	}
	fs := flag.NewFlagSet("viewmux "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flags{FlagSet: fs, cmd: c, out: out}
}

// parse parses args and refuses stray positional arguments. On --help or
// -h it prints the command's help to out and returns flag.ErrHelp (exit 0).
// Errors are usage errors (exit 2) that name the flag at fault and point to
// the command's help.
func (f *flags) parse(args []string) error {
	if err := f.parseAllowingArgs(args); err != nil {
		return err
	}
	if f.NArg() > 0 {
		return f.usageErr(fmt.Errorf("unexpected argument %q", f.Arg(0)))
	}
	return nil
}

// parseAllowingArgs is parse for commands that take positional arguments.
func (f *flags) parseAllowingArgs(args []string) error {
	err := f.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		f.help(f.out)
		return err
	}
	return f.usageErr(errors.New(flagError(err.Error())))
}

// parseSubcommand parses the args of a command with subcommands (`auth
// login NAME`, `pins approve TOOL`): the first word, when it is no flag, is
// the subcommand; flags may come before or after the operands, which are
// returned in order.
func (f *flags) parseSubcommand(args []string) (sub string, operands []string, err error) {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	for {
		if err := f.parseAllowingArgs(args); err != nil {
			return "", nil, err
		}
		if f.NArg() == 0 {
			return sub, operands, nil
		}
		operands = append(operands, f.Arg(0))
		args = f.Args()[1:]
	}
}

// usageErr is err as a usage error of this command.
func (f *flags) usageErr(err error) error {
	name := f.cmd.name
	if f.implicit {
		return hintedUsageErr(fmt.Errorf("%w (with no command, flags are serve's)", err),
			"Run 'viewmux --help' for every command, 'viewmux serve --help' for serve's flags.")
	}
	return hintedUsageErr(fmt.Errorf("%s: %w", name, err), fmt.Sprintf("Run 'viewmux %s --help' for its flags.", name))
}

var (
	undefinedFlag = regexp.MustCompile(`^flag provided but not defined: -+(\S+)$`)
	missingValue  = regexp.MustCompile(`^flag needs an argument: -+(\S+)$`)
	flagMention   = regexp.MustCompile(`(flag|for) -(\w)`)
)

// flagError rewords the flag package's error text in the --flag form help
// uses.
func flagError(msg string) string {
	if m := undefinedFlag.FindStringSubmatch(msg); m != nil {
		return "unknown flag --" + m[1]
	}
	if m := missingValue.FindStringSubmatch(msg); m != nil {
		return "flag --" + m[1] + " needs a value"
	}
	return flagMention.ReplaceAllString(msg, "$1 --$2")
}

// help writes the command's help: usage, what it does, and its flags. A
// *helpCapture also gets the flag set, for completions and the man page.
func (f *flags) help(w io.Writer) {
	if h, ok := w.(*helpCapture); ok {
		h.fs = f.FlagSet
	}
	fmt.Fprintf(w, "Usage: %s\n\n%s.\n", f.cmd.usage, capitalize(f.cmd.summary))
	if f.cmd.about != "" {
		fmt.Fprintf(w, "\n%s\n", f.cmd.about)
	}
	type row struct{ name, usage string }
	var rows []row
	width := 0
	f.VisitAll(func(fl *flag.Flag) {
		arg, usage := flag.UnquoteUsage(fl)
		name := "--" + fl.Name
		if arg != "" {
			name += " " + arg
		}
		if d := fl.DefValue; d != "" && d != "false" && d != "0" {
			usage += fmt.Sprintf(" (default %q)", d)
		}
		rows = append(rows, row{name, usage})
		width = max(width, len(name))
	})
	if len(rows) == 0 {
		return
	}
	fmt.Fprint(w, "\nFlags:\n")
	for _, r := range rows {
		fmt.Fprintf(w, "  %-*s  %s\n", width, r.name, r.usage)
	}
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
