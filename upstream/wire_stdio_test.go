package upstream

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// scriptedLimit is the max_message_bytes of the tests against the scripted
// server; its "noise" tool writes messages past it.
const scriptedLimit = 16 << 10

// scriptedServe is a stdio MCP server written by hand that misbehaves on
// cue, through its tools:
//
//	noise        writes a line that is not JSON, an oversize notification,
//	             an oversize message without id or method, answers to ids
//	             nobody asked, then answers "quiet"
//	sample       asks the client for sampling/createMessage and answers
//	             with the client's whole answer line
//	ping_client  pings the client and answers with its whole answer line
//	hang         never answers
//	last_cancel  answers {"hang":<id of the last hang call>,"cancelled":<requestId of the last notifications/cancelled>}
func scriptedServe(r io.Reader, w io.Writer) {
	out := &lockedWriter{w: w}
	send := func(s string) { fmt.Fprint(out, s+"\n") }
	var (
		mu        sync.Mutex
		waiting   = map[string]chan string{}
		hangID    json.RawMessage
		cancelled json.RawMessage
		seq       int
	)
	ask := func(method, params string) string {
		mu.Lock()
		seq++
		id := fmt.Sprintf("srv-%d", seq)
		ch := make(chan string, 1)
		waiting[id] = ch
		mu.Unlock()
		send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%q,"method":%q,"params":%s}`, id, method, params))
		return <-ch
	}
	text := func(id json.RawMessage, s string) {
		b, _ := json.Marshal(s)
		send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":%s}]}}`, id, b))
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name      string          `json:"name"`
				RequestID json.RawMessage `json:"requestId"`
			} `json:"params"`
		}
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		switch {
		case m.Method == "" && m.ID != nil: // an answer of the client
			var id string
			json.Unmarshal(m.ID, &id)
			mu.Lock()
			ch := waiting[id]
			delete(waiting, id)
			mu.Unlock()
			if ch != nil {
				ch <- line
			}
		case m.Method == "notifications/cancelled":
			mu.Lock()
			cancelled = m.Params.RequestID
			mu.Unlock()
		case m.ID == nil: // other notifications
		case m.Method == "initialize":
			send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"scripted","version":"0"}}}`, m.ID))
		case m.Method == "tools/list":
			send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"tools":[`+
				`{"name":"noise","inputSchema":{"type":"object"}},{"name":"sample","inputSchema":{"type":"object"}},`+
				`{"name":"ping_client","inputSchema":{"type":"object"}},{"name":"hang","inputSchema":{"type":"object"}},`+
				`{"name":"last_cancel","inputSchema":{"type":"object"}}]}}`, m.ID))
		case m.Method == "tools/call":
			id := m.ID
			switch m.Params.Name {
			case "noise":
				big := strings.Repeat("n", 2*scriptedLimit)
				send(`this is not JSON`)
				send(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"` + big + `"}}`)
				send(`{"jsonrpc":"2.0","result":{"data":"` + big + `"}}`)
				send(`{"jsonrpc":"2.0","id":"viewmux-999999999","result":{}}`)
				send(`{"jsonrpc":"2.0","id":"nobody","result":{"data":"` + big + `"}}`)
				send(`{"jsonrpc":"2.0","id":12345,"error":{"code":1,"message":"x"}}`)
				text(id, "quiet")
			case "sample":
				go func() {
					text(id, ask("sampling/createMessage", `{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":5}`))
				}()
			case "ping_client":
				go func() { text(id, ask("ping", `{}`)) }()
			case "hang":
				mu.Lock()
				hangID = id
				mu.Unlock()
			case "last_cancel":
				mu.Lock()
				text(id, fmt.Sprintf(`{"hang":%s,"cancelled":%s}`, orNull(hangID), orNull(cancelled)))
				mu.Unlock()
			}
		default:
			send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}`, m.ID))
		}
	}
}

func orNull(b json.RawMessage) string {
	if len(b) == 0 {
		return "null"
	}
	return string(b)
}

// TestScriptedStdio runs viewmux's own engine against a stdio child that
// misbehaves on cue. No subtest may restart the connection.
func TestScriptedStdio(t *testing.T) {
	logs := &logSink{}
	opts := fastOptions(logs)
	asked := make(chan string, 4)
	opts.OnRequest = func(ctx context.Context, u *Upstream, method string, params json.RawMessage) (json.RawMessage, error) {
		asked <- u.Name() + " " + method
		return json.RawMessage(`{"role":"assistant","content":{"type":"text","text":"from the hook"},"model":"m1"}`), nil
	}
	cfg := stdioConfig(t, "scr", "scripted")
	cfg.MaxMessageBytes = scriptedLimit
	u := New(cfg, opts)
	startUpstream(t, u)
	before := u.Health()

	t.Run("dropped messages", func(t *testing.T) {
		if got := callText(t, u, "noise", map[string]any{}); got != "quiet" {
			t.Fatalf("noise = %q", got)
		}
		if len(logs.find(func(r map[string]string) bool {
			return r["upstream"] == "scr" && strings.Contains(r["err"], "exceeds max_message_bytes (16384 bytes)")
		})) < 3 {
			t.Error("the oversize messages without a waiting call were not logged with the limit")
		}
	})
	t.Run("server request through the hook", func(t *testing.T) {
		got := callText(t, u, "sample", map[string]any{})
		var answer struct {
			ID     string          `json:"id"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal([]byte(got), &answer); err != nil || !strings.HasPrefix(answer.ID, "srv-") ||
			string(answer.Result) != `{"role":"assistant","content":{"type":"text","text":"from the hook"},"model":"m1"}` {
			t.Fatalf("the upstream got %s", got)
		}
		if a := <-asked; a != "scr sampling/createMessage" {
			t.Fatalf("hook asked %q", a)
		}
	})
	t.Run("ping from the upstream", func(t *testing.T) {
		got := callText(t, u, "ping_client", map[string]any{})
		var answer struct {
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal([]byte(got), &answer); err != nil || string(answer.Result) != "{}" {
			t.Fatalf("the upstream got %s", got)
		}
		select {
		case a := <-asked:
			t.Fatalf("ping reached the hook: %s", a)
		default:
		}
	})
	t.Run("cancellation names viewmux's id", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := u.Send(ctx, Request{Method: "tools/call", Target: "hang", Params: json.RawMessage(`{"name":"hang"}`)})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v", err)
		}
		var ids struct {
			Hang, Cancelled json.RawMessage
		}
		waitFor(t, 5*time.Second, "the cancel notice", func() bool {
			if err := json.Unmarshal([]byte(callText(t, u, "last_cancel", map[string]any{})), &ids); err != nil {
				t.Fatal(err)
			}
			return string(ids.Cancelled) != "null"
		})
		if string(ids.Hang) != string(ids.Cancelled) || !strings.HasPrefix(string(ids.Hang), `"viewmux-`) {
			t.Fatalf("hang id %s, cancelled %s", ids.Hang, ids.Cancelled)
		}
	})
	if after := u.Health(); after.Restarts != before.Restarts || after.Connects != before.Connects || u.State() != StateUp {
		t.Errorf("the connection did not stay up: before %+v, after %+v", before, after)
	}
}
