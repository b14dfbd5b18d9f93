//go:build unix

package integration

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
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/mark3labs/mcp-go/mcp"
)

// Raw JSON-RPC clients for every front door of viewmux, for the recording
// tests: each sends the params text it is given byte for byte (duplicate
// keys, escapes and big numbers included), which no SDK client can. The
// streamable HTTP door reuses rawhttp_test.go's session; websocket, legacy
// SSE and stdio are here because nothing else speaks them raw.

// recProfile is the profile every recording door asks for.
const recProfile = "agent"

// recAnswer is viewmux's answer to one request.
type recAnswer struct {
	Raw    []byte     // the JSON-RPC response, as sent
	Msg    rpcMessage // Raw decoded
	Status int        // the HTTP status on /mcp; 0 on the other doors
}

// driveError returns the answer's error as drive.mjs reports one, for the
// shared assertions of profiles_test.go (nil when it is a result).
func (a recAnswer) driveError() *DriveError {
	if a.Msg.Error == nil {
		return nil
	}
	code := a.Msg.Error.Code
	return &DriveError{Kind: "jsonrpc", Code: &code, Message: a.Msg.Error.Message, Data: a.Msg.Error.Data}
}

func (a recAnswer) String() string {
	if a.Status != 0 {
		return fmt.Sprintf("HTTP %d %s", a.Status, a.Raw)
	}
	return string(a.Raw)
}

// recClient is one client session through one door.
type recClient interface {
	// do sends a request with the next id, method and params (JSON text,
	// sent exactly as given), and returns the answer to it.
	do(t testing.TB, method, params string) recAnswer
}

// recDoor opens clients through one door.
type recDoor struct {
	name string
	// modern is the stateless 2026-07-28 way in on /mcp.
	modern bool
	open   func(t *testing.T) recClient
}

// recDoors returns every door of mux for the recording profile: streamable
// HTTP (a legacy session, and stateless 2026-07-28 requests), websocket,
// legacy SSE and `serve --stdio` with the config at cfgPath. stdioLogs
// receives each stdio process's stderr, for the secret check.
func recDoors(mux *Mux, cfgPath string, stdioLogs func(name string, logs *syncBuffer)) []recDoor {
	q := "?profile=" + recProfile
	return []recDoor{
		{name: "http", open: func(t *testing.T) recClient {
			return &recHTTP{s: openRawSession(t, mux.URL()+q, nil)}
		}},
		{name: "http 2026-07-28", modern: true, open: func(t *testing.T) recClient {
			return &recModern{url: mux.URL() + q}
		}},
		{name: "ws", open: func(t *testing.T) recClient {
			return openRecWS(t, "ws://"+mux.Addr+"/ws"+q)
		}},
		{name: "sse", open: func(t *testing.T) recClient {
			return openRecSSE(t, "http://"+mux.Addr, "/sse"+q)
		}},
		{name: "stdio", open: func(t *testing.T) recClient {
			c, logs := openRecStdio(t, cfgPath)
			if stdioLogs != nil {
				stdioLogs(t.Name(), logs)
			}
			return c
		}},
	}
}

// recBody is a JSON-RPC request with params spliced in as text.
func recBody(id int, method, params string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%s,"params":%s}`, id, strconv.Quote(method), params)
}

// recHTTP is a legacy session on /mcp.
type recHTTP struct {
	s    *rawSession
	next int
}

func (c *recHTTP) do(t testing.TB, method, params string) recAnswer {
	t.Helper()
	c.next++
	r := c.s.post(t, "", nil, recBody(c.next, method, params))
	if r.Msg == nil {
		t.Fatalf("%s on /mcp: no JSON-RPC answer: %s", method, r)
	}
	return recAnswer{Raw: r.RawMsg, Msg: *r.Msg, Status: r.Status}
}

// recModern sends stateless 2026-07-28 requests to /mcp: no initialize,
// the protocol version and client capabilities in each request's _meta,
// and the standard headers.
type recModern struct {
	url  string
	next int
}

// recModernMeta is the _meta a 2026-07-28 request must carry, by key; the
// client info is one viewmux must not forward as its own.
var recModernMeta = [][2]string{
	{mcp.MetaKeyProtocolVersion, `"2026-07-28"`},
	{mcp.MetaKeyClientCapabilities, `{}`},
	{mcp.MetaKeyClientInfo, `{"name":"recording-raw-client","version":"9"}`},
}

// metaObject finds the first "_meta" object of a params text.
var metaObject = regexp.MustCompile(`"_meta"\s*:\s*\{`)

// withModernMeta splices the keys of recModernMeta that params does not
// already spell into params as text, so every other byte stays as the test
// wrote it: into the first "_meta" object, or as a new _meta member.
func withModernMeta(params string) string {
	var add []string
	for _, kv := range recModernMeta {
		if !strings.Contains(params, strconv.Quote(kv[0])) {
			add = append(add, strconv.Quote(kv[0])+":"+kv[1])
		}
	}
	if len(add) == 0 {
		return params
	}
	members := strings.Join(add, ",")
	if loc := metaObject.FindStringIndex(params); loc != nil {
		j := loc[1]
		if !strings.HasPrefix(strings.TrimSpace(params[j:]), "}") {
			members += ","
		}
		return params[:j] + members + params[j:]
	}
	i := strings.Index(params, "{") + 1
	members = `"_meta":{` + members + `}`
	if !strings.HasPrefix(strings.TrimSpace(params[i:]), "}") {
		members += ","
	}
	return params[:i] + members + params[i:]
}

func (c *recModern) do(t testing.TB, method, params string) recAnswer {
	t.Helper()
	c.next++
	params = withModernMeta(params)
	h := map[string]string{mcp.HeaderProtocolVersion: mcp.ProtocolVersion20260728}
	for k, v := range mcp.StandardHeaders(mcp.ProtocolVersion20260728, mcp.MCPMethod(method), json.RawMessage(params)) {
		h[k] = v
	}
	r := rawPost(t, c.url, h, recBody(c.next, method, params))
	if r.Msg == nil {
		t.Fatalf("2026-07-28 %s on /mcp: no JSON-RPC answer: %s", method, r)
	}
	if id := r.Header.Get("Mcp-Session-Id"); id != "" {
		t.Errorf("a stateless request was given session %q", id)
	}
	return recAnswer{Raw: r.RawMsg, Msg: *r.Msg, Status: r.Status}
}

// recStream is a session on a door that carries messages both ways on one
// connection (websocket, SSE, stdio): send writes one message, and every
// message viewmux sends arrives on in.
type recStream struct {
	door string
	send func(body []byte) error
	in   chan []byte
	next int
}

// initialize runs the legacy handshake on the stream.
func (c *recStream) initialize(t testing.TB) {
	t.Helper()
	a := c.do(t, "initialize", `{"protocolVersion":"`+rawProtocolVersion+`","capabilities":{},"clientInfo":{"name":"recording-raw","version":"1.0.0"}}`)
	if a.Msg.Error != nil || a.Msg.Result == nil {
		t.Fatalf("%s: initialize: %s", c.door, a)
	}
	if err := c.send([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)); err != nil {
		t.Fatalf("%s: notifications/initialized: %v", c.door, err)
	}
}

func (c *recStream) do(t testing.TB, method, params string) recAnswer {
	t.Helper()
	c.next++
	id := strconv.Itoa(c.next)
	if err := c.send([]byte(recBody(c.next, method, params))); err != nil {
		t.Fatalf("%s: sending %s: %v", c.door, method, err)
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case raw, ok := <-c.in:
			if !ok {
				t.Fatalf("%s: the connection ended before the answer to %s (id %s)", c.door, method, id)
			}
			var m rpcMessage
			var probe struct {
				Method string `json:"method"`
			}
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatalf("%s: viewmux sent a message that is not JSON: %q", c.door, raw)
			}
			json.Unmarshal(raw, &probe)
			if probe.Method != "" {
				continue // a notification (or a request this test does not expect)
			}
			if string(m.ID) == id {
				return recAnswer{Raw: bytes.TrimSpace(raw), Msg: m}
			}
			t.Errorf("%s: answer to an id not in flight: %s", c.door, raw)
		case <-timeout:
			t.Fatalf("%s: no answer to %s (id %s) within 30s", c.door, method, id)
		}
	}
}

// openRecWS opens a websocket session at url and initializes it.
func openRecWS(t *testing.T, url string) *recStream {
	t.Helper()
	return openWS(t, url, true)
}

// openWS opens a websocket session at url, initialized or (for a
// 2026-07-28 client) not.
func openWS(t *testing.T, url string, initialize bool) *recStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	dialCtx, dialCancel := context.WithTimeout(ctx, 10*time.Second)
	defer dialCancel()
	conn, resp, err := websocket.Dial(dialCtx, url, &websocket.DialOptions{Subprotocols: []string{"mcp"}})
	if err != nil {
		cancel()
		status := ""
		if resp != nil {
			status = resp.Status
		}
		t.Fatalf("websocket %s: %v %s", url, err, status)
	}
	conn.SetReadLimit(16 << 20)
	c := &recStream{door: "ws", in: make(chan []byte, 64), send: func(body []byte) error {
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		defer wcancel()
		return conn.Write(wctx, websocket.MessageText, body)
	}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(c.in)
		for {
			_, b, err := conn.Read(ctx)
			if err != nil {
				return
			}
			c.in <- b
		}
	}()
	t.Cleanup(func() {
		conn.Close(websocket.StatusNormalClosure, "")
		cancel()
		drainUntil(c.in, done)
	})
	if initialize {
		c.initialize(t)
	}
	return c
}

// drainUntil discards messages from in until done is closed, so that a
// reader blocked on a full channel can end.
func drainUntil(in <-chan []byte, done <-chan struct{}) {
	for {
		select {
		case <-in:
		case <-done:
			return
		}
	}
}

// openRecSSE opens a legacy SSE session: GET base+path, the endpoint event,
// then one POST per message; answers come back as message events.
func openRecSSE(t *testing.T, base, path string) *recStream {
	t.Helper()
	return openSSE(t, base, path, true)
}

// openSSE is openRecSSE, initialized or (for a 2026-07-28 client) not.
func openSSE(t *testing.T, base, path string, initialize bool) *recStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("GET %s: %s %s", path, resp.Status, b)
	}
	endpoint := make(chan string, 1)
	c := &recStream{door: "sse", in: make(chan []byte, 64)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(c.in)
		rd := bufio.NewReaderSize(resp.Body, 64<<10)
		var event string
		var data []string
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\r\n")
			switch {
			case line == "":
				if len(data) > 0 {
					payload := strings.Join(data, "\n")
					if event == "endpoint" {
						endpoint <- payload
					} else {
						c.in <- []byte(payload)
					}
				}
				event, data = "", nil
			case strings.HasPrefix(line, "event:"):
				event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
			case strings.HasPrefix(line, "data:"):
				data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		drainUntil(c.in, done)
	})
	var post string
	select {
	case post = <-endpoint:
	case <-time.After(10 * time.Second):
		t.Fatalf("GET %s: no endpoint event within 10s", path)
	}
	c.send = func(body []byte) error {
		r, err := rawClient.Post(base+post, "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		defer r.Body.Close()
		if r.StatusCode != http.StatusAccepted {
			b, _ := io.ReadAll(r.Body)
			return fmt.Errorf("POST %s: %s %s", post, r.Status, b)
		}
		return nil
	}
	if initialize {
		c.initialize(t)
	}
	return c
}

// openRecStdio starts `viewmux serve --stdio --profile agent` with the
// config at cfgPath and initializes it. At cleanup it closes stdin and
// expects the process to exit 0 and leave nothing behind. The returned
// buffer collects its stderr.
func openRecStdio(t *testing.T, cfgPath string) (*recStream, *syncBuffer) {
	t.Helper()
	return openStdioStream(t, cfgPath, recProfile, true)
}

// openStdioStream is openRecStdio for any profile ("" = the config's
// default).
func openStdioStream(t *testing.T, cfgPath, profile string, initialize bool) (*recStream, *syncBuffer) {
	t.Helper()
	marker := randomHex(t, 12)
	ctx, cancel := context.WithCancel(context.Background())
	args := []string{"serve", "--stdio", "--config", cfgPath}
	if profile != "" {
		args = append(args, "--profile", profile)
	}
	cmd := exec.CommandContext(ctx, muxBinary(t), args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(envWithout(os.Environ(), "VIEWMUX_CONFIG", markerEnv), markerEnv+"="+marker)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	c := &recStream{door: "stdio", in: make(chan []byte, 64), send: func(body []byte) error {
		_, err := stdin.Write(append(body, '\n'))
		return err
	}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(c.in)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			c.in <- bytes.Clone(sc.Bytes())
		}
	}()
	t.Cleanup(func() {
		stdin.Close()
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		go drainUntil(c.in, done)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("viewmux serve --stdio after stdin closed: %v, want exit status 0", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("viewmux serve --stdio did not exit within 15s of stdin closing")
			cancel()
			<-exited
		}
		cancel()
		<-done
		if survivors := waitNoMarked(marker, 2*time.Second); len(survivors) > 0 {
			t.Errorf("processes started by viewmux --stdio survived it:\n%s", describeProcs(survivors))
			killMarked(marker)
		}
		if t.Failed() {
			t.Logf("--- viewmux --stdio stderr ---\n%s", logs.String())
		}
	})
	if initialize {
		c.initialize(t)
	}
	return c, logs
}
