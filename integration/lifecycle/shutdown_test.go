//go:build unix

package lifecycle

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// On shutdown, calls in flight get a JSON-RPC error before
// connections close, and viewmux exits within shutdown_grace plus the
// children's kill steps; `serve --stdio` answers what it has read. And:
// a call that arrives while its upstream restarts gets a temporary error,
// never -32601.
//
// The calls run the demo server's slow_count with a progress token: its
// first progress notification comes at once, so a call whose progress
// arrived is known to be running upstream before the test signals viewmux.

const (
	sdGrace = 2 * time.Second
	// sdMargin is what the exit may take past the grace: the children's
	// kill steps and a loaded machine. It bounds behaviour, not speed.
	sdMargin = 10 * time.Second
)

// Arguments of slow_count: a slow call runs for 30s, far past the grace;
// a quick one for a second, within it.
var (
	sdSlowArgs  = map[string]any{"count": 4, "interval_ms": 10000}
	sdQuickArgs = map[string]any{"count": 3, "interval_ms": 500}
)

// sdConfig mounts the demo server with the test's shutdown grace.
func sdConfig(t *testing.T) string {
	return fmt.Sprintf("[server]\nshutdown_grace = %q\n\n%s", sdGrace.String(), itest.DemoUpstream(t, "demo"))
}

// sdAnswer is what a call got back: a JSON-RPC result or error, or, when
// the connection ended without one, Err.
type sdAnswer struct {
	Result json.RawMessage
	Error  *itest.RPCError
	Err    error
}

func (a sdAnswer) String() string {
	switch {
	case a.Err != nil:
		return "no answer: " + a.Err.Error()
	case a.Error != nil:
		return fmt.Sprintf("error %d %q", a.Error.Code, a.Error.Message)
	}
	return "result " + string(a.Result)
}

// sdCall is one tools/call the test made and waits on.
type sdCall struct {
	door     string
	id       int
	quick    bool          // expected to finish within the grace
	progress chan struct{} // closed at its first progress notification
	answer   chan sdAnswer // receives exactly one answer
	once     sync.Once
}

func newSDCall(door string, id int, quick bool) *sdCall {
	return &sdCall{door: door, id: id, quick: quick, progress: make(chan struct{}), answer: make(chan sdAnswer, 1)}
}

func (c *sdCall) progressed() { c.once.Do(func() { close(c.progress) }) }

func (c *sdCall) name() string { return fmt.Sprintf("%s call %d", c.door, c.id) }

// sdCallBody is a tools/call of demo__slow_count whose progress token is
// its id.
func sdCallBody(id int, args map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0", "id": id, "method": "tools/call",
		"params": map[string]any{"name": "demo__slow_count", "arguments": args, "_meta": map[string]any{"progressToken": id}},
	})
	return b
}

// sdFrame is a JSON-RPC message as the tests read it.
type sdFrame struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		ProgressToken json.RawMessage `json:"progressToken"`
	} `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *itest.RPCError `json:"error"`
}

// sdRouter hands a stream's frames to the calls they belong to.
type sdRouter struct {
	mu    sync.Mutex
	calls map[string]*sdCall
}

func (r *sdRouter) add(c *sdCall) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls = make(map[string]*sdCall)
	}
	r.calls[fmt.Sprint(c.id)] = c
}

// frame routes one message; it reports a response that is not a call's.
func (r *sdRouter) frame(raw []byte) (other *sdFrame) {
	var f sdFrame
	if json.Unmarshal(raw, &f) != nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if f.Method == "notifications/progress" {
		if c := r.calls[string(f.Params.ProgressToken)]; c != nil {
			c.progressed()
		}
		return nil
	}
	if f.Method != "" || len(f.ID) == 0 {
		return nil
	}
	c := r.calls[string(f.ID)]
	if c == nil {
		return &f
	}
	delete(r.calls, string(f.ID))
	c.answer <- sdAnswer{Result: f.Result, Error: f.Error}
	return nil
}

// end answers every call still waiting: the stream closed without its
// answer.
func (r *sdRouter) end(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, c := range r.calls {
		c.answer <- sdAnswer{Err: fmt.Errorf("the %s closed without an answer", why)}
		delete(r.calls, id)
	}
}

// sdStream is a message-stream door (websocket, stdio) with the calls on it.
type sdStream struct {
	door    string
	send    func([]byte) error
	router  sdRouter
	replies chan *sdFrame // responses that are no call's (initialize)
}

// read routes frames from next until it fails.
func (s *sdStream) read(next func() ([]byte, error)) {
	for {
		raw, err := next()
		if err != nil {
			s.router.end(s.door + " stream")
			close(s.replies)
			return
		}
		if f := s.router.frame(raw); f != nil {
			s.replies <- f
		}
	}
}

// initialize runs the legacy handshake on the stream.
func (s *sdStream) initialize(t *testing.T) {
	t.Helper()
	if err := s.send([]byte(itest.InitializeBody())); err != nil {
		t.Fatalf("%s: initialize: %v", s.door, err)
	}
	select {
	case f, ok := <-s.replies:
		if !ok || f.Error != nil || f.Result == nil {
			t.Fatalf("%s: initialize answered %+v (stream open: %v)", s.door, f, ok)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no answer to initialize", s.door)
	}
	if err := s.send([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)); err != nil {
		t.Fatalf("%s: notifications/initialized: %v", s.door, err)
	}
}

// call starts a call of slow_count on the stream.
func (s *sdStream) call(t *testing.T, id int, quick bool) *sdCall {
	t.Helper()
	args := sdSlowArgs
	if quick {
		args = sdQuickArgs
	}
	c, err := s.start(id, sdCallBody(id, args))
	if err != nil {
		t.Fatalf("%s: sending call %d: %v", s.door, id, err)
	}
	c.quick = quick
	return c
}

// start sends the request body, whose id is id, and returns the call
// waiting for its answer.
func (s *sdStream) start(id int, body []byte) (*sdCall, error) {
	c := newSDCall(s.door, id, false)
	s.router.add(c)
	return c, s.send(body)
}

// openSDWebsocket opens /ws of m; the connection is closed at cleanup.
func openSDWebsocket(t *testing.T, m *itest.Mux) *sdStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	conn, _, err := websocket.Dial(dctx, "ws://"+m.Addr+"/ws", &websocket.DialOptions{Subprotocols: []string{"mcp"}})
	if err != nil {
		t.Fatalf("websocket: %v", err)
	}
	conn.SetReadLimit(16 << 20)
	t.Cleanup(func() { conn.CloseNow() })
	s := &sdStream{door: "ws", replies: make(chan *sdFrame, 8), send: func(b []byte) error {
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		defer wcancel()
		return conn.Write(wctx, websocket.MessageText, b)
	}}
	go s.read(func() ([]byte, error) {
		_, b, err := conn.Read(ctx)
		return b, err
	})
	s.initialize(t)
	return s
}

// openSDSSE opens the legacy SSE door of m (GET /sse, POST /message); the
// stream is closed at cleanup.
func openSDSSE(t *testing.T, m *itest.Mux) *sdStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.Addr+"/sse", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /sse: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("GET /sse: %s", resp.Status)
	}
	t.Cleanup(func() { resp.Body.Close() })
	rd := bufio.NewReader(resp.Body)
	// next returns the next event's name and data.
	next := func() (string, []byte, error) {
		var event string
		var data []string
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return "", nil, err
			}
			line = strings.TrimRight(line, "\r\n")
			switch {
			case line == "" && len(data) > 0:
				return event, []byte(strings.Join(data, "\n")), nil
			case strings.HasPrefix(line, "event:"):
				event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
			case strings.HasPrefix(line, "data:"):
				data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
			}
		}
	}
	event, endpoint, err := next()
	if err != nil || event != "endpoint" {
		t.Fatalf("GET /sse: first event %q %q (%v), want the endpoint", event, endpoint, err)
	}
	post := "http://" + m.Addr + string(endpoint)
	s := &sdStream{door: "sse", replies: make(chan *sdFrame, 8), send: func(b []byte) error {
		r, err := http.Post(post, "application/json", bytes.NewReader(b))
		if err != nil {
			return err
		}
		defer r.Body.Close()
		if r.StatusCode != http.StatusAccepted {
			return fmt.Errorf("POST %s: %s", post, r.Status)
		}
		return nil
	}}
	go s.read(func() ([]byte, error) {
		_, data, err := next()
		return data, err
	})
	s.initialize(t)
	return s
}

// sdPost starts a tools/call on the /mcp session sess and reads its answer
// on a goroutine of its own.
func sdPost(t *testing.T, sess *itest.RawSession, id int, quick bool) *sdCall {
	t.Helper()
	args := sdSlowArgs
	if quick {
		args = sdQuickArgs
	}
	c := newSDCall("/mcp", id, quick)
	req, err := http.NewRequest(http.MethodPost, sess.URL, bytes.NewReader(sdCallBody(id, args)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", sess.ID)
	req.Header.Set("Mcp-Protocol-Version", itest.RawProtocolVersion)
	go func() {
		var r sdRouter
		r.add(c)
		defer r.end("/mcp response")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			b, _ := io.ReadAll(resp.Body)
			r.frame(b)
			return
		}
		rd := bufio.NewReader(resp.Body)
		var data []string
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\r\n")
			if line == "" {
				if len(data) > 0 {
					r.frame([]byte(strings.Join(data, "\n")))
				}
				data = nil
				continue
			}
			if v, ok := strings.CutPrefix(line, "data:"); ok {
				data = append(data, strings.TrimPrefix(v, " "))
			}
		}
	}()
	return c
}

// waitRunning waits until every call has had its first progress
// notification, that is, runs upstream.
func waitRunning(t *testing.T, calls []*sdCall) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for _, c := range calls {
		select {
		case <-c.progress:
		case a := <-c.answer:
			t.Fatalf("%s ended before the test could signal viewmux: %s", c.name(), a)
		case <-deadline:
			t.Fatalf("%s: no progress within 30s", c.name())
		}
	}
}

// checkAnswers collects every call's answer and checks it: a quick call
// has its result, every other call the shutdown error.
func checkAnswers(t *testing.T, calls []*sdCall) {
	t.Helper()
	deadline := time.After(sdGrace + sdMargin)
	for _, c := range calls {
		var a sdAnswer
		select {
		case a = <-c.answer:
		case <-deadline:
			t.Errorf("%s: still unanswered %v after the signal", c.name(), sdGrace+sdMargin)
			continue
		}
		switch {
		case c.quick && (a.Result == nil || !strings.Contains(string(a.Result), "counted to 3")):
			t.Errorf("%s (finishes within the grace): %s, want its result", c.name(), a)
		case !c.quick && (a.Error == nil || a.Error.Code != -32603 || !strings.Contains(a.Error.Message, "shutting down")):
			t.Errorf("%s (runs past the grace): %s, want JSON-RPC error -32603 \"…shutting down…\"", c.name(), a)
		}
	}
}

// TestShutdownAnswersCallsInFlight SIGTERMs a serving viewmux with calls in
// flight on /mcp, /ws and /sse: the calls that finish within shutdown_grace get
// their results, every other one a JSON-RPC error on its own connection,
// and viewmux exits 0 within the grace plus the kill steps.
func TestShutdownAnswersCallsInFlight(t *testing.T) {
	m := itest.StartMuxWith(t, itest.MuxOptions{Config: sdConfig(t), StopTimeout: sdGrace + sdMargin})
	sess := itest.OpenRawSession(t, m.URL(), nil)
	ws := openSDWebsocket(t, m)
	sse := openSDSSE(t, m)

	var calls []*sdCall
	for i := range 8 {
		calls = append(calls, sdPost(t, sess, 100+i, false))
	}
	calls = append(calls, sdPost(t, sess, 200, true))
	calls = append(calls, ws.call(t, 300, false), ws.call(t, 301, false), ws.call(t, 302, true))
	calls = append(calls, sse.call(t, 400, false), sse.call(t, 401, true))
	waitRunning(t, calls)

	start := time.Now()
	if err := m.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	checkAnswers(t, calls)
	code, ok := m.Wait(sdGrace + sdMargin)
	took := time.Since(start)
	if !ok {
		t.Fatalf("viewmux still running %v after SIGTERM (shutdown_grace %v)", took, sdGrace)
	}
	if code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	t.Logf("exited %v after SIGTERM (shutdown_grace %v)", took.Round(time.Millisecond), sdGrace)
}

// TestStdioAnswersCallsInFlight ends `viewmux serve --stdio` with calls in
// flight, by closing stdin and by SIGTERM: every request it read is
// answered (its result if it finishes within the grace, else the shutdown
// error) before it exits 0.
func TestStdioAnswersCallsInFlight(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "viewmux.toml")
	if err := os.WriteFile(cfgPath, []byte(sdConfig(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		end  func(cmd *exec.Cmd, stdin io.Closer) error
	}{
		{"stdin closed", func(_ *exec.Cmd, stdin io.Closer) error { return stdin.Close() }},
		{"SIGTERM", func(cmd *exec.Cmd, _ io.Closer) error { return cmd.Process.Signal(syscall.SIGTERM) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			marker := itest.RandomHex(t, 12)
			cmd := exec.Command(itest.MuxBinary(t), "serve", "--stdio", "--config", cfgPath)
			cmd.Dir = dir
			cmd.Env = append(itest.EnvWithout(os.Environ(), "VIEWMUX_CONFIG", itest.MarkerEnv), itest.MarkerEnv+"="+marker)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			cmd.WaitDelay = 2 * time.Second
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr itest.SyncBuffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			t.Cleanup(func() {
				select {
				case <-exited:
				default:
					syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				}
				if survivors := itest.WaitNoMarked(marker, 2*time.Second); len(survivors) > 0 {
					t.Errorf("processes started by viewmux --stdio survived it:\n%s", itest.DescribeProcs(survivors))
					itest.KillMarked(marker)
				}
				if t.Failed() {
					t.Logf("--- viewmux --stdio stderr ---\n%s", stderr.String())
				}
			})
			s := &sdStream{door: "stdio", replies: make(chan *sdFrame, 8), send: func(b []byte) error {
				_, err := stdin.Write(append(b, '\n'))
				return err
			}}
			sc := bufio.NewScanner(stdout)
			sc.Buffer(nil, 16<<20)
			read := make(chan struct{})
			go func() {
				defer close(read)
				s.read(func() ([]byte, error) {
					if sc.Scan() {
						return bytes.Clone(sc.Bytes()), nil
					}
					if sc.Err() != nil {
						return nil, sc.Err()
					}
					return nil, io.EOF
				})
			}()
			s.initialize(t)

			var calls []*sdCall
			for i := range 8 {
				calls = append(calls, s.call(t, 100+i, false))
			}
			calls = append(calls, s.call(t, 200, true))
			waitRunning(t, calls)

			start := time.Now()
			if err := tt.end(cmd, stdin); err != nil {
				t.Fatal(err)
			}
			checkAnswers(t, calls)
			<-read
			go func() { exited <- cmd.Wait() }()
			select {
			case err := <-exited:
				exited <- err
				if err != nil {
					t.Errorf("viewmux --stdio: %v, want exit status 0", err)
				}
			case <-time.After(sdGrace + sdMargin):
				t.Fatalf("viewmux --stdio still running %v after %s", time.Since(start), tt.name)
			}
			t.Logf("exited %v after %s (shutdown_grace %v)", time.Since(start).Round(time.Millisecond), tt.name, sdGrace)
		})
	}
}

// TestReloadRestartAnswersCalls reloads a config that changes an
// upstream, so that it restarts (its new command takes a second to
// start), while calls of its tools keep arriving on /mcp and on /ws (in
// bursts larger than a stream session's workers, so some wait in its
// queue) and some are in flight: no call is answered "Tool not found";
// each gets its result, the temporary "restarting" error, or, sent to the
// old child just before it was replaced, the error that says it may or
// may not have run.
func TestReloadRestartAnswersCalls(t *testing.T) {
	bin := itest.MuxBinary(t)
	before := fmt.Sprintf("[upstreams.demo]\ncommand = %q\nargs = [\"demo-server\", \"--name\", \"demo\"]\n", bin)
	after := fmt.Sprintf("[upstreams.demo]\ncommand = \"sh\"\nargs = [\"-c\", \"sleep 1; exec %s demo-server --name demo\"]\n", bin)
	m := itest.StartMux(t, before)
	path := filepath.Join(m.Dir, "viewmux.toml")
	sess := itest.OpenRawSession(t, m.URL(), nil)
	ws := openSDWebsocket(t, m)

	// Calls in flight on the old child when it is replaced.
	var inflight []*sdCall
	for i := range 4 {
		inflight = append(inflight, sdPost(t, sess, 100+i, false))
	}
	inflight = append(inflight, ws.call(t, 300, false), ws.call(t, 301, false))
	waitRunning(t, inflight)

	// Callers that keep calling through the reload.
	var mu sync.Mutex
	var ok, restarting, cut int
	var bad []string
	count := func(door string, a sdAnswer) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case a.Result != nil && a.Error == nil:
			ok++
		case a.Error != nil && a.Error.Code == -32603 && strings.Contains(a.Error.Message, "restarting"):
			restarting++
		case a.Error != nil && a.Error.Code == -32603 && strings.Contains(a.Error.Message, "after receiving the call; it may or may not have run"):
			// Sent to the old child just before it was replaced: it may
			// have run, so it is not "restarting, retry".
			cut++
		default:
			bad = append(bad, door+": "+a.String())
		}
	}
	stop := make(chan struct{})
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			client := &http.Client{Timeout: 30 * time.Second}
			for i := 0; !stopped(); i++ {
				body := itest.ToolsCallBody(t, 1000*(w+1)+i, "demo__echo", map[string]any{"text": "x"})
				req, _ := http.NewRequest(http.MethodPost, m.URL(), strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set("Mcp-Session-Id", sess.ID)
				req.Header.Set("Mcp-Protocol-Version", itest.RawProtocolVersion)
				var a sdAnswer
				resp, err := client.Do(req)
				if err != nil {
					a.Err = err
				} else {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					var f sdFrame
					if err := json.Unmarshal(itest.RPCPayload(resp.Header.Get("Content-Type"), b), &f); err != nil {
						a.Err = fmt.Errorf("HTTP %d %q: %v", resp.StatusCode, b, err)
					}
					a.Result, a.Error = f.Result, f.Error
				}
				count("/mcp", a)
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	wg.Go(func() {
		for id := 10000; !stopped(); {
			var burst []*sdCall
			for range 40 {
				id++
				c, err := ws.start(id, []byte(itest.ToolsCallBody(t, id, "demo__echo", map[string]any{"text": "x"})))
				if err != nil {
					count("/ws", sdAnswer{Err: err})
					return
				}
				burst = append(burst, c)
			}
			for _, c := range burst {
				select {
				case a := <-c.answer:
					count("/ws", a)
				case <-time.After(30 * time.Second):
					count("/ws", sdAnswer{Err: fmt.Errorf("call %d: no answer within 30s", c.id)})
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	time.Sleep(200 * time.Millisecond) // some calls answered by the old child
	logs := strings.Count(m.Stderr(), "config reloaded")
	if err := os.WriteFile(path, []byte(after), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := m.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(m.Stderr(), "config reloaded") == logs && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	// The reload is logged once the new child is up; let the callers see it.
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	if strings.Count(m.Stderr(), "config reloaded") == logs {
		t.Fatalf("no reload logged within 30s")
	}

	for _, c := range inflight {
		a := <-c.answer
		if a.Error == nil || a.Error.Code != -32603 {
			t.Errorf("%s, in flight on the replaced child: %s, want JSON-RPC error -32603", c.name(), a)
		} else {
			t.Logf("%s, in flight on the replaced child: %s", c.name(), a)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("calls during the reload: %d results, %d restarting, %d cut off on the old child, %d other", ok, restarting, cut, len(bad))
	if len(bad) > 0 {
		t.Errorf("%d calls during the restart got neither a result, the restarting error nor the outcome-unknown error, e.g. %s", len(bad), bad[0])
	}
	// At most what the callers have in flight at once: one call of each
	// /mcp caller, and a /ws burst.
	if maxCut := 2 + 40; cut > maxCut {
		t.Errorf("%d calls were cut off on the old child; at most the %d the callers have in flight at once can be", cut, maxCut)
	}
	if restarting == 0 {
		t.Errorf("no call arrived while the upstream restarted; the test did not exercise the restart")
	}
	if ok == 0 {
		t.Errorf("no call succeeded around the reload")
	}
}
