package upstream

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/viewmux/viewmux/configs"
)

// envServerMode, when set, makes the test binary a stdio MCP server:
//
//	serve     serve until stdin closes, then exit
//	linger    serve until stdin closes, then keep running (needs SIGTERM)
//	stubborn  like linger, and ignore SIGTERM (needs SIGKILL)
//	silent    read stdin, never answer
//	handmade  answer from handwritten JSON (handmadeServe), no mcp-go involved
//	handmadeloop  the same, with a tools/list whose next cursor never ends
//	modernonly refuse initialize as a 2026-07-28-only server would
//	scripted  a handwritten server that misbehaves on cue (scriptedServe)
//	brittle   a handwritten server that dies in a call, or answers one
//	          with bytes that cannot be read (brittleReply)
const envServerMode = "VIEWMUX_UPSTREAM_TEST_SERVER"

// envStderr, when set, makes the server write a few stderr lines first,
// one of them longer than maxStderrLine.
const envStderr = "VIEWMUX_UPSTREAM_TEST_STDERR"

func TestMain(m *testing.M) {
	if mode := os.Getenv(envServerMode); mode != "" {
		os.Exit(runTestServer(mode))
	}
	os.Exit(m.Run())
}

func runTestServer(mode string) int {
	if os.Getenv(envStderr) != "" {
		fmt.Fprintln(os.Stderr, "hello from stderr")
		fmt.Fprintln(os.Stderr, strings.Repeat("x", maxStderrLine+1000))
		fmt.Fprintln(os.Stderr, "after the long line")
	}
	switch mode {
	case "silent":
		io.Copy(io.Discard, os.Stdin)
		return 0
	case "handmade":
		handmadeServe(os.Stdin, os.Stdout, false)
		return 0
	case "handmadeloop":
		handmadeServe(os.Stdin, os.Stdout, true)
		return 0
	case "stubborn":
		signal.Ignore(syscall.SIGTERM)
	case "modernonly":
		return serveModernOnly()
	case "scripted":
		scriptedServe(os.Stdin, os.Stdout)
		return 0
	case "brittle":
		return brittleServe(os.Stdin, os.Stdout)
	}
	err := server.NewStdioServer(newTestServer()).Listen(context.Background(), os.Stdin, os.Stdout)
	if mode == "linger" || mode == "stubborn" {
		time.Sleep(time.Hour)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "test server:", err)
		return 1
	}
	return 0
}

// complexSchema uses root oneOf, $defs, $schema and $ref, which mcp.Tool's
// own decoding drops or reshapes.
const complexSchema = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",` +
	`"$defs":{"point":{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}},"required":["x","y"]}},` +
	`"properties":{"shape":{"enum":["circle","square"]},"center":{"$ref":"#/$defs/point"},"radius":{"type":"number","exclusiveMinimum":0},"side":{"type":"number"}},` +
	`"oneOf":[{"required":["shape","radius"]},{"required":["shape","side"]}],"additionalProperties":false,"x-vendor":{"keep":true}}`

const complexOutputSchema = `{"type":"object","properties":{"area":{"type":"number"}},"anyOf":[{"required":["area"]}],"unevaluatedProperties":false}`

// The test server's catalog, by page size 2.
var (
	testToolNames    = []string{"add_tool", "big", "complex", "echo", "notify", "slow", "whoami"}
	testPromptNames  = []string{"p1", "p2", "p3"}
	testResourceURIs = []string{"test://r1", "test://r2", "test://r3"}
	testTemplateURIs = []string{"test://t/{a}", "test://u/{b}", "test://v/{c}"}
)

const testServerVersion = "1.2.3"

func newTestServer() *server.MCPServer {
	s := server.NewMCPServer("testsrv", testServerVersion,
		server.WithToolCapabilities(true),
		server.WithPromptCapabilities(true),
		server.WithResourceCapabilities(false, true),
		server.WithPaginationLimit(2),
		server.WithInstructions("test instructions"),
	)
	s.AddTool(mcp.NewTool("echo", mcp.WithDescription("returns its raw arguments")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(string(req.Params.RawArguments)), nil
		})
	complexTool := mcp.NewToolWithRawSchema("complex", "a schema mcp.Tool cannot hold", json.RawMessage(complexSchema))
	complexTool.RawOutputSchema = json.RawMessage(complexOutputSchema)
	s.AddTool(complexTool, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("ok"), nil
	})
	s.AddTool(mcp.NewTool("slow", mcp.WithNumber("ms")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			select {
			case <-time.After(time.Duration(req.GetFloat("ms", 60000)) * time.Millisecond):
				return mcp.NewToolResultText("done"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
	s.AddTool(mcp.NewTool("add_tool", mcp.WithString("name", mcp.Required())),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			name := req.GetString("name", "")
			s.AddTool(mcp.NewTool(name), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return mcp.NewToolResultText(name), nil
			})
			return mcp.NewToolResultText("added " + name), nil
		})
	s.AddTool(mcp.NewTool("whoami"),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			b, _ := json.Marshal(ident{Pid: os.Getpid(), Pgid: syscall.Getpgrp()})
			return mcp.NewToolResultText(string(b)), nil
		})
	s.AddTool(mcp.NewTool("big", mcp.WithNumber("n")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(strings.Repeat("b", int(req.GetFloat("n", 0)))), nil
		})
	s.AddTool(mcp.NewTool("notify"),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			err := s.SendNotificationToClient(ctx, "notifications/message", map[string]any{"level": "info", "data": "hi"})
			if err != nil {
				return nil, err
			}
			// mcp-go's streamable HTTP server can drop a notification its
			// forwarder dequeued just as the handler returned; give it time.
			time.Sleep(50 * time.Millisecond)
			return mcp.NewToolResultText("sent"), nil
		})
	for _, name := range testPromptNames {
		s.AddPrompt(mcp.NewPrompt(name, mcp.WithPromptDescription("prompt "+name)),
			func(ctx context.Context, req mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
				return mcp.NewGetPromptResult(name, []mcp.PromptMessage{
					mcp.NewPromptMessage(mcp.RoleUser, mcp.NewTextContent("hello from "+name)),
				}), nil
			})
	}
	for i, uri := range testResourceURIs {
		s.AddResource(mcp.NewResource(uri, fmt.Sprintf("r%d", i+1)),
			func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
				return []mcp.ResourceContents{mcp.TextResourceContents{URI: uri, Text: "content of " + uri}}, nil
			})
	}
	for i, tmpl := range testTemplateURIs {
		s.AddResourceTemplate(mcp.NewResourceTemplate(tmpl, fmt.Sprintf("t%d", i+1)),
			func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
				return nil, nil
			})
	}
	return s
}

// handmadeTools is the tools/list result of the handmade server: one tool
// whose schema mcp-go could not even produce, one whose x-mcp-header
// annotation is invalid (mcp-go's server would refuse to register it).
const handmadeTools = `{"tools":[` +
	`{"name":"good","inputSchema":{"type":"object","anyOf":[{"required":["a"]},{"required":["b"]}],` +
	`"properties":{"a":{"type":"string","x-mcp-header":"A-Value"},"b":{"type":["integer","null"]}},"x-extra":[1,{"z":null}]}},` +
	`{"name":"bad","inputSchema":{"type":"object","properties":{"o":{"type":"object","x-mcp-header":"Obj"}}}}]}`

// handmadePrompts are the two pages of the handmade server's prompts/list:
// fields mcp-go's types lack or would drop, and a false "required". The
// second page also lists null, a string and an array, which are no
// definitions and must be left out.
var handmadePrompts = []string{
	`{"name":"first","arguments":[{"name":"a","required":false},{"name":"b","x-vendor":{"k":[1,2.50]}}],"x-top":"kept <&>"}`,
	`{"name":"second","title":"Second","description":"Say \u00e9","_meta":{"up/k":1}}`,
}

// handmadeServe is a minimal legacy stdio MCP server written by hand. With
// loop, every tools/list page names the same next cursor.
func handmadeServe(r io.Reader, w io.Writer, loop bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Cursor string `json:"cursor"`
			} `json:"params"`
		}
		if json.Unmarshal(sc.Bytes(), &msg) != nil || msg.ID == nil {
			continue // notifications
		}
		var reply string
		switch msg.Method {
		case "initialize":
			reply = `"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"prompts":{}},"serverInfo":{"name":"handmade","version":"0"}}`
		case "tools/list":
			reply = `"result":` + handmadeTools
			if loop {
				reply = strings.TrimSuffix(reply, "}") + `,"nextCursor":"again"}`
			}
		case "tools/call":
			reply = `"result":{"content":[{"type":"text","text":"ok"}]}`
		case "prompts/list":
			if msg.Params.Cursor == "" {
				reply = `"result":{"prompts":[` + handmadePrompts[0] + `],"nextCursor":"two"}`
			} else {
				reply = `"result":{"prompts":[` + handmadePrompts[1] + `,null,"p",[]]}`
			}
		default:
			reply = `"error":{"code":-32601,"message":"method not found"}`
		}
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,%s}`+"\n", msg.ID, reply)
	}
}

// ident is what the whoami tool returns.
type ident struct {
	Pid  int `json:"pid"`
	Pgid int `json:"pgid"`
}

// selfPath is the test binary, run as a server through envServerMode.
func selfPath(t testing.TB) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// stdioConfig runs the test binary directly as a stdio server in mode.
func stdioConfig(t testing.TB, name, mode string) *configs.Upstream {
	return &configs.Upstream{
		Name:            name,
		Transport:       configs.TransportStdio,
		Command:         selfPath(t),
		Env:             map[string]string{envServerMode: mode},
		ConnectTimeout:  10 * time.Second,
		CallTimeout:     30 * time.Second,
		MaxMessageBytes: 16 << 20,
	}
}

// fastOptions shortens the shutdown waits and captures logs.
func fastOptions(logs *logSink) Options {
	return Options{
		Logger:         slog.New(logs),
		StdinCloseWait: 300 * time.Millisecond,
		TermWait:       500 * time.Millisecond,
	}
}

// startUpstream starts u and registers its Close.
func startUpstream(t testing.TB, u *Upstream) {
	t.Helper()
	t.Cleanup(func() {
		if err := u.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := u.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
}

func toolNames(cat *Catalog) []string {
	var out []string
	for _, t := range cat.Tools {
		out = append(out, t.Name)
	}
	slices.Sort(out)
	return out
}

func callText(t *testing.T, u *Upstream, tool string, args any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var req mcp.CallToolRequest
	req.Params.Name = tool
	req.Params.Arguments = args
	res, err := u.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("CallTool(%s): %v", tool, err)
	}
	return resultText(t, res)
}

func resultText(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if res.IsError || len(res.Content) != 1 {
		t.Fatalf("unexpected result %+v", res)
	}
	tc, ok := mcp.AsTextContent(res.Content[0])
	if !ok {
		t.Fatalf("not text content: %#v", res.Content[0])
	}
	return tc.Text
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// logSink is a slog.Handler keeping every record's message and attributes.
type logSink struct {
	mu      sync.Mutex // of the root sink
	records []map[string]string
	attrs   []slog.Attr
	parent  *logSink // nil for the root
}

func (s *logSink) Enabled(context.Context, slog.Level) bool { return true }

func (s *logSink) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{"msg": r.Message, "level": r.Level.String()}
	for _, a := range s.attrs {
		m[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	root := s.root()
	root.mu.Lock()
	root.records = append(root.records, m)
	root.mu.Unlock()
	return nil
}

func (s *logSink) WithAttrs(as []slog.Attr) slog.Handler {
	return &logSink{attrs: append(slices.Clone(s.attrs), as...), parent: s.root()}
}

func (s *logSink) WithGroup(string) slog.Handler { return s }

func (s *logSink) root() *logSink {
	if s.parent != nil {
		return s.parent
	}
	return s
}

// find returns the records for which match holds.
func (s *logSink) find(match func(map[string]string) bool) []map[string]string {
	root := s.root()
	root.mu.Lock()
	defer root.mu.Unlock()
	var out []map[string]string
	for _, r := range root.records {
		if match(r) {
			out = append(out, r)
		}
	}
	return out
}

// lockedWriter serializes writes from the stdio server and the initialize
// refusals of serveModernOnly.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// serveModernOnly answers initialize with an unsupported-version error and
// passes every other message to the test server, like a server that speaks
// only 2026-07-28.
func serveModernOnly() int {
	pr, pw := io.Pipe()
	out := &lockedWriter{w: os.Stdout}
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if json.Unmarshal(sc.Bytes(), &m) == nil && m.Method == "initialize" {
				fmt.Fprintf(out, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32602,"message":"unsupported protocol version: this server speaks 2026-07-28 only"}}`+"\n", m.ID)
				continue
			}
			pw.Write(append(sc.Bytes(), '\n'))
		}
		pw.Close()
	}()
	if err := server.NewStdioServer(newTestServer()).Listen(context.Background(), pr, out); err != nil {
		fmt.Fprintln(os.Stderr, "test server:", err)
		return 1
	}
	return 0
}

// BenchmarkStdioCall measures one small tools/call at a time to a stdio
// child (the handwritten server, which costs next to nothing), for
// viewmux's own cost per call on a stdio upstream: framing, the engine,
// the answer's parse (-cpuprofile, -memprofile).
func BenchmarkStdioCall(b *testing.B) {
	u := New(stdioConfig(b, "bench", "handmade"), fastOptions(&logSink{}))
	startUpstream(b, u)
	ctx := context.Background()
	req := Request{Method: "tools/call", Target: "echo", Params: json.RawMessage(`{"name":"echo","arguments":{"x":1}}`)}
	b.ReportAllocs()
	for b.Loop() {
		res, err := u.Send(ctx, req)
		if err != nil || !strings.Contains(string(res), `"ok"`) {
			b.Fatalf("Send = %s, %v", res, err)
		}
	}
}
