//go:build unix

package itest

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

// RecProfile is the profile every recording door asks for.
const RecProfile = "agent"

// RecAnswer is viewmux's answer to one request.
type RecAnswer struct {
	Raw    []byte     // the JSON-RPC response, as sent
	Msg    rpcMessage // Raw decoded
	Status int        // the HTTP status on /mcp; 0 on the other doors
}

// DriveError returns the answer's error as drive.mjs reports one, for the
// shared assertions of profiles_test.go (nil when it is a result).
func (a RecAnswer) DriveError() *DriveError {
	if a.Msg.Error == nil {
		return nil
	}
	code := a.Msg.Error.Code
	return &DriveError{Kind: "jsonrpc", Code: &code, Message: a.Msg.Error.Message, Data: a.Msg.Error.Data}
}

func (a RecAnswer) String() string {
	if a.Status != 0 {
		return fmt.Sprintf("HTTP %d %s", a.Status, a.Raw)
	}
	return string(a.Raw)
}

// RecClient is one client session through one door.
type RecClient interface {
	// Do sends a request with the next id, method and params (JSON text,
	// sent exactly as given), and returns the answer to it.
	Do(t testing.TB, method, params string) RecAnswer
}

// RecDoor opens clients through one door.
type RecDoor struct {
	Name string
	// Modern is the stateless 2026-07-28 way in on /mcp.
	Modern bool
	Open   func(t *testing.T) RecClient
}

// RecDoors returns every door of mux for the recording profile: streamable
// HTTP (a legacy session, and stateless 2026-07-28 requests), websocket,
// legacy SSE and `serve --stdio` with the config at CfgPath. stdioLogs
// receives each stdio process's stderr, for the secret check.
func RecDoors(mux *Mux, cfgPath string, stdioLogs func(name string, logs *SyncBuffer)) []RecDoor {
	q := "?profile=" + RecProfile
	return []RecDoor{
		{Name: "http", Open: func(t *testing.T) RecClient {
			return &RecHTTP{S: OpenRawSession(t, mux.URL()+q, nil)}
		}},
		{Name: "http 2026-07-28", Modern: true, Open: func(t *testing.T) RecClient {
			return &RecModern{URL: mux.URL() + q}
		}},
		{Name: "ws", Open: func(t *testing.T) RecClient {
			return OpenRecWS(t, "ws://"+mux.Addr+"/ws"+q)
		}},
		{Name: "sse", Open: func(t *testing.T) RecClient {
			return openRecSSE(t, "http://"+mux.Addr, "/sse"+q)
		}},
		{Name: "stdio", Open: func(t *testing.T) RecClient {
			c, logs := openRecStdio(t, cfgPath)
			if stdioLogs != nil {
				stdioLogs(t.Name(), logs)
			}
			return c
		}},
	}
}

// RecBody is a JSON-RPC request with params spliced in as text.
func RecBody(id int, method, params string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%s,"params":%s}`, id, strconv.Quote(method), params)
}

// RecHTTP is a legacy session on /mcp.
type RecHTTP struct {
	S    *RawSession
	next int
}

func (c *RecHTTP) Do(t testing.TB, method, params string) RecAnswer {
	t.Helper()
	c.next++
	r := c.S.Post(t, "", nil, RecBody(c.next, method, params))
	if r.Msg == nil {
		t.Fatalf("%s on /mcp: no JSON-RPC answer: %s", method, r)
	}
	return RecAnswer{Raw: r.RawMsg, Msg: *r.Msg, Status: r.Status}
}

// RecModern sends stateless 2026-07-28 requests to /mcp: no initialize,
// the protocol version and client capabilities in each request's _meta,
// and the standard headers.
type RecModern struct {
	URL  string
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

// WithModernMeta splices the keys of recModernMeta that params does not
// already spell into params as text, so every other byte stays as the test
// wrote it: into the first "_meta" object, or as a new _meta member.
func WithModernMeta(params string) string {
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

func (c *RecModern) Do(t testing.TB, method, params string) RecAnswer {
	t.Helper()
	c.next++
	params = WithModernMeta(params)
	h := map[string]string{mcp.HeaderProtocolVersion: mcp.ProtocolVersion20260728}
	for k, v := range mcp.StandardHeaders(mcp.ProtocolVersion20260728, mcp.MCPMethod(method), json.RawMessage(params)) {
		h[k] = v
	}
	r := RawPost(t, c.URL, h, RecBody(c.next, method, params))
	if r.Msg == nil {
		t.Fatalf("2026-07-28 %s on /mcp: no JSON-RPC answer: %s", method, r)
	}
	if id := r.Header.Get("Mcp-Session-Id"); id != "" {
		t.Errorf("a stateless request was given session %q", id)
	}
	return RecAnswer{Raw: r.RawMsg, Msg: *r.Msg, Status: r.Status}
}

// RecStream is a session on a door that carries messages both ways on one
// connection (websocket, SSE, stdio): send writes one message, and every
// message viewmux sends arrives on in.
type RecStream struct {
	Door string
	Send func(body []byte) error
	In   chan []byte
	Next int
}

// Initialize runs the legacy handshake on the stream.
func (c *RecStream) Initialize(t testing.TB) {
	t.Helper()
	a := c.Do(t, "initialize", `{"protocolVersion":"`+RawProtocolVersion+`","capabilities":{},"clientInfo":{"name":"recording-raw","version":"1.0.0"}}`)
	if a.Msg.Error != nil || a.Msg.Result == nil {
		t.Fatalf("%s: initialize: %s", c.Door, a)
	}
	if err := c.Send([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)); err != nil {
		t.Fatalf("%s: notifications/initialized: %v", c.Door, err)
	}
}

func (c *RecStream) Do(t testing.TB, method, params string) RecAnswer {
	t.Helper()
	c.Next++
	id := strconv.Itoa(c.Next)
	if err := c.Send([]byte(RecBody(c.Next, method, params))); err != nil {
		t.Fatalf("%s: sending %s: %v", c.Door, method, err)
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case raw, ok := <-c.In:
			if !ok {
				t.Fatalf("%s: the connection ended before the answer to %s (id %s)", c.Door, method, id)
			}
			var m rpcMessage
			var probe struct {
				Method string `json:"method"`
			}
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatalf("%s: viewmux sent a message that is not JSON: %q", c.Door, raw)
			}
			json.Unmarshal(raw, &probe)
			if probe.Method != "" {
				continue // a notification (or a request this test does not expect)
			}
			if string(m.ID) == id {
				return RecAnswer{Raw: bytes.TrimSpace(raw), Msg: m}
			}
			t.Errorf("%s: answer to an id not in flight: %s", c.Door, raw)
		case <-timeout:
			t.Fatalf("%s: no answer to %s (id %s) within 30s", c.Door, method, id)
		}
	}
}

// OpenRecWS opens a websocket session at url and initializes it.
func OpenRecWS(t *testing.T, url string) *RecStream {
	t.Helper()
	return OpenWS(t, url, true)
}

// OpenWS opens a websocket session at url, initialized or (for a
// 2026-07-28 client) not.
func OpenWS(t *testing.T, url string, initialize bool) *RecStream {
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
	c := &RecStream{Door: "ws", In: make(chan []byte, 64), Send: func(body []byte) error {
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		defer wcancel()
		return conn.Write(wctx, websocket.MessageText, body)
	}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(c.In)
		for {
			_, b, err := conn.Read(ctx)
			if err != nil {
				return
			}
			c.In <- b
		}
	}()
	t.Cleanup(func() {
		conn.Close(websocket.StatusNormalClosure, "")
		cancel()
		DrainUntil(c.In, done)
	})
	if initialize {
		c.Initialize(t)
	}
	return c
}

// DrainUntil discards messages from in until done is closed, so that a
// reader blocked on a full channel can end.
func DrainUntil(in <-chan []byte, done <-chan struct{}) {
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
func openRecSSE(t *testing.T, base, path string) *RecStream {
	t.Helper()
	return OpenSSE(t, base, path, true)
}

// OpenSSE is openRecSSE, initialized or (for a 2026-07-28 client) not.
func OpenSSE(t *testing.T, base, path string, initialize bool) *RecStream {
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
	c := &RecStream{Door: "sse", In: make(chan []byte, 64)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(c.In)
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
						c.In <- []byte(payload)
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
		DrainUntil(c.In, done)
	})
	var post string
	select {
	case post = <-endpoint:
	case <-time.After(10 * time.Second):
		t.Fatalf("GET %s: no endpoint event within 10s", path)
	}
	c.Send = func(body []byte) error {
		r, err := RawClient.Post(base+post, "application/json", bytes.NewReader(body))
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
		c.Initialize(t)
	}
	return c
}

// openRecStdio starts `viewmux serve --stdio --profile agent` with the
// config at CfgPath and initializes it. At cleanup it closes stdin and
// expects the process to exit 0 and leave nothing behind. The returned
// buffer collects its stderr.
func openRecStdio(t *testing.T, cfgPath string) (*RecStream, *SyncBuffer) {
	t.Helper()
	return OpenStdioStream(t, cfgPath, RecProfile, true)
}

// OpenStdioStream is openRecStdio for any profile ("" = the config's
// default).
func OpenStdioStream(t *testing.T, cfgPath, profile string, initialize bool) (*RecStream, *SyncBuffer) {
	t.Helper()
	marker := RandomHex(t, 12)
	ctx, cancel := context.WithCancel(context.Background())
	args := []string{"serve", "--stdio", "--config", cfgPath}
	if profile != "" {
		args = append(args, "--profile", profile)
	}
	cmd := exec.CommandContext(ctx, MuxBinary(t), args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(EnvWithout(os.Environ(), "VIEWMUX_CONFIG", MarkerEnv), MarkerEnv+"="+marker)
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
	logs := &SyncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	c := &RecStream{Door: "stdio", In: make(chan []byte, 64), Send: func(body []byte) error {
		_, err := stdin.Write(append(body, '\n'))
		return err
	}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(c.In)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			c.In <- bytes.Clone(sc.Bytes())
		}
	}()
	t.Cleanup(func() {
		stdin.Close()
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		go DrainUntil(c.In, done)
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
		if survivors := WaitNoMarked(marker, 2*time.Second); len(survivors) > 0 {
			t.Errorf("processes started by viewmux --stdio survived it:\n%s", DescribeProcs(survivors))
			KillMarked(marker)
		}
		if t.Failed() {
			t.Logf("--- viewmux --stdio stderr ---\n%s", logs.String())
		}
	})
	if initialize {
		c.Initialize(t)
	}
	return c, logs
}
