//go:build unix

package conformance

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// Parity bar: the official MCP conformance suite (the pinned
// @modelcontextprotocol/conformance, all suites, every spec version it knows)
// run through viewmux against an upstream passes every scenario that it passes
// against that upstream directly.
//
// The upstreams (conformanceUpstreams) are mcp-go's own conformance server
// (examples/conformance of the mcp-go in go.mod) and the official Go SDK's
// conformance/everything-server (goSDKVersion) in its stateless and its
// stateful mode. For each, one instance is tested directly and a second one
// through viewmux mounting it unprefixed; the two sides run at the same time.
// On each side the CLI runs `server --suite all` (every server scenario,
// active and pending) once per spec version the CLI knows (`--spec-version
// V`: the scenarios that apply at V, on V's wire), and once without
// --spec-version (each scenario at its own default version; the only run that
// includes the extension scenarios, which belong to no spec version).
//
// A scenario that passes directly must pass through viewmux at the same spec
// version; one that fails directly is logged and does not count. The
// scenarios an upstream is known to fail intermittently (mcp-go's
// expected-failures list; those measured on the go-sdk server) are re-run,
// one at a time, up to conformanceRetries times on either side while they
// fail, and compared like every other scenario.
//
// Run it alone with: go test ./integration/ -run TestConformanceParity -v
// One upstream: -run 'TestConformanceParity/go-sdk-stateless' -v

const (
	// conformanceRetries is the default number of retry rounds for
	// intermittent scenarios; VIEWMUX_CONFORMANCE_RETRIES overrides it (0 to
	// measure flakiness). mcp-go's two (mcp-go #969: its forwarder takes a
	// notification sent just before the response off the channel, then
	// drops it once the response has the lock) pass a single run about 1
	// time in 4 on either side on an idle machine with conformance
	// 0.2.0-alpha.12 (2 cores: tools-call-with-progress 6/30 direct, 8/30
	// through viewmux at 2026-07-28; 4/20 and 3/20 at 2025-11-25). The
	// forwarder only wins when another core is free, so under load they
	// nearly always fail: with both cores busy, 0/20 direct and 3/20
	// through viewmux. They run at 7 (selection, scenario) pairs. Failures
	// come in streaks while the machine is loaded; 30 rounds over all
	// failing pairs once let a pair fail 31 times in a row through viewmux
	// in CI, with the side done in 93 s of its 300 s budget. So the rounds
	// are bounded by the budget (conformanceSideBudget) rather than by
	// this count in practice: a loaded machine costs time, not a spurious
	// failure.
	conformanceRetries = 300
	// A whole suite takes a few seconds; these bound a hang. The CLI gives
	// each scenario conformanceCLIScenarioTimeout itself, so a hung scenario
	// fails with the CLI's own message before anything here kills it.
	conformanceCLIScenarioTimeout = 20 * time.Second
	conformanceSuiteTimeout       = 90 * time.Second
	conformanceScenarioTimeout    = 40 * time.Second
	// conformanceSideBudget bounds one side of one upstream, every spec
	// version and every retry included; what would start after it is spent
	// is reported as not run (and fails, if it passed directly).
	// 180 s ran out on a machine at load 19 (helpers building beside CI)
	// after 2-3 retries of mcp-go's progress scenario, which its own
	// streamable HTTP server fails in streaks (it drops a notification it
	// has taken off its channel once the response is written).
	conformanceSideBudget = 300 * time.Second
)

// conformanceUpstream is one upstream server the parity bar is measured
// against.
type conformanceUpstream struct {
	name, mode string
	// start starts one instance and returns its MCP endpoint; label says
	// which side it serves.
	start func(t *testing.T, label string) string
	// flaky returns the scenarios to retry while they fail.
	flaky func(t *testing.T) map[string]bool
}

func conformanceUpstreams() []conformanceUpstream {
	return []conformanceUpstream{
		{
			name:  "mcp-go",
			mode:  "stateful",
			start: startMcpGoServer,
			flaky: func(t *testing.T) map[string]bool { return mcpGoFlakyScenarios(t) },
		},
		{
			name:  "go-sdk-stateless",
			mode:  "stateless",
			start: func(t *testing.T, label string) string { return itest.StartGoSDKServer(t, label, true) },
			flaky: func(*testing.T) map[string]bool { return goSDKFlakyScenarios() },
		},
		{
			name:  "go-sdk-stateful",
			mode:  "stateful",
			start: func(t *testing.T, label string) string { return itest.StartGoSDKServer(t, label, false) },
			flaky: func(*testing.T) map[string]bool { return goSDKFlakyScenarios() },
		},
	}
}

// conformanceSelection is one `server --suite all` run: a spec version, or
// "" for none, and the scenarios `list --server` lists for it.
type conformanceSelection struct {
	version   string
	scenarios []string
}

func (s conformanceSelection) label() string {
	if s.version == "" {
		return "default"
	}
	return s.version
}

// specArgs returns the CLI arguments that select s's spec version.
func (s conformanceSelection) specArgs() []string {
	if s.version == "" {
		return nil
	}
	return []string{"--spec-version", s.version}
}

// conformanceSelections returns one selection per spec version the CLI
// knows, oldest first, then the one without --spec-version.
func conformanceSelections(t *testing.T) []conformanceSelection {
	t.Helper()
	versions := conformanceSpecVersions(t)
	all, tags := listServerScenarios(t, "")
	for _, name := range all {
		for _, tag := range tags[name] {
			if tag != "extension" && !slices.Contains(versions, tag) {
				t.Errorf("conformance list --server tags %s with %q, not one of the spec versions %v the CLI accepts", name, tag, versions)
			}
		}
	}
	var sels []conformanceSelection
	for _, v := range versions {
		names, _ := listServerScenarios(t, v)
		sels = append(sels, conformanceSelection{version: v, scenarios: names})
	}
	return append(sels, conformanceSelection{scenarios: all})
}

// conformanceSide is every run of every scenario of one selection against
// one URL.
type conformanceSide struct {
	label     string // e.g. "via viewmux @2025-11-25"
	serverURL string
	sel       conformanceSelection
	runs      map[string][]scenarioRun // in order; more than one only for retries
}

// passed reports whether any run of the scenario passed.
func (s *conformanceSide) passed(name string) bool {
	for _, r := range s.runs[name] {
		if r.Passed() {
			return true
		}
	}
	return false
}

// last returns the scenario's last run.
func (s *conformanceSide) last(name string) scenarioRun {
	runs := s.runs[name]
	if len(runs) == 0 {
		return scenarioRun{Err: "not run"}
	}
	return runs[len(runs)-1]
}

func (s *conformanceSide) retries(name string) int {
	if n := len(s.runs[name]); n > 1 {
		return n - 1
	}
	return 0
}

// status is the table cell: pass/FAIL (its passing run if any, else its last),
// with warnings noted.
func (s *conformanceSide) status(name string) string {
	var r scenarioRun
	switch {
	case len(s.runs[name]) == 0:
		return "not run"
	case s.passed(name):
		for _, run := range s.runs[name] {
			if run.Passed() {
				r = run
				break
			}
		}
	default:
		r = s.last(name)
	}
	st := "FAIL"
	switch {
	case r.Checks == nil:
		st = "NO RESULT"
	case r.Passed() && r.count("SUCCESS") == 0:
		st = "pass (INFO only)" // nothing failed, nothing was asserted either
	case r.Passed():
		st = "pass"
	}
	if w := r.count("WARNING"); w > 0 {
		st += fmt.Sprintf(" (%d warning)", w)
	}
	return st
}

// runConformanceSides runs every selection against serverURL within
// conformanceSideBudget and returns one side per selection, in order. First
// each selection's whole suite; then, on its own, each scenario that left no
// result; then up to retries rounds re-running each failing intermittent
// scenario once, so that a budget spent on retries never keeps a suite from
// running. It is safe to
// call for different sides at the same time.
func runConformanceSides(t *testing.T, label, serverURL string, sels []conformanceSelection, flaky map[string]bool, retries int) (sides []*conformanceSide, elapsed time.Duration) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(conformanceSideBudget)
	for _, sel := range sels {
		side := &conformanceSide{label: label + " @" + sel.label(), serverURL: serverURL, sel: sel, runs: map[string][]scenarioRun{}}
		side.runSuite(t, deadline)
		sides = append(sides, side)
	}
	for _, side := range sides {
		for _, name := range side.sel.scenarios {
			if len(side.runs[name]) == 0 {
				side.runs[name] = append(side.runs[name], side.runOne(name, deadline))
			}
		}
	}
	// Round by round, so that a pair's retries are spread over the time the
	// others take: failures come in streaks.
	for round := 0; round < retries && time.Now().Before(deadline); round++ {
		for _, side := range sides {
			for _, name := range side.sel.scenarios {
				if flaky[name] && !side.passed(name) && time.Now().Before(deadline) {
					side.runs[name] = append(side.runs[name], side.runOne(name, deadline))
				}
			}
		}
	}
	return sides, time.Since(start)
}

// cliTimeoutArgs gives the CLI its per-scenario timeout.
func cliTimeoutArgs() []string {
	return []string{"--timeout", strconv.Itoa(int(conformanceCLIScenarioTimeout.Milliseconds()))}
}

// runSuite runs the selection's `server --suite all` once and records each
// scenario's result.
func (s *conformanceSide) runSuite(t *testing.T, deadline time.Time) {
	t.Helper()
	if len(s.sel.scenarios) == 0 || time.Now().After(deadline) {
		return // runOne reports the spent budget
	}
	args := append([]string{"--suite", "all"}, s.sel.specArgs()...)
	results, out, err := runConformance(s.serverURL, min(conformanceSuiteTimeout, time.Until(deadline)), append(args, cliTimeoutArgs()...)...)
	if err != nil {
		t.Logf("%s: conformance server %s: %v\n--- CLI output (tail) ---\n%s", s.label, strings.Join(args, " "), err, itest.Tail(out, 3000))
	}
	for name, checks := range results {
		if !slices.Contains(s.sel.scenarios, name) {
			t.Errorf("%s: result for %q, which `conformance list --server %s` does not list", s.label, name, strings.Join(s.sel.specArgs(), " "))
			continue
		}
		s.runs[name] = append(s.runs[name], scenarioRun{Checks: checks})
	}
}

// runOne runs one scenario of the selection on its own.
func (s *conformanceSide) runOne(name string, deadline time.Time) scenarioRun {
	if time.Now().After(deadline) {
		return scenarioRun{Err: fmt.Sprintf("not run: the %v budget for this side is spent", conformanceSideBudget)}
	}
	args := append([]string{"--scenario", name}, s.sel.specArgs()...)
	res, out, err := runConformance(s.serverURL, min(conformanceScenarioTimeout, time.Until(deadline)), append(args, cliTimeoutArgs()...)...)
	if checks, ok := res[name]; ok {
		return scenarioRun{Checks: checks}
	}
	why := "no checks.json"
	if err != nil {
		why = err.Error()
	}
	return scenarioRun{Err: fmt.Sprintf("%s; CLI output (tail):\n%s", why, itest.Tail(out, 1500))}
}

// conformanceTally is the outcome at one (upstream, mode, spec version).
type conformanceTally struct {
	upstream, mode, version string
	scenarios               int
	direct, via             int // scenarios passing on each side
	kept                    int // passing on both sides
	parity                  []string
}

func TestConformanceParity(t *testing.T) {
	t.Parallel()
	itest.RequireConformance(t)
	itest.MuxBinary(t)
	conformanceServerBinary(t)
	itest.GoSDKServerBinary(t)
	retries := conformanceRetries
	if v := os.Getenv("VIEWMUX_CONFORMANCE_RETRIES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			t.Fatalf("VIEWMUX_CONFORMANCE_RETRIES=%q: want a number >= 0", v)
		}
		retries = n
	}
	sels := conformanceSelections(t)

	var mu sync.Mutex
	var tallies []conformanceTally
	start := time.Now()
	// Cleanup runs once the parallel subtests are done.
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		logConformanceSummary(t, tallies, time.Since(start))
	})
	for _, up := range conformanceUpstreams() {
		t.Run(up.name, func(t *testing.T) {
			t.Parallel()
			got := testConformanceUpstream(t, up, sels, retries)
			mu.Lock()
			defer mu.Unlock()
			tallies = append(tallies, got...)
		})
	}
}

// logConformanceSummary logs one line per (upstream, mode, spec version),
// then every parity failure on one line.
func logConformanceSummary(t *testing.T, tallies []conformanceTally, elapsed time.Duration) {
	order := map[string]int{}
	for i, up := range conformanceUpstreams() {
		order[up.name] = i
	}
	tallies = slices.Clone(tallies)
	slices.SortStableFunc(tallies, func(a, b conformanceTally) int { return order[a.upstream] - order[b.upstream] })
	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "upstream\tmode\tspec version\tscenarios\tpass direct\tpass via viewmux\tpass both\tparity failures")
	for _, c := range tallies {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", c.upstream, c.mode, c.version, c.scenarios, c.direct, c.via, c.kept, len(c.parity))
	}
	tw.Flush()
	var failures strings.Builder
	for _, c := range tallies {
		for _, p := range c.parity {
			fmt.Fprintf(&failures, "  %s (%s) @%s %s\n", c.upstream, c.mode, c.version, p)
		}
	}
	if failures.Len() > 0 {
		fmt.Fprintf(&table, "\nparity failures (passes directly, fails through viewmux; first failing check):\n%s", failures.String())
	}
	t.Logf("conformance parity summary (%v):\n%s", elapsed.Round(time.Second), table.String())
}

// testConformanceUpstream runs every selection against one instance of up
// directly and, at the same time, against viewmux mounting a second instance
// with one connection per client session, reached through a proxy that
// keeps the CLI's caller at its whole share of them (startAbandoningProxy);
// it fails t for each scenario that passes directly but not through viewmux,
// logs the per-scenario table, and returns one tally per selection.
func testConformanceUpstream(t *testing.T, up conformanceUpstream, sels []conformanceSelection, retries int) []conformanceTally {
	flaky := up.flaky(t)
	directURL := up.start(t, "direct")
	upstreamURL := up.start(t, "behind viewmux")
	mux := itest.StartMux(t, muxConformanceConfig(upstreamURL))
	viaURL, ended := startAbandoningProxy(t, mux.URL())

	var direct, via []*conformanceSide
	var elapsed [2]time.Duration
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		direct, elapsed[0] = runConformanceSides(t, "direct", directURL, sels, flaky, retries)
	}()
	go func() {
		defer wg.Done()
		via, elapsed[1] = runConformanceSides(t, "via viewmux", viaURL, sels, flaky, retries)
	}()
	wg.Wait()
	secondLook(direct, via)
	// Each session the CLI ended was replaced by an abandoned one, so the
	// next that used the upstream took the place of an idle connection.
	const reclaimedMetric = "viewmux_session_connections_reclaimed_total"
	reclaimed, ok := itest.Scrape(t, mux).Values[reclaimedMetric]
	if !ok || reclaimed == 0 {
		t.Errorf("/metrics of viewmux: %s = %v (present: %v) after the CLI ended %d sessions; want reclaims", reclaimedMetric, reclaimed, ok, ended.Load())
	}
	t.Logf("through viewmux: %v idle session connections reclaimed; the CLI ended %d sessions", reclaimed, ended.Load())
	// The selection without --spec-version (the last) runs server-initialize
	// on every upstream.
	if all := direct[len(sels)-1]; !all.passed("server-initialize") {
		t.Fatalf("server-initialize fails against %s directly, so the harness is broken:\n%s",
			up.name, all.last("server-initialize").Failures())
	}

	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "spec version\tscenario\tdirect\tvia viewmux\tretries (direct/mux)\tverdict")
	var tallies []conformanceTally
	var notCounted []string
	for i, sel := range sels {
		d, v := direct[i], via[i]
		c := conformanceTally{upstream: up.name, mode: up.mode, version: sel.label(), scenarios: len(sel.scenarios)}
		for _, name := range sel.scenarios {
			verdict := "ok"
			if v.passed(name) {
				c.via++
			}
			switch {
			case !d.passed(name):
				verdict = "not counted (fails directly)"
				notCounted = append(notCounted, fmt.Sprintf("@%s %s fails directly (viewmux: %s):\n%s",
					sel.label(), name, v.status(name), d.last(name).Failures()))
			case v.passed(name) && !v.runs[name][0].Passed() && !flaky[name]:
				// Passed through viewmux only on secondLook's run.
				c.direct++
				c.kept++
				verdict = "ok on a second run through viewmux"
				t.Logf("@%s %s passed directly, failed its first run through viewmux and passed its second:\n%s",
					sel.label(), name, v.runs[name][0].Failures())
			case !v.passed(name):
				c.direct++
				verdict = "PARITY FAILURE"
				c.parity = append(c.parity, name+": "+v.last(name).FirstFailure())
				t.Errorf("@%s %s passes directly but fails through viewmux:\n%s", sel.label(), name, v.last(name).Failures())
			default:
				c.direct++
				c.kept++
			}
			if flaky[name] {
				verdict += " [intermittent upstream]"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\n", sel.label(), name, d.status(name), v.status(name),
				d.retries(name), v.retries(name), verdict)
		}
		tallies = append(tallies, c)
	}
	tw.Flush()
	if failed := slices.ContainsFunc(tallies, func(c conformanceTally) bool { return len(c.parity) > 0 }); failed {
		t.Logf("viewmux's warnings and errors (stderr):\n%s", itest.Tail(muxTrouble(mux.Stderr()), 6000))
	}

	var sum strings.Builder
	for _, c := range tallies {
		fmt.Fprintf(&sum, "  @%s: %d of %d scenarios pass directly, %d of them also through viewmux (%d pass through viewmux)\n",
			c.version, c.direct, c.scenarios, c.kept, c.via)
	}
	t.Logf("conformance parity, %s (%s) (direct side %v, viewmux side %v):\n%s\n%s",
		up.name, up.mode, elapsed[0].Round(time.Millisecond), elapsed[1].Round(time.Millisecond), sum.String(), table.String())
	for _, s := range notCounted {
		t.Log(s)
	}
	return tallies
}

// muxTrouble returns the lines of viewmux's log text that are warnings or
// errors, for a parity failure's report.
func muxTrouble(log string) string {
	var b strings.Builder
	for line := range strings.Lines(log) {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// secondLook runs once more, through viewmux, each scenario that passed
// directly and failed its only run through viewmux, so that one run lost
// to the machine's load (the CLI gives a stateless request 10 s) is told
// apart from a scenario viewmux breaks, which fails both runs. The table
// shows the extra run; a scenario that passes only on it is logged.
func secondLook(direct, via []*conformanceSide) {
	for i, v := range via {
		for _, name := range v.sel.scenarios {
			if direct[i].passed(name) && len(v.runs[name]) == 1 && !v.passed(name) {
				v.runs[name] = append(v.runs[name], v.runOne(name, time.Now().Add(conformanceScenarioTimeout)))
			}
		}
	}
}
