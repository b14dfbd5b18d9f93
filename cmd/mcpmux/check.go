package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpmux/mcpmux/aggregator"
	"github.com/mcpmux/mcpmux/filter"
	"github.com/mcpmux/mcpmux/internal/redact"
	"github.com/mcpmux/mcpmux/sessions"
	"github.com/mcpmux/mcpmux/upstream"
)

// estimateTokens approximates the model tokens a tools/list payload costs:
// about four bytes of JSON per token, the usual rule of thumb for English
// text and JSON with common tokenizers.
func estimateTokens(tools []mcp.Tool) (int, error) {
	b, err := json.Marshal(mcp.ListToolsResult{Tools: tools})
	if err != nil {
		return 0, err
	}
	return (len(b) + 3) / 4, nil
}

func cmdCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("check", stderr)
	configPath := fs.String("config", "", "config file")
	logLevel := fs.String("log-level", "error", "log level for upstream messages on stderr")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	_, cfg, err := openConfig(*configPath, configSource{}, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "config %s: valid\n\n", cfg.Source)

	agg, startErr := startAggregator(ctx, cfg, log)
	defer agg.Close()
	snap := agg.Snapshot()
	var problems []string

	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UPSTREAM\tTRANSPORT\tSTATE\tTOOLS\tNOTE")
	for i, st := range snap.Upstreams {
		uc := cfg.Upstreams[i]
		note := ""
		if st.Dropped > 0 {
			note = fmt.Sprintf("%d hidden by its own rules", st.Dropped)
		}
		if n := refusedIn(snap.Conflicts, st.Name); n > 0 {
			note = strings.TrimSpace(fmt.Sprintf("%s %d refused: in another upstream's namespace", note, n))
		}
		if err := agg.StartError(st.Name); err != nil {
			note = redact.URLs(err.Error())
			problems = append(problems, redact.URLs(fmt.Sprintf("upstream %q: %v", st.Name, err)))
		}
		if st.Required {
			note = strings.TrimSpace("required " + note)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", st.Name, uc.Transport, st.State, st.Tools, note)
	}
	tw.Flush()
	for _, c := range snap.Conflicts {
		problems = append(problems, "config error: "+c.String())
	}
	if len(snap.Rewrites) > 0 {
		fmt.Fprintln(stdout)
		for _, r := range snap.Rewrites {
			fmt.Fprintln(stdout, "note:", r.String())
		}
	}

	res, err := sessions.NewResolver(cfg, filter.NewRegistry())
	if err != nil {
		return configErr(err)
	}
	names := res.Profiles()
	if len(names) == 0 {
		names = []string{""}
	}
	byFilter := map[*filter.Filter][]string{}
	var order []*filter.Filter
	type row struct {
		name          string
		tools, tokens int
		f             *filter.Filter
	}
	var rows []row
	for _, name := range names {
		b, err := res.ResolveLocal(sessions.Selection{Profile: name})
		if err != nil {
			problems = append(problems, fmt.Sprintf("profile %q: %v", name, err))
			continue
		}
		v := filterView(snap, b.Filter)
		tokens, err := estimateTokens(v.Tools)
		if err != nil {
			problems = append(problems, fmt.Sprintf("profile %q: encoding tools/list: %v", name, err))
		}
		if _, seen := byFilter[b.Filter]; !seen {
			order = append(order, b.Filter)
		}
		byFilter[b.Filter] = append(byFilter[b.Filter], name)
		rows = append(rows, row{name, v.Len(), tokens, b.Filter})
	}
	fmt.Fprintln(stdout)
	tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROFILE\tTOOLS\t~TOKENS\tFILTER\tSHARED WITH")
	for _, r := range rows {
		shared := slices.DeleteFunc(slices.Clone(byFilter[r.f]), func(n string) bool { return n == r.name })
		name := r.name
		if name == "" {
			name = "(none)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t#%d\t%s\n", name, r.tools, r.tokens, slices.Index(order, r.f)+1, strings.Join(shared, ", "))
	}
	tw.Flush()
	fmt.Fprintf(stdout, "\n%d profiles share %d filter instances; ~TOKENS is the tools/list JSON size / 4.\n", len(rows), len(order))

	if startErr != nil {
		se := redact.URLs(startErr.Error())
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(se, p) }) {
			problems = append(problems, se)
		}
	}
	if len(problems) > 0 {
		fmt.Fprintln(stdout)
		for _, p := range problems {
			fmt.Fprintln(stdout, "error:", p)
		}
		return &exitError{exitRuntime, fmt.Errorf("check found %d problems", len(problems))}
	}
	return nil
}

// refusedIn counts the tools and prompts of the unprefixed upstream name
// that were refused for falling in another upstream's namespace.
func refusedIn(conflicts []aggregator.Conflict, name string) int {
	n := 0
	for _, c := range conflicts {
		if c.Namespace != "" && c.Dropped == name {
			n++
		}
	}
	return n
}

func filterView(snap *aggregator.Snapshot, f *filter.Filter) *filter.View {
	return filter.NewRegistry().View(snap.Version, snap.Tools, f)
}

func cmdTools(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("tools", stderr)
	configPath := fs.String("config", "", "config file")
	profile := fs.String("profile", "", "profile (default: server.default_profile)")
	toolsets := fs.String("toolsets", "", "comma-separated toolsets to narrow to")
	tools := fs.String("tools", "", "comma-separated tool names to narrow to")
	readOnly := fs.Bool("read-only", false, "only read-only tools")
	asJSON := fs.Bool("json", false, "print the tools/list result as JSON")
	logLevel := fs.String("log-level", "error", "log level for upstream messages on stderr")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	_, cfg, err := openConfig(*configPath, configSource{}, log)
	if err != nil {
		return err
	}
	res, err := sessions.NewResolver(cfg, filter.NewRegistry())
	if err != nil {
		return configErr(err)
	}
	sel := sessions.Selection{Profile: *profile, ReadOnly: *readOnly}
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
			fmt.Fprintf(stderr, "mcpmux: warning: upstream %q is %s; its tools are missing: %s\n", st.Name, st.State, redact.URLs(fmt.Sprint(agg.StartError(st.Name))))
		}
	}
	v := filterView(snap, b.Filter)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(mcp.ListToolsResult{Tools: v.Tools})
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tUPSTREAM\tREAD-ONLY\tDESCRIPTION")
	for _, t := range v.Tools {
		e := v.Lookup(t.Name)
		desc, _, _ := strings.Cut(t.Description, "\n")
		if len(desc) > 72 {
			desc = desc[:69] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\n", t.Name, e.Upstream, e.ReadOnly, desc)
	}
	tw.Flush()
	if v.Len() == 0 {
		return &exitError{exitRuntime, errors.New("the view has no tools")}
	}
	return nil
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
