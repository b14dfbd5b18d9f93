package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Figures derived from one run. "Added" is a path's latency minus the
// direct latency of the same call in the same run; a notifying call's
// "extra" is what its notifications add on top of a plain call's added
// latency on the same path.
func addedP50(p, direct pcts) time.Duration { return p.p50 - direct.p50 }

func (r result) floorAdded() time.Duration { return addedP50(r.floor, r.direct) }
func (r result) muxAdded() time.Duration   { return addedP50(r.mux, r.direct) }
func (r result) floorExtra() time.Duration { return addedP50(r.nFloor, r.nDirect) - r.floorAdded() }
func (r result) muxExtra() time.Duration   { return addedP50(r.nMux, r.nDirect) - r.muxAdded() }
func (r result) stdioAdded() time.Duration { return addedP50(r.sMux, r.sDirect) }
func (r result) stdioExtra() time.Duration { return addedP50(r.spMux, r.spDirect) - r.stdioAdded() }

func printRun(out io.Writer, r int, res result, stdio bool) {
	fmt.Fprintf(out, "run %d: added p50 µs floor %s mcpmux %s | notifying call extra µs floor %s mcpmux %s",
		r, us(res.floorAdded()), us(res.muxAdded()), us(res.floorExtra()), us(res.muxExtra()))
	if stdio {
		fmt.Fprintf(out, " | stdio added %s, extra %s", us(res.stdioAdded()), us(res.stdioExtra()))
	}
	fmt.Fprintf(out, " | throughput %% of direct floor %.1f mcpmux %.1f | CPU µs/call floor %s mcpmux %s | new upstream TCP conns: latency %d, throughput %d (direct %d, floor %d, mcpmux %d) | echo answered as SSE in throughput: direct %d, floor %d, mcpmux %d\n",
		100*res.floorRate/res.directRate, 100*res.muxRate/res.directRate,
		us(res.floorCPU), us(res.muxCPU), res.latConns, res.tputConns, res.directConns, res.floorConns, res.muxConns,
		res.directSSE, res.floorSSE, res.muxSSE)
}

// printSummary prints the medians over runs and a verdict per bar.
func printSummary(out io.Writer, o options, rs []result, tally *progressSeries, leaked int64, pings bool) {
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
	type row struct {
		label   string
		p       func(result) pcts
		against func(result) pcts // the direct series "added" is taken from; nil: none
	}
	direct := func(r result) pcts { return r.direct }
	nDirect := func(r result) pcts { return r.nDirect }
	sDirect := func(r result) pcts { return r.sDirect }
	spDirect := func(r result) pcts { return r.spDirect }
	note := fmt.Sprintf("(%d progress)", o.progress)
	rows := []row{
		{"HTTP   direct  " + echoTool, direct, nil},
		{"HTTP   floor   " + echoTool, func(r result) pcts { return r.floor }, direct},
		{"HTTP   mcpmux  " + exposedEcho, func(r result) pcts { return r.mux }, direct},
		{"HTTP   direct  " + notifyTool + " " + note, nDirect, nil},
		{"HTTP   floor   " + notifyTool, func(r result) pcts { return r.nFloor }, nDirect},
		{"HTTP   mcpmux  " + exposedNote, func(r result) pcts { return r.nMux }, nDirect},
	}
	if o.stdio {
		rows = append(rows,
			row{"stdio  direct  " + stdioEcho, sDirect, nil},
			row{"stdio  mcpmux  " + exposedStdEcho, func(r result) pcts { return r.sMux }, sDirect},
			row{"stdio  direct  " + stdioCount + " " + note, spDirect, nil},
			row{"stdio  mcpmux  " + exposedStdCnt, func(r result) pcts { return r.spMux }, spDirect})
	}
	rows = append(rows, row{"HTTP   mcpmux  denied " + exposedWrite + " (ro)", func(r result) pcts { return r.denied }, nil})
	if pings {
		rows = append(rows,
			row{"HTTP   mcpmux  ping", func(r result) pcts { return r.ping }, nil},
			row{"HTTP   direct  ping", func(r result) pcts { return r.directPing }, nil})
	}

	fmt.Fprintf(out, "summary: median of %d run(s); \"added\" is path − direct, taken per run, then the median\n\n", len(rs))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "latency at c=1, µs\tp50\tp90\tp99\tadded p50\tadded p99\t")
	for _, w := range rows {
		p50 := med(func(r result) time.Duration { return w.p(r).p50 })
		p90 := med(func(r result) time.Duration { return w.p(r).p90 })
		p99 := med(func(r result) time.Duration { return w.p(r).p99 })
		a50, a99 := "", ""
		if w.against != nil {
			a50 = signed(med(func(r result) time.Duration { return w.p(r).p50 - w.against(r).p50 }))
			a99 = signed(med(func(r result) time.Duration { return w.p(r).p99 - w.against(r).p99 }))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", w.label, us(p50), us(p90), us(p99), a50, a99)
	}
	fmt.Fprintln(tw, "\t\t\t\t\t\t")
	tw.Flush()

	dRate := medf(func(r result) float64 { return r.directRate })
	fRate := medf(func(r result) float64 { return r.floorRate })
	mRate := medf(func(r result) float64 { return r.muxRate })
	fShare := medf(func(r result) float64 { return r.floorRate / r.directRate })
	mShare := medf(func(r result) float64 { return r.muxRate / r.directRate })
	upCPU := med(func(r result) time.Duration { return r.upCPU })
	fCPU := med(func(r result) time.Duration { return r.floorCPU })
	mCPU := med(func(r result) time.Duration { return r.muxCPU })
	cpuCell := func(d time.Duration) string {
		if d == 0 {
			return "n/a"
		}
		return us(d)
	}
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "throughput, %d sessions\tcalls/s\t%% of direct\tCPU µs per call\t\n", o.clients)
	fmt.Fprintf(tw, "direct\t%.0f\t100.0\t%s\t\n", dRate, cpuCell(upCPU))
	fmt.Fprintf(tw, "floor\t%.0f\t%.1f\t%s\t\n", fRate, 100*fShare, cpuCell(fCPU))
	fmt.Fprintf(tw, "mcpmux\t%.0f\t%.1f\t%s\t\n", mRate, 100*mShare, cpuCell(mCPU))
	tw.Flush()
	fmt.Fprintln(out, "(% of direct is taken per run, then the median; CPU is the process's own, from /proc, during its slices:")
	fmt.Fprintln(out, " the floor's and mcpmux's per call they forwarded; direct's is the upstream's, with --upstream process only)")

	fmt.Fprintln(out, "\nprogress notifications that reached the client before the result (all runs, warmup included):")
	delivered := func(name string, p *progressTally) {
		fmt.Fprintf(out, "  %-22s %d of %d", name, p.before.Load(), p.asked.Load())
		if s := p.stray.Load(); s > 0 {
			fmt.Fprintf(out, ", %d more after their result", s)
		}
		fmt.Fprintln(out)
	}
	delivered("HTTP direct", &tally.direct)
	delivered("HTTP floor", &tally.floor)
	delivered("HTTP mcpmux", &tally.mux)
	if o.stdio {
		delivered("stdio direct", &tally.sDirect)
		delivered("stdio mcpmux", &tally.sMux)
	}

	verdict := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "MISS"
	}
	fAdded, mAdded := med(result.floorAdded), med(result.muxAdded)
	fAdded99 := med(func(r result) time.Duration { return r.floor.p99 - r.direct.p99 })
	mAdded99 := med(func(r result) time.Duration { return r.mux.p99 - r.direct.p99 })
	fExtra, mExtra := med(result.floorExtra), med(result.muxExtra)
	wait := med(func(r result) time.Duration { return r.muxExtra() - r.floorExtra() })
	deniedOverPing := med(func(r result) time.Duration { return r.denied.p50 - r.ping.p50 })
	deniedP50 := med(func(r result) time.Duration { return r.denied.p50 })

	fmt.Fprintln(out, "\nbars:")
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  bar\tmcpmux\tfloor\tneeds\tverdict")
	fmt.Fprintf(tw, "  added latency, tools/call c=1, p50 µs\t%s\t%s\tmcpmux ≤ floor\t%s\n",
		us(mAdded), us(fAdded), verdict(mAdded <= fAdded))
	fmt.Fprintf(tw, "  added latency, tools/call c=1, p99 µs\t%s\t%s\t(shown, not a bar)\t-\n", us(mAdded99), us(fAdded99))
	fmt.Fprintf(tw, "  throughput at %d clients, %% of direct\t%.1f\t%.1f\tmcpmux ≥ floor\t%s\n",
		o.clients, 100*mShare, 100*fShare, verdict(mShare >= fShare))
	if mCPU > 0 && fCPU > 0 {
		fmt.Fprintf(tw, "  CPU per forwarded call, µs\t%s\t%s\tmcpmux ≤ %.1f × floor = %s\t%s (%.2f×)\n",
			us(mCPU), us(fCPU), barCPU, us(time.Duration(barCPU*float64(fCPU))), verdict(float64(mCPU) <= barCPU*float64(fCPU)), float64(mCPU)/float64(fCPU))
	} else {
		fmt.Fprintf(tw, "  CPU per forwarded call, µs\t%s\t%s\tmcpmux ≤ %.1f × floor\tn/a (no /proc)\n", cpuCell(mCPU), cpuCell(fCPU), barCPU)
	}
	if o.stdio {
		sAdded := med(result.stdioAdded)
		fmt.Fprintf(tw, "  stdio upstream, added p50 µs\t%s\t-\t≤ %s\t%s\n", us(sAdded), us(barStdio), verdict(sAdded <= barStdio))
	}
	fmt.Fprintf(tw, "  notifying call over HTTP, extra µs\t%s\t%s\tmcpmux − floor ≤ %s\t%s (%s)\n",
		us(mExtra), us(fExtra), us(o.waitBar), verdict(wait <= o.waitBar), us(wait))
	if o.stdio {
		sExtra := med(result.stdioExtra)
		fmt.Fprintf(tw, "  notifying call over stdio, extra µs\t%s\t-\t≤ %s\t%s\n", us(sExtra), us(o.waitBar), verdict(sExtra <= o.waitBar))
	}
	if pings {
		fmt.Fprintf(tw, "  denied call p50 over mcpmux's ping, µs\t%s\t-\t≤ %s\t%s\n", us(deniedOverPing), us(barDenied), verdict(deniedOverPing <= barDenied))
	} else {
		fmt.Fprintf(tw, "  denied call p50 end to end, µs\t%s\t-\t≤ %s\t%s\n", us(deniedP50), us(barDenied), verdict(deniedP50 <= barDenied))
	}
	fmt.Fprintf(tw, "  denied calls reaching the upstream\t%d\t-\t= 0\t%s\n", leaked, verdict(leaked == 0))
	tw.Flush()
	if leaked != 0 {
		fmt.Fprintln(out, strings.Repeat("!", 8), "a hidden tool's call reached the upstream")
	}
	fmt.Fprintf(out, "\n(throughput is also to be ≥ every peer proxy run side by side; this program runs none)\n")
}
