//go:build unix

package fidelity

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	gosdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// fidTapLimit is the largest message the tap keeps; listings are far
// smaller, and the 50 MB results of the matrix must not be copied.
const fidTapLimit = 4 << 20

// fidTap records, per request id, the method the client sent and the raw
// result that came back.
type fidTap struct {
	mu      sync.Mutex
	methods map[string]string          // request id (JSON text) → method
	results map[string]json.RawMessage // request id → raw result
	order   []string                   // ids of results, in arrival order
}

func newFidTap() *fidTap {
	return &fidTap{methods: map[string]string{}, results: map[string]json.RawMessage{}}
}

// sent records one outgoing message (or batch).
func (tp *fidTap) sent(b []byte) {
	if len(b) > fidTapLimit {
		return
	}
	for _, m := range fidSplitBatch(b) {
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(m, &msg) != nil || len(msg.ID) == 0 || msg.Method == "" {
			continue
		}
		tp.mu.Lock()
		tp.methods[string(msg.ID)] = msg.Method
		tp.mu.Unlock()
	}
}

// received records one incoming message (or batch).
func (tp *fidTap) received(b []byte) {
	if len(b) > fidTapLimit {
		return
	}
	for _, m := range fidSplitBatch(b) {
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Result json.RawMessage `json:"result"`
		}
		if json.Unmarshal(m, &msg) != nil || len(msg.ID) == 0 || msg.Method != "" || len(msg.Result) == 0 {
			continue
		}
		tp.mu.Lock()
		tp.results[string(msg.ID)] = bytes.Clone(msg.Result)
		tp.order = append(tp.order, string(msg.ID))
		tp.mu.Unlock()
	}
}

// resultsOf returns the raw results of every request of method, in arrival
// order, and forgets them.
func (tp *fidTap) resultsOf(method string) []json.RawMessage {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	var out []json.RawMessage
	keep := tp.order[:0]
	for _, id := range tp.order {
		if tp.methods[id] == method {
			out = append(out, tp.results[id])
			delete(tp.results, id)
			continue
		}
		keep = append(keep, id)
	}
	tp.order = keep
	return out
}

func fidSplitBatch(b []byte) []json.RawMessage {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		var batch []json.RawMessage
		if json.Unmarshal(b, &batch) == nil {
			return batch
		}
		return nil
	}
	return []json.RawMessage{b}
}

// fidTapRT taps HTTP: request bodies as sent, and response bodies (JSON or
// event streams) as the SDK reads them.
type fidTapRT struct{ tap *fidTap }

func (rt fidTapRT) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Method == http.MethodPost {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		rt.tap.sent(b)
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	ct := resp.Header.Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "text/event-stream"):
		resp.Body = &fidTeeBody{rc: resp.Body, feed: (&fidSSEParser{tap: rt.tap}).feed}
	case strings.HasPrefix(ct, "application/json"):
		var buf bytes.Buffer
		over := false
		resp.Body = &fidTeeBody{rc: resp.Body, feed: func(p []byte, eof bool) {
			if !over {
				buf.Write(p)
				over = buf.Len() > fidTapLimit
			}
			if eof && !over {
				rt.tap.received(buf.Bytes())
			}
		}}
	}
	return resp, nil
}

// fidTeeBody passes a body through, feeding every chunk read (and, once,
// the end) to feed.
type fidTeeBody struct {
	rc   io.ReadCloser
	feed func(p []byte, eof bool)
	done bool
}

func (b *fidTeeBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 || (err == io.EOF && !b.done) {
		b.done = b.done || err == io.EOF
		b.feed(p[:n], err == io.EOF)
	}
	return n, err
}

func (b *fidTeeBody) Close() error { return b.rc.Close() }

// fidSSEParser turns an event stream, fed in chunks, into the data of its
// events; data past fidTapLimit is dropped rather than held.
type fidSSEParser struct {
	tap     *fidTap
	line    []byte
	data    []byte
	skipped bool
}

func (s *fidSSEParser) feed(p []byte, _ bool) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(s.line) <= fidTapLimit {
				s.line = append(s.line, p...)
			} else {
				s.skipped = true
			}
			return
		}
		if len(s.line) <= fidTapLimit {
			s.line = append(s.line, p[:i]...)
		} else {
			s.skipped = true
		}
		p = p[i+1:]
		s.endLine(bytes.TrimSuffix(s.line, []byte("\r")))
		s.line = s.line[:0]
	}
}

func (s *fidSSEParser) endLine(line []byte) {
	switch {
	case len(line) == 0:
		if len(s.data) > 0 && !s.skipped {
			s.tap.received(s.data)
		}
		s.data, s.skipped = s.data[:0], false
	case bytes.HasPrefix(line, []byte("data:")):
		d := bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))
		if len(s.data) > 0 {
			s.data = append(s.data, '\n')
		}
		if len(s.data)+len(d) > fidTapLimit {
			s.skipped = true
			return
		}
		s.data = append(s.data, d...)
	}
}

// fidWSTransport is an MCP client transport over websocket (subprotocol
// "mcp", one message per text frame), which the Go SDK does not have.
type fidWSTransport struct {
	url string
	tap *fidTap
}

func (w *fidWSTransport) Connect(ctx context.Context) (gosdk.Connection, error) {
	conn, _, err := websocket.Dial(ctx, w.url, &websocket.DialOptions{Subprotocols: []string{"mcp"}})
	if err != nil {
		return nil, err
	}
	conn.SetReadLimit(256 << 20)
	return &fidWSConn{conn: conn, tap: w.tap}, nil
}

type fidWSConn struct {
	conn *websocket.Conn
	tap  *fidTap
	once sync.Once
}

func (c *fidWSConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	_, b, err := c.conn.Read(ctx)
	if err != nil {
		return nil, err
	}
	c.tap.received(b)
	return jsonrpc.DecodeMessage(b)
}

func (c *fidWSConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	b, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	c.tap.sent(b)
	return c.conn.Write(ctx, websocket.MessageText, b)
}

func (c *fidWSConn) Close() error {
	c.once.Do(func() { _ = c.conn.Close(websocket.StatusNormalClosure, "") })
	return nil
}

func (c *fidWSConn) SessionID() string { return "" }

// fidLineTap feeds newline-delimited messages passing through to a tap
// function, holding at most fidTapLimit of one line.
type fidLineTap struct {
	f    func([]byte)
	line []byte
	over bool
}

func (l *fidLineTap) feed(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if !l.over && len(l.line)+len(chunk) <= fidTapLimit {
			l.line = append(l.line, chunk...)
		} else {
			l.over = true
		}
		if i < 0 {
			return
		}
		if !l.over {
			l.f(l.line)
		}
		l.line, l.over = l.line[:0], false
		p = p[i+1:]
	}
}

type fidTapReader struct {
	r   io.ReadCloser
	tap *fidLineTap
}

func (r *fidTapReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.tap.feed(p[:n])
	return n, err
}

func (r *fidTapReader) Close() error { return r.r.Close() }

type fidTapWriter struct {
	w   io.WriteCloser
	tap *fidLineTap
}

func (w *fidTapWriter) Write(p []byte) (int, error) {
	w.tap.feed(p)
	return w.w.Write(p)
}

func (w *fidTapWriter) Close() error { return w.w.Close() }

// fidStdio starts cmd (in its own process group, with marker in its
// environment when not empty) and returns a transport over its stdin and
// stdout, and its stderr. At cleanup its stdin is closed and it must exit
// by itself within 15 s; then the group is killed whatever happened.
func fidStdio(t *testing.T, cmd *exec.Cmd, tap *fidTap) (gosdk.Transport, *itest.SyncBuffer, error) {
	t.Helper()
	stderr := &itest.SyncBuffer{}
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 2 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case err := <-exited:
			if err != nil && !t.Failed() {
				t.Logf("%s after stdin closed: %v", cmd.Path, err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("%s did not exit within 15s of stdin closing", strings.Join(cmd.Args, " "))
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // grandchildren left in the group, if any
		if t.Failed() {
			t.Logf("--- %s stderr ---\n%s", strings.Join(cmd.Args, " "), stderr.String())
		}
	})
	return &gosdk.IOTransport{
		Reader:        &fidTapReader{r: stdout, tap: &fidLineTap{f: tap.received}},
		Writer:        &fidTapWriter{w: stdin, tap: &fidLineTap{f: tap.sent}},
		MaxLineLength: -1,
	}, stderr, nil
}

// fidSession is one Go SDK client session and what it observed.
type fidSession struct {
	cs    *gosdk.ClientSession
	tap   *fidTap
	label string // distinguishes this session's answers from others'
	where string // door or upstream, for messages
	// stderr is viewmux's, for a session on the stdio door.
	stderr *itest.SyncBuffer

	mu sync.Mutex
	// delays holds, by a text a sampling question contains, how long the
	// client takes to answer it.
	delays   map[string]time.Duration
	progress map[string][]float64 // progress token → progress values, in arrival order
	logs     []string             // data of each log notification, as JSON
	sampled  []string             // text of the last message of each sampling request
	elicited []string             // message of each elicitation request
}

// fidAnswer is what a session answers to the sampling request whose last
// message is text.
func (s *fidSession) fidAnswer(text string) string {
	return fmt.Sprintf("answer of %s to: %s", s.label, text)
}

func (s *fidSession) options() *gosdk.ClientOptions {
	return &gosdk.ClientOptions{
		CreateMessageHandler: func(_ context.Context, req *gosdk.CreateMessageRequest) (*gosdk.CreateMessageResult, error) {
			text := ""
			if n := len(req.Params.Messages); n > 0 {
				if tc, ok := req.Params.Messages[n-1].Content.(*gosdk.TextContent); ok {
					text = tc.Text
				}
			}
			s.mu.Lock()
			s.sampled = append(s.sampled, text)
			var delay time.Duration
			for k, d := range s.delays {
				if strings.Contains(text, k) {
					delay = d
				}
			}
			s.mu.Unlock()
			time.Sleep(delay)
			return &gosdk.CreateMessageResult{Model: "fidelity-model", Role: "assistant", StopReason: "endTurn",
				Content: &gosdk.TextContent{Text: s.fidAnswer(text)}}, nil
		},
		ElicitationHandler: func(_ context.Context, req *gosdk.ElicitRequest) (*gosdk.ElicitResult, error) {
			s.mu.Lock()
			s.elicited = append(s.elicited, req.Params.Message)
			s.mu.Unlock()
			// Every required string property gets this session's name.
			var schema struct {
				Properties map[string]struct {
					Type string `json:"type"`
				} `json:"properties"`
				Required []string `json:"required"`
			}
			b, _ := json.Marshal(req.Params.RequestedSchema)
			_ = json.Unmarshal(b, &schema)
			content := map[string]any{}
			for _, name := range schema.Required {
				if schema.Properties[name].Type == "string" {
					content[name] = "ada-" + s.label
				}
			}
			return &gosdk.ElicitResult{Action: "accept", Content: content}, nil
		},
		ProgressNotificationHandler: func(_ context.Context, req *gosdk.ProgressNotificationClientRequest) {
			tok := fmt.Sprint(req.Params.ProgressToken)
			s.mu.Lock()
			s.progress[tok] = append(s.progress[tok], req.Params.Progress)
			s.mu.Unlock()
		},
		LoggingMessageHandler: func(_ context.Context, req *gosdk.LoggingMessageRequest) {
			b, _ := json.Marshal(req.Params.Data)
			s.mu.Lock()
			s.logs = append(s.logs, string(b))
			s.mu.Unlock()
		},
	}
}

// fidConnect connects a session through the transport that newTransport
// builds around the session's tap. It never fails the test: an error is
// the cell's result.
func fidConnect(ctx context.Context, label, where string, newTransport func(tap *fidTap) (gosdk.Transport, error)) (*fidSession, error) {
	s := &fidSession{tap: newFidTap(), label: label, where: where, progress: map[string][]float64{}, delays: map[string]time.Duration{}}
	tr, err := newTransport(s.tap)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	c := gosdk.NewClient(&gosdk.Implementation{Name: "viewmux-fidelity", Version: "1"}, s.options())
	// A legacy (initialize) session: the matrix is about what an upstream
	// sends in the middle of a call, which 2026-07-28 has no room for.
	cs, err := c.Connect(ctx, tr, &gosdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		return nil, fmt.Errorf("%s: connect: %w", where, err)
	}
	s.cs = cs
	return s, nil
}

func (s *fidSession) close() {
	if s != nil && s.cs != nil {
		_ = s.cs.Close()
	}
}

// fidHTTPClient is an HTTP client that taps into tap and never times out
// (streams last as long as their session).
func fidHTTPClient(tap *fidTap) *http.Client {
	return &http.Client{Transport: fidTapRT{tap: tap}}
}

// fidStreamable and fidSSE build the two HTTP client transports.
func fidStreamable(url string) func(*fidTap) (gosdk.Transport, error) {
	return func(tap *fidTap) (gosdk.Transport, error) {
		return &gosdk.StreamableClientTransport{Endpoint: url, HTTPClient: fidHTTPClient(tap), MaxRetries: -1, MaxEventSize: -1}, nil
	}
}

func fidSSE(url string) func(*fidTap) (gosdk.Transport, error) {
	return func(tap *fidTap) (gosdk.Transport, error) {
		return &gosdk.SSEClientTransport{Endpoint: url, HTTPClient: fidHTTPClient(tap), MaxEventSize: -1}, nil
	}
}

func fidWS(url string) func(*fidTap) (gosdk.Transport, error) {
	return func(tap *fidTap) (gosdk.Transport, error) {
		return &fidWSTransport{url: url, tap: tap}, nil
	}
}

// call calls tool with args, with progress token tok when not empty, and
// returns the text of its result; a JSON-RPC error or an isError result is
// an error carrying that text.
func (s *fidSession) call(ctx context.Context, tool string, args map[string]any, tok string) (string, error) {
	p := &gosdk.CallToolParams{Name: tool, Arguments: args}
	if tok != "" {
		p.SetProgressToken(tok)
	}
	res, err := s.cs.CallTool(ctx, p)
	if err != nil {
		return "", fmt.Errorf("%s: tools/call %s: %w", s.where, tool, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*gosdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	if res.IsError {
		return b.String(), fmt.Errorf("%s: tools/call %s: isError result: %s", s.where, tool, fidShort(b.String()))
	}
	return b.String(), nil
}

// progressOf returns the progress values the session got for tok.
func (s *fidSession) progressOf(tok string) []float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]float64(nil), s.progress[tok]...)
}

func (s *fidSession) logged() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.logs...)
}

func (s *fidSession) samplingAsked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.sampled...)
}

func (s *fidSession) elicitationAsked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.elicited...)
}

// fidShort cuts s for a message.
func fidShort(s string) string {
	if len(s) > 300 {
		return fmt.Sprintf("%s… (%d bytes)", s[:300], len(s))
	}
	return s
}

// fidWaitFor polls cond every 20 ms until it holds or d passes.
func fidWaitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var errFidNA = errors.New("not applicable")
