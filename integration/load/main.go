// Command load measures viewmux against a floor and a direct baseline, in
// one run, on one machine, for the request-path bars of README.md: the
// latency viewmux adds to an allowed tools/call, throughput at 16 concurrent
// sessions and CPU per call, each next to the floor (a plain
// httputil.ReverseProxy in front of the same upstream, the cheapest extra
// HTTP hop); the latency it adds in front of a stdio upstream; whether a
// call whose upstream sends progress notifications waits for anything; and
// the cost of a denied call (which must never reach the upstream). See
// README.md in this directory.
//
// The HTTP upstream is an mcp-go streamable HTTP server inside this process
// (or a re-executed copy of it, --upstream process); the floor is a
// re-executed copy of this program; viewmux is its binary, as a child
// process. Missing a bar is a measurement, not a failure: the exit status is
// non-zero only when something did not work (a call failed, a count did not
// add up).
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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

type options struct {
	viewmux     string
	protocol    string
	n, warmup   int
	block       int
	clients     int
	duration    time.Duration
	slices      int
	runs        int
	tools       int
	progress    int
	stdio       bool
	small       bool
	waitBar     time.Duration
	muxLogLevel string
	timeout     time.Duration
	keep        bool
	upstream    string
	big         string
	bigCalls    int
	bigConc     int
	bigSizes    []int
	states      []upState
}

// the bars, and the names the calls go by.
const (
	barDenied    = 50 * time.Microsecond
	barStdio     = 150 * time.Microsecond
	barCPU       = 1.0 // viewmux CPU per call ≤ barCPU × the floor's
	exposedWrite = muxUpstream + "__" + writeTool
	exposedNote  = muxUpstream + "__" + notifyTool
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
	flag.StringVar(&o.upstream, "upstream", "inproc", "where the HTTP upstream runs: inproc (in this process, with the clients) or process (a child process)")
	flag.StringVar(&o.viewmux, "viewmux", "", "viewmux binary to run (default: go build ./cmd/viewmux into a temp dir)")
	flag.StringVar(&o.protocol, "protocol", mcp.LATEST_LEGACY_PROTOCOL_VERSION, "protocol version the clients pin (viewmux pins 2025-11-25 upstream); \"\" negotiates")
	flag.IntVar(&o.n, "n", 5000, "timed calls per latency series per run")
	flag.IntVar(&o.warmup, "warmup", 500, "untimed calls per latency series before timing, per run")
	flag.IntVar(&o.block, "block", 100, "calls per block when interleaving the latency series")
	flag.IntVar(&o.clients, "clients", 16, "concurrent sessions in the throughput phase (per side)")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "throughput: measured time per side per run")
	flag.IntVar(&o.slices, "slices", 2, "throughput: split each side's time into this many slices, alternating direct/floor/viewmux as ABC CBA …")
	flag.IntVar(&o.runs, "runs", 3, "repeat latency and throughput this many times, interleaved; the summary is the median")
	flag.IntVar(&o.tools, "tools", 0, "extra filler tools on the upstream (e.g. 1000 for a 1,000-tool catalog)")
	flag.IntVar(&o.progress, "progress", 5, "progress notifications per call in the notifying series (1–1000)")
	flag.BoolVar(&o.stdio, "stdio", true, "also measure a stdio upstream (viewmux demo-server) directly and through viewmux serve --stdio")
	flag.BoolVar(&o.small, "small", true, "measure the small-call series (latency and throughput); false runs the large-result series alone")
	flag.DurationVar(&o.waitBar, "wait-bar", 500*time.Microsecond, "a notifying call may cost viewmux at most this much more than it costs the floor (a sleep or poll shows as more)")
	flag.StringVar(&o.muxLogLevel, "mux-log-level", "info", "viewmux --log-level (info is its default; denied calls log a line each)")
	flag.StringVar(&o.big, "big", "1MiB,10MiB,50MiB", "large-result series: result sizes (KiB, MiB or bytes, comma-separated); \"\" skips them")
	flag.IntVar(&o.bigCalls, "big-calls", 10, "large-result series: timed calls per path per size per run")
	states := flag.String("upstream-state", "both", "the upstream state the small-call (echo) and large-result series measure, on every path alike: sse (answering as an event stream, as it does once a session had a notification), json, or both, each reported on its own (see state.go)")
	flag.IntVar(&o.bigConc, "big-concurrent", 4, "large-result series: concurrent calls per path for the peak RSS figure")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Minute, "give up after this long")
	flag.BoolVar(&o.keep, "keep", false, "keep the temp dir (configs, viewmux logs) and print its path")
	flag.Parse()
	if o.upstream != "inproc" && o.upstream != "process" {
		fmt.Fprintf(os.Stderr, "load: --upstream must be inproc or process, not %q\n", o.upstream)
		os.Exit(2)
	}
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "load: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	bigSizes, berr := parseSizes(o.big)
	if berr != nil {
		fmt.Fprintln(os.Stderr, "load:", berr)
		os.Exit(2)
	}
	if o.bigCalls < 1 || o.bigConc < 1 || o.bigConc > o.clients {
		fmt.Fprintln(os.Stderr, "load: --big-calls must be ≥ 1 and --big-concurrent from 1 to --clients")
		os.Exit(2)
	}
	o.bigSizes = bigSizes
	if o.states, berr = parseStates(*states); berr != nil {
		fmt.Fprintln(os.Stderr, "load:", berr)
		os.Exit(2)
	}
	if o.n < 1 || o.warmup < 0 || o.block < 1 || o.clients < 1 || o.duration <= 0 || o.slices < 1 || o.runs < 1 || o.tools < 0 || o.progress < 1 || o.progress > 1000 {
		fmt.Fprintln(os.Stderr, "load: --n, --block, --clients, --slices, --runs must be ≥ 1, --duration > 0, --warmup and --tools ≥ 0, --progress in 1–1000")
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

// result is one run's figures. Latencies are single calls at c=1.
type result struct {
	echo                     []echoResult // per upstream state, in o.states' order
	nDirect, nFloor, nMux    pcts         // tools/call notify over HTTP, with progress
	sDirect, sMux            pcts         // stdio: echo
	spDirect, spMux          pcts         // stdio: slow_count, with progress
	denied, ping, directPing pcts
	latConns                 int64 // TCP connections the upstream accepted in the latency phase
}

// echoResult is one upstream state's small-call figures in one run: echo
// at c=1 and in the throughput phase.
type echoResult struct {
	state                   upState
	direct, floor, mux      pcts  // tools/call echo over HTTP, c=1
	tputConns               int64 // TCP connections the upstream accepted in the state's throughput phase
	directConns, floorConns int64 // … in its slices of each side
	muxConns                int64
	directSSE, floorSSE     int64 // echo calls the upstream answered as SSE in each side's slices
	muxSSE                  int64
	directRate, floorRate   float64       // calls/s
	muxRate                 float64       // calls/s
	muxCPU, floorCPU, upCPU time.Duration // CPU per call in that side's slices; 0 = unknown
}

// echoPaths are one upstream state's sessions for the small-call series:
// one per path for the c=1 series, o.clients per path for throughput.
// sent counts the echo calls made on them.
type echoPaths struct {
	state              upState
	dc, fc, mc         *client.Client
	dcs, fcs, mcs      []*client.Client
	direct, floor, mux caller
	sent               atomic.Int64
}

// progressSeries are the tallies of the notifying series, kept over runs.
type progressSeries struct {
	direct, floor, mux, sDirect, sMux progressTally
}

func run(ctx context.Context, o options, out io.Writer) (err error) {
	dir, err := os.MkdirTemp("", "viewmux-load-")
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

	bin, built := o.viewmux, ""
	if bin == "" {
		fmt.Fprintln(out, "building ./cmd/viewmux …")
		if bin, built, err = buildMux(ctx, dir); err != nil {
			return err
		}
	} else {
		built = binVersion(ctx, bin)
	}
	floorBin, err := buildFloor(ctx, dir)
	if err != nil {
		return err
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

	fl, err := childFloor(ctx, floorBin, up.url)
	if err != nil {
		return err
	}
	defer func() { // after the floor's sessions close, before the upstream does
		if cerr := fl.stop(); cerr != nil && err == nil {
			err = fmt.Errorf("floor: %w", cerr)
		}
	}()

	m, err := startMux(ctx, bin, dir, up.url, o.muxLogLevel)
	if err != nil {
		return err
	}
	defer m.stop() // before the upstream closes and the dir is removed
	defer func() {
		if err != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w\n--- viewmux log (tail, without the per-call refusals) ---\n%s", err, m.logTail(4096))
		}
	}()

	// Every session this program opens is closed on the way out, before
	// viewmux, the floor and the upstream stop.
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
	directURL, floorURL, muxURL, roURL := up.url, fl.url, m.base+"/mcp", m.base+"/mcp?profile=ro"

	var sent, sentNote atomic.Int64 // successful echo and notify calls, on every path
	denied := deniedCaller(exposedWrite)
	var tally progressSeries
	noteArgs := map[string]any{"count": o.progress}
	noteText := notifiedText(o.progress)
	nDirect := progressCaller(notifyTool, noteArgs, o.progress, noteText, &tally.direct, &sentNote)
	nFloor := progressCaller(notifyTool, noteArgs, o.progress, noteText, &tally.floor, &sentNote)
	nMux := progressCaller(exposedNote, noteArgs, o.progress, noteText, &tally.mux, &sentNote)

	// One session per latency series (the echo ones per state, below), and
	// o.clients per side and state for throughput.
	var rc, ndc, nfc, nmc *client.Client
	for _, s := range []struct {
		c     **client.Client
		url   string
		tally *progressTally
	}{
		{&rc, roURL, nil}, {&ndc, directURL, &tally.direct}, {&nfc, floorURL, &tally.floor}, {&nmc, muxURL, &tally.mux},
	} {
		if *s.c, err = open(s.url); err != nil {
			return err
		}
		if s.tally != nil {
			s.tally.watch(*s.c)
		}
	}
	if err := checkViews(ctx, nmc, rc, o.tools+len(quietTools)); err != nil {
		return err
	}
	var paths []*echoPaths // per state, in o.states' order
	for _, st := range o.states {
		p := &echoPaths{state: st}
		p.direct, p.floor, p.mux = echoCaller(echoTool, &sent, &p.sent), echoCaller(echoTool, &sent, &p.sent), echoCaller(st.muxTool(echoTool), &sent, &p.sent)
		for _, s := range []struct {
			c   **client.Client
			url string
		}{{&p.dc, directURL}, {&p.fc, floorURL}, {&p.mc, muxURL}} {
			if *s.c, err = open(s.url); err != nil {
				return err
			}
		}
		for range o.clients {
			for _, s := range []struct {
				cs  *[]*client.Client
				url string
			}{{&p.dcs, directURL}, {&p.fcs, floorURL}, {&p.mcs, muxURL}} {
				c, err := open(s.url)
				if err != nil {
					return err
				}
				*s.cs = append(*s.cs, c)
			}
		}
		if st == stateSSE {
			own := append([]*client.Client{p.dc, p.fc}, p.dcs...)
			if err := primeSSE(ctx, append(own, p.fcs...), p.mc, &sentNote); err != nil {
				return err
			}
		}
		paths = append(paths, p)
	}

	var bigRounds []bigRound
	if len(o.bigSizes) > 0 {
		urls := bigURLs{direct: directURL, floor: floorURL, mux: muxURL, floorPID: fl.pid, muxPID: m.cmd.Process.Pid}
		if bigRounds, err = openBigRounds(ctx, o.states, o.bigConc, urls, open, &sentNote); err != nil {
			return err
		}
	}

	var sp *stdioPair
	if o.stdio {
		if sp, err = openStdioPair(ctx, bin, dir, o, &tally); err != nil {
			return err
		}
		opened = append(opened, sp.direct, sp.mux)
	}

	// ping was removed in 2026-07-28; mcp-go's client then sends nothing, so
	// there is no ping to measure.
	dc := paths[0].dc // for the header and the direct ping
	pings := !mcp.IsModernProtocol(rc.ProtocolVersion()) && !mcp.IsModernProtocol(dc.ProtocolVersion())
	fmt.Fprintf(out, "viewmux load: %d CPUs, GOMAXPROCS %d, %s, protocol %s (direct) / %s (viewmux), upstream %s with %d tools\nviewmux: %s\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), dc.ProtocolVersion(), rc.ProtocolVersion(), o.upstream, upstreamTools+o.tools, built)
	fmt.Fprintf(out, "latency: %d timed calls per series (+%d warmup), blocks of %d, interleaved; notifying calls send %d progress notifications; throughput: %d sessions per side, %v per side in %d alternating slices; %d run(s)\n",
		o.n, o.warmup, o.block, o.progress, o.clients, o.duration, o.slices, o.runs)
	for _, st := range o.states {
		fmt.Fprintf(out, "%s: %s\n", st.label(), st.note())
	}
	fmt.Fprintln(out)

	var results []result
	bigs := make([][][]bigResult, len(bigRounds)) // [round][run][size]
	for r := range o.runs {
		res := result{echo: make([]echoResult, len(paths))}
		add := func(label string, c *client.Client, call caller, into *pcts) *series {
			return &series{label: label, c: c, call: call, into: into}
		}
		var ss []*series
		for i, p := range paths {
			e := &res.echo[i]
			e.state = p.state
			ss = append(ss,
				add("direct "+echoTool+" ("+p.state.label()+")", p.dc, p.direct, &e.direct),
				add("floor "+echoTool+" ("+p.state.label()+")", p.fc, p.floor, &e.floor),
				add("viewmux "+p.state.muxTool(echoTool)+" ("+p.state.label()+")", p.mc, p.mux, &e.mux))
		}
		ss = append(ss,
			add("viewmux denied "+exposedWrite, rc, denied, &res.denied),
			add("direct "+notifyTool, ndc, nDirect, &res.nDirect),
			add("floor "+notifyTool, nfc, nFloor, &res.nFloor),
			add("viewmux "+exposedNote, nmc, nMux, &res.nMux))
		if o.stdio {
			ss = append(ss,
				add("stdio direct "+stdioEcho, sp.direct, sp.echoDirect, &res.sDirect),
				add("stdio viewmux "+exposedStdEcho, sp.mux, sp.echoMux, &res.sMux),
				add("stdio direct "+stdioCount, sp.direct, sp.countDirect, &res.spDirect),
				add("stdio viewmux "+exposedStdCnt, sp.mux, sp.countMux, &res.spMux))
		}
		if pings {
			ss = append(ss,
				add("viewmux ping", rc, pingCaller, &res.ping),
				add("direct ping", dc, pingCaller, &res.directPing))
		}
		if o.small {
			c0, err := settledCounts(up.counts)
			if err != nil {
				return err
			}
			sent0 := sseSent(paths)
			if err := latency(ctx, ss, o.warmup, o.n, o.block); err != nil {
				return err
			}
			c1, err := settledCounts(up.counts)
			if err != nil {
				return err
			}
			// The states' series are interleaved, so the phase's total is
			// checked: every echo call made in the event-stream state, and
			// no other, answered as an event stream.
			if got, want := c1.EchoSSE-c0.EchoSSE, sseSent(paths)-sent0; got != want {
				return fmt.Errorf("latency phase: the upstream answered %d of %d echo calls as an event stream, want %d (the calls made in the event-stream state)",
					got, c1.Calls[echoTool]-c0.Calls[echoTool], want)
			}
			for _, s := range ss {
				*s.into = percentiles(s.d)
			}
			res.latConns = c1.Conns - c0.Conns
			if err := m.alive(); err != nil {
				return err
			}

			for j := range paths { // the states in turn, in reverse order every other run
				i := j
				if r%2 == 1 {
					i = len(paths) - 1 - j
				}
				p, e := paths[i], &res.echo[i]
				t0, err := settledCounts(up.counts)
				if err != nil {
					return err
				}
				tp, err := throughputRun(ctx, o, p.state, []tputSide{
					{name: "direct", cs: p.dcs, call: p.direct, pid: up.pid},
					{name: "floor", cs: p.fcs, call: p.floor, pid: fl.pid},
					{name: "viewmux", cs: p.mcs, call: p.mux, pid: m.cmd.Process.Pid},
				}, up.counts)
				if err != nil {
					return err
				}
				e.directRate, e.floorRate, e.muxRate = tp[0].rate, tp[1].rate, tp[2].rate
				e.upCPU, e.floorCPU, e.muxCPU = tp[0].cpu, tp[1].cpu, tp[2].cpu
				e.directConns, e.floorConns, e.muxConns = tp[0].conns, tp[1].conns, tp[2].conns
				e.directSSE, e.floorSSE, e.muxSSE = tp[0].sse, tp[1].sse, tp[2].sse
				if err := m.alive(); err != nil {
					return err
				}
				t1, err := settledCounts(up.counts)
				if err != nil {
					return err
				}
				e.tputConns = t1.Conns - t0.Conns
			}
			results = append(results, res)
			printRun(out, r+1, res, o.stdio)
		}

		big := make([][]bigResult, len(bigRounds))
		for _, size := range o.bigSizes {
			for i, br := range bigRounds { // each size in every state back to back
				c0, err := settledCounts(up.counts)
				if err != nil {
					return err
				}
				b, err := bigRun(ctx, size, bigCalls(size, o.bigCalls), br.direct, br.floor, br.mux)
				if err != nil {
					return err
				}
				c1, err := settledCounts(up.counts)
				if err != nil {
					return err
				}
				if err := checkBigState(br.state, c0, c1); err != nil {
					return err
				}
				big[i] = append(big[i], b)
				fmt.Fprintf(out, "run %d: %s result, upstream answering as %s: added p50 ms floor %.2f viewmux %.2f | CPU ms/MiB floor %.2f viewmux %.2f\n",
					r+1, sizeLabel(size), br.state, ms(b.floorAdded()), ms(b.muxAdded()), ms(perMB(b.floorCPU, size)), ms(perMB(b.muxCPU, size)))
			}
		}
		for i := range bigRounds {
			bigs[i] = append(bigs[i], big[i])
		}
		if err := m.alive(); err != nil {
			return err
		}
	}

	// Integrity: every echo and notify call answered reached the upstream
	// exactly once, and no denied call reached it at all.
	cs, err := settledCounts(up.counts)
	if err != nil {
		return err
	}
	got, want := cs.Calls[echoTool], sent.Load()
	gotNote, wantNote := cs.Calls[notifyTool], sentNote.Load()
	leaked := cs.Calls[writeTool]
	fmt.Fprintf(out, "\nupstream HTTP handler saw: %d tools/call %s (client side counted %d), %d tools/call %s (client side %d), %d tools/call %s, %d requests and %d TCP connections in all\n\n",
		got, echoTool, want, gotNote, notifyTool, wantNote, leaked, writeTool, cs.Requests, cs.Conns)
	if got != want {
		return fmt.Errorf("the upstream counted %d echo calls, the clients %d", got, want)
	}
	if gotNote != wantNote {
		return fmt.Errorf("the upstream counted %d notify calls, the clients %d", gotNote, wantNote)
	}
	if o.small {
		printSummary(out, o, results, &tally, leaked, pings)
	}
	for i, br := range bigRounds {
		printBig(out, br.state, bigs[i])
	}
	return nil
}

// checkViews makes sure the default view has up__echo, up__write, up__notify
// and extra more tools, and the "ro" view has up__echo and up__notify but
// not up__write.
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
	exposedEcho := stateSSE.muxTool(echoTool)
	if !all[exposedEcho] || !all[exposedWrite] || !all[exposedNote] || len(all) != upstreamTools+extra {
		return fmt.Errorf("default view through viewmux: want %s, %s, %s and %d more, got %d tools", exposedEcho, exposedWrite, exposedNote, extra, len(all))
	}
	ro, err := names(rc)
	if err != nil {
		return err
	}
	if !ro[exposedEcho] || !ro[exposedNote] || ro[exposedWrite] {
		return fmt.Errorf("profile ro: want %s and %s visible and %s hidden, got %v", exposedEcho, exposedNote, exposedWrite, slices.Sorted(maps.Keys(ro)))
	}
	return nil
}

// tputSide is one side of the throughput phase: its sessions, its call,
// and the process whose CPU time its calls cost (0: none to read).
type tputSide struct {
	name string
	cs   []*client.Client
	call caller
	pid  int
}

// tputResult is one side's figures.
type tputResult struct {
	rate  float64       // calls/s
	cpu   time.Duration // CPU per call of the side's process, 0 when unknown
	conns int64         // TCP connections the upstream accepted during the side's slices
	sse   int64         // echo calls the upstream answered as SSE during them
}

// throughputRun warms every side up for a second, then measures them in
// alternating slices (A B C, C B A, …), each side o.duration in all. Where
// /proc allows, it also reads the CPU time each side's process spends per
// call during that side's slices. Every slice's echo calls must have been
// answered as state st says.
func throughputRun(ctx context.Context, o options, st upState, sides []tputSide, upCounts func() (counts, error)) ([]tputResult, error) {
	for _, s := range sides {
		if _, _, err := throughput(ctx, s.cs, s.call, time.Second); err != nil {
			return nil, err
		}
	}
	slice := o.duration / time.Duration(o.slices)
	calls := make([]int64, len(sides))
	took := make([]time.Duration, len(sides))
	cpu := make([]time.Duration, len(sides))
	conns, sse := make([]int64, len(sides)), make([]int64, len(sides))
	cpuOK := make([]bool, len(sides))
	for i, s := range sides {
		cpuOK[i] = s.pid != 0
	}
	read := func(i int) time.Duration {
		if !cpuOK[i] {
			return 0
		}
		d, ok := processCPU(sides[i].pid)
		cpuOK[i] = ok
		return d
	}
	for k := range o.slices {
		for j := range sides {
			i := j
			if k%2 == 1 {
				i = len(sides) - 1 - j
			}
			u0, err := settledCounts(upCounts)
			if err != nil {
				return nil, err
			}
			c0 := read(i)
			n, el, err := throughput(ctx, sides[i].cs, sides[i].call, slice)
			if err != nil {
				return nil, err
			}
			c1 := read(i)
			u1, err := settledCounts(upCounts)
			if err != nil {
				return nil, err
			}
			what := fmt.Sprintf("throughput, %s slice %d", sides[i].name, k+1)
			if err := checkState(st, what, echoTool, u1.Calls[echoTool]-u0.Calls[echoTool], u1.EchoSSE-u0.EchoSSE); err != nil {
				return nil, err
			}
			calls[i], took[i], cpu[i] = calls[i]+n, took[i]+el, cpu[i]+c1-c0
			conns[i] += u1.Conns - u0.Conns
			sse[i] += u1.EchoSSE - u0.EchoSSE
		}
	}
	rs := make([]tputResult, len(sides))
	for i := range sides {
		rs[i].rate, rs[i].conns, rs[i].sse = float64(calls[i])/took[i].Seconds(), conns[i], sse[i]
		if cpuOK[i] && calls[i] > 0 {
			rs[i].cpu = cpu[i] / time.Duration(calls[i])
		}
	}
	return rs, nil
}

// sseSent is how many echo calls have been made on the event-stream
// state's sessions so far.
func sseSent(paths []*echoPaths) int64 {
	var n int64
	for _, p := range paths {
		if p.state == stateSSE {
			n += p.sent.Load()
		}
	}
	return n
}
