// Command hopprobe measures what one proxy process adds to a small
// tools/call, one call at a time, for four paths to the same mcp-go
// upstream (in this process): directly; through the floor
// (integration/floor, an httputil reverse proxy built as a program of its
// own, as integration/load runs it); through the same proxy code run as a
// copy of this program; and through `viewmux serve`.
//
//	go build -o /tmp/viewmux ./cmd/viewmux && go run ./integration/hopprobe --viewmux /tmp/viewmux
//
// It prints each round's added p50 per path, and the medians.
//
// The two floors differ by about 20 µs of about 300 µs on a 2-core VM: a
// proxy that is a copy of this program, whose code sits at the same
// addresses as the client's and the upstream's in this process, is faster
// than the same proxy built alone. viewmux's session server showed the same:
// run as a copy of this program it was as fast as that floor, and built
// alone as slow as `viewmux serve`. The bars compare viewmux with the floor
// built alone, which is what a proxy in front of an upstream is.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/viewmux/viewmux/integration/internal/gobuild"
)

// Set in a child's environment: the upstream's URL, and the address the
// child serves on.
const (
	envFloor = "HOPPROBE_FLOOR"
	envAddr  = "HOPPROBE_ADDR"
)

func main() {
	if up := os.Getenv(envFloor); up != "" {
		exit(serveFloor(up, os.Getenv(envAddr)))
	}
	bin := flag.String("viewmux", "", "viewmux binary (required)")
	floor := flag.String("floor", "", "integration/floor binary (default: go build it into a temp dir)")
	rounds := flag.Int("rounds", 5, "rounds, each timing every path in turn")
	n := flag.Int("n", 1000, "timed calls per path per round")
	flag.Parse()
	if *bin == "" {
		exit(errors.New("--viewmux is required"))
	}
	exit(run(*bin, *floor, *rounds, *n))
}

func exit(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "hopprobe:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serveFloor is the floor's proxy run as a copy of this program: a
// byte-for-byte reverse proxy configured as integration/floor's.
func serveFloor(up, addr string) error {
	target, err := url.Parse(up)
	if err != nil {
		return err
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 64, 64
	rp := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport:     t,
		FlushInterval: -1,
	}
	return http.ListenAndServe(addr, rp)
}

func run(bin, floor string, rounds, n int) error {
	ctx := context.Background()
	up := server.NewMCPServer("hopprobe", "1", server.WithToolCapabilities(true))
	up.AddTool(mcp.NewTool("echo"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("ok"), nil
	})
	ts := httptest.NewServer(server.NewStreamableHTTPServer(up))
	defer ts.Close()

	addrs := make([]string, 3)
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		addrs[i] = ln.Addr().String()
		ln.Close()
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "hopprobe")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// The config gets a directory of its own: viewmux watches it.
	cfgDir := filepath.Join(dir, "config")
	cfgPath := filepath.Join(cfgDir, "viewmux.toml")
	if err := os.Mkdir(cfgDir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf("[upstreams.up]\nurl = %q\n", ts.URL+"/mcp")), 0o600); err != nil {
		return err
	}
	if floor == "" {
		if floor, err = gobuild.BuildHere(ctx, "./integration/floor", filepath.Join(dir, "floor")); err != nil {
			return err
		}
	}
	children := []*exec.Cmd{
		exec.Command(floor, "-upstream", ts.URL, "-listen", addrs[0]),
		exec.Command(self),
		exec.Command(bin, "serve", "--config", cfgPath, "--listen", addrs[2]),
	}
	// The floor serves until its stdin closes, which the pipe does at
	// exit.
	if _, err := children[0].StdinPipe(); err != nil {
		return err
	}
	children[1].Env = append(os.Environ(), envFloor+"="+ts.URL, envAddr+"="+addrs[1])
	for _, c := range children {
		if err := c.Start(); err != nil {
			return err
		}
		defer func() { c.Process.Kill(); c.Wait() }()
	}

	paths := []struct {
		name, url, tool string
		c               *client.Client
		added           []time.Duration
	}{
		{name: "direct", url: ts.URL + "/mcp", tool: "echo"},
		{name: "floor", url: "http://" + addrs[0] + "/mcp", tool: "echo"},
		{name: "floor as a copy of this program", url: "http://" + addrs[1] + "/mcp", tool: "echo"},
		{name: "viewmux serve", url: "http://" + addrs[2] + "/mcp", tool: "up__echo"},
	}
	for i := range paths {
		if paths[i].c, err = dial(ctx, paths[i].url, 30*time.Second); err != nil {
			return fmt.Errorf("%s: %w", paths[i].name, err)
		}
	}
	for r := range rounds {
		var direct time.Duration
		fmt.Printf("round %d: added p50", r+1)
		for i := range paths {
			p50, err := timeCalls(ctx, paths[i].c, paths[i].tool, n)
			if err != nil {
				return fmt.Errorf("%s: %w", paths[i].name, err)
			}
			if i == 0 {
				direct = p50
				continue
			}
			paths[i].added = append(paths[i].added, p50-direct)
			fmt.Printf("  %s %v", paths[i].name, (p50 - direct).Round(time.Microsecond))
		}
		fmt.Println()
	}
	fmt.Print("median added p50:")
	for _, p := range paths[1:] {
		slices.Sort(p.added)
		fmt.Printf("  %s %v", p.name, p.added[len(p.added)/2].Round(time.Microsecond))
	}
	fmt.Println()
	return nil
}

// dial connects and initializes a client, retrying until the path's
// server listens.
func dial(ctx context.Context, url string, wait time.Duration) (*client.Client, error) {
	deadline := time.Now().Add(wait)
	for {
		tr, err := transport.NewStreamableHTTP(url)
		if err != nil {
			return nil, err
		}
		c := client.NewClient(tr)
		err = c.Start(ctx)
		if err == nil {
			var req mcp.InitializeRequest
			req.Params.ProtocolVersion = "2025-06-18"
			if _, err = c.Initialize(ctx, req); err == nil {
				return c, nil
			}
		}
		c.Close()
		if time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// timeCalls makes n calls of tool one at a time and returns their p50.
func timeCalls(ctx context.Context, c *client.Client, tool string, n int) (time.Duration, error) {
	var req mcp.CallToolRequest
	req.Params.Name = tool
	d := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if _, err := c.CallTool(ctx, req); err != nil {
			return 0, err
		}
		d = append(d, time.Since(t0))
	}
	slices.Sort(d)
	return d[len(d)/2], nil
}
