package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// childEnv, when set in the environment, makes the test binary act as a demo
// server named by its value over its own stdin and stdout, instead of running
// tests. TestChildProcess re-executes the binary this way.
const childEnv = "VIEWMUX_DEMO_TEST_CHILD"

func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		// As `viewmux demo-server` must: mcp-go's stdio client closes the
		// child's stderr before it exits, and Go kills a process that
		// writes to a broken fd 1 or 2 unless SIGPIPE is handled.
		signal.Ignore(syscall.SIGPIPE)
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := Serve(ctx, name, os.Stdin, os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// waitTimeout bounds every wait for something the server should do soon.
const waitTimeout = 5 * time.Second

// protocolModes are the two protocol eras mcp-go's client can speak. The
// default probes server/discover and, against mcp-go's server, negotiates the
// stateless 2026-07-28 revision; WithLegacyProtocolOnly keeps the
// initialize handshake.
var protocolModes = []struct {
	name   string
	opts   []client.ClientOption
	modern bool
}{
	{name: "modern", modern: true},
	{name: "legacy", opts: []client.ClientOption{client.WithLegacyProtocolOnly()}},
}

// syncBuffer is a bytes.Buffer safe for concurrent use, to collect a server's
// log.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// recorder keeps every notification a client receives. Its add runs on the
// client's reader goroutine, so it never blocks.
type recorder struct {
	mu      sync.Mutex
	got     []mcp.JSONRPCNotification
	changed chan struct{} // closed and replaced on every add
}

func newRecorder() *recorder {
	return &recorder{changed: make(chan struct{})}
}

func (r *recorder) add(n mcp.JSONRPCNotification) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, n)
	close(r.changed)
	r.changed = make(chan struct{})
}

// matching returns the notifications received so far for which keep is true.
func (r *recorder) matching(keep func(mcp.JSONRPCNotification) bool) []mcp.JSONRPCNotification {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []mcp.JSONRPCNotification
	for _, n := range r.got {
		if keep(n) {
			out = append(out, n)
		}
	}
	return out
}

// waitFor waits until at least n received notifications satisfy keep, and
// returns all that do.
func (r *recorder) waitFor(t *testing.T, n int, keep func(mcp.JSONRPCNotification) bool) []mcp.JSONRPCNotification {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		changed := r.changed
		r.mu.Unlock()
		if got := r.matching(keep); len(got) >= n {
			return got
		}
		select {
		case <-changed:
		case <-deadline.C:
			got := r.matching(keep)
			t.Fatalf("got %d matching notifications after %v, want %d; all: %v", len(got), waitTimeout, n, r.matching(func(mcp.JSONRPCNotification) bool { return true }))
			return nil
		}
	}
}

// isMethod keeps notifications of one method.
func isMethod(method string) func(mcp.JSONRPCNotification) bool {
	return func(n mcp.JSONRPCNotification) bool { return n.Method == method }
}

// isProgressFor keeps progress notifications carrying token. Tokens are
// compared by their JSON text, since numbers come back as float64.
func isProgressFor(token any) func(mcp.JSONRPCNotification) bool {
	want := fmt.Sprint(token)
	return func(n mcp.JSONRPCNotification) bool {
		return n.Method == "notifications/progress" && fmt.Sprint(n.Params.AdditionalFields["progressToken"]) == want
	}
}

// peer is an MCP client connected to a demo server, with the notifications it
// received and, for in-process servers, the server's log.
type peer struct {
	*client.Client
	rec  *recorder
	logs *syncBuffer // nil for a child process
	seq  atomic.Int64
}

// connect starts, registers notifications on and initializes c.
func connect(t *testing.T, c *client.Client, wantModern bool) *recorder {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatalf("client start: %v", err)
	}
	rec := newRecorder()
	c.OnNotification(rec.add)
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{
		ClientInfo: mcp.Implementation{Name: "demo-test", Version: "1"},
	}}); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	if got := mcp.IsModernProtocol(c.ProtocolVersion()); got != wantModern {
		t.Fatalf("negotiated protocol %q: modern = %v, want %v", c.ProtocolVersion(), got, wantModern)
	}
	return rec
}

// startPipe runs Serve in this process over a pair of io.Pipes, connects an
// mcp-go client over them, and stops both when the test ends, checking that
// Serve returns nil on EOF of its input.
func startPipe(t *testing.T, name string, modern bool, opts ...client.ClientOption) *peer {
	t.Helper()
	toClient, serverOut := io.Pipe()
	serverIn, fromClient := io.Pipe()
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, name, serverIn, serverOut, logs) }()

	c := client.NewClient(transport.NewIO(toClient, fromClient, nil), opts...)
	p := &peer{Client: c, logs: logs}
	t.Cleanup(func() {
		// Closing the client closes the server's input. The client stops
		// reading after that, so drain what the server still writes while
		// it finishes its in-flight calls.
		if err := c.Close(); err != nil {
			t.Errorf("client close: %v", err)
		}
		go func() { _, _ = io.Copy(io.Discard, toClient) }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve after EOF = %v, want nil", err)
			}
		case <-time.After(waitTimeout):
			t.Errorf("Serve did not return within %v of EOF", waitTimeout)
			cancel()
			<-done
		}
		cancel()
		_ = serverOut.Close() // ends the drain
		_ = serverIn.Close()
		if t.Failed() {
			t.Logf("server log:\n%s", logs)
		}
	})
	p.rec = connect(t, c, modern)
	return p
}

// token returns a progress token unique within p.
func (p *peer) token(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, p.seq.Add(1))
}

// callTool calls a tool and fails the test on a protocol error.
func (p *peer) callTool(t *testing.T, name string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	res, err := p.CallTool(ctx, mcp.CallToolRequest{Params: mcp.CallToolParams{Name: name, Arguments: args}})
	if err != nil {
		t.Fatalf("tools/call %s: %v", name, err)
	}
	return res
}

// flush makes sure every notification the server queued before now has
// reached the client: it asks for one more progress notification and waits
// for it. The server writes notifications from one FIFO queue, so all
// earlier ones arrive first.
func (p *peer) flush(t *testing.T) {
	t.Helper()
	tok := p.token("flush")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, err := p.CallTool(ctx, mcp.CallToolRequest{Params: mcp.CallToolParams{
		Name:      "slow_count",
		Arguments: map[string]any{"count": 1, "interval_ms": 0},
		Meta:      &mcp.Meta{ProgressToken: tok},
	}})
	if err != nil {
		t.Fatalf("flush: %v", err)
	}
	p.rec.waitFor(t, 1, isProgressFor(tok))
}

// resultText joins the text contents of res.
func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func TestServeInitialize(t *testing.T) {
	for _, mode := range protocolModes {
		t.Run(mode.name, func(t *testing.T) {
			toClient, serverOut := io.Pipe()
			serverIn, fromClient := io.Pipe()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- Serve(ctx, "alpha", serverIn, serverOut, io.Discard) }()
			defer func() { _ = serverOut.Close(); _ = serverIn.Close() }()

			c := client.NewClient(transport.NewIO(toClient, fromClient, nil), mode.opts...)
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			res, err := c.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{
				ClientInfo: mcp.Implementation{Name: "demo-test", Version: "1"},
			}})
			if err != nil {
				t.Fatalf("initialize: %v", err)
			}
			if res.ServerInfo.Name != "viewmux-demo-alpha" {
				t.Errorf("server name = %q, want %q", res.ServerInfo.Name, "viewmux-demo-alpha")
			}
			if !strings.Contains(res.Instructions, "demo") {
				t.Errorf("instructions = %q, want a description of the demo", res.Instructions)
			}
			caps := res.Capabilities
			switch {
			case caps.Tools == nil || !caps.Tools.ListChanged:
				t.Errorf("tools capability = %+v, want listChanged", caps.Tools)
			case caps.Resources == nil || !caps.Resources.ListChanged || caps.Resources.Subscribe:
				t.Errorf("resources capability = %+v, want listChanged and no subscribe", caps.Resources)
			case caps.Prompts == nil || !caps.Prompts.ListChanged:
				t.Errorf("prompts capability = %+v, want listChanged", caps.Prompts)
			case caps.Logging == nil:
				t.Errorf("logging capability missing")
			}

			// Cancelling ctx stops Serve, which then reports no error.
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Serve after cancel = %v, want nil", err)
				}
			case <-time.After(waitTimeout):
				t.Fatalf("Serve did not return within %v of cancellation", waitTimeout)
			}
			_ = c.Close()
		})
	}
}

func TestServeRejects(t *testing.T) {
	// A running server holds mcp-go's process-wide stdio session.
	running := startPipe(t, "running", true)

	tests := []struct {
		name    string
		server  string
		wantErr error
	}{
		{name: "empty name", server: "", wantErr: ErrInvalidName},
		{name: "name with slash", server: "a/b", wantErr: ErrInvalidName},
		{name: "name with space", server: "a b", wantErr: ErrInvalidName},
		{name: "name too long", server: strings.Repeat("n", 65), wantErr: ErrInvalidName},
		{name: "second server in process", server: "second", wantErr: ErrAlreadyServing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, w := io.Pipe()
			defer func() { _ = w.Close() }()
			done := make(chan error, 1)
			go func() { done <- Serve(context.Background(), tt.server, in, io.Discard, io.Discard) }()
			select {
			case err := <-done:
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("Serve(%q) = %v, want %v", tt.server, err, tt.wantErr)
				}
			case <-time.After(waitTimeout):
				t.Fatalf("Serve(%q) kept running, want %v", tt.server, tt.wantErr)
			}
		})
	}

	// The refused calls left the running server alone.
	if got := resultText(running.callTool(t, "echo", map[string]any{"text": "still here"})); got != "still here" {
		t.Errorf("echo after refused Serve calls = %q", got)
	}
}

func TestNewServer(t *testing.T) {
	t.Run("invalid name panics", func(t *testing.T) {
		defer func() {
			if recover() == nil {
				t.Error("NewServer(\"a b\") did not panic")
			}
		}()
		NewServer("a b")
	})

	t.Run("independent in-process servers", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		clients := map[string]*client.Client{}
		for _, name := range []string{"one", "two"} {
			c, err := client.NewInProcessClient(NewServer(name))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Initialize(ctx, mcp.InitializeRequest{}); err != nil {
				t.Fatal(err)
			}
			clients[name] = c
		}
		call := func(c *client.Client, tool string, args map[string]any) *mcp.CallToolResult {
			t.Helper()
			res, err := c.CallTool(ctx, mcp.CallToolRequest{Params: mcp.CallToolParams{Name: tool, Arguments: args}})
			if err != nil {
				t.Fatalf("%s: %v", tool, err)
			}
			return res
		}
		call(clients["one"], "write_note", map[string]any{"title": "only-in-one", "text": "x"})
		if res := call(clients["one"], "read_note", map[string]any{"title": "only-in-one"}); res.IsError {
			t.Errorf("server one lost its note: %s", resultText(res))
		}
		if res := call(clients["two"], "read_note", map[string]any{"title": "only-in-one"}); !res.IsError {
			t.Errorf("server two sees server one's note: %s", resultText(res))
		}
	})
}

func TestChildProcess(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	// Under -race a child sleeps 1s at exit by default; skip that.
	env := []string{childEnv + "=child", "GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")}
	c, err := client.NewStdioMCPClientWithOptions(exe, env, nil,
		transport.WithCommandStderrWriter(stderr))
	if err != nil {
		t.Fatalf("start child: %v", err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = c.Close()
		}
	}()
	p := &peer{Client: c}
	p.rec = connect(t, c, true)

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	tools, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	if len(tools.Tools) != len(wantTools) {
		t.Errorf("child lists %d tools, want %d", len(tools.Tools), len(wantTools))
	}

	t.Run("echo is exact", func(t *testing.T) {
		const text = "  line one\nline two\t\"quoted\" ünïcödé 🎉  "
		if got := resultText(p.callTool(t, "echo", map[string]any{"text": text})); got != text {
			t.Errorf("echo = %q, want %q", got, text)
		}
	})

	t.Run("progress", func(t *testing.T) {
		tok := p.token("child")
		res, err := c.CallTool(ctx, mcp.CallToolRequest{Params: mcp.CallToolParams{
			Name:      "slow_count",
			Arguments: map[string]any{"count": 4, "interval_ms": 5},
			Meta:      &mcp.Meta{ProgressToken: tok},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if got := resultText(res); got != "counted to 4" {
			t.Errorf("slow_count = %q", got)
		}
		p.rec.waitFor(t, 4, isProgressFor(tok))
	})

	t.Run("cancel", func(t *testing.T) {
		tok := p.token("child-cancel")
		callCtx, callCancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() {
			_, err := c.CallTool(callCtx, mcp.CallToolRequest{Params: mcp.CallToolParams{
				Name:      "slow_count",
				Arguments: map[string]any{"count": 1000, "interval_ms": 10},
				Meta:      &mcp.Meta{ProgressToken: tok},
			}})
			errc <- err
		}()
		p.rec.waitFor(t, 2, isProgressFor(tok))
		callCancel()
		select {
		case err := <-errc:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled call = %v, want context.Canceled", err)
			}
		case <-time.After(time.Second):
			t.Fatal("cancelled call did not return within 1s")
		}
		// The child got notifications/cancelled and stopped counting: the
		// count settles, ten intervals apart, long before the 1000 a child
		// that ignored the cancel would reach. A tick already under way
		// when the cancel arrived may still land after the first flush (on
		// a loaded machine it did), so the test waits for the count to
		// settle rather than taking the first reading as final.
		p.flush(t)
		n := len(p.rec.matching(isProgressFor(tok)))
		settleBy := time.Now().Add(waitTimeout)
		for {
			time.Sleep(100 * time.Millisecond) // ten intervals
			p.flush(t)
			m := len(p.rec.matching(isProgressFor(tok)))
			if m == n {
				break
			}
			if time.Now().After(settleBy) || m >= 1000 {
				t.Fatalf("progress for the cancelled call kept coming: %d notifications, still rising after %v", m, waitTimeout)
			}
			n = m
		}
		if n >= 1000 {
			t.Errorf("progress for the cancelled call reached %d: the child never stopped", n)
		}
	})

	// The child logs to stderr, never to stdout (which the client parses).
	// The transport mirrors stderr asynchronously, so poll for the line.
	deadline := time.Now().Add(waitTimeout)
	for !strings.Contains(stderr.String(), "demo server started") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	for _, want := range []string{"demo server started", "upstream=child"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("child stderr lacks %q:\n%s", want, stderr)
		}
	}

	// Closing stdin ends the child; Serve returns nil on EOF, so it exits 0.
	closed = true
	if err := c.Close(); err != nil {
		t.Errorf("child exit: %v", err)
	}
}
