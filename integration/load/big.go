package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

// blobTool answers a text result of exactly "bytes" bytes: the large-result
// series (--big) call it directly, through the floor and through viewmux.
const (
	blobTool     = "blob"
	maxBlobBytes = 256 << 20
)

// bigRound is one state's three paths, each with sessions of its own.
type bigRound struct {
	state              upState
	direct, floor, mux bigSide
}

// bigURLs are where each path's sessions connect, and the processes whose
// CPU and RSS the series reads.
type bigURLs struct {
	direct, floor, mux string
	floorPID, muxPID   int
}

// openBigRounds opens one round per state: on each path a c=1 session, and
// on the floor and viewmux conc more for the peak RSS figure (the direct
// path has no process of its own to read). For stateSSE it puts every one of
// them into the event-stream state with one notifying call (see upState);
// each such call is added to sent, which the upstream's count must match.
func openBigRounds(ctx context.Context, states []upState, conc int, urls bigURLs, open func(string) (*client.Client, error), sent *atomic.Int64) ([]bigRound, error) {
	var rounds []bigRound
	for _, st := range states {
		r := bigRound{state: st,
			direct: bigSide{tool: blobTool},
			floor:  bigSide{tool: blobTool, pid: urls.floorPID},
			mux:    bigSide{tool: st.muxTool(blobTool), pid: urls.muxPID},
		}
		var err error
		if r.direct.c, err = open(urls.direct); err != nil {
			return nil, err
		}
		if r.floor.c, err = open(urls.floor); err != nil {
			return nil, err
		}
		if r.mux.c, err = open(urls.mux); err != nil {
			return nil, err
		}
		r.direct.raw, r.floor.raw, r.mux.raw = newRawBlob(urls.direct, r.direct.c), newRawBlob(urls.floor, r.floor.c), newRawBlob(urls.mux, r.mux.c)
		for range conc {
			fc, err := open(urls.floor)
			if err != nil {
				return nil, err
			}
			mc, err := open(urls.mux)
			if err != nil {
				return nil, err
			}
			r.floor.cs, r.mux.cs = append(r.floor.cs, fc), append(r.mux.cs, mc)
		}
		if st == stateSSE {
			own := append([]*client.Client{r.direct.c, r.floor.c}, r.floor.cs...)
			if err := primeSSE(ctx, own, r.mux.c, sent); err != nil {
				return nil, err
			}
		}
		rounds = append(rounds, r)
	}
	return rounds, nil
}

// checkBigState reports an error unless the upstream answered the blob
// calls between c0 and c1 (settled) the way st says.
func checkBigState(st upState, c0, c1 counts) error {
	return checkState(st, "large results", blobTool, c1.Calls[blobTool]-c0.Calls[blobTool], c1.BlobSSE-c0.BlobSSE)
}

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

// rawBlob times a blob call on an open session the way a client that
// only reads the answer would: it POSTs the tools/call with the session's
// id and reads the response body to its end without decoding it. The
// timed c=1 calls use it because mcp-go's client decodes an event-stream
// answer far more slowly than a JSON one: on the direct and floor paths the
// client pays that in the event-stream state, while viewmux answers its own
// client with JSON whatever the upstream sent, so timing through mcp-go's
// client would credit viewmux with the client's decoding. Reading bytes
// costs every path the same. It checks the status, the content type and
// that the body holds at least the result's text; the untimed warm-up call
// of each path checks the whole result through mcp-go's client.
type rawBlob struct {
	url, session, protocol string
	hc                     *http.Client
	id                     atomic.Int64
}

func newRawBlob(url string, c *client.Client) *rawBlob {
	return &rawBlob{url: url, session: c.GetSessionId(), protocol: c.ProtocolVersion(),
		hc: &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}}
}

func (r *rawBlob) call(ctx context.Context, tool string, size int) error {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":"raw-%d","method":"tools/call","params":{"name":%q,"arguments":{"bytes":%d}}}`, r.id.Add(1), tool, size)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", r.session)
	if r.protocol != "" {
		req.Header.Set("Mcp-Protocol-Version", r.protocol)
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return fmt.Errorf("tools/call %s (%d bytes) at %s: %w", tool, size, r.url, err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	ct := resp.Header.Get("Content-Type")
	switch {
	case err != nil:
		return fmt.Errorf("tools/call %s (%d bytes) at %s: reading the answer: %w", tool, size, r.url, err)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("tools/call %s (%d bytes) at %s: status %s", tool, size, r.url, resp.Status)
	case !strings.HasPrefix(ct, "application/json") && !strings.HasPrefix(ct, "text/event-stream"):
		return fmt.Errorf("tools/call %s (%d bytes) at %s: content type %q", tool, size, r.url, ct)
	case n < int64(size) || n > int64(size)+64<<10:
		return fmt.Errorf("tools/call %s (%d bytes) at %s: answer of %d bytes", tool, size, r.url, n)
	}
	return nil
}

// bigSide is one path of the large-result series.
type bigSide struct {
	c    *client.Client   // the c=1 session
	raw  *rawBlob         // c's session, for the timed calls
	cs   []*client.Client // sessions for the concurrent calls (none: not measured)
	tool string
	pid  int // the process in the path (0: none), for CPU and RSS
}

// bigRun measures one size: after one checked warm-up call per path, calls
// c=1 calls per path, timed with rawBlob, interleaved (direct,
// floor, viewmux, then the reverse), reading the CPU of the floor's and
// viewmux's process around each of their own calls; then, for the floor and
// viewmux, len(cs) calls at once, reading the process's peak RSS growth
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
		if err := s.raw.call(ctx, s.tool, size); err != nil {
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
func printBig(out io.Writer, st upState, runs [][]bigResult) {
	if len(runs) == 0 || len(runs[0]) == 0 {
		return
	}
	fmt.Fprintf(out, "\nlarge results, upstream answering every path as %s (%s) (medians of %d run(s); CPU read around each call; RSS: %d concurrent calls, peak growth over RSS before them, per call):\n", st, st.note(), len(runs), runs[0][0].concurrent)
	fmt.Fprintln(out, "size       added p50 ms floor / viewmux (ratio, bar ≤ 2)   CPU ms per MiB floor / viewmux (ratio, bar ≤ 2)   peak RSS growth per call ÷ payload floor / viewmux (bar ≤ 2)")
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
