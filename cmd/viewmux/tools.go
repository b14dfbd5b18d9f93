package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/termsafe"
	"github.com/viewmux/viewmux/sessions/grant"
	"github.com/viewmux/viewmux/upstream"
)

// maxDescription bounds the description column of `viewmux tools`.
const maxDescription = 72

func cmdTools(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("tools", stdout)
	configPath := fs.String("config", "", "read the config from `FILE` (default: discovered, else the embedded quickstart)")
	profile := fs.String("profile", "", "the profile's `NAME` (default: server.default_profile)")
	toolsets := fs.String("toolsets", "", "narrow to these toolsets (`A,B`: comma-separated)")
	tools := fs.String("tools", "", "narrow to these tools (`A,B`: comma-separated exposed names)")
	readOnly := fs.Bool("read-only", false, "only read-only tools")
	asJSON := fs.Bool("json", false, "print the tools/list result as JSON")
	logs := addLogFlags(fs, "error")
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := logs.check(fs); err != nil {
		return err
	}
	_, cfg, log, _, err := logs.open(*configPath, configSource{}, stderr)
	if err != nil {
		return err
	}
	res, err := grant.NewResolver(cfg, filter.NewRegistry())
	if err != nil {
		return configErr(err)
	}
	sel := grant.Selection{Profile: *profile, ReadOnly: *readOnly}
	sel.Toolsets = splitComma(*toolsets)
	sel.Tools = splitComma(*tools)
	sel.Narrowing = len(sel.Toolsets) > 0 || len(sel.Tools) > 0 || sel.ReadOnly
	b, err := res.ResolveLocal(sel)
	if err != nil {
		return usageErr("%v", err)
	}
	agg, startErr := startAggregator(ctx, cfg, log)
	defer agg.Close()
	if startErr != nil {
		return &exitError{exitRuntime, startErr}
	}
	snap := agg.Snapshot()
	for _, st := range snap.Upstreams {
		if st.State != upstream.StateUp {
			fmt.Fprintf(stderr, "viewmux: warning: upstream %q is %s; its tools are missing: %s\n", st.Name, st.State, termsafe.Escape(agg.Redact(fmt.Sprint(agg.StartError(st.Name)))))
		}
	}
	v := filterView(snap, b.Filter)
	if *asJSON {
		// The listing as clients get it (each definition the upstream's
		// bytes), only indented.
		var out bytes.Buffer
		if err := json.Indent(&out, v.Encoded(), "", "  "); err != nil {
			return err
		}
		out.WriteByte('\n')
		_, err := stdout.Write(out.Bytes())
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tUPSTREAM\tREAD-ONLY\tAPPROVE\tDESCRIPTION")
	for _, t := range v.Tools {
		e := v.Lookup(t.Name)
		approve := "-"
		if need, timeout := b.Filter.Approval(e); need {
			approve = "yes, " + timeout.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\n", termsafe.Escape(t.Name), e.Upstream, e.ReadOnly, approve, termsafe.Escape(summary(t.Description, maxDescription)))
	}
	tw.Flush()
	if !sel.Narrowing {
		if tokens, err := estimateTokens(v.Tools); err == nil {
			if line := dynamicReport(res, snap, b.Profile, v.Len(), tokens); line != "" {
				fmt.Fprintln(stdout, "\n"+line)
			}
		}
	}
	if v.Len() == 0 {
		return &exitError{exitRuntime, errors.New("the view has no tools")}
	}
	return nil
}

// summary is the first non-blank line of a description, trimmed and cut
// to at most width runes ("..." marks a cut).
func summary(desc string, width int) string {
	line := ""
	for l := range strings.Lines(desc) {
		if line = strings.TrimSpace(l); line != "" {
			break
		}
	}
	if r := []rune(line); len(r) > width {
		return string(r[:width-3]) + "..."
	}
	return line
}

func splitComma(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
