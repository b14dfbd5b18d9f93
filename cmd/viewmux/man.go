package main

import (
	"fmt"
	"io"
	"strings"
)

func cmdMan(args []string, stdout io.Writer) error {
	if err := newFlags("man", stdout).parse(args); err != nil {
		return err
	}
	_, err := io.WriteString(stdout, manPage(commandRefs(), version()))
	return err
}

// roff escapes text for a roff line: backslashes, and a leading . or '
// that roff would read as a request.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, ".") || strings.HasPrefix(l, "'") {
			l = `\&` + l
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "\n")
}

// roffFlag writes --name as roff: bold, with its hyphens as \-.
func roffFlag(name string) string { return `\fB\-\-` + strings.ReplaceAll(name, "-", `\-`) + `\fR` }

// manPage is viewmux(1), made from the command table and each command's
// own flags, the same sources as --help and the completions.
func manPage(refs []commandRef, version string) string {
	var b strings.Builder
	fmt.Fprintf(&b, ".TH VIEWMUX 1 \"\" %q \"User Commands\"\n", "viewmux "+version)
	b.WriteString(".SH NAME\nviewmux \\- one MCP endpoint for many MCP servers\n")
	b.WriteString(".SH SYNOPSIS\n.B viewmux\n[\\fICOMMAND\\fR] [\\fIFLAGS\\fR]\n")
	b.WriteString(".SH DESCRIPTION\n")
	b.WriteString(roff("viewmux connects to every MCP server configured as an upstream (stdio child processes, "+
		"streamable HTTP, legacy SSE, websocket), merges their tools, prompts and resources under namespaced "+
		"names, filters them through profiles, and serves each client the view of its profile over streamable "+
		"HTTP at /mcp, legacy SSE at /sse, websocket at /ws, or stdio. With no command, viewmux serves; its flags are serve's.") + "\n")
	b.WriteString(".SH COMMANDS\n")
	for _, r := range refs {
		fmt.Fprintf(&b, ".SS %s\n", r.name)
		b.WriteString(".nf\n" + roff(r.usage) + "\n.fi\n")
		b.WriteString(".PP\n" + roff(capitalize(r.summary)+".") + "\n")
		if r.about != "" {
			b.WriteString(".PP\n.nf\n" + roff(r.about) + "\n.fi\n")
		}
		for _, f := range r.flags {
			b.WriteString(".TP\n" + roffFlag(f.Name))
			if arg := flagArg(f); arg != "" {
				b.WriteString(` \fI` + roff(arg) + `\fR`)
			}
			b.WriteString("\n" + roff(flagUsage(f)))
			if d := f.DefValue; d != "" && d != "false" && d != "0" {
				b.WriteString(roff(fmt.Sprintf(" (default %q)", d)))
			}
			b.WriteString("\n")
		}
	}
	b.WriteString(".SH CONFIGURATION\n")
	b.WriteString(roff("The config is read from --config FILE, else $VIEWMUX_CONFIG, else ./viewmux.toml, else "+
		"$XDG_CONFIG_HOME/viewmux/config.toml, else the embedded quickstart (two built-in demo servers; "+
		"viewmux init writes it out). SIGHUP, or a change to the file, reloads it.") + "\n")
	b.WriteString(".SH ENVIRONMENT\n.TP\n.B VIEWMUX_CONFIG\nthe config file, when --config is not given\n")
	b.WriteString(".TP\n.B XDG_CONFIG_HOME\nwhere the per-user config is looked for (default ~/.config)\n")
	b.WriteString(".TP\n.B VIEWMUX_SELF\nthis executable, for ${VIEWMUX_SELF} in a config, unless set\n")
	b.WriteString(".TP\n.B OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_EXPORTER, OTEL_*\n" +
		roff("OpenTelemetry traces, exported over OTLP; off unless an endpoint is set or OTEL_TRACES_EXPORTER=otlp "+
			"(operations.md, Traces)") + "\n")
	b.WriteString(".SH EXIT STATUS\n.TP\n.B 0\nsuccess\n.TP\n.B 1\na runtime failure: a required upstream failed, or check found a problem\n")
	b.WriteString(".TP\n.B 2\nbad usage or an invalid config; every error names its file:line\n")
	b.WriteString(".SH SEE ALSO\n")
	b.WriteString(roff("viewmux help COMMAND; the documentation in the source tree's docs/ directory: "+
		"getting-started.md, configuration.md (every config key), clients.md, security.md, operations.md.") + "\n")
	return b.String()
}
