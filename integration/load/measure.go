package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// dial opens one MCP session at url: its own HTTP transport (so its own
// connection), the protocol version pinned, initialized.
func dial(ctx context.Context, url, protocol string) (*client.Client, error) {
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	t, err := transport.NewStreamableHTTP(url, transport.WithHTTPBasicClient(hc))
	if err != nil {
		return nil, err
	}
	var opts []client.ClientOption
	if protocol != "" {
		opts = append(opts, client.WithProtocolVersion(protocol))
	}
	c := client.NewClient(t, opts...)
	if err := c.Start(ctx); err != nil {
		return nil, fmt.Errorf("start %s: %w", url, err)
	}
	var req mcp.InitializeRequest
	req.Params.ClientInfo = mcp.Implementation{Name: "viewmux-load", Version: "1"}
	if _, err := c.Initialize(ctx, req); err != nil {
		c.Close()
		return nil, fmt.Errorf("initialize %s: %w", url, err)
	}
	return c, nil
}

// caller makes one kind of call on any session.
type caller func(ctx context.Context, c *client.Client) error

const echoText = "hello from viewmux-load"

// echoCaller calls tool (echo, directly or through viewmux) and checks the
// answer. Each successful call is added to every counter in sent (the
// total must match what the upstream counted at the end).
func echoCaller(tool string, sent ...*atomic.Int64) caller {
	var req mcp.CallToolRequest
	req.Params.Name = tool
	req.Params.Arguments = map[string]any{"text": echoText}
	return func(ctx context.Context, c *client.Client) error {
		res, err := c.CallTool(ctx, req)
		if err != nil {
			return fmt.Errorf("tools/call %s: %w", tool, err)
		}
		for _, n := range sent {
			n.Add(1)
		}
		return checkText(tool, res, echoText)
	}
}

// checkText reports an error unless res is one text content equal to want.
func checkText(tool string, res *mcp.CallToolResult, want string) error {
	if res.IsError || len(res.Content) != 1 {
		return fmt.Errorf("tools/call %s: unexpected result %+v", tool, res)
	}
	if tc, ok := res.Content[0].(mcp.TextContent); !ok || tc.Text != want {
		return fmt.Errorf("tools/call %s: unexpected content %+v, want %q", tool, res.Content[0], want)
	}
	return nil
}

// progressTally follows the progress notifications of one session's calls,
// made one at a time: how many the calls asked for, how many carrying the
// current call's token reached the client before that call's result, and
// how many carried another token (one that arrived after its own result).
// Safe for concurrent use by the session's reader and its caller.
type progressTally struct {
	seq                  atomic.Int64
	current              atomic.Pointer[string] // token of the call in flight
	asked, before, stray atomic.Int64
	seen                 atomic.Int64 // notifications with the current token
}

// watch counts the progress notifications c receives.
func (p *progressTally) watch(c *client.Client) {
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method != string(mcp.MethodNotificationProgress) {
			return
		}
		cur := p.current.Load()
		if cur != nil && fmt.Sprint(n.Params.AdditionalFields["progressToken"]) == *cur {
			p.seen.Add(1)
		} else {
			p.stray.Add(1)
		}
	})
}

// progressCaller calls tool with args and a fresh progress token, for a
// tool that sends want progress notifications and then answers text. Each
// successful call is added to sent (nil: not counted). The session must be
// watched by p, and used by this caller only, one call at a time.
func progressCaller(tool string, args map[string]any, want int, text string, p *progressTally, sent *atomic.Int64) caller {
	return func(ctx context.Context, c *client.Client) error {
		tok := fmt.Sprintf("load-%d", p.seq.Add(1))
		p.current.Store(&tok)
		seen0 := p.seen.Load()
		var req mcp.CallToolRequest
		req.Params.Name = tool
		req.Params.Arguments = args
		req.Params.Meta = &mcp.Meta{ProgressToken: tok}
		res, err := c.CallTool(ctx, req)
		if err != nil {
			return fmt.Errorf("tools/call %s: %w", tool, err)
		}
		if sent != nil {
			sent.Add(1)
		}
		p.asked.Add(int64(want))
		p.before.Add(p.seen.Load() - seen0)
		return checkText(tool, res, text)
	}
}

// deniedCaller calls a tool the session's profile hides; the only right
// answer is a JSON-RPC "method/tool not found" error (-32601).
func deniedCaller(tool string) caller {
	var req mcp.CallToolRequest
	req.Params.Name = tool
	req.Params.Arguments = map[string]any{"text": "must never arrive"}
	return func(ctx context.Context, c *client.Client) error {
		_, err := c.CallTool(ctx, req)
		switch {
		case err == nil:
			return fmt.Errorf("tools/call %s: allowed, but the profile hides it", tool)
		case errors.Is(err, mcp.ErrMethodNotFound):
			return nil
		default:
			return fmt.Errorf("tools/call %s: want -32601, got: %w", tool, err)
		}
	}
}

func pingCaller(ctx context.Context, c *client.Client) error { return c.Ping(ctx) }

// series is one latency series: one session, one kind of call.
type series struct {
	label string
	c     *client.Client
	call  caller
	d     []time.Duration
	into  *pcts // where the run's percentiles go
}

// latency runs warmup and then n timed calls of every series, interleaved
// in blocks: series A, B, C, … for one block, then … C, B, A for the next,
// so drift and noise on the machine land on every series alike.
func latency(ctx context.Context, ss []*series, warmup, n, block int) error {
	do := func(s *series, k int, record bool) error {
		for range k {
			start := time.Now()
			err := s.call(ctx, s.c)
			el := time.Since(start)
			if err != nil {
				return fmt.Errorf("%s: %w", s.label, err)
			}
			if record {
				s.d = append(s.d, el)
			}
		}
		return nil
	}
	for _, s := range ss {
		s.d = make([]time.Duration, 0, n)
	}
	for done := 0; done < warmup; done += block {
		for _, s := range ss {
			if err := do(s, min(block, warmup-done), false); err != nil {
				return err
			}
		}
	}
	for b, done := 0, 0; done < n; b, done = b+1, done+block {
		for i := range ss {
			s := ss[i]
			if b%2 == 1 {
				s = ss[len(ss)-1-i]
			}
			if err := do(s, min(block, n-done), true); err != nil {
				return err
			}
		}
	}
	return nil
}

// throughput runs every session in a closed loop of calls for d and
// returns the completed calls and the time from the start until the last
// call finished.
func throughput(ctx context.Context, cs []*client.Client, call caller, d time.Duration) (int64, time.Duration, error) {
	var (
		stop  atomic.Bool
		total atomic.Int64
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	start := time.Now()
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	for _, c := range cs {
		wg.Go(func() {
			var n int64
			for !stop.Load() && ctx.Err() == nil {
				if err := call(ctx, c); err != nil {
					once.Do(func() { first = err })
					stop.Store(true)
					break
				}
				n++
			}
			total.Add(n)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if first != nil {
		return 0, 0, first
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, context.Cause(ctx)
	}
	return total.Load(), elapsed, nil
}
