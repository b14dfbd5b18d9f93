package protocol

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// TestHTTPCallStreamReachesItsSession: progress and a log message that a
// shared streamable HTTP upstream writes on one call's own response stream
// reach exactly that call's session, while another session's call is in
// flight on the same upstream. (Before viewmux spoke HTTP itself, the log
// message reached no one: with two calls in flight it was nobody's.)
//
// The upstream is handwritten: mcp-go's server writes a notification on
// whichever of a session's streams takes it first.
func TestHTTPCallStreamReachesItsSession(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(tiedStreamUpstream))
	t.Cleanup(up.Close)
	m := itest.StartMux(t, fmt.Sprintf("[upstreams.up]\nurl = %q\n", up.URL+"/mcp"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	type note struct{ who, method string }
	var mu sync.Mutex
	var notes []note
	connect := func(who string) func(ctx context.Context, name string, args map[string]any, token mcp.ProgressToken) string {
		c, _ := itest.EraConnect(t, ctx, m.URL())
		c.OnNotification(func(n mcp.JSONRPCNotification) {
			if n.Method == string(mcp.MethodNotificationProgress) || n.Method == string(mcp.MethodNotificationMessage) {
				mu.Lock()
				notes = append(notes, note{who, n.Method})
				mu.Unlock()
			}
		})
		if err := c.SetLevel(ctx, mcp.SetLevelRequest{Params: mcp.SetLevelParams{Level: mcp.LoggingLevelDebug}}); err != nil {
			t.Fatalf("%s: logging/setLevel: %v", who, err)
		}
		for {
			list, err := c.ListTools(ctx, mcp.ListToolsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Tools) > 0 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		return func(ctx context.Context, name string, args map[string]any, token mcp.ProgressToken) string {
			return itest.EraCall(t, ctx, c, name, args, token)
		}
	}
	callA, callB := connect("A"), connect("B")

	waited := make(chan string, 1)
	go func() { waited <- callB(ctx, "up__wait", nil, nil) }()
	time.Sleep(100 * time.Millisecond) // B's call is in flight upstream
	if got := callA(ctx, "up__report", nil, "tok-a"); got != "reported" {
		t.Fatalf("report = %q", got)
	}
	if got := <-waited; got != "waited" {
		t.Fatalf("wait = %q", got)
	}
	time.Sleep(200 * time.Millisecond) // anything misrouted has arrived
	mu.Lock()
	defer mu.Unlock()
	want := []note{{"A", "notifications/progress"}, {"A", "notifications/message"}}
	if !slices.Equal(notes, want) {
		t.Errorf("notifications reached %v, want %v", notes, want)
	}
}

// tiedStreamUpstream is a minimal streamable HTTP MCP server: tools/call
// "report" answers with an event stream carrying progress and a log
// message before its result; "wait" answers JSON after 500ms.
func tiedStreamUpstream(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
	case http.MethodDelete:
		return
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name string `json:"name"`
			Meta struct {
				ProgressToken json.RawMessage `json:"progressToken"`
			} `json:"_meta"`
		} `json:"params"`
	}
	if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if len(m.ID) == 0 {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	answer := func(result string) string {
		return `{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":` + result + `}`
	}
	json := func(body string) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	}
	switch {
	case m.Method == "initialize":
		w.Header().Set("Mcp-Session-Id", "tied-1")
		json(answer(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{},"logging":{}},"serverInfo":{"name":"tied","version":"1"}}`))
	case m.Method == "tools/list":
		json(answer(`{"tools":[{"name":"report","inputSchema":{"type":"object"}},{"name":"wait","inputSchema":{"type":"object"}}]}`))
	case m.Method == "tools/call" && m.Params.Name == "report":
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":%s,\"progress\":1}}\n\n", m.Params.Meta.ProgressToken)
		io.WriteString(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"from report\"}}\n\n")
		io.WriteString(w, "data: "+answer(`{"content":[{"type":"text","text":"reported"}]}`)+"\n\n")
	case m.Method == "tools/call":
		time.Sleep(500 * time.Millisecond)
		json(answer(`{"content":[{"type":"text","text":"waited"}]}`))
	default:
		json(answer(`{}`))
	}
}
