//go:build unix

package protocol

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// modernListen opens a 2026-07-28 subscriptions/listen stream on url and
// returns a channel of the methods of the notifications it receives.
func modernListen(t *testing.T, url string) <-chan string {
	t.Helper()
	return modernListenBody(t, url, listenBody)
}

// modernListenBody is modernListen with the request body given.
func modernListenBody(t *testing.T, url, body string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		resp.Body.Close()
		t.Fatalf("subscriptions/listen on %s: status %d, Content-Type %q", url, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	methods := make(chan string, 16)
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var m struct {
				Method string `json:"method"`
			}
			if json.Unmarshal([]byte(data), &m) == nil && m.Method != "" {
				methods <- m.Method
			}
		}
	}()
	return methods
}

// expectMethod waits for method on ch (want) or checks that it does not
// come within wait (!want).
func expectMethod(t *testing.T, who string, ch <-chan string, method string, want bool, wait time.Duration) {
	t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case got := <-ch:
			if got != method {
				continue
			}
			if !want {
				t.Errorf("%s got %s, want nothing (its view did not change)", who, method)
			}
			return
		case <-deadline:
			if want {
				t.Errorf("%s got no %s within %s", who, method, wait)
			}
			return
		}
	}
}

// TestModernListen checks that a 2026-07-28 client that listens hears
// tools/list_changed for its own view only: a read-only listener
// is not told of a new tool that is not read-only, and is told of one that
// is; an unrestricted listener is told of both.
func TestModernListen(t *testing.T) {
	mux := itest.StartMux(t, listChangedConfig(t))
	all := modernListen(t, mux.URL())
	ro := modernListen(t, mux.URL()+"?profile=readonly")
	for _, ch := range []<-chan string{all, ro} {
		expectMethod(t, "listener", ch, "notifications/subscriptions/acknowledged", true, 10*time.Second)
	}
	s := itest.OpenRawSession(t, mux.URL(), nil)
	if r := s.Post(t, "", nil, itest.ToolsCallBody(t, 2, "demo__add_tool", map[string]any{"name": "extra_rw", "read_only": false})); r.Msg == nil || r.Msg.Error != nil {
		t.Fatalf("add_tool: %s", r)
	}
	expectMethod(t, "the unrestricted listener", all, "notifications/tools/list_changed", true, 10*time.Second)
	expectMethod(t, "the read-only listener", ro, "notifications/tools/list_changed", false, 1500*time.Millisecond)
	if r := s.Post(t, "", nil, itest.ToolsCallBody(t, 3, "demo__add_tool", map[string]any{"name": "extra_ro", "read_only": true})); r.Msg == nil || r.Msg.Error != nil {
		t.Fatalf("add_tool: %s", r)
	}
	expectMethod(t, "the unrestricted listener", all, "notifications/tools/list_changed", true, 10*time.Second)
	expectMethod(t, "the read-only listener", ro, "notifications/tools/list_changed", true, 10*time.Second)
}

// listenBody is a 2026-07-28 subscriptions/listen request for tools
// list_changed.
const listenBody = `{"jsonrpc":"2.0","id":"listen-1","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},` +
	`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`

// streamListen sends listenBody on c and returns a channel of the methods
// of what viewmux sends back on it (answers are reported as "answer <id>").
func streamListen(t *testing.T, c *itest.RecStream) <-chan string {
	t.Helper()
	if err := c.Send([]byte(listenBody)); err != nil {
		t.Fatalf("%s: subscriptions/listen: %v", c.Door, err)
	}
	methods := make(chan string, 64)
	go func() {
		for raw := range c.In {
			var m struct {
				Method string          `json:"method"`
				ID     json.RawMessage `json:"id"`
			}
			if json.Unmarshal(raw, &m) != nil {
				continue
			}
			if m.Method == "" {
				m.Method = "answer " + string(m.ID)
			}
			select {
			case methods <- m.Method:
			default:
			}
		}
	}()
	return methods
}

// TestModernListenStreamDoors is TestModernListen on /ws, /sse and stdio:
// a 2026-07-28 client (no initialize, so no legacy session that would be
// told anyway) that listens on a stream gets its own view's list_changed
// through that stream's writer.
func TestModernListenStreamDoors(t *testing.T) {
	t.Parallel()
	mux := itest.StartMux(t, listChangedConfig(t))
	base := "http://" + mux.Addr
	for _, door := range []struct {
		name string
		open func(t *testing.T, profile string) *itest.RecStream
	}{
		{"ws", func(t *testing.T, profile string) *itest.RecStream {
			q := ""
			if profile != "" {
				q = "?profile=" + profile
			}
			return itest.OpenWS(t, "ws://"+mux.Addr+"/ws"+q, false)
		}},
		{"sse", func(t *testing.T, profile string) *itest.RecStream {
			q := ""
			if profile != "" {
				q = "?profile=" + profile
			}
			return itest.OpenSSE(t, base, "/sse"+q, false)
		}},
	} {
		t.Run(door.name, func(t *testing.T) {
			all := streamListen(t, door.open(t, ""))
			ro := streamListen(t, door.open(t, "readonly"))
			for _, ch := range []<-chan string{all, ro} {
				expectMethod(t, "listener", ch, "notifications/subscriptions/acknowledged", true, 10*time.Second)
			}
			s := itest.OpenRawSession(t, mux.URL(), nil)
			name := "rw_" + door.name
			if r := s.Post(t, "", nil, itest.ToolsCallBody(t, 2, "demo__add_tool", map[string]any{"name": name, "read_only": false})); r.Msg == nil || r.Msg.Error != nil {
				t.Fatalf("add_tool: %s", r)
			}
			expectMethod(t, "the unrestricted listener", all, "notifications/tools/list_changed", true, 10*time.Second)
			expectMethod(t, "the read-only listener", ro, "notifications/tools/list_changed", false, 1500*time.Millisecond)
			if r := s.Post(t, "", nil, itest.ToolsCallBody(t, 3, "demo__add_tool", map[string]any{"name": "ro_" + door.name, "read_only": true})); r.Msg == nil || r.Msg.Error != nil {
				t.Fatalf("add_tool: %s", r)
			}
			expectMethod(t, "the read-only listener", ro, "notifications/tools/list_changed", true, 10*time.Second)
		})
	}
	t.Run("stdio", func(t *testing.T) {
		c, _ := itest.OpenStdioStream(t, filepath.Join(mux.Dir, "viewmux.toml"), "", false)
		got := streamListen(t, c)
		expectMethod(t, "listener", got, "notifications/subscriptions/acknowledged", true, 10*time.Second)
		call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"demo__add_tool","arguments":{"name":"rw_stdio","read_only":false},` +
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
		if err := c.Send([]byte(call)); err != nil {
			t.Fatal(err)
		}
		expectMethod(t, "the stdio listener", got, "notifications/tools/list_changed", true, 10*time.Second)
	})
}

// TestModernListenResourceUpdated checks that a 2026-07-28 listener that
// lists a resource URI gets notifications/resources/updated for it, from
// the reference server-everything over stdio (its subscriber updates are
// switched on with its toggle-subscriber-updates tool), and that a
// listener that did not list it gets none.
func TestModernListenResourceUpdated(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	const uri = "demo://resource/static/document/features.md"
	mux := itest.StartMux(t, protoConfig(protoEveryStdio()))
	itest.WaitForTools(t, mux.URL(), nil, []string{"every__toggle-subscriber-updates"}, 30*time.Second)
	listen := func(uris ...string) <-chan string {
		b, _ := json.Marshal(uris)
		body := `{"jsonrpc":"2.0","id":"listen-1","method":"subscriptions/listen","params":{"notifications":{"resourceSubscriptions":` + string(b) + `},` +
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
		return modernListenBody(t, mux.URL(), body)
	}
	sub, other := listen(uri), listen()
	expectMethod(t, "the subscribed listener", sub, "notifications/subscriptions/acknowledged", true, 10*time.Second)
	expectMethod(t, "the other listener", other, "notifications/subscriptions/acknowledged", true, 10*time.Second)
	s := itest.OpenRawSession(t, mux.URL(), nil)
	if r := s.Post(t, "", nil, itest.ToolsCallBody(t, 2, "every__toggle-subscriber-updates", map[string]any{})); r.Msg == nil || r.Msg.Error != nil {
		t.Fatalf("toggle-subscriber-updates: %s", r)
	}
	t.Cleanup(func() {
		s.Post(t, "", nil, itest.ToolsCallBody(t, 3, "every__toggle-subscriber-updates", map[string]any{}))
	})
	expectMethod(t, "the subscribed listener", sub, "notifications/resources/updated", true, 20*time.Second)
	expectMethod(t, "the listener that listed nothing", other, "notifications/resources/updated", false, 2*time.Second)
}
