package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

// blobTool answers a text result of exactly "bytes" bytes: the large-result
// series (--big) call it directly, through the floor and through mcpmux.
const (
	blobTool     = "blob"
	exposedBlob  = "up__" + blobTool
	maxBlobBytes = 256 << 20
)

// blobs caches the result text of each size, so that the upstream's own
// cost per call is the same on every path and in every run.
var blobs sync.Map // int → string

func blobText(n int) string {
	if s, ok := blobs.Load(n); ok {
		return s.(string)
	}
	s, _ := blobs.LoadOrStore(n, strings.Repeat("x", n))
	return s.(string)
}

// parseSizes reads a list such as "1MiB,10MiB,50MiB" (KiB, MiB and plain
// byte counts).
func parseSizes(v string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		mult := 1
		switch {
		case strings.HasSuffix(f, "MiB"):
			f, mult = strings.TrimSuffix(f, "MiB"), 1<<20
		case strings.HasSuffix(f, "KiB"):
			f, mult = strings.TrimSuffix(f, "KiB"), 1<<10
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 || n*mult > maxBlobBytes {
			return nil, fmt.Errorf("--big: %q is not a size from 1 byte to 256MiB", f)
		}
		out = append(out, n*mult)
	}
	return out, nil
}

// bigPayload is how many bytes each path of the large-result series moves
// per size and run at least: CPU time is read from /proc in 10 ms ticks,
// so a size's calls must add up to enough CPU for the ticks to average out.
const bigPayload = 256 << 20

// bigCalls is the number of timed calls per path for results of size
// bytes: at least min, and at least bigPayload bytes' worth.
func bigCalls(size, least int) int { return max(least, bigPayload/size) }

// bigResult is one run's figures for one result size.
type bigResult struct {
	size                   int
	direct, floor, mux     pcts          // c=1 latency
	floorCPU, muxCPU       time.Duration // CPU per call, read around each call of that path
	floorGrowth, muxGrowth int64         // peak RSS growth over the concurrent calls, bytes; -1 = unknown
	concurrent             int
}

func (b bigResult) floorAdded() time.Duration { return addedP50(b.floor, b.direct) }
func (b bigResult) muxAdded() time.Duration   { return addedP50(b.mux, b.direct) }

// perMB is CPU per MiB of payload.
func perMB(cpu time.Duration, size int) time.Duration {
	return time.Duration(float64(cpu) * float64(1<<20) / float64(size))
}

// blobCaller calls tool for a result of size bytes and checks its length.
func blobCaller(tool string, size int) caller {
	var req mcp.CallToolRequest
	req.Params.Name = tool
	req.Params.Arguments = map[string]any{"bytes": size}
	return func(ctx context.Context, c *client.Client) error {
		res, err := c.CallTool(ctx, req)
		if err != nil {
			return fmt.Errorf("tools/call %s (%d bytes): %w", tool, size, err)
		}
		if res.IsError || len(res.Content) != 1 {
			return fmt.Errorf("tools/call %s: unexpected result", tool)
		}
		tc, ok := res.Content[0].(mcp.TextContent)
		if !ok || len(tc.Text) != size {
			return fmt.Errorf("tools/call %s: want %d bytes of text, got %T of %d", tool, size, res.Content[0], len(tc.Text))
		}
		return nil
	}
}

// bigSide is one path of the large-result series.
type bigSide struct {
	c    *client.Client   // the c=1 session
	cs   []*client.Client // sessions for the concurrent calls
	tool string
	pid  int // the process in the path (0: none), for CPU and RSS
}

// bigRun measures one size: calls c=1 calls per path, interleaved (direct,
// floor, mcpmux, then the reverse), reading the CPU of the floor's and
// mcpmux's process around each of their own calls; then, for the floor and
// mcpmux, len(cs) calls at once, reading the process's peak RSS growth
// over its RSS before them.
func bigRun(ctx context.Context, size, calls int, direct, floor, mux bigSide) (bigResult, error) {
	res := bigResult{size: size, concurrent: len(mux.cs)}
	sides := []*bigSide{&direct, &floor, &mux}
	lat := make([][]time.Duration, len(sides))
	cpu := make([]time.Duration, len(sides))
	cpuOK := []bool{false, floor.pid != 0, mux.pid != 0}
	one := func(i int) error {
		s := sides[i]
		var c0 time.Duration
		if cpuOK[i] {
			c0, cpuOK[i] = processCPU(s.pid)
		}
		start := time.Now()
		if err := blobCaller(s.tool, size)(ctx, s.c); err != nil {
			return err
		}
		lat[i] = append(lat[i], time.Since(start))
		if cpuOK[i] {
			c1, ok := processCPU(s.pid)
			cpu[i] += c1 - c0
			cpuOK[i] = ok
		}
		return nil
	}
	for i := range sides { // warm up every path once
		if err := blobCaller(sides[i].tool, size)(ctx, sides[i].c); err != nil {
			return res, err
		}
	}
	for k := range calls {
		for j := range sides {
			i := j
			if k%2 == 1 {
				i = len(sides) - 1 - j
			}
			if err := one(i); err != nil {
				return res, err
			}
		}
	}
	res.direct, res.floor, res.mux = percentiles(lat[0]), percentiles(lat[1]), percentiles(lat[2])
	if cpuOK[1] {
		res.floorCPU = cpu[1] / time.Duration(calls)
	}
	if cpuOK[2] {
		res.muxCPU = cpu[2] / time.Duration(calls)
	}
	var err error
	if res.floorGrowth, err = peakGrowth(ctx, floor, size); err != nil {
		return res, err
	}
	if res.muxGrowth, err = peakGrowth(ctx, mux, size); err != nil {
		return res, err
	}
	return res, nil
}

// peakGrowth resets s.pid's peak RSS to its current RSS, makes one call of
// size bytes on each of s.cs at once, and returns how far the peak rose
// above the RSS before the calls; -1 when /proc does not allow it.
func peakGrowth(ctx context.Context, s bigSide, size int) (int64, error) {
	if s.pid == 0 {
		return -1, nil
	}
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", s.pid), []byte("5"), 0); err != nil {
		return -1, nil
	}
	before, ok := procStatus(s.pid, "VmRSS")
	if !ok {
		return -1, nil
	}
	var wg sync.WaitGroup
	errs := make([]error, len(s.cs))
	for i, c := range s.cs {
		wg.Go(func() { errs[i] = blobCaller(s.tool, size)(ctx, c) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	peak, ok := procStatus(s.pid, "VmHWM")
	if !ok {
		return -1, nil
	}
	return peak - before, nil
}

// procStatus reads one "Key: N kB" line of /proc/PID/status, in bytes.
func procStatus(pid int, key string) (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || k != key {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, false
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		return n << 10, err == nil
	}
	return 0, false
}

// printBig prints the medians over runs of the large-result series, each
// figure next to the floor's and its bar (added latency and CPU
// per MB at most 2× the floor's, peak RSS growth at most 2× the payload
// per concurrent call).
func printBig(out io.Writer, runs [][]bigResult) {
	if len(runs) == 0 || len(runs[0]) == 0 {
		return
	}
	fmt.Fprintf(out, "\nlarge results (medians of %d run(s); CPU read around each call; RSS: %d concurrent calls, peak growth over RSS before them, per call):\n", len(runs), runs[0][0].concurrent)
	fmt.Fprintln(out, "size       added p50 ms floor / mcpmux (ratio, bar ≤ 2)   CPU ms per MiB floor / mcpmux (ratio, bar ≤ 2)   peak RSS growth per call ÷ payload floor / mcpmux (bar ≤ 2)")
	for k := range runs[0] {
		med := func(f func(bigResult) time.Duration) time.Duration {
			v := make([]time.Duration, len(runs))
			for i := range runs {
				v[i] = f(runs[i][k])
			}
			return median(v)
		}
		medi := func(f func(bigResult) int64) int64 {
			v := make([]int64, len(runs))
			for i := range runs {
				v[i] = f(runs[i][k])
			}
			return median(v)
		}
		size := runs[0][k].size
		fa, ma := med(bigResult.floorAdded), med(bigResult.muxAdded)
		fc := med(func(b bigResult) time.Duration { return perMB(b.floorCPU, b.size) })
		mc := med(func(b bigResult) time.Duration { return perMB(b.muxCPU, b.size) })
		fg, mg := medi(func(b bigResult) int64 { return b.floorGrowth }), medi(func(b bigResult) int64 { return b.muxGrowth })
		conc := int64(runs[0][k].concurrent)
		growth := func(g int64) string {
			if g < 0 {
				return "unknown"
			}
			return fmt.Sprintf("%.2f", float64(g)/float64(conc)/float64(size))
		}
		fmt.Fprintf(out, "%-9s  %8.2f / %8.2f (%s)                 %8.2f / %8.2f (%s)                  %s / %s\n",
			sizeLabel(size), ms(fa), ms(ma), ratio(ma, fa), ms(fc), ms(mc), ratio(mc, fc), growth(fg), growth(mg))
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ratio(a, b time.Duration) string {
	if b <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", float64(a)/float64(b))
}

func sizeLabel(n int) string {
	switch {
	case n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}
