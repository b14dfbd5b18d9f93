//go:build linux

// Command memload measures what one unauthenticated client can make viewmux
// hold (issue 9): it starts the real viewmux binary on the default
// loopback config (no token, no [server] table) with one upstream, records
// its idle RSS (VmRSS of /proc/<pid>/status), then, one phase after the
// other, the RSS after
//
//   - 20,000 requests with distinct ?tools= narrowings (2026-07-28
//     tools/call of an unknown tool, so each is refused),
//   - 100 requests with a 500 KB Mcp-Tools header,
//   - 200 connections trickling a request body, and 200 idle keep-alive
//     connections, with the time until viewmux closes them (read_timeout),
//   - 20,000 initialize requests that never send anything else: at most
//     max_sessions_per_caller of them (2500: every loopback client without
//     a token is one caller) get a session, the rest 503; the live sessions
//     are counted (viewmux_open_sessions) and the RSS they add divided by
//     them is the cost of one idle session; then, after read_timeout, the
//     sessions that never finished initializing are gone.
//
// The bar: apart from live sessions, RSS stays under 2× idle. Missing it is
// a measurement, not a failure: the exit status is non-zero only when
// something did not work. Linux only (it reads /proc).
//
// Run it from the repository: go run ./integration/memload
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/viewmux/viewmux/integration/internal/gobuild"
)

type options struct {
	viewmux     string
	initialize  int
	narrowings  int
	bigHeaders  int
	headerBytes int
	slowConns   int
	workers     int
	connWait    time.Duration
	keep        bool
}

func main() {
	var o options
	flag.StringVar(&o.viewmux, "viewmux", "", "viewmux binary to measure (default: build ./cmd/viewmux)")
	flag.IntVar(&o.initialize, "initialize", 20000, "initialize requests")
	flag.IntVar(&o.narrowings, "narrowings", 20000, "requests with distinct ?tools= values")
	flag.IntVar(&o.bigHeaders, "big-headers", 100, "requests with a big Mcp-Tools header")
	flag.IntVar(&o.headerBytes, "header-bytes", 500_000, "size of that header")
	flag.IntVar(&o.slowConns, "slow", 200, "slow-body connections, and as many idle keep-alive ones")
	flag.IntVar(&o.workers, "workers", 32, "concurrent requests")
	flag.DurationVar(&o.connWait, "conn-wait", 2*time.Minute, "how long to wait for viewmux to close the slow and idle connections")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary directory (config, viewmux log)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "memload:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	dir, err := os.MkdirTemp("", "viewmux-memload-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Println("directory:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	bin := o.viewmux
	if bin == "" {
		if bin, err = build(dir); err != nil {
			return err
		}
	}
	up, err := startUpstream()
	if err != nil {
		return err
	}
	defer up.Close()
	mux, err := startMux(bin, dir, up.URL)
	if err != nil {
		return err
	}
	defer mux.stop()

	time.Sleep(2 * time.Second) // let startup garbage settle
	idle, err := mux.rss()
	if err != nil {
		return err
	}
	rep := &report{idle: idle, mux: mux}
	rep.line("idle", idle, "")

	if err := narrowings(o, mux, rep); err != nil {
		return err
	}
	if err := bigHeaders(o, mux, rep); err != nil {
		return err
	}
	if err := slowConns(o, mux, rep); err != nil {
		return err
	}
	if err := initializes(o, mux, rep); err != nil {
		return err
	}
	return mux.alive()
}

// report prints one line per measurement, against the bar, with the Go
// heap in use (go_memstats_heap_inuse_bytes), which RSS lags: the runtime
// returns freed memory to the system gradually.
type report struct {
	idle int64
	mux  *muxProc
}

func (r *report) line(what string, rss int64, note string) {
	ratio := float64(rss) / float64(r.idle)
	heap := "   ?"
	if h, err := r.mux.gauge("go_memstats_heap_inuse_bytes"); err == nil {
		heap = fmt.Sprintf("%5.1f", h/1e6)
	}
	fmt.Printf("%-40s RSS %6.1f MB %5.2f× idle  heap %s MB  %s\n", what, float64(rss)/1e6, ratio, heap, note)
}

// --- phases ---

func narrowings(o options, mux *muxProc, rep *report) error {
	var refused, other atomic.Int64
	err := parallel(o.narrowings, o.workers, func(c *http.Client, i int) error {
		params := `{"name":"up__nope","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`
		req, err := http.NewRequest(http.MethodPost, mux.base+"/mcp?tools=t"+strconv.Itoa(i), strings.NewReader(
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":`+params+`}`))
		if err != nil {
			return err
		}
		setHeaders(req.Header)
		req.Header.Set(mcp.HeaderProtocolVersion, mcp.ProtocolVersion20260728)
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", "up__nope")
		body, status, err := do(c, req)
		if err != nil {
			return err
		}
		if status != http.StatusOK && bytes.Contains(body, []byte("Tool not found")) {
			refused.Add(1)
		} else {
			other.Add(1)
		}
		return nil
	})
	if err != nil {
		return err
	}
	rss, err := mux.rss()
	if err != nil {
		return err
	}
	inst, err := mux.gauge("viewmux_filter_instances")
	if err != nil {
		return err
	}
	if other.Load() > 0 {
		fmt.Printf("  (%d of the ?tools= requests were not answered Tool not found)\n", other.Load())
	}
	rep.line(fmt.Sprintf("after %d distinct ?tools=", o.narrowings), rss,
		fmt.Sprintf("refused %d, viewmux_filter_instances %.0f", refused.Load(), inst))
	return nil
}

func bigHeaders(o options, mux *muxProc, rep *report) error {
	value := strings.Repeat("a", o.headerBytes)
	codes := map[int]int{}
	var mu sync.Mutex
	start := time.Now()
	err := parallel(o.bigHeaders, min(o.workers, 8), func(c *http.Client, i int) error {
		req, err := http.NewRequest(http.MethodPost, mux.base+"/mcp", strings.NewReader(initializeBody))
		if err != nil {
			return err
		}
		setHeaders(req.Header)
		req.Header.Set("Mcp-Tools", value)
		_, status, err := do(c, req)
		if err != nil {
			// viewmux may answer 431 and close before the whole header
			// is written; that is a refusal too.
			status = -1
		}
		mu.Lock()
		codes[status]++
		mu.Unlock()
		return nil
	})
	if err != nil {
		return err
	}
	took := time.Since(start)
	rss, err := mux.rss()
	if err != nil {
		return err
	}
	rep.line(fmt.Sprintf("after %d × %d KB Mcp-Tools", o.bigHeaders, o.headerBytes/1000), rss,
		fmt.Sprintf("answers %v in %v", codes, took.Round(time.Millisecond)))
	return nil
}

func slowConns(o options, mux *muxProc, rep *report) error {
	addr := strings.TrimPrefix(mux.base, "http://")
	type result struct {
		took time.Duration
		err  error
	}
	results := make(chan result, 2*o.slowConns)
	start := time.Now()
	stop := make(chan struct{})
	defer close(stop)
	for i := range 2 * o.slowConns {
		slow := i%2 == 0
		go func() {
			took, err := holdConn(addr, slow, stop)
			results <- result{took, err}
		}()
	}
	time.Sleep(3 * time.Second)
	rss, err := mux.rss()
	if err != nil {
		return err
	}
	var slowest time.Duration
	closed := 0
	for range 2 * o.slowConns {
		select {
		case r := <-results:
			if r.err != nil {
				return r.err
			}
			closed++
			slowest = max(slowest, r.took)
		case <-time.After(time.Until(start.Add(o.connWait))):
			rep.line(fmt.Sprintf("with %d slow-body + %d idle conns open", o.slowConns, o.slowConns), rss,
				fmt.Sprintf("%d of %d still open after %v", 2*o.slowConns-closed, 2*o.slowConns, o.connWait))
			return nil
		}
	}
	rep.line(fmt.Sprintf("with %d slow-body + %d idle conns open", o.slowConns, o.slowConns), rss,
		fmt.Sprintf("all closed by viewmux; the last after %v (run took %v)", slowest.Round(100*time.Millisecond), time.Since(start).Round(time.Second)))
	return nil
}

// holdConn opens a connection and either trickles a request body one byte
// a second (slow) or sends one request and then nothing (idle keep-alive);
// it returns how long after the start viewmux took to close it.
func holdConn(addr string, slow bool, stop <-chan struct{}) (time.Duration, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		io.Copy(io.Discard, c) // returns when viewmux closes the connection
		close(closed)
	}()
	if slow {
		fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100000\r\n\r\n{", addr)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-closed:
				return time.Since(start), nil
			case <-stop:
				return 0, errors.New("stopped")
			case <-t.C:
				c.Write([]byte(" "))
			}
		}
	}
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	select {
	case <-closed:
		return time.Since(start), nil
	case <-stop:
		return 0, errors.New("stopped")
	}
}

func initializes(o options, mux *muxProc, rep *report) error {
	before, err := mux.rss()
	if err != nil {
		return err
	}
	heapBefore, err := mux.gauge("go_memstats_heap_inuse_bytes")
	if err != nil {
		return err
	}
	codes := map[int]int{}
	var mu sync.Mutex
	err = parallel(o.initialize, o.workers, func(c *http.Client, i int) error {
		req, err := http.NewRequest(http.MethodPost, mux.base+"/mcp", strings.NewReader(initializeBody))
		if err != nil {
			return err
		}
		setHeaders(req.Header)
		_, status, err := do(c, req)
		if err != nil {
			return err
		}
		mu.Lock()
		codes[status]++
		mu.Unlock()
		return nil
	})
	if err != nil {
		return err
	}
	rss, err := mux.rss()
	if err != nil {
		return err
	}
	// viewmux_sessions counts the bound sessions on builds older than
	// viewmux_open_sessions, so that a before/after comparison runs.
	gauge := "viewmux_open_sessions"
	live, err := mux.gauge(gauge)
	if err != nil {
		gauge = "viewmux_sessions"
		if live, err = mux.gauge(gauge); err != nil {
			return err
		}
	}
	per := "no live session"
	if live > 0 {
		heap, err := mux.gauge("go_memstats_heap_inuse_bytes")
		if err != nil {
			return err
		}
		per = fmt.Sprintf("per idle session %.1f KB RSS, %.1f KB heap", float64(rss-before)/live/1000, (heap-heapBefore)/live/1000)
	}
	rep.line(fmt.Sprintf("after %d initialize", o.initialize), rss,
		fmt.Sprintf("answers %v, %0.f live sessions, %s (RSS before: %.1f MB)", codes, live, per, float64(before)/1e6))
	if live > 0 {
		fmt.Printf("%-40s RSS %6.1f MB %5.2f× idle  (the RSS before them)\n", "  apart from the live sessions",
			float64(before)/1e6, float64(before)/float64(rep.idle))
	}

	// Sessions that never sent anything after initialize expire after
	// read_timeout (30s by default; they are checked at most a second
	// late).
	deadline := time.Now().Add(2 * time.Minute)
	start := time.Now()
	for {
		n, err := mux.gauge(gauge)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			rep.line(fmt.Sprintf("%.0f sessions still open 2 minutes later", n), rss, "")
			return nil
		}
		time.Sleep(time.Second)
	}
	rss, err = mux.rss()
	if err != nil {
		return err
	}
	rep.line("after those sessions expired", rss, fmt.Sprintf("(%v after the last initialize)", time.Since(start).Round(time.Second)))
	// The runtime gives the freed pages back to the system over a few
	// minutes.
	for range 3 {
		time.Sleep(time.Minute)
		if rss, err = mux.rss(); err != nil {
			return err
		}
		rep.line("  a minute later", rss, mux.memstats())
	}
	return nil
}

const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"memload","version":"1"}}}`

func setHeaders(h http.Header) {
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
}

// parallel runs fn for 0..n-1 on workers goroutines, each with its own
// keep-alive client, and returns the first error.
func parallel(n, workers int, fn func(c *http.Client, i int) error) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			defer c.CloseIdleConnections()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(c, i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

func do(c *http.Client, req *http.Request) ([]byte, int, error) {
	resp, err := c.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return body, resp.StatusCode, err
}

// --- the upstream ---

type upstream struct {
	URL string
	srv *http.Server
}

// startUpstream serves three tools over mcp-go's streamable HTTP on a
// loopback port, in this process.
func startUpstream() (*upstream, error) {
	s := server.NewMCPServer("memload-upstream", "1.0.0", server.WithToolCapabilities(false))
	for _, name := range []string{"echo", "search", "write"} {
		s.AddTool(mcp.NewTool(name, mcp.WithDescription("A tool named "+name+"."), mcp.WithString("text")),
			func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return mcp.NewToolResultText("ok"), nil
			})
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &upstream{URL: "http://" + l.Addr().String() + "/mcp", srv: &http.Server{Handler: server.NewStreamableHTTPServer(s)}}
	go u.srv.Serve(l)
	return u, nil
}

func (u *upstream) Close() { u.srv.Close() }

// --- viewmux ---

type muxProc struct {
	cmd     *exec.Cmd
	base    string
	logPath string
	exited  chan struct{}
	waitErr error
}

// build builds ./cmd/viewmux of the module this program is run in.
func build(dir string) (string, error) {
	bin, err := gobuild.BuildHere(context.Background(), "./cmd/viewmux", filepath.Join(dir, "viewmux"))
	if errors.Is(err, gobuild.ErrNoModule) {
		return "", fmt.Errorf("%w, or pass --viewmux PATH", err)
	}
	return bin, err
}

// startMux runs bin on the default config: one upstream, nothing else.
func startMux(bin, dir, upURL string) (*muxProc, error) {
	cfgDir := filepath.Join(dir, "config") // viewmux watches its config's directory
	if err := os.Mkdir(cfgDir, 0o700); err != nil {
		return nil, err
	}
	cfg := filepath.Join(cfgDir, "viewmux.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("[upstreams.up]\nurl = %q\n", upURL)), 0o600); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	m := &muxProc{base: "http://" + addr, logPath: filepath.Join(dir, "viewmux.log"), exited: make(chan struct{})}
	logf, err := os.Create(m.logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	m.cmd = exec.Command(bin, "serve", "--config", cfg, "--listen", addr)
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	m.cmd.Env = append(os.Environ(), "VIEWMUX_CONFIG=")
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		m.waitErr = m.cmd.Wait()
		close(m.exited)
	}()
	hc := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if err := m.alive(); err != nil {
			return nil, err
		}
		resp, err := hc.Get(m.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return m, nil
			}
		}
		if time.Now().After(deadline) {
			m.stop()
			return nil, fmt.Errorf("viewmux not ready after 30s; log in %s", m.logPath)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (m *muxProc) alive() error {
	select {
	case <-m.exited:
		log, _ := os.ReadFile(m.logPath)
		if len(log) > 4096 {
			log = log[len(log)-4096:]
		}
		return fmt.Errorf("viewmux exited (%v):\n%s", m.waitErr, log)
	default:
		return nil
	}
}

func (m *muxProc) stop() {
	select {
	case <-m.exited:
		return
	default:
	}
	m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(10 * time.Second):
		m.cmd.Process.Kill()
		<-m.exited
	}
}

// rss returns viewmux's resident set size in bytes.
func (m *muxProc) rss() (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", m.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("reading viewmux's RSS (Linux only): %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmRSS in /proc/<pid>/status")
}

// gauge reads an unlabelled gauge from GET /metrics.
func (m *muxProc) gauge(name string) (float64, error) {
	resp, err := http.Get(m.base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("/metrics has no %s (HTTP %d)", name, resp.StatusCode)
}

// memstats names where the runtime's memory is: heap pages freed but not
// yet returned to the system, returned ones, and goroutine stacks.
func (m *muxProc) memstats() string {
	var out []string
	for _, g := range []struct{ name, label string }{
		{"go_memstats_heap_idle_bytes", "heap idle"},
		{"go_memstats_heap_released_bytes", "released"},
		{"go_memstats_stack_inuse_bytes", "stacks"},
		{"go_goroutines", "goroutines"},
	} {
		v, err := m.gauge(g.name)
		if err != nil {
			continue
		}
		if g.name == "go_goroutines" {
			out = append(out, fmt.Sprintf("%s %.0f", g.label, v))
		} else {
			out = append(out, fmt.Sprintf("%s %.1f MB", g.label, v/1e6))
		}
	}
	return strings.Join(out, ", ")
}
