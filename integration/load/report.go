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

func (e echoResult) floorAdded() time.Duration { return addedP50(e.floor, e.direct) }
func (e echoResult) muxAdded() time.Duration   { return addedP50(e.mux, e.direct) }
func (r result) floorExtra() time.Duration {
	return addedP50(r.nFloor, r.nDirect) - r.plain().floorAdded()
}
func (r result) muxExtra() time.Duration { return addedP50(r.nMux, r.nDirect) - r.plain().muxAdded() }

// plain is the echo series the notifying series is compared with: the
// event-stream state's when it was measured, as notify's own calls are
// answered as event streams on every path.
func (r result) plain() echoResult {
	for _, e := range r.echo {
		if e.state == stateSSE {
			return e
		}
	}
	return r.echo[0]
}
func (r result) stdioAdded() time.Duration { return addedP50(r.sMux, r.sDirect) }
func (r result) stdioExtra() time.Duration { return addedP50(r.spMux, r.spDirect) - r.stdioAdded() }

func printRun(out io.Writer, r int, res result, stdio bool) {
	fmt.Fprintf(out, "run %d: notifying call extra µs floor %s viewmux %s", r, us(res.floorExtra()), us(res.muxExtra()))
	if stdio {
		fmt.Fprintf(out, " | stdio added %s, extra %s", us(res.stdioAdded()), us(res.stdioExtra()))
	}
	fmt.Fprintf(out, " | new upstream TCP conns in the latency phase %d\n", res.latConns)
	for _, e := range res.echo {
		fmt.Fprintf(out, "run %d, %s: added p50 µs floor %s viewmux %s | throughput %% of direct floor %.1f viewmux %.1f | CPU µs/call floor %s viewmux %s | new upstream TCP conns in throughput %d (direct %d, floor %d, viewmux %d) | echo answered as SSE in throughput: direct %d, floor %d, viewmux %d\n",
			r, e.state.label(), us(e.floorAdded()), us(e.muxAdded()),
			100*e.floorRate/e.directRate, 100*e.muxRate/e.directRate,
			us(e.floorCPU), us(e.muxCPU), e.tputConns, e.directConns, e.floorConns, e.muxConns,
			e.directSSE, e.floorSSE, e.muxSSE)
	}
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
	nDirect := func(r result) pcts { return r.nDirect }
	sDirect := func(r result) pcts { return r.sDirect }
	spDirect := func(r result) pcts { return r.spDirect }
	note := fmt.Sprintf("(%d progress)", o.progress)
	var rows []row
	for i, st := range o.states {
		tag := "(" + st.tag() + ")"
		direct := func(r result) pcts { return r.echo[i].direct }
		rows = append(rows,
			row{"HTTP   direct  " + echoTool + " " + tag, direct, nil},
			row{"HTTP   floor   " + echoTool + " " + tag, func(r result) pcts { return r.echo[i].floor }, direct},
			row{"HTTP   viewmux  " + st.muxTool(echoTool) + " " + tag, func(r result) pcts { return r.echo[i].mux }, direct})
	}
	rows = append(rows,
		row{"HTTP   direct  " + notifyTool + " " + note, nDirect, nil},
		row{"HTTP   floor   " + notifyTool, func(r result) pcts { return r.nFloor }, nDirect},
		row{"HTTP   viewmux  " + exposedNote, func(r result) pcts { return r.nMux }, nDirect})
	if o.stdio {
		rows = append(rows,
			row{"stdio  direct  " + stdioEcho, sDirect, nil},
			row{"stdio  viewmux  " + exposedStdEcho, func(r result) pcts { return r.sMux }, sDirect},
			row{"stdio  direct  " + stdioCount + " " + note, spDirect, nil},
			row{"stdio  viewmux  " + exposedStdCnt, func(r result) pcts { return r.spMux }, spDirect})
	}
	rows = append(rows, row{"HTTP   viewmux  denied " + exposedWrite + " (ro)", func(r result) pcts { return r.denied }, nil})
	if pings {
		rows = append(rows,
			row{"HTTP   viewmux  ping", func(r result) pcts { return r.ping }, nil},
			row{"HTTP   direct  ping", func(r result) pcts { return r.directPing }, nil})
	}

	fmt.Fprintf(out, "summary: median of %d run(s); \"added\" is path − direct, taken per run, then the median\n", len(rs))
	for _, st := range o.states {
		fmt.Fprintf(out, "(%s): %s\n", st.tag(), st.label())
	}
	fmt.Fprintln(out)
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

	cpuCell := func(d time.Duration) string {
		if d == 0 {
			return "n/a"
		}
		return us(d)
	}
	// echoBars are one state's figures for the bars, medians over runs.
	type echoBars struct {
		fAdded, mAdded, fAdded99, mAdded99 time.Duration
		fShare, mShare                     float64
		fCPU, mCPU                         time.Duration
		fConns, mConns                     int64
	}
	bars := make([]echoBars, len(o.states))
	for i, st := range o.states {
		e := func(f func(echoResult) time.Duration) time.Duration {
			return med(func(r result) time.Duration { return f(r.echo[i]) })
		}
		ef := func(f func(echoResult) float64) float64 {
			return medf(func(r result) float64 { return f(r.echo[i]) })
		}
		ei := func(f func(echoResult) int64) int64 {
			v := make([]int64, len(rs))
			for k, r := range rs {
				v[k] = f(r.echo[i])
			}
			return median(v)
		}
		b := &bars[i]
		b.fAdded, b.mAdded = e(echoResult.floorAdded), e(echoResult.muxAdded)
		b.fAdded99 = e(func(e echoResult) time.Duration { return e.floor.p99 - e.direct.p99 })
		b.mAdded99 = e(func(e echoResult) time.Duration { return e.mux.p99 - e.direct.p99 })
		b.fShare = ef(func(e echoResult) float64 { return e.floorRate / e.directRate })
		b.mShare = ef(func(e echoResult) float64 { return e.muxRate / e.directRate })
		b.fCPU, b.mCPU = e(func(e echoResult) time.Duration { return e.floorCPU }), e(func(e echoResult) time.Duration { return e.muxCPU })
		b.fConns, b.mConns = ei(func(e echoResult) int64 { return e.floorConns }), ei(func(e echoResult) int64 { return e.muxConns })
		dConns := ei(func(e echoResult) int64 { return e.directConns })

		fmt.Fprintf(out, "%s:\n", st.label())
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "throughput, %d sessions (%s)\tcalls/s\t%% of direct\tCPU µs per call\tnew upstream TCP conns\t\n", o.clients, st.tag())
		fmt.Fprintf(tw, "direct\t%.0f\t100.0\t%s\t%d\t\n", ef(func(e echoResult) float64 { return e.directRate }), cpuCell(e(func(e echoResult) time.Duration { return e.upCPU })), dConns)
		fmt.Fprintf(tw, "floor\t%.0f\t%.1f\t%s\t%d\t\n", ef(func(e echoResult) float64 { return e.floorRate }), 100*b.fShare, cpuCell(b.fCPU), b.fConns)
		fmt.Fprintf(tw, "viewmux\t%.0f\t%.1f\t%s\t%d\t\n", ef(func(e echoResult) float64 { return e.muxRate }), 100*b.mShare, cpuCell(b.mCPU), b.mConns)
		tw.Flush()
		fmt.Fprintln(out)
	}
	fmt.Fprintln(out, "(% of direct is taken per run, then the median; CPU is the process's own, from /proc, during its slices:")
	fmt.Fprintln(out, " the floor's and viewmux's per call they forwarded; direct's is the upstream's, with --upstream process only;")
	fmt.Fprintln(out, " new upstream TCP conns: those the upstream accepted during the side's measured slices, after a warm-up second)")
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
	delivered("HTTP viewmux", &tally.mux)
	if o.stdio {
		delivered("stdio direct", &tally.sDirect)
		delivered("stdio viewmux", &tally.sMux)
	}

	verdict := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "MISS"
	}
	fExtra, mExtra := med(result.floorExtra), med(result.muxExtra)
	wait := med(func(r result) time.Duration { return r.muxExtra() - r.floorExtra() })
	deniedOverPing := med(func(r result) time.Duration { return r.denied.p50 - r.ping.p50 })
	deniedP50 := med(func(r result) time.Duration { return r.denied.p50 })

	fmt.Fprintln(out, "\nbars:")
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  bar\tviewmux\tfloor\tneeds\tverdict")
	for i, st := range o.states {
		b := bars[i]
		fmt.Fprintf(tw, "  %s:\t\t\t\t\n", st.label())
		fmt.Fprintf(tw, "  added latency, tools/call c=1, p50 µs\t%s\t%s\tviewmux ≤ floor\t%s\n",
			us(b.mAdded), us(b.fAdded), verdict(b.mAdded <= b.fAdded))
		fmt.Fprintf(tw, "  added latency, tools/call c=1, p99 µs\t%s\t%s\t(shown, not a bar)\t-\n", us(b.mAdded99), us(b.fAdded99))
		fmt.Fprintf(tw, "  throughput at %d clients, %% of direct\t%.1f\t%.1f\tviewmux ≥ floor\t%s\n",
			o.clients, 100*b.mShare, 100*b.fShare, verdict(b.mShare >= b.fShare))
		if b.mCPU > 0 && b.fCPU > 0 {
			fmt.Fprintf(tw, "  CPU per forwarded call, µs\t%s\t%s\tviewmux ≤ %.1f × floor = %s\t%s (%.2f×)\n",
				us(b.mCPU), us(b.fCPU), barCPU, us(time.Duration(barCPU*float64(b.fCPU))), verdict(float64(b.mCPU) <= barCPU*float64(b.fCPU)), float64(b.mCPU)/float64(b.fCPU))
		} else {
			fmt.Fprintf(tw, "  CPU per forwarded call, µs\t%s\t%s\tviewmux ≤ %.1f × floor\tn/a (no /proc)\n", cpuCell(b.mCPU), cpuCell(b.fCPU), barCPU)
		}
		fmt.Fprintf(tw, "  new upstream TCP conns in throughput\t%d\t%d\tviewmux = 0\t%s\n", b.mConns, b.fConns, verdict(b.mConns == 0))
	}
	fmt.Fprintf(tw, "  the other bars (not per state):\t\t\t\t\n")
	if o.stdio {
		sAdded := med(result.stdioAdded)
		fmt.Fprintf(tw, "  stdio upstream, added p50 µs\t%s\t-\t≤ %s\t%s\n", us(sAdded), us(barStdio), verdict(sAdded <= barStdio))
	}
	fmt.Fprintf(tw, "  notifying call over HTTP, extra µs\t%s\t%s\tviewmux − floor ≤ %s\t%s (%s)\n",
		us(mExtra), us(fExtra), us(o.waitBar), verdict(wait <= o.waitBar), us(wait))
	if o.stdio {
		sExtra := med(result.stdioExtra)
		fmt.Fprintf(tw, "  notifying call over stdio, extra µs\t%s\t-\t≤ %s\t%s\n", us(sExtra), us(o.waitBar), verdict(sExtra <= o.waitBar))
	}
	if pings {
		fmt.Fprintf(tw, "  denied call p50 over viewmux's ping, µs\t%s\t-\t≤ %s\t%s\n", us(deniedOverPing), us(barDenied), verdict(deniedOverPing <= barDenied))
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
