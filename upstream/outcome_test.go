package upstream

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/viewmux/viewmux/configs"
)

// The brittle upstream: a handwritten server that, in a tools/call of
// "charge", reads the call, counts it and goes away without answering (a
// crash after a side effect), and answers "deep", "deep_last", "broken"
// and "big" with bytes viewmux refuses to read. Over stdio it is the test
// binary (mode brittle), counting charges in the file envBrittleCharges
// names; over legacy SSE, websocket and streamable HTTP an httptest
// server counting them in memory.

// envBrittleCharges names the file the stdio brittle server appends a
// line to for each charge it reads.
const envBrittleCharges = "VIEWMUX_UPSTREAM_TEST_CHARGES"

// brittleLimit is the max_message_bytes of brittle upstreams: room for an
// answer nested 200,000 deep, not for "big".
const brittleLimit = 1 << 20

// brittleDepth is how deep the "deep" answers nest.
const brittleDepth = 200000

// brittleReply is the brittle server's answer to one message ("" for
// none); die tells that the server goes away after reading it, unanswered.
func brittleReply(msg []byte) (reply string, die bool) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	if json.Unmarshal(msg, &m) != nil || m.ID == nil {
		return "", false // notifications
	}
	id := string(m.ID)
	switch {
	case m.Method == "initialize":
		return `{"jsonrpc":"2.0","id":` + id + `,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"brittle","version":"0"}}}`, false
	case m.Method == "tools/list":
		var tools []string
		for _, n := range []string{"charge", "deep", "deep_last", "broken", "big", "echo"} {
			tools = append(tools, `{"name":"`+n+`","inputSchema":{"type":"object"}}`)
		}
		return `{"jsonrpc":"2.0","id":` + id + `,"result":{"tools":[` + strings.Join(tools, ",") + `]}}`, false
	case m.Method != "tools/call":
		return `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":-32601,"message":"method not found"}}`, false
	}
	deep := func() string { return strings.Repeat("[", brittleDepth) + strings.Repeat("]", brittleDepth) }
	switch m.Params.Name {
	case "charge":
		return "", true
	case "deep":
		return `{"jsonrpc":"2.0","id":` + id + `,"result":` + deep() + `}`, false
	case "deep_last":
		return `{"jsonrpc":"2.0","result":{"content":` + deep() + `},"id":` + id + `}`, false
	case "broken":
		return `{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[}}`, false
	case "big":
		return `{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[{"type":"text","text":"` + strings.Repeat("b", 2*brittleLimit) + `"}]}}`, false
	}
	return `{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[{"type":"text","text":"ok"}]}}`, false
}

// brittleServe is the stdio brittle server; it returns its exit code.
func brittleServe(r io.Reader, w io.Writer) int {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		reply, die := brittleReply(sc.Bytes())
		if die {
			f, err := os.OpenFile(os.Getenv(envBrittleCharges), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
			if err != nil {
				return 2
			}
			fmt.Fprintln(f, "charge")
			f.Close()
			return 3 // a crash, the call read and unanswered
		}
		if reply != "" {
			fmt.Fprintln(w, reply)
		}
	}
	return 0
}

// brittleStdio is the config of a stdio brittle upstream and the count of
// the charges it read.
func brittleStdio(t *testing.T) (*configs.Upstream, func() int) {
	charges := t.TempDir() + "/charges"
	cfg := stdioConfig(t, "brittle-stdio", "brittle")
	cfg.Env[envBrittleCharges] = charges
	cfg.MaxMessageBytes, cfg.CallTimeout = brittleLimit, 60*time.Second
	return cfg, func() int {
		b, _ := os.ReadFile(charges)
		return strings.Count(string(b), "charge\n")
	}
}

// brittleSSE serves the brittle server over legacy HTTP+SSE: a GET of
// /sse is one session, whose endpoint event names /message?s=N; a charge
// POSTed there is accepted (202), then the session's stream ends.
func brittleSSE(t *testing.T) (*configs.Upstream, func() int) {
	var (
		charges  atomic.Int64
		mu       sync.Mutex
		sessions = map[string]chan string{} // a session's outgoing messages; closed to end its stream
		n        int
	)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			mu.Lock()
			n++
			sid := fmt.Sprint(n)
			out := make(chan string, 16)
			sessions[sid] = out
			mu.Unlock()
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "event: endpoint\ndata: /message?s=%s\n\n", sid)
			w.(http.Flusher).Flush()
			for {
				select {
				case msg, ok := <-out:
					if !ok {
						return // the stream ends
					}
					fmt.Fprintf(w, "event: message\ndata: %s\n\n", msg)
					w.(http.Flusher).Flush()
				case <-r.Context().Done():
					return
				}
			}
		case http.MethodPost:
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			out := sessions[r.URL.Query().Get("s")]
			mu.Unlock()
			if out == nil {
				http.Error(w, "no session", http.StatusNotFound)
				return
			}
			reply, die := brittleReply(body)
			w.WriteHeader(http.StatusAccepted)
			switch {
			case die:
				charges.Add(1)
				mu.Lock()
				delete(sessions, r.URL.Query().Get("s"))
				mu.Unlock()
				close(out)
			case reply != "":
				out <- reply
			}
		}
	}))
	t.Cleanup(ts.Close)
	return &configs.Upstream{Name: "brittle-sse", Transport: configs.TransportSSE, URL: ts.URL + "/sse",
			ConnectTimeout: 10 * time.Second, CallTimeout: 60 * time.Second, MaxMessageBytes: brittleLimit},
		func() int { return int(charges.Load()) }
}

// brittleWS serves the brittle server over websocket; a charge read
// closes the connection at once.
func brittleWS(t *testing.T) (*configs.Upstream, func() int) {
	var charges atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{wsSubprotocol}})
		if err != nil {
			return
		}
		defer conn.CloseNow()
		conn.SetReadLimit(-1)
		for {
			_, msg, err := conn.Read(r.Context())
			if err != nil {
				return
			}
			reply, die := brittleReply(msg)
			if die {
				charges.Add(1)
				return // CloseNow: the TCP connection drops, no close frame
			}
			if reply != "" {
				if err := conn.Write(r.Context(), websocket.MessageText, []byte(reply)); err != nil {
					return
				}
			}
		}
	}))
	t.Cleanup(ts.Close)
	cfg := wsConfig("brittle-ws", "ws"+strings.TrimPrefix(ts.URL, "http"))
	cfg.MaxMessageBytes, cfg.CallTimeout = brittleLimit, 60*time.Second
	return cfg, func() int { return int(charges.Load()) }
}

// brittleHTTP serves the brittle server over streamable HTTP, each answer
// as a JSON body or, with stream, as an event of the POST's own stream.
func brittleHTTP(t *testing.T, name string, stream bool) *configs.Upstream {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		body, _ := io.ReadAll(r.Body)
		reply, _ := brittleReply(body)
		switch {
		case reply == "":
			w.WriteHeader(http.StatusAccepted)
		case stream:
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "event: message\ndata: %s\n\n", reply)
		default:
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, reply)
		}
	}))
	t.Cleanup(ts.Close)
	return &configs.Upstream{Name: name, Transport: configs.TransportHTTP, URL: ts.URL + "/mcp",
		ConnectTimeout: 10 * time.Second, CallTimeout: 60 * time.Second, MaxMessageBytes: brittleLimit}
}

// brittleOptions are the options of a brittle upstream: no probes, a
// quick reconnect, and ups told of each catalog published.
func brittleOptions(ups chan<- struct{}) Options {
	opts := fastOptions(&logSink{})
	opts.ProbeInterval = -1
	opts.MinBackoff = 10 * time.Millisecond
	opts.OnCatalog = func(u *Upstream) {
		if u.Catalog() != nil {
			select {
			case ups <- struct{}{}:
			default:
			}
		}
	}
	return opts
}

// TestCallInFlightWhenUpstreamGoesAway: a call the upstream read before
// going away (a stdio child that exits, an SSE stream that ends after the
// POST was accepted, a websocket dropped) fails at once with
// ErrOutcomeUnknown naming the upstream, and is never sent again: the
// upstream counts it once, also after viewmux reconnected.
func TestCallInFlightWhenUpstreamGoesAway(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		setup func(*testing.T) (*configs.Upstream, func() int)
	}{
		{"stdio", brittleStdio},
		{"sse", brittleSSE},
		{"websocket", brittleWS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, charges := tc.setup(t)
			ups := make(chan struct{}, 1)
			u := New(cfg, brittleOptions(ups))
			startUpstream(t, u)
			<-ups // the first catalog

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := u.Send(ctx, Request{Method: "tools/call", Target: "charge", Params: json.RawMessage(`{"name":"charge"}`)})
			if !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, ErrDown) || !strings.Contains(err.Error(), `upstream "`+cfg.Name+`"`) {
				t.Fatalf("the call in flight ended with %v; want ErrOutcomeUnknown naming the upstream", err)
			}
			select {
			case <-ups: // reconnected
			case <-ctx.Done():
				t.Fatal("viewmux did not reconnect")
			}
			if _, err := u.Send(ctx, Request{Method: "tools/call", Target: "echo", Params: json.RawMessage(`{"name":"echo"}`)}); err != nil {
				t.Fatalf("a call after the reconnect: %v", err)
			}
			if n := charges(); n != 1 {
				t.Fatalf("the upstream read the charge %d times, want once", n)
			}
		})
	}
}

// TestUnreadableAnswer: an answer viewmux refuses to read, for its depth
// (200,000 deep, the id before or after the nesting), its syntax or its
// size, ends its call at once with an error naming the upstream and the
// reason, on every transport, and the connection stays up.
func TestUnreadableAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		setup func(*testing.T) *configs.Upstream
	}{
		{"stdio", func(t *testing.T) *configs.Upstream { cfg, _ := brittleStdio(t); return cfg }},
		{"sse", func(t *testing.T) *configs.Upstream { cfg, _ := brittleSSE(t); return cfg }},
		{"websocket", func(t *testing.T) *configs.Upstream { cfg, _ := brittleWS(t); return cfg }},
		{"http json", func(t *testing.T) *configs.Upstream { return brittleHTTP(t, "brittle-json", false) }},
		{"http event stream", func(t *testing.T) *configs.Upstream { return brittleHTTP(t, "brittle-stream", true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := tc.setup(t)
			ups := make(chan struct{}, 1)
			u := New(cfg, brittleOptions(ups))
			startUpstream(t, u)
			before := u.Health()
			for _, answer := range []struct {
				tool, reason string
				is           error
			}{
				{"deep", "nested deeper than 10000 levels", ErrUnreadable},
				{"deep_last", "nested deeper than 10000 levels", ErrUnreadable},
				{"broken", "invalid character", ErrUnreadable},
				{"big", "exceeds max_message_bytes", ErrTooLarge},
			} {
				// The call timeout is a minute: a call left to it would
				// end with this ctx's deadline instead.
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				_, err := u.Send(ctx, Request{Method: "tools/call", Target: answer.tool, Params: json.RawMessage(`{"name":"` + answer.tool + `"}`)})
				cancel()
				if !errors.Is(err, answer.is) || !strings.Contains(err.Error(), `upstream "`+cfg.Name+`"`) || !strings.Contains(err.Error(), answer.reason) {
					t.Errorf("%s: the call ended with %v; want %v naming the upstream and %q", answer.tool, err, answer.is, answer.reason)
				}
			}
			if got := callText(t, u, "echo", map[string]any{}); got != "ok" {
				t.Errorf("echo = %q", got)
			}
			if after := u.Health(); after.Connects != before.Connects {
				t.Errorf("the connection did not stay up: before %+v, after %+v", before, after)
			}
		})
	}
}
