//go:build unix

package protocol

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// These tests check where an upstream's server→client requests go: never to a session that did not cause them. The upstream is
// lateask, a stdio server whose sampling request can come after the call
// that caused it finished, while another session's call is in flight.

// lateAskBinary builds ./lateask once per test run.
func lateAskBinary(t testing.TB) string {
	t.Helper()
	return itest.Fixture(t, "./lateask")
}

func lateAskConfig(t testing.TB, scope string) string {
	return fmt.Sprintf("[upstreams.late]\ncommand = %s\nrequired = true\nscope = %q\n", itest.TomlString(lateAskBinary(t)), scope)
}

// srqClient is one client session that answers sampling requests with its
// own reply and counts them.
type srqClient interface {
	call(t *testing.T, tool string) (text string, isError bool)
	asked() []string // the sampling questions it was asked
	close()
}

// srqSampler answers sampling requests with reply.
type srqSampler struct {
	reply string
	mu    sync.Mutex
	got   []string
}

func (s *srqSampler) record(question string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, question)
	return s.reply
}

func (s *srqSampler) asked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

func (s *srqSampler) CreateMessage(_ context.Context, req mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
	q := ""
	if len(req.Messages) > 0 {
		if tc, ok := mcp.AsTextContent(req.Messages[0].Content); ok {
			q = tc.Text
		}
	}
	return &mcp.CreateMessageResult{Model: "test", SamplingMessage: mcp.SamplingMessage{
		Role: mcp.RoleAssistant, Content: mcp.NewTextContent(s.record(q))}}, nil
}

// srqHTTP is a session on /mcp, through mcp-go's client.
type srqHTTP struct {
	*srqSampler
	c *client.Client
}

func openSrqHTTP(t *testing.T, url, reply string) *srqHTTP {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := &srqSampler{reply: reply}
	c, _ := itest.EraConnect(t, ctx, url, client.WithProtocolVersion(mcp.LATEST_LEGACY_PROTOCOL_VERSION), client.WithSamplingHandler(s))
	return &srqHTTP{srqSampler: s, c: c}
}

func (h *srqHTTP) call(t *testing.T, tool string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var req mcp.CallToolRequest
	req.Params.Name = tool
	res, err := h.c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("/mcp: tools/call %s: %v", tool, err)
	}
	return itest.EraText(res), res.IsError
}

func (h *srqHTTP) close() { h.c.Close() }

// srqWS is a session on /ws: raw JSON-RPC frames, sampling requests
// answered as they come.
type srqWS struct {
	*srqSampler
	conn   *websocket.Conn
	cancel context.CancelFunc
	mu     sync.Mutex
	next   int
	wait   map[string]chan json.RawMessage
	done   chan struct{}
}

func openSrqWS(t *testing.T, url, reply string) *srqWS {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	dialCtx, dialCancel := context.WithTimeout(ctx, 10*time.Second)
	defer dialCancel()
	conn, _, err := websocket.Dial(dialCtx, url, &websocket.DialOptions{Subprotocols: []string{"mcp"}})
	if err != nil {
		cancel()
		t.Fatalf("websocket %s: %v", url, err)
	}
	conn.SetReadLimit(16 << 20)
	w := &srqWS{srqSampler: &srqSampler{reply: reply}, conn: conn, cancel: cancel,
		wait: make(map[string]chan json.RawMessage), done: make(chan struct{})}
	go w.read(ctx)
	t.Cleanup(w.close)
	if _, err := w.request("initialize", map[string]any{
		"protocolVersion": mcp.LATEST_LEGACY_PROTOCOL_VERSION,
		"capabilities":    map[string]any{"sampling": map[string]any{}},
		"clientInfo":      map[string]any{"name": "serverreq-test", "version": "1"},
	}); err != nil {
		t.Fatalf("/ws initialize: %v", err)
	}
	w.write(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	return w
}

func (w *srqWS) write(msg any) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return w.conn.Write(ctx, websocket.MessageText, b)
}

// read answers sampling requests and hands responses to their waiters.
func (w *srqWS) read(ctx context.Context) {
	defer close(w.done)
	for {
		_, b, err := w.conn.Read(ctx)
		if err != nil {
			return
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Messages []struct {
					Content struct{ Text string } `json:"content"`
				} `json:"messages"`
			} `json:"params"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		switch {
		case m.Method == "sampling/createMessage" && len(m.ID) > 0:
			q := ""
			if len(m.Params.Messages) > 0 {
				q = m.Params.Messages[0].Content.Text
			}
			reply := w.record(q)
			w.write(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]any{
				"model": "test", "role": "assistant", "content": map[string]any{"type": "text", "text": reply}}})
		case m.Method == "" && len(m.ID) > 0:
			w.mu.Lock()
			ch := w.wait[string(m.ID)]
			delete(w.wait, string(m.ID))
			w.mu.Unlock()
			if ch != nil {
				ch <- b
			}
		}
	}
}

func (w *srqWS) request(method string, params any) (json.RawMessage, error) {
	w.mu.Lock()
	w.next++
	n := w.next
	ch := make(chan json.RawMessage, 1)
	w.wait[strconv.Itoa(n)] = ch
	w.mu.Unlock()
	if err := w.write(map[string]any{"jsonrpc": "2.0", "id": n, "method": method, "params": params}); err != nil {
		return nil, err
	}
	select {
	case b := <-ch:
		var r struct {
			Result json.RawMessage `json:"result"`
			Error  *itest.RPCError `json:"error"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, err
		}
		if r.Error != nil {
			return nil, fmt.Errorf("error %d: %s", r.Error.Code, r.Error.Message)
		}
		return r.Result, nil
	case <-w.done:
		return nil, fmt.Errorf("the connection ended before the answer to %s", method)
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("no answer to %s within 30s", method)
	}
}

func (w *srqWS) call(t *testing.T, tool string) (string, bool) {
	t.Helper()
	raw, err := w.request("tools/call", map[string]any{"name": tool, "arguments": map[string]any{}})
	if err != nil {
		t.Fatalf("/ws: tools/call %s: %v", tool, err)
	}
	var res struct {
		Content []struct{ Text string } `json:"content"`
		IsError bool                    `json:"isError"`
	}
	if err := json.Unmarshal(raw, &res); err != nil || len(res.Content) == 0 {
		t.Fatalf("/ws: tools/call %s: result %s", tool, raw)
	}
	return res.Content[0].Text, res.IsError
}

func (w *srqWS) close() {
	w.conn.Close(websocket.StatusNormalClosure, "")
	w.cancel()
	<-w.done
}

// lateChildren returns the live lateask processes viewmux started.
func lateChildren(t *testing.T, mux *itest.Mux) []itest.Proc {
	t.Helper()
	ps, err := itest.Descendants(mux.PID())
	if err != nil {
		t.Fatal(err)
	}
	var out []itest.Proc
	for _, p := range ps {
		if p.Comm == "lateask" && p.State != 'Z' {
			out = append(out, p)
		}
	}
	return out
}

// waitChildren polls until viewmux has n lateask children, and returns them.
func waitChildren(t *testing.T, mux *itest.Mux, n int) []itest.Proc {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ps := lateChildren(t, mux)
		if len(ps) == n {
			return ps
		}
		if time.Now().After(deadline) {
			t.Fatalf("viewmux has %d lateask children, want %d:\n%s", len(ps), n, itest.DescribeProcs(ps))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServerRequestNeverReachesAnotherSession is issue 9's item 5: on a
// shared stdio upstream, a sampling request that the attacker's finished
// call caused, sent while the victim's call is in flight, must not reach
// the victim, and the upstream gets an error that says what to configure.
func TestServerRequestNeverReachesAnotherSession(t *testing.T) {
	itest.RequireProc(t)
	mux := itest.StartMux(t, lateAskConfig(t, "shared"))
	for _, door := range []string{"mcp", "ws"} {
		t.Run("victim on /"+door, func(t *testing.T) {
			attacker := openSrqHTTP(t, mux.URL(), "the attacker's answer")
			defer attacker.close()
			var victim srqClient
			if door == "mcp" {
				victim = openSrqHTTP(t, mux.URL(), "the victim's answer")
			} else {
				victim = openSrqWS(t, "ws://"+mux.Addr+"/ws", "the victim's answer")
			}
			defer victim.close()

			if text, _ := attacker.call(t, "late__arm"); text != "armed" {
				t.Fatalf("late__arm = %q", text)
			}
			// The attacker's call has been answered: only the victim's is
			// in flight when the upstream asks.
			text, _ := victim.call(t, "late__hold")
			if got := victim.asked(); len(got) != 0 {
				t.Errorf("the victim was asked %q, for a call of another session", got)
			}
			if got := attacker.asked(); len(got) != 0 {
				t.Errorf("the attacker was asked %q after its call had ended", got)
			}
			if !strings.HasPrefix(text, "refused: ") {
				t.Fatalf("the upstream's request was %q, want it refused", text)
			}
			for _, want := range []string{`scope = "session"`, "[upstreams.late]", "cannot tell which client session"} {
				if !strings.Contains(text, want) {
					t.Errorf("the upstream's error %q does not say %s", text, want)
				}
			}
		})
	}
	if !strings.Contains(mux.Stderr(), "server→client request refused") {
		t.Errorf("viewmux did not log the refusal:\n%s", mux.Stderr())
	}
}

// TestSessionScopedUpstream checks scope = "session": each
// session that uses the upstream gets its own child, opened on first use
// (once, however many calls race to open it), and its server→client
// requests reach that session; a stateless request uses the shared child;
// a session's end ends its child.
func TestSessionScopedUpstream(t *testing.T) {
	itest.RequireProc(t)
	mux := itest.StartMux(t, lateAskConfig(t, "session"))
	shared := waitChildren(t, mux, 1)[0].PID

	a := openSrqHTTP(t, mux.URL(), "answer for A")
	b := openSrqWS(t, "ws://"+mux.Addr+"/ws", "answer for B")
	if n := len(lateChildren(t, mux)); n != 1 {
		t.Errorf("%d lateask children after two sessions opened without using it, want 1 (the shared one)", n)
	}

	// Concurrent first uses of one session open one child.
	pidOf := func(c srqClient) []int {
		var wg sync.WaitGroup
		out := make([]int, 4)
		for i := range out {
			wg.Go(func() {
				text, _ := c.call(t, "late__pid")
				out[i], _ = strconv.Atoi(text)
			})
		}
		wg.Wait()
		return out
	}
	pa, pb := pidOf(a), pidOf(b)
	for _, ps := range [][]int{pa, pb} {
		for _, p := range ps {
			if p != ps[0] || p == 0 {
				t.Errorf("one session's calls went to children %v, want one child", ps)
			}
		}
	}
	if pa[0] == pb[0] || pa[0] == shared || pb[0] == shared {
		t.Errorf("children: A %d, B %d, shared %d: want three different ones", pa[0], pb[0], shared)
	}
	waitChildren(t, mux, 3)

	// A stateless request has no session: it uses the shared child.
	r := (&itest.RecModern{URL: mux.URL()}).Do(t, "tools/call", `{"name":"late__pid","arguments":{}}`)
	if !strings.Contains(string(r.Msg.Result), strconv.Quote(strconv.Itoa(shared))) {
		t.Errorf("a stateless late__pid answered %s, want the shared child %d", r.Raw, shared)
	}

	// Each session's sampling reaches that session.
	for _, tc := range []struct {
		name string
		c    srqClient
		want string
	}{{"A", a, "sampled: answer for A"}, {"B", b, "sampled: answer for B"}} {
		if text, isErr := tc.c.call(t, "late__ask"); text != tc.want || isErr {
			t.Errorf("%s: late__ask = %q (isError %v), want %q", tc.name, text, isErr, tc.want)
		}
	}
	// Arming A's child does not arm B's; A's own late request reaches A.
	a.call(t, "late__arm")
	if text, _ := b.call(t, "late__hold"); text != "not armed" {
		t.Errorf("B's late__hold = %q, want %q: A's child is not B's", text, "not armed")
	}
	if text, _ := a.call(t, "late__hold"); text != "answered: answer for A" {
		t.Errorf("A's late__hold = %q, want A's own answer", text)
	}
	if got := a.asked(); len(got) != 2 {
		t.Errorf("A was asked %q, want its two questions", got)
	}
	if got := b.asked(); len(got) != 1 || got[0] != "the question of this call" {
		t.Errorf("B was asked %q, want its one question", got)
	}

	// A session's end ends its child, and only its child.
	a.close()
	left := waitChildren(t, mux, 2)
	if slicesHasPID(left, pa[0]) || !slicesHasPID(left, pb[0]) {
		t.Errorf("after A's DELETE the children are\n%s want B's %d and the shared %d", itest.DescribeProcs(left), pb[0], shared)
	}
	b.close()
	left = waitChildren(t, mux, 1)
	if left[0].PID != shared {
		t.Errorf("after both sessions ended the child left is %d, want the shared %d", left[0].PID, shared)
	}
}

// TestSessionScopedStdioDoor checks that the stdio door's one session gets
// its own child, and that the child ends with the door's session.
func TestSessionScopedStdioDoor(t *testing.T) {
	itest.RequireProc(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "viewmux.toml")
	if err := os.WriteFile(cfg, []byte(lateAskConfig(t, "session")), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, itest.MuxBinary(t), "serve", "--stdio", "--config", cfg)
	marker := itest.RandomHex(t, 12)
	cmd.Env = append(itest.EnvWithout(os.Environ(), "VIEWMUX_CONFIG", itest.MarkerEnv), itest.MarkerEnv+"="+marker)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = &itest.SyncBuffer{}
	t.Cleanup(func() { itest.KillMarked(marker) })
	tr, err := newStdioPipes(cmd)
	if err != nil {
		t.Fatal(err)
	}
	s := &srqSampler{reply: "answer over stdio"}
	c := client.NewClient(tr, client.WithSamplingHandler(s), client.WithProtocolVersion(mcp.LATEST_LEGACY_PROTOCOL_VERSION))
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var init mcp.InitializeRequest
	init.Params.ClientInfo = mcp.Implementation{Name: "serverreq-test", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatalf("initialize: %v\n%s", err, cmd.Stderr)
	}
	var req mcp.CallToolRequest
	req.Params.Name = "late__ask"
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := itest.EraText(res); got != "sampled: answer over stdio" {
		t.Errorf("late__ask = %q, want the stdio client's answer", got)
	}
	kids := lateStdioChildren(t, cmd.Process.Pid)
	if len(kids) != 2 {
		t.Errorf("viewmux --stdio has %d lateask children, want 2 (shared and the session's):\n%s", len(kids), itest.DescribeProcs(kids))
	}
	c.Close() // closes viewmux's stdin: the session, and viewmux, end
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("viewmux --stdio: %v\n%s", err, cmd.Stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("viewmux --stdio did not exit after stdin closed")
	}
	if left := itest.WaitNoMarked(marker, 10*time.Second); len(left) != 0 {
		t.Errorf("left behind:\n%s", itest.DescribeProcs(left))
	}
}

func lateStdioChildren(t *testing.T, pid int) []itest.Proc {
	t.Helper()
	ps, err := itest.Descendants(pid)
	if err != nil {
		t.Fatal(err)
	}
	var out []itest.Proc
	for _, p := range ps {
		if p.Comm == "lateask" && p.State != 'Z' {
			out = append(out, p)
		}
	}
	return out
}

func slicesHasPID(ps []itest.Proc, pid int) bool {
	for _, p := range ps {
		if p.PID == pid {
			return true
		}
	}
	return false
}

// newStdioPipes starts cmd and returns an mcp-go transport speaking to its
// stdin and stdout.
func newStdioPipes(cmd *exec.Cmd) (*transport.Stdio, error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return transport.NewIO(stdout, stdin, io.NopCloser(strings.NewReader(""))), nil
}
