package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// The stdio upstream is viewmux's built-in demo server (`viewmux demo-server`),
// a real stdio MCP server. Its echo returns its text; its slow_count sends a
// progress notification per step when the call has a progress token.
const (
	stdioName      = "st"
	stdioEcho      = "echo"
	stdioCount     = "slow_count"
	exposedStdEcho = stdioName + "__" + stdioEcho
	exposedStdCnt  = stdioName + "__" + stdioCount
)

// stdioConfig mounts the demo server, started by viewmux from its own binary,
// as the stdio upstream "st".
func stdioConfig() string {
	return fmt.Sprintf(`# written by integration/load
[upstreams.%s]
command = "${VIEWMUX_SELF}"
args = ["demo-server", "--name", %q]
`, stdioName, stdioName)
}

// stdioArgs returns the arguments for bin that serve MCP on stdin/stdout:
// the demo server itself (direct), or `viewmux serve --stdio` with a config
// mounting it (through viewmux). The viewmux config is written into a
// directory of its own under dir, for the reason startMux gives.
func stdioArgs(dir string, viaMux bool, logLevel string) ([]string, error) {
	if !viaMux {
		return []string{"demo-server", "--name", stdioName}, nil
	}
	cfgDir := filepath.Join(dir, "config-stdio")
	if err := os.Mkdir(cfgDir, 0o700); err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(cfgDir, "viewmux.toml")
	if err := os.WriteFile(cfgPath, []byte(stdioConfig()), 0o600); err != nil {
		return nil, err
	}
	return []string{"serve", "--stdio", "--config", cfgPath, "--log-level", logLevel}, nil
}

// dialStdio starts bin with args as a child speaking MCP on its stdin and
// stdout, its stderr going to logPath, and initializes a session with it.
// Closing the client closes the child's stdin and waits for it to exit.
func dialStdio(ctx context.Context, bin string, args []string, logPath, protocol string) (*client.Client, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor once started
	spawn := func(_ context.Context, command string, env, args []string) (*exec.Cmd, error) {
		cmd := exec.Command(command, args...)
		cmd.Env = append(append(os.Environ(), "VIEWMUX_CONFIG="), env...) // only --config counts
		cmd.Stderr = logf
		cmd.SysProcAttr = childAttr()
		return cmd, nil
	}
	t := transport.NewStdioWithOptions(bin, nil, args, transport.WithCommandFunc(spawn))
	var opts []client.ClientOption
	if protocol != "" {
		opts = append(opts, client.WithProtocolVersion(protocol))
	}
	c := client.NewClient(t, opts...)
	if err := c.Start(ctx); err != nil {
		return nil, fmt.Errorf("start %s %v: %w", bin, args, err)
	}
	var req mcp.InitializeRequest
	req.Params.ClientInfo = mcp.Implementation{Name: "viewmux-load", Version: "1"}
	if _, err := c.Initialize(ctx, req); err != nil {
		c.Close()
		return nil, fmt.Errorf("initialize %s %v: %w (log: %s)", bin, args, err, logPath)
	}
	return c, nil
}

// stdioPair is the stdio part of the measurement: one session speaking stdio
// to the demo server, one speaking stdio to viewmux serve --stdio, which
// mounts the same server; and the calls the latency series make on them.
type stdioPair struct {
	direct, mux           *client.Client // closed by the caller
	echoDirect, echoMux   caller
	countDirect, countMux caller // slow_count, interval_ms 0, o.progress steps
}

// openStdioPair starts both children, checks their tools and returns the
// pair. On error nothing is left running.
func openStdioPair(ctx context.Context, bin, dir string, o options, tally *progressSeries) (_ *stdioPair, err error) {
	p := &stdioPair{}
	defer func() {
		if err != nil {
			for _, c := range []*client.Client{p.direct, p.mux} {
				if c != nil {
					c.Close()
				}
			}
		}
	}()
	for _, s := range []struct {
		c      **client.Client
		viaMux bool
		log    string
		tally  *progressTally
	}{{&p.direct, false, "stdio-direct.log", &tally.sDirect}, {&p.mux, true, "stdio-viewmux.log", &tally.sMux}} {
		args, err := stdioArgs(dir, s.viaMux, o.muxLogLevel)
		if err != nil {
			return nil, err
		}
		if *s.c, err = dialStdio(ctx, bin, args, filepath.Join(dir, s.log), o.protocol); err != nil {
			return nil, err
		}
		s.tally.watch(*s.c)
	}
	if err := checkStdioViews(ctx, p.direct, p.mux); err != nil {
		return nil, err
	}
	countArgs := map[string]any{"count": o.progress, "interval_ms": 0}
	countText := fmt.Sprintf("counted to %d", o.progress)
	p.echoDirect, p.echoMux = echoCaller(stdioEcho), echoCaller(exposedStdEcho)
	p.countDirect = progressCaller(stdioCount, countArgs, o.progress, countText, &tally.sDirect, nil)
	p.countMux = progressCaller(exposedStdCnt, countArgs, o.progress, countText, &tally.sMux, nil)
	return p, nil
}

// checkStdioViews makes sure the demo server has echo and slow_count, and
// viewmux over stdio exposes them as st__echo and st__slow_count.
func checkStdioViews(ctx context.Context, direct, mux *client.Client) error {
	for _, side := range []struct {
		c     *client.Client
		names []string
	}{{direct, []string{stdioEcho, stdioCount}}, {mux, []string{exposedStdEcho, exposedStdCnt}}} {
		res, err := side.c.ListTools(ctx, mcp.ListToolsRequest{})
		if err != nil {
			return fmt.Errorf("stdio tools/list: %w", err)
		}
		have := make(map[string]bool, len(res.Tools))
		for _, t := range res.Tools {
			have[t.Name] = true
		}
		for _, n := range side.names {
			if !have[n] {
				return fmt.Errorf("stdio: tool %s missing from tools/list", n)
			}
		}
	}
	return nil
}
