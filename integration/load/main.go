// Command load measures mcpmux against a direct baseline, in one run, on
// one machine: the latency mcpmux adds to an allowed tools/call over
// loopback streamable HTTP, throughput at 16 concurrent sessions, and the
// cost of a denied call (which must never reach the upstream). These are the
// bars of SPEC §11. See README.md in this directory.
//
// The upstream is an mcp-go streamable HTTP server inside this process; the
// mcpmux binary runs as a child process mounting it by URL. Missing a bar is
// a measurement, not a failure: the exit status is non-zero only when
// something did not work (a call failed, a count did not add up).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

type options struct {
	mcpmux      string
	protocol    string
	n, warmup   int
	block       int
	clients     int
	duration    time.Duration
	slices      int
	runs        int
	tools       int
	muxLogLevel string
	timeout     time.Duration
	keep        bool
	upstream    string
}

// SPEC §11 bars.
const (
	barAddedP50  = 100 * time.Microsecond
	barAddedP99  = time.Millisecond
	barDenied    = 50 * time.Microsecond
	barRatio     = 0.60
	exposedEcho  = "up__" + echoTool
	exposedWrite = "up__" + writeTool
)

func main() {
	if v, ok := os.LookupEnv(upstreamEnv); ok {
		if err := serveUpstreamChild(v); err != nil {
			fmt.Fprintln(os.Stderr, "load upstream:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	flag.StringVar(&o.upstream, "upstream", "inproc", "where the upstream runs: inproc (in this process, with the clients) or process (a child process)")
	flag.StringVar(&o.mcpmux, "mcpmux", "", "mcpmux binary to run (default: go build ./cmd/mcpmux into a temp dir)")
	flag.StringVar(&o.protocol, "protocol", mcp.LATEST_LEGACY_PROTOCOL_VERSION, "protocol version the clients pin (mcpmux pins 2025-11-25 upstream); \"\" negotiates")
	flag.IntVar(&o.n, "n", 5000, "timed calls per latency series per run")
	flag.IntVar(&o.warmup, "warmup", 500, "untimed calls per latency series before timing, per run")
	flag.IntVar(&o.block, "block", 100, "calls per block when interleaving the latency series")
	flag.IntVar(&o.clients, "clients", 16, "concurrent sessions in the throughput phase (per side)")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "throughput: measured time per side per run")
	flag.IntVar(&o.slices, "slices", 2, "throughput: split each side's time into this many slices, alternating direct/mcpmux as ABBA…")
	flag.IntVar(&o.runs, "runs", 3, "repeat latency and throughput this many times; the summary is the median")
	flag.IntVar(&o.tools, "tools", 0, "extra filler tools on the upstream (e.g. 1000 for a 1,000-tool catalog)")
	flag.StringVar(&o.muxLogLevel, "mux-log-level", "info", "mcpmux --log-level (info is its default; denied calls log a line each)")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Minute, "give up after this long")
	flag.BoolVar(&o.keep, "keep", false, "keep the temp dir (config, mcpmux log) and print its path")
	flag.Parse()
	if o.upstream != "inproc" && o.upstream != "process" {
		fmt.Fprintf(os.Stderr, "load: --upstream must be inproc or process, not %q\n", o.upstream)
		os.Exit(2)
	}
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "load: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if o.n < 1 || o.warmup < 0 || o.block < 1 || o.clients < 1 || o.duration <= 0 || o.slices < 1 || o.runs < 1 || o.tools < 0 {
		fmt.Fprintln(os.Stderr, "load: --n, --block, --clients, --slices, --runs must be ≥ 1, --duration > 0, --warmup and --tools ≥ 0")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeoutCause(ctx, o.timeout, fmt.Errorf("--timeout %v reached", o.timeout))
	err := run(ctx, o, os.Stdout)
	cancel()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

// result is one run's figures.
type result struct {
	direct, mux, denied, ping pcts
	directPing                pcts
	latConns, tputConns       int64         // TCP connections the upstream accepted per phase
	directRate, muxRate       float64       // calls/s
	muxCPU, upCPU             time.Duration // CPU per call: mcpmux on its calls, a child upstream on direct calls; 0 = unknown
}

func run(ctx context.Context, o options, out io.Writer) (err error) {
	dir, err := os.MkdirTemp("", "mcpmux-load-")
	if err != nil {
		return err
	}
	defer func() {
		if o.keep {
			fmt.Fprintln(out, "kept:", dir)
			return
		}
		if rerr := os.RemoveAll(dir); rerr != nil && err == nil {
			err = rerr
		}
	}()

	bin := o.mcpmux
	if bin == "" {
		fmt.Fprintln(out, "building ./cmd/mcpmux …")
		if bin, err = buildMux(ctx, dir); err != nil {
			return err
		}
	}

	var up *upstreamHandle
	if o.upstream == "process" {
		up, err = childUpstream(ctx, o.tools)
	} else {
		up, err = inProcessUpstream(o.tools)
	}
	if err != nil {
		return err
	}
	defer func() {
		if cerr := up.close(); cerr != nil && err == nil {
			err = fmt.Errorf("upstream: %w", cerr)
		}
	}()

	m, err := startMux(ctx, bin, dir, up.url, o.muxLogLevel)
	if err != nil {
		return err
	}
	defer m.stop() // before the upstream closes and the dir is removed
	defer func() {
		if err != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w\n--- mcpmux log (tail, without the per-call refusals) ---\n%s", err, m.logTail(4096))
		}
	}()

	// Every session this program opens is closed on the way out.
	var opened []*client.Client
	defer func() {
		for _, c := range opened {
			c.Close()
		}
	}()
	open := func(url string) (*client.Client, error) {
		c, err := dial(ctx, url, o.protocol)
		if err == nil {
			opened = append(opened, c)
		}
		return c, err
	}
	directURL, muxURL, roURL := up.url, m.base+"/mcp", m.base+"/mcp?profile=ro"

	var sent atomic.Int64 // successful echo calls, direct and through mcpmux
	direct, via := echoCaller(echoTool, &sent), echoCaller(exposedEcho, &sent)
	denied := deniedCaller(exposedWrite)

	dc, err := open(directURL)
	if err != nil {
		return err
	}
	mc, err := open(muxURL)
	if err != nil {
		return err
	}
	rc, err := open(roURL)
	if err != nil {
		return err
	}
	if err := checkViews(ctx, mc, rc, o.tools); err != nil {
		return err
	}
	var dcs, mcs []*client.Client
	for range o.clients {
		c, err := open(directURL)
		if err != nil {
			return err
		}
		dcs = append(dcs, c)
		if c, err = open(muxURL); err != nil {
			return err
		}
		mcs = append(mcs, c)
	}

	// ping was removed in 2026-07-28; mcp-go's client then sends nothing, so
	// there is no floor to measure.
	pings := !mcp.IsModernProtocol(rc.ProtocolVersion()) && !mcp.IsModernProtocol(dc.ProtocolVersion())
	fmt.Fprintf(out, "mcpmux load: %d CPUs, GOMAXPROCS %d, %s, protocol %s (direct) / %s (mcpmux), upstream %s with %d tools\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), dc.ProtocolVersion(), mc.ProtocolVersion(), o.upstream, 2+o.tools)
	fmt.Fprintf(out, "latency: %d timed calls per series (+%d warmup), blocks of %d, interleaved; throughput: %d sessions per side, %v per side in %d alternating slices; %d run(s)\n\n",
		o.n, o.warmup, o.block, o.clients, o.duration, o.slices, o.runs)

	var results []result
	for r := range o.runs {
		var res result
		ss := []*series{
			{label: "direct " + echoTool, c: dc, call: direct},
			{label: "mcpmux " + exposedEcho, c: mc, call: via},
			{label: "mcpmux denied " + exposedWrite, c: rc, call: denied},
		}
		if pings {
			ss = append(ss,
				&series{label: "mcpmux ping", c: rc, call: pingCaller},
				&series{label: "direct ping", c: dc, call: pingCaller})
		}
		c0, err := up.counts()
		if err != nil {
			return fmt.Errorf("upstream counts: %w", err)
		}
		if err := latency(ctx, ss, o.warmup, o.n, o.block); err != nil {
			return err
		}
		c1, err := up.counts()
		if err != nil {
			return fmt.Errorf("upstream counts: %w", err)
		}
		res.direct, res.mux = percentiles(ss[0].d), percentiles(ss[1].d)
		res.denied = percentiles(ss[2].d)
		if pings {
			res.ping, res.directPing = percentiles(ss[3].d), percentiles(ss[4].d)
		}
		if err := m.alive(); err != nil {
			return err
		}

		tp, err := throughputRun(ctx, o, dcs, mcs, direct, via, m.cmd.Process.Pid, up.pid)
		if err != nil {
			return err
		}
		res.directRate, res.muxRate, res.muxCPU, res.upCPU = tp.directRate, tp.muxRate, tp.muxCPU, tp.upCPU
		if err := m.alive(); err != nil {
			return err
		}
		c2, err := up.counts()
		if err != nil {
			return fmt.Errorf("upstream counts: %w", err)
		}
		res.latConns, res.tputConns = c1.Conns-c0.Conns, c2.Conns-c1.Conns
		results = append(results, res)
		printRun(out, r+1, res)
	}

	// Integrity: every echo call answered reached the upstream exactly
	// once, and no denied call reached it at all.
	cs, err := up.counts()
	if err != nil {
		return fmt.Errorf("upstream counts: %w", err)
	}
	got, want := cs.Calls[echoTool], sent.Load()
	leaked := cs.Calls[writeTool]
	fmt.Fprintf(out, "\nupstream HTTP handler saw: %d tools/call %s (client side counted %d), %d tools/call %s, %d requests and %d TCP connections in all\n\n",
		got, echoTool, want, leaked, writeTool, cs.Requests, cs.Conns)
	if got != want {
		return fmt.Errorf("the upstream counted %d echo calls, the clients %d", got, want)
	}
	printSummary(out, o, results, leaked, pings)
	return nil
}

// checkViews makes sure the default view has up__echo and the "ro" view has
// up__echo but not up__write, and that one call through mcpmux works.
func checkViews(ctx context.Context, mc, rc *client.Client, extra int) error {
	names := func(c *client.Client) (map[string]bool, error) {
		res, err := c.ListTools(ctx, mcp.ListToolsRequest{})
		if err != nil {
			return nil, fmt.Errorf("tools/list: %w", err)
		}
		m := make(map[string]bool, len(res.Tools))
		for _, t := range res.Tools {
			m[t.Name] = true
		}
		return m, nil
	}
	all, err := names(mc)
	if err != nil {
		return err
	}
	if !all[exposedEcho] || !all[exposedWrite] || len(all) != 2+extra {
		return fmt.Errorf("default view through mcpmux: want %s, %s and %d more, got %d tools", exposedEcho, exposedWrite, extra, len(all))
	}
	ro, err := names(rc)
	if err != nil {
		return err
	}
	if !ro[exposedEcho] || ro[exposedWrite] {
		return fmt.Errorf("profile ro: want %s visible and %s hidden, got %v", exposedEcho, exposedWrite, slices.Sorted(maps.Keys(ro)))
	}
	return nil
}

type tputResult struct {
	directRate, muxRate float64       // calls/s
	muxCPU, upCPU       time.Duration // CPU per call, 0 when unknown
}

// throughputRun warms both sides up for a second each, then measures them
// in alternating slices (direct, mcpmux, mcpmux, direct, …). Where /proc
// allows, it also reads the CPU time mcpmux spends per call in the mcpmux
// slices and, with --upstream process, the upstream per call in the direct
// slices (a plain mcp-go server: the yardstick for mcpmux's figure).
func throughputRun(ctx context.Context, o options, dcs, mcs []*client.Client, direct, via caller, muxPID, upPID int) (tputResult, error) {
	var r tputResult
	for _, side := range []struct {
		cs   []*client.Client
		call caller
	}{{dcs, direct}, {mcs, via}} {
		if _, _, err := throughput(ctx, side.cs, side.call, time.Second); err != nil {
			return r, err
		}
	}
	slice := o.duration / time.Duration(o.slices)
	var dn, mn int64
	var dt, mt, muxCPU, upCPU time.Duration
	cpuOK := map[int]bool{muxPID: true, upPID: upPID != 0}
	cpu := func(pid int) time.Duration {
		if !cpuOK[pid] {
			return 0
		}
		d, ok := processCPU(pid)
		cpuOK[pid] = ok
		return d
	}
	for i := range o.slices {
		first := i%2 == 0 // ABBA: direct first on even slices
		for _, isDirect := range []bool{first, !first} {
			cs, call, pid := mcs, via, muxPID
			if isDirect {
				cs, call, pid = dcs, direct, upPID
			}
			c0 := cpu(pid)
			n, el, err := throughput(ctx, cs, call, slice)
			if err != nil {
				return r, err
			}
			c1 := cpu(pid)
			if isDirect {
				dn, dt, upCPU = dn+n, dt+el, upCPU+c1-c0
			} else {
				mn, mt, muxCPU = mn+n, mt+el, muxCPU+c1-c0
			}
		}
	}
	r.directRate, r.muxRate = float64(dn)/dt.Seconds(), float64(mn)/mt.Seconds()
	if cpuOK[muxPID] && mn > 0 {
		r.muxCPU = muxCPU / time.Duration(mn)
	}
	if upPID != 0 && cpuOK[upPID] && dn > 0 {
		r.upCPU = upCPU / time.Duration(dn)
	}
	return r, nil
}

func printRun(out io.Writer, r int, res result) {
	pingP50 := "n/a"
	if res.ping.n > 0 {
		pingP50 = us(res.ping.p50)
	}
	fmt.Fprintf(out, "run %d: latency µs p50/p99  direct %s/%s  mcpmux %s/%s  added %s/%s  denied p50 %s  mcpmux ping p50 %s | throughput direct %.0f/s  mcpmux %.0f/s  %.1f%% | new upstream TCP conns: latency %d, throughput %d\n",
		r, us(res.direct.p50), us(res.direct.p99), us(res.mux.p50), us(res.mux.p99),
		us(res.mux.p50-res.direct.p50), us(res.mux.p99-res.direct.p99),
		us(res.denied.p50), pingP50,
		res.directRate, res.muxRate, 100*res.muxRate/res.directRate, res.latConns, res.tputConns)
}

// printSummary prints the medians over runs and a verdict per SPEC bar.
func printSummary(out io.Writer, o options, rs []result, leaked int64, pings bool) {
	med := func(f func(result) time.Duration) time.Duration {
		v := make([]time.Duration, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		return median(v)
	}
	medf := func(f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		return median(v)
	}
	row := func(f func(result) pcts) [3]time.Duration {
		return [3]time.Duration{
			med(func(r result) time.Duration { return f(r).p50 }),
			med(func(r result) time.Duration { return f(r).p90 }),
			med(func(r result) time.Duration { return f(r).p99 }),
		}
	}
	d := row(func(r result) pcts { return r.direct })
	m := row(func(r result) pcts { return r.mux })
	den := row(func(r result) pcts { return r.denied })
	png := row(func(r result) pcts { return r.ping })
	dpng := row(func(r result) pcts { return r.directPing })
	// Added latency is computed per run, then the median taken.
	addedP50 := med(func(r result) time.Duration { return r.mux.p50 - r.direct.p50 })
	addedP90 := med(func(r result) time.Duration { return r.mux.p90 - r.direct.p90 })
	addedP99 := med(func(r result) time.Duration { return r.mux.p99 - r.direct.p99 })
	deniedOverPing := med(func(r result) time.Duration { return r.denied.p50 - r.ping.p50 })
	dRate := medf(func(r result) float64 { return r.directRate })
	mRate := medf(func(r result) float64 { return r.muxRate })
	ratio := medf(func(r result) float64 { return r.muxRate / r.directRate })
	muxCPU := med(func(r result) time.Duration { return r.muxCPU })
	upCPU := med(func(r result) time.Duration { return r.upCPU })

	fmt.Fprintf(out, "summary: median of %d run(s)\n", len(rs))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "latency, µs\tp50\tp90\tp99\t")
	fmt.Fprintf(tw, "direct  %s\t%s\t%s\t%s\t\n", echoTool, us(d[0]), us(d[1]), us(d[2]))
	fmt.Fprintf(tw, "mcpmux  %s\t%s\t%s\t%s\t\n", exposedEcho, us(m[0]), us(m[1]), us(m[2]))
	fmt.Fprintf(tw, "added (mcpmux − direct)\t%s\t%s\t%s\t\n", us(addedP50), us(addedP90), us(addedP99))
	fmt.Fprintf(tw, "denied  %s (profile ro)\t%s\t%s\t%s\t\n", exposedWrite, us(den[0]), us(den[1]), us(den[2]))
	if pings {
		fmt.Fprintf(tw, "mcpmux  ping (floor)\t%s\t%s\t%s\t\n", us(png[0]), us(png[1]), us(png[2]))
		fmt.Fprintf(tw, "direct  ping\t%s\t%s\t%s\t\n", us(dpng[0]), us(dpng[1]), us(dpng[2]))
		fmt.Fprintf(tw, "denied − ping\t%s\t\t\t\n", us(deniedOverPing))
	}
	fmt.Fprintln(tw, "\t\t\t\t")
	fmt.Fprintf(tw, "throughput, %d sessions\tcalls/s\t\t\t\n", o.clients)
	fmt.Fprintf(tw, "direct\t%.0f\t\t\t\n", dRate)
	fmt.Fprintf(tw, "mcpmux\t%.0f\t\t\t\n", mRate)
	fmt.Fprintf(tw, "mcpmux / direct\t%.1f%%\t\t\t\n", 100*ratio)
	if muxCPU > 0 {
		fmt.Fprintf(tw, "mcpmux CPU per call, µs\t%s\t\t\t\n", us(muxCPU))
	}
	if upCPU > 0 {
		fmt.Fprintf(tw, "upstream CPU per direct call, µs\t%s\t\t\t\n", us(upCPU))
	}
	tw.Flush()

	verdict := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "MISS"
	}
	fmt.Fprintln(out, "\nverdicts (SPEC §11):")
	fmt.Fprintf(out, "  added latency p50   %7s µs  ≤ 100 µs   %s\n", us(addedP50), verdict(addedP50 <= barAddedP50))
	fmt.Fprintf(out, "  added latency p99   %7s µs  ≤ 1000 µs  %s\n", us(addedP99), verdict(addedP99 <= barAddedP99))
	fmt.Fprintf(out, "  throughput ratio    %7.1f %%   ≥ 60 %%     %s\n", 100*ratio, verdict(ratio >= barRatio))
	if pings {
		fmt.Fprintf(out, "  denied call         %7s µs  ≤ 50 µs    %s  (p50 over mcpmux's own ping floor; end to end %s µs incl. client and HTTP)\n",
			us(deniedOverPing), verdict(deniedOverPing <= barDenied), us(den[0]))
	} else {
		fmt.Fprintf(out, "  denied call         %7s µs  ≤ 50 µs    %s  (end to end, incl. client and HTTP: no ping floor on protocol 2026-07-28)\n",
			us(den[0]), verdict(den[0] <= barDenied))
	}
	fmt.Fprintf(out, "  denied upstream     %7d req  = 0        %s\n", leaked, verdict(leaked == 0))
	if leaked != 0 {
		fmt.Fprintln(out, strings.Repeat("!", 8), "a hidden tool's call reached the upstream")
	}
}
