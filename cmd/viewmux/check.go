package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/aggregator"
	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/termsafe"
	"github.com/viewmux/viewmux/sessions"
	"github.com/viewmux/viewmux/sessions/grant"
	"github.com/viewmux/viewmux/upstream"
)

// estimateTokens approximates the model tokens a tools/list payload costs
// (filter.EstimateTokens: its JSON size over four), the same estimate the
// status page shows.
func estimateTokens(tools []mcp.Tool) (int, error) { return filter.EstimateTokens(tools) }

// plural is "1 problem", "2 problems".
func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

func cmdCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("check", stdout)
	configPath := fs.String("config", "", "read the config from `FILE` (default: discovered, else the embedded quickstart)")
	noConnect := fs.Bool("no-connect", false, "validate only: contact no upstream and start no child")
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
	fmt.Fprintf(stdout, "config %s: valid\n", cfg.Source)
	for _, w := range configWarnings(cfg) {
		fmt.Fprintln(stdout, "warning:", w)
	}
	fmt.Fprintln(stdout)
	res, err := grant.NewResolver(cfg, filter.NewRegistry())
	if err != nil {
		return configErr(err)
	}
	if *noConnect {
		return checkOffline(stdout, cfg, res)
	}

	agg, startErr := startAggregator(ctx, cfg, log)
	defer agg.Close()
	snap := agg.Snapshot()
	var problems []string
	// Problems and notes hold what upstreams sent (errors, stderr lines,
	// tool names): shown escaped, never run by the terminal.
	problem := func(p string) {
		if p = termsafe.Escape(agg.Redact(p)); !slices.Contains(problems, p) {
			problems = append(problems, p)
		}
	}

	byUpstream := map[string][]mcp.Tool{}
	for _, e := range snap.Tools {
		byUpstream[e.Upstream] = append(byUpstream[e.Upstream], e.Tool)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UPSTREAM\tTRANSPORT\tSTATE\tTOOLS\t~TOKENS\tNOTE")
	for i, st := range snap.Upstreams {
		uc := cfg.Upstreams[i]
		var notes []string
		if st.Required {
			notes = append(notes, "required")
		}
		if st.Dropped > 0 {
			notes = append(notes, fmt.Sprintf("%d hidden by its own rules", st.Dropped))
		}
		if n := refusedIn(snap.Conflicts, st.Name); n > 0 {
			notes = append(notes, fmt.Sprintf("%d refused: in another upstream's namespace", n))
		}
		if st.Quarantined > 0 {
			notes = append(notes, fmt.Sprintf("%d quarantined: changed since pinned (viewmux pins list)", st.Quarantined))
		}
		state := st.State.String()
		if err := agg.StartError(st.Name); err != nil && uc.PerUser() && errors.Is(err, upstream.ErrNeedsLogin) {
			// Each user connects at /oauth/connect/NAME: no problem.
			// Without the operator's login the tool list waits for the
			// first user's.
			state = "per-user"
			if uc.Credentials == configs.CredentialsExchange {
				notes = append(notes, fmt.Sprintf("each caller's OAuth token is exchanged; tools listed after `viewmux auth login %s`, or once a caller has called", st.Name))
			} else {
				notes = append(notes, fmt.Sprintf("users connect at /oauth/connect/%s; tools listed once one has, or after `viewmux auth login %s`", st.Name, st.Name))
			}
		} else if err != nil {
			// The error names the upstream already; it is printed once,
			// below the tables, with the child's last stderr lines.
			problem(err.Error())
			more := moreScopes(agg, st.Name)
			switch {
			case errors.Is(err, upstream.ErrNeedsLogin):
				state = "needs login"
				notes = append(notes, fmt.Sprintf("run `viewmux auth login %s`", st.Name))
			case errors.Is(err, upstream.ErrInsufficientScope) && len(more) > 0:
				// Its tool list was refused for scope a new login adds.
				state = "needs login (more scope: " + termsafe.Escape(strings.Join(more, " ")) + ")"
				notes = append(notes, fmt.Sprintf("run `viewmux auth login %s`", st.Name))
			default:
				notes = append(notes, "failed to start: see below")
				if st.State == upstream.StateConnecting {
					state = upstream.StateDown.String() // retrying after the failure
				}
			}
		}
		tokens := 0
		if tools := byUpstream[st.Name]; len(tools) > 0 {
			if tokens, err = estimateTokens(tools); err != nil {
				problem(fmt.Sprintf("upstream %q: encoding its tools: %v", st.Name, err))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", st.Name, uc.Transport, state, st.Tools, tokens, strings.Join(notes, "; "))
	}
	tw.Flush()
	for _, c := range snap.Conflicts {
		problem("config error: " + c.String())
	}
	var notes []string
	for _, r := range snap.Rewrites {
		if n := termsafe.Escape(r.String()); !slices.Contains(notes, n) {
			notes = append(notes, n)
		}
	}
	for _, u := range snap.Unmatched {
		notes = append(notes, termsafe.Escape(fmt.Sprintf("upstream %q lists no tool %q: its override applies once it does", u.Upstream, u.Tool)))
	}
	if len(notes) > 0 {
		fmt.Fprintln(stdout)
		for _, n := range notes {
			fmt.Fprintln(stdout, "note:", n)
		}
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
		b, err := res.ResolveLocal(grant.Selection{Profile: name})
		if err != nil {
			problem(fmt.Sprintf("profile %q: %v", name, err))
			continue
		}
		v := filterView(snap, b.Filter)
		tokens, err := estimateTokens(v.Tools)
		if err != nil {
			problem(fmt.Sprintf("profile %q: encoding tools/list: %v", name, err))
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
	share := "share"
	if len(rows) == 1 {
		share = "shares"
	}
	fmt.Fprintf(stdout, "\n%s %s %s; ~TOKENS is the tools/list JSON size / 4.\n",
		plural(len(rows), "profile", "profiles"), share, plural(len(order), "filter instance", "filter instances"))
	for _, r := range rows {
		if line := dynamicReport(res, snap, r.name, r.tools, r.tokens); line != "" {
			fmt.Fprintln(stdout, line)
		}
	}

	if startErr != nil {
		// Only required upstreams fail Start, and their errors are listed
		// already; anything else is new.
		se := termsafe.Escape(agg.Redact(startErr.Error()))
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(se, p) }) {
			problem(se)
		}
	}
	if len(problems) > 0 {
		fmt.Fprintln(stdout)
		for _, p := range problems {
			fmt.Fprintln(stdout, "error:", p)
		}
		return &exitError{exitRuntime, fmt.Errorf("check found %s", plural(len(problems), "problem", "problems"))}
	}
	return nil
}

// checkOffline is `check --no-connect`: what the config declares, with
// nothing contacted.
func checkOffline(stdout io.Writer, cfg *configs.Config, res *grant.Resolver) error {
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UPSTREAM\tTRANSPORT\tSCOPE\tNOTE")
	for _, u := range cfg.Upstreams {
		note := ""
		if u.Required {
			note = "required"
		}
		scope := u.Scope
		if scope == "" {
			scope = configs.ScopeShared
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", u.Name, u.Transport, scope, note)
	}
	tw.Flush()
	profiles := res.Profiles()
	if len(profiles) > 0 {
		fmt.Fprintf(stdout, "\nprofiles: %s\n", strings.Join(profiles, ", "))
	}
	fmt.Fprintf(stdout, "\n%s and %s; no upstream contacted (--no-connect).\n",
		plural(len(cfg.Upstreams), "upstream", "upstreams"), plural(len(profiles), "profile", "profiles"))
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

// dynamicReport is the line `check` and `tools` print for a profile with
// dynamic_toolsets or tool_search: what a new session's tools/list costs
// against the profile's full view (tools and tokens, as given); "" for
// other profiles.
func dynamicReport(res *grant.Resolver, snap *aggregator.Snapshot, profile string, tools, tokens int) string {
	b, err := res.ResolveLocal(grant.Selection{Profile: profile})
	if err != nil {
		return ""
	}
	reg := filter.NewRegistry()
	what := "is dynamic"
	f := sessions.DynamicFilter(res, reg, b)
	if f == nil {
		what, f = "searches its tools", sessions.SearchFilter(res, reg, b)
	}
	if f == nil {
		return ""
	}
	v := reg.View(snap.Version, snap.Tools, f)
	initial, err := estimateTokens(v.Tools)
	if err != nil {
		return fmt.Sprintf("profile %q %s: encoding its initial tools/list: %v", profile, what, err)
	}
	return fmt.Sprintf("profile %q %s: initial %s ~%d tokens, full %s ~%d tokens",
		profile, what, plural(v.Len(), "tool", "tools"), initial, plural(tools, "tool", "tools"), tokens)
}

// moreScopes returns the scopes the oauth upstream name refused a request
// for that its login was not granted (oauth.Client.MoreScopes); nil for
// any other upstream.
func moreScopes(agg *aggregator.Aggregator, name string) []string {
	for _, u := range agg.Upstreams() {
		if u.Name() == name && u.OAuth() != nil {
			return u.OAuth().MoreScopes()
		}
	}
	return nil
}
