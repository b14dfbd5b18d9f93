// Command floodload measures what a hostile upstream's notification
// floods cost another upstream's callers (issue 17, finding 5). It starts
// the real viewmux binary with two stdio upstreams, both ./hostile: "flood"
// and "bystander". One client session calls bystander__echo, one call at
// a time, first while everything is quiet, then while flood sends
// tools/list_changed as fast as its stdout takes them, then while it
// sends log messages without end. For each phase it reports the calls'
// median and p90 latency, viewmux's CPU (user + system, from
// /proc/PID/stat) as a share of one core over a --settle window and the
// calls, and the tools/list requests flood received.
//
// The bar: the bystander's median during a flood within 2× its quiet
// median. Missing it is a measurement, not a failure: the exit status is
// non-zero only when something did not work. Linux only (it reads /proc).
//
// Run it from the repository: go run ./integration/floodload [--viewmux BIN]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

func main() {
	bin := flag.String("viewmux", "", "viewmux binary (default: build ./cmd/viewmux)")
	calls := flag.Int("calls", 500, "bystander calls per phase")
	settle := flag.Duration("settle", 3*time.Second, "wait after a flood starts before measuring")
	tools := flag.Int("flood-tools", 2000, "tools the flooding upstream lists (each refetch reads them all)")
	listeners := flag.Int("listeners", 10, "other sessions holding a GET stream open, told of each catalog change")
	flag.Parse()
	if err := run(*bin, *calls, *settle, *tools, *listeners); err != nil {
		fmt.Fprintln(os.Stderr, "floodload:", err)
		os.Exit(1)
	}
}

func run(bin string, calls int, settle time.Duration, tools, listeners int) error {
	dir, err := os.MkdirTemp("", "floodload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if bin == "" {
		bin = filepath.Join(dir, "viewmux")
		if err := build(bin, "./cmd/viewmux"); err != nil {
			return err
		}
	}
	hostile := filepath.Join(dir, "hostile")
	if err := build(hostile, "./integration/hostile"); err != nil {
		return err
	}
	addr := "127.0.0.1:18977"
	cfg := fmt.Sprintf(`[server]
listen = %q
[upstreams.flood]
command = %q
args = ["-churn", "-tools", "%d", "-desc", "200"]
[upstreams.bystander]
command = %q
`, addr, hostile, tools, hostile)
	cfgPath := filepath.Join(dir, "viewmux.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return err
	}
	mux := exec.Command(bin, "serve", "--config", cfgPath)
	mux.Stderr = nil
	if err := mux.Start(); err != nil {
		return err
	}
	defer func() {
		mux.Process.Signal(os.Interrupt)
		mux.Wait()
	}()
	ctx := context.Background()
	var c *client.Client
	for deadline := time.Now().Add(20 * time.Second); ; {
		c, err = connect(ctx, "http://"+addr+"/mcp")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
	defer c.Close()
	var told atomic.Int64
	for range listeners {
		l, err := connect(ctx, "http://"+addr+"/mcp", transport.WithContinuousListening())
		if err != nil {
			return err
		}
		defer l.Close()
		l.OnNotification(func(n mcp.JSONRPCNotification) {
			if n.Method == string(mcp.MethodNotificationToolsListChanged) {
				told.Add(1)
			}
		})
	}
	fmt.Printf("viewmux %s; flood lists %d tools, different each time; %d listening sessions; %d bystander__echo calls per phase, one at a time\n", bin, tools, listeners, calls)
	fmt.Printf("%-22s %10s %10s %10s %12s\n", "phase", "p50", "p90", "viewmux CPU", "flood lists")
	quiet, err := phase(ctx, c, mux.Process.Pid, "quiet", calls, settle)
	if err != nil {
		return err
	}
	if _, err := call(ctx, c, "flood__flood", map[string]any{"count": 0}); err != nil {
		return err
	}
	time.Sleep(settle)
	flood, err := phase(ctx, c, mux.Process.Pid, "list_changed flood", calls, settle)
	if err != nil {
		return err
	}
	if _, err := call(ctx, c, "flood__stop", nil); err != nil {
		return err
	}
	chatter := make(chan error, 1)
	go func() {
		_, err := call(ctx, c, "flood__chatter", map[string]any{"count": 200000})
		chatter <- err
	}()
	time.Sleep(settle)
	logs, err := phase(ctx, c, mux.Process.Pid, "log message flood", calls, settle)
	if err != nil {
		return err
	}
	fmt.Printf("the %d listening sessions were told of %d catalog changes\n", listeners, told.Load())
	fmt.Printf("bystander p50: list_changed flood %.2f× quiet, log flood %.2f× quiet (bar: 2×)\n",
		float64(flood)/float64(quiet), float64(logs)/float64(quiet))
	// The chatter call itself may end in its call_timeout: viewmux reads a
	// flooding upstream only so fast, and the upstream's own answers wait
	// behind its flood. That is the flooder's cost, not a failure here.
	select {
	case err := <-chatter:
		fmt.Printf("the flooding upstream's chatter call: err = %v\n", err)
	default:
		fmt.Println("the flooding upstream's chatter call is still in flight")
	}
	return nil
}

func build(out, pkg string) error {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

func connect(ctx context.Context, url string, opts ...transport.StreamableHTTPCOption) (*client.Client, error) {
	c, err := client.NewStreamableHttpClient(url, opts...)
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "floodload", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func call(ctx context.Context, c *client.Client, tool string, args map[string]any) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var req mcp.CallToolRequest
	req.Params.Name = tool
	req.Params.Arguments = args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		return "", fmt.Errorf("%s: %w", tool, err)
	}
	if res.IsError || len(res.Content) == 0 {
		return "", fmt.Errorf("%s: error result", tool)
	}
	tc, _ := mcp.AsTextContent(res.Content[0])
	if tc == nil {
		return "", fmt.Errorf("%s: no text", tool)
	}
	return tc.Text, nil
}

// phase waits window, then makes n bystander calls, and prints their
// latency, viewmux's CPU over the window and the calls, and flood's
// tools/list count; it returns the median.
func phase(ctx context.Context, c *client.Client, pid int, name string, n int, window time.Duration) (time.Duration, error) {
	cpu0, err := cpuTime(pid)
	if err != nil {
		return 0, err
	}
	began := time.Now()
	time.Sleep(window)
	lat := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		got, err := call(ctx, c, "bystander__echo", map[string]any{"text": "x"})
		if err != nil {
			return 0, err
		}
		if got != "x" {
			return 0, fmt.Errorf("bystander__echo answered %q", got)
		}
		lat = append(lat, time.Since(t0))
	}
	wall := time.Since(began)
	cpu1, err := cpuTime(pid)
	if err != nil {
		return 0, err
	}
	lists, err := call(ctx, c, "flood__stats", nil)
	if err != nil {
		return 0, err
	}
	slices.Sort(lat)
	p50, p90 := lat[len(lat)/2], lat[len(lat)*9/10]
	fmt.Printf("%-22s %10s %10s %9.0f%% %12s\n", name, p50.Round(10*time.Microsecond), p90.Round(10*time.Microsecond),
		100*(cpu1-cpu0).Seconds()/wall.Seconds(), strings.TrimPrefix(lists, "lists="))
	return p50, nil
}

// cpuTime is pid's user + system CPU time so far.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	const hz = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / hz, nil
}
