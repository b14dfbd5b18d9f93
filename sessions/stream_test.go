package sessions

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/sessions/grant"
)

// rpcMsg is any JSON-RPC message a test peer receives.
type rpcMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// peer is one test client of a stream front door: it sends raw messages
// and receives decoded ones.
type peer interface {
	send(t *testing.T, raw string)
	recv(t *testing.T) rpcMsg
}

// await reads messages until the one answering id, collecting every other
// message into seen (when not nil).
func await(t *testing.T, p peer, id any, seen *[]rpcMsg) rpcMsg {
	t.Helper()
	want := string(mustMarshal(id))
	for {
		m := p.recv(t)
		if string(m.ID) == want && m.Method == "" {
			return m
		}
		if seen != nil {
			*seen = append(*seen, m)
		}
	}
}

// rpc sends one request and returns its answer.
func rpc(t *testing.T, p peer, id int, method string, params any) rpcMsg {
	t.Helper()
	msg := map[string]any{"jsonrpc": "2.0", "id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	b, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	p.send(t, string(b))
	return await(t, p, id, nil)
}

// initializeAs runs the legacy handshake with the given client capabilities.
func initializeAs(t *testing.T, p peer, caps map[string]any) {
	t.Helper()
	m := rpc(t, p, 1, "initialize", map[string]any{
		"protocolVersion": "2025-11-25",
		"capabilities":    caps,
		"clientInfo":      map[string]any{"name": "stream-test", "version": "1"},
	})
	if m.Error != nil || len(m.Result) == 0 {
		t.Fatalf("initialize: %+v", m)
	}
	p.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

// toolNames lists tools through p.
func toolNames(t *testing.T, p peer, id int) []string {
	t.Helper()
	m := rpc(t, p, id, "tools/list", nil)
	var res struct {
		Tools []struct{ Name string } `json:"tools"`
	}
	if m.Error != nil || json.Unmarshal(m.Result, &res) != nil {
		t.Fatalf("tools/list: %+v %s", m.Error, m.Result)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	return names
}

// checkDoorBasics is what every front door must do identically: the
// profile's view, a call reaching the upstream, and a hidden tool refused by
// the gate without reaching it.
func checkDoorBasics(t *testing.T, up *upstreamServer, p peer) {
	t.Helper()
	initializeAs(t, p, map[string]any{})
	if got, want := strings.Join(toolNames(t, p, 2), ","), "up__tool_0000,up__tool_0002,up__tool_0004"; got != want {
		t.Fatalf("readonly view = %s, want %s", got, want)
	}
	m := rpc(t, p, 3, "tools/call", map[string]any{"name": "up__tool_0002", "arguments": map[string]any{"query": "x"}})
	if m.Error != nil || !strings.Contains(string(m.Result), `"text":"ok"`) {
		t.Fatalf("allowed call: %+v %s", m.Error, m.Result)
	}
	before := up.requests.Load()
	for i, name := range []string{"up__tool_0001", "no__such_tool"} {
		m = rpc(t, p, 4+i, "tools/call", map[string]any{"name": name, "arguments": map[string]any{"query": "x"}})
		if m.Error == nil || m.Error.Code != mcp.METHOD_NOT_FOUND || m.Error.Message != "Tool not found: "+name {
			t.Fatalf("call of %s: %+v %s, want -32601 Tool not found", name, m.Error, m.Result)
		}
	}
	if n := up.requests.Load() - before; n != 0 {
		t.Fatalf("refused calls reached the upstream %d times", n)
	}
}

// newDoorServer is a Server over a 6-tool upstream (even tools read-only)
// with a readonly profile plus extra config, served on a loopback listener.
func newDoorServer(t *testing.T, extra string) (*Server, *upstreamServer, *httptest.Server) {
	t.Helper()
	up := newUpstreamServer(t, 6)
	s := newBenchServer(t, up.http.URL, "[profiles.readonly]\nread_only = true\n[profiles.all]\n"+extra)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return s, up, hs
}

// slowUpstream is a real upstream whose "wait" tool blocks until its
// request is cancelled, reporting both moments.
type slowUpstream struct {
	url       string
	started   chan struct{}
	cancelled chan struct{}
}

func newSlowUpstream(t *testing.T) *slowUpstream {
	t.Helper()
	su := &slowUpstream{started: make(chan struct{}, 8), cancelled: make(chan struct{}, 8)}
	srv := server.NewMCPServer("slow", "1", server.WithToolCapabilities(true))
	srv.AddTool(mcp.NewTool("wait", mcp.WithReadOnlyHintAnnotation(true)), func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		su.started <- struct{}{}
		select {
		case <-ctx.Done():
			su.cancelled <- struct{}{}
			return nil, ctx.Err()
		case <-time.After(30 * time.Second):
			return mcp.NewToolResultText("waited"), nil
		}
	})
	srv.AddTool(mcp.NewTool("quick", mcp.WithReadOnlyHintAnnotation(true)), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("quick"), nil
	})
	hs := httptest.NewServer(server.NewStreamableHTTPServer(srv))
	t.Cleanup(hs.Close)
	su.url = hs.URL
	return su
}

// checkCancellation proves that requests run concurrently and that
// notifications/cancelled is read while a call runs: the call is cancelled
// at the upstream, gets no answer, and a later call is answered first.
func checkCancellation(t *testing.T, su *slowUpstream, p peer) {
	t.Helper()
	initializeAs(t, p, map[string]any{})
	p.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"up__wait","arguments":{}}}`)
	select {
	case <-su.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow call never reached the upstream")
	}
	// A second call on the same session is answered while the first runs.
	if m := rpc(t, p, 8, "tools/call", map[string]any{"name": "up__quick", "arguments": map[string]any{}}); m.Error != nil {
		t.Fatalf("concurrent call: %+v", m.Error)
	}
	p.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"test"}}`)
	select {
	case <-su.cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("cancelling the call did not cancel it at the upstream")
	}
	// The cancelled call must get no answer: ping twice, a moment apart,
	// and look at everything that came meanwhile.
	var seen []rpcMsg
	p.send(t, `{"jsonrpc":"2.0","id":9,"method":"ping"}`)
	await(t, p, 9, &seen)
	time.Sleep(100 * time.Millisecond)
	p.send(t, `{"jsonrpc":"2.0","id":10,"method":"ping"}`)
	await(t, p, 10, &seen)
	for _, m := range seen {
		if string(m.ID) == "7" {
			t.Fatalf("cancelled request was answered: %+v", m)
		}
	}
}

// sseEvents reads events from an SSE body.
type sseEvents struct {
	r *bufio.Reader
}

// next returns the next event's name and data, skipping comments.
func (e *sseEvents) next() (name, data string, err error) {
	var lines []string
	for {
		line, err := e.r.ReadString('\n')
		if err != nil {
			return "", "", err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if name == "" && lines == nil {
				continue
			}
			return name, strings.Join(lines, "\n"), nil
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			lines = append(lines, strings.TrimPrefix(line, "data: "))
		}
	}
}

// TestDispatchFastPathMatchesMCPGo checks that the pre-encoded listing a
// stream session gets equals what mcp-go answers for the same view.
func TestDispatchFastPathMatchesMCPGo(t *testing.T) {
	up := newUpstreamServer(t, 6)
	s := newBenchServer(t, up.http.URL, "[profiles.readonly]\nread_only = true\n")
	b, err := s.Resolver().ResolveLocal(grant.Selection{Profile: "readonly"})
	if err != nil {
		t.Fatal(err)
	}
	ss := s.newStreamSession(context.Background(), doorWS, b, frameWriterFunc(func([]byte) error { return nil }))
	defer ss.Close(nil)
	fast := s.dispatch(ss.ctx(), ss, []byte(`{"jsonrpc":"2.0","id":5,"method":"tools/list"}`))
	// A cursor takes the request to mcp-go.
	slow := s.dispatch(ss.ctx(), ss, []byte(`{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"cursor":""}}`))
	var a, c any
	if err := json.Unmarshal(fast, &a); err != nil {
		t.Fatalf("fast path: %v: %s", err, fast)
	}
	if err := json.Unmarshal(slow, &c); err != nil {
		t.Fatalf("mcp-go: %v: %s", err, slow)
	}
	if fa, sl := mustMarshal(a), mustMarshal(c); string(fa) != string(sl) {
		t.Fatalf("fast path differs from mcp-go:\nfast:   %.300s\nmcp-go: %.300s", fa, sl)
	}
	if got := s.dispatch(ss.ctx(), ss, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)); got != nil {
		t.Fatalf("a notification was answered: %s", got)
	}
	if got := string(s.dispatch(ss.ctx(), ss, []byte(`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"up__tool_0001"}}`))); !strings.Contains(got, `"code":-32601`) {
		t.Fatalf("hidden tool: %s", got)
	}
	if got := string(s.dispatch(ss.ctx(), ss, []byte(`{not json`))); !strings.Contains(got, `"code":-32700`) {
		t.Fatalf("malformed message: %s", got)
	}
}

type frameWriterFunc func([]byte) error

func (f frameWriterFunc) WriteFrame(b jsonrpc.Frame) error { return f(b.Bytes()) }

// TestServerToClientRequests drives sampling, elicitation and roots on a
// stream session: the request goes out with a session-unique id and the
// client's matching answer, or error, comes back to the asker.
func TestServerToClientRequests(t *testing.T) {
	s, _, hs := newDoorServer(t, "")
	p := dialWSPeer(t, hs, "?profile=readonly", nil)
	initializeAs(t, p, map[string]any{"sampling": map[string]any{}, "elicitation": map[string]any{}, "roots": map[string]any{}})
	ss := onlyStream(t, s)
	ctx := context.Background()

	type outcome struct {
		res json.RawMessage
		err error
	}
	tests := []struct {
		name   string
		method mcp.MCPMethod
		params any
		answer string // result JSON, or error object when it starts with "E"
		check  func(t *testing.T, o outcome)
	}{
		{"sampling", mcp.MethodSamplingCreateMessage, mcp.CreateMessageParams{
			Messages: []mcp.SamplingMessage{{Role: mcp.RoleUser, Content: mcp.NewTextContent("hi")}}, MaxTokens: 5},
			`{"role":"assistant","content":{"type":"text","text":"hello"},"model":"m"}`, func(t *testing.T, o outcome) {
				if o.err != nil || !strings.Contains(string(o.res), `"model":"m"`) || !strings.Contains(string(o.res), `"hello"`) {
					t.Fatalf("sampling = %s, %v", o.res, o.err)
				}
			}},
		{"elicitation", mcp.MethodElicitationCreate, mcp.ElicitationParams{Message: "name?", RequestedSchema: map[string]any{"type": "object"}},
			`{"action":"accept","content":{"name":"x"}}`, func(t *testing.T, o outcome) {
				if o.err != nil || !strings.Contains(string(o.res), `"action":"accept"`) {
					t.Fatalf("elicitation = %s, %v", o.res, o.err)
				}
			}},
		{"roots", mcp.MethodListRoots, nil, `{"roots":[{"uri":"file:///w","name":"w"}]}`, func(t *testing.T, o outcome) {
			if o.err != nil || !strings.Contains(string(o.res), `"file:///w"`) {
				t.Fatalf("roots = %s, %v", o.res, o.err)
			}
		}},
		{"client error", mcp.MethodListRoots, nil, `E{"code":-32603,"message":"no roots here"}`, func(t *testing.T, o outcome) {
			var ce *ClientError
			if !errors.As(o.err, &ce) || ce.Code != -32603 || ce.Message != "no roots here" || ce.Method != "roots/list" {
				t.Fatalf("error = %v, want the client's -32603", o.err)
			}
		}},
	}
	seenIDs := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan outcome, 1)
			go func() {
				res, err := ss.request(ctx, tt.method, tt.params)
				done <- outcome{res, err}
			}()
			m := p.recv(t)
			if m.Method != string(tt.method) || len(m.ID) == 0 {
				t.Fatalf("client got %+v, want a %s request", m, tt.method)
			}
			if seenIDs[string(m.ID)] {
				t.Fatalf("request id %s reused", m.ID)
			}
			seenIDs[string(m.ID)] = true
			if strings.HasPrefix(tt.answer, "E") {
				p.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":%s}`, m.ID, tt.answer[1:]))
			} else {
				p.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID, tt.answer))
			}
			select {
			case o := <-done:
				tt.check(t, o)
			case <-time.After(10 * time.Second):
				t.Fatal("no outcome")
			}
		})
	}

	t.Run("cancelled by the server", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := ss.request(cctx, mcp.MethodListRoots, nil)
			done <- err
		}()
		m := p.recv(t)
		cancel()
		if err := <-done; err == nil {
			t.Fatal("cancelled request returned no error")
		}
		n := p.recv(t)
		if n.Method != "notifications/cancelled" || !strings.Contains(string(n.Params), `"requestId":`+string(m.ID)) {
			t.Fatalf("client got %+v, want notifications/cancelled for %s", n, m.ID)
		}
	})
}

// onlyStream returns the server's one live stream session.
func onlyStream(t *testing.T, s *Server) *session {
	t.Helper()
	all := allStreams(s)
	if len(all) != 1 {
		t.Fatalf("%d stream sessions, want 1", len(all))
	}
	return all[0]
}

func allStreams(s *Server) []*session {
	return s.streams()
}

// waitStreams waits until the server has n live stream sessions.
func waitStreams(t *testing.T, s *Server, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(s.streams()) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d stream sessions, want %d", len(s.streams()), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// getStatus does a plain GET and returns its status, a header and body.
func getStatus(t *testing.T, url string, hdr http.Header) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	bufio.NewReader(resp.Body).WriteTo(&b)
	return resp.StatusCode, resp.Header, b.String()
}

// mustMarshal encodes test values whose encoding cannot fail.
func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("sessions: encoding %T: %v", v, err))
	}
	return b
}
