package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/upstream"
)

// testClient is a Client that records what reaches it.
type testClient struct {
	name    string
	session string
	caller  string
	notes   []string
}

func (c *testClient) Notify(method string, _ any) { c.notes = append(c.notes, method) }
func (c *testClient) Request(context.Context, string, any) (json.RawMessage, error) {
	return json.RawMessage(`{}`), nil
}
func (c *testClient) Capabilities() mcp.ClientCapabilities {
	return mcp.ClientCapabilities{Sampling: &mcp.SamplingCapability{}}
}
func (c *testClient) LogLevel() mcp.LoggingLevel { return mcp.LoggingLevelDebug }
func (c *testClient) Modern() bool               { return false }
func (c *testClient) Session() string            { return c.session }
func (c *testClient) Caller() string             { return c.caller }

// testLink returns the link of a connection (never started) of an upstream
// named name over transport, serving session ("" = shared).
func testLink(name, transport, session string) *connLink {
	uc := &configs.Upstream{Name: name, Transport: transport, Command: "unused", Scope: configs.ScopeShared}
	return &connLink{name: name, session: session, u: upstream.New(uc, upstream.Options{})}
}

// TestOwnerSharedUntied is issue 9, item 5: on a shared stdio connection,
// a server→client request with nothing tying it to a call is refused even
// when exactly one call (another session's) is in flight, and the refusal
// says what to configure.
func TestOwnerSharedUntied(t *testing.T) {
	for _, transport := range []string{configs.TransportStdio, configs.TransportWebsocket, configs.TransportHTTP} {
		t.Run(transport, func(t *testing.T) {
			r := newRelay()
			l := testLink("late", transport, "")
			victim := &testClient{name: "victim", session: "B"}
			_, end := beginCall(r, l.u, victim)
			defer end()
			cl, _, err := r.owner(context.Background(), l)
			if cl != nil {
				t.Fatalf("the request went to %v, want it refused", cl.(*testClient).name)
			}
			if !errors.Is(err, ErrAmbiguousCaller) {
				t.Fatalf("err = %v, want ErrAmbiguousCaller", err)
			}
			for _, want := range []string{`scope = "session"`, "[upstreams.late]"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %s", err, want)
				}
			}
		})
	}
}

// TestOwnerSharedOfSessionScope checks the refusal on the shared
// connection of a scope = "session" upstream: it does not advise setting
// what is already set.
func TestOwnerSharedOfSessionScope(t *testing.T) {
	r := newRelay()
	uc := &configs.Upstream{Name: "late", Transport: configs.TransportStdio, Command: "unused", Scope: configs.ScopeSession}
	l := &connLink{name: "late", u: upstream.New(uc, upstream.Options{})}
	_, end := beginCall(r, l.u, &testClient{name: "stateless"})
	defer end()
	cl, _, err := r.owner(context.Background(), l)
	if cl != nil || !errors.Is(err, ErrAmbiguousCaller) {
		t.Fatalf("owner = %v, %v; want a refusal", cl, err)
	}
	if strings.Contains(err.Error(), "set scope") || !strings.Contains(err.Error(), "shared connection") {
		t.Errorf("error %q: want it to say this is the shared connection, without advising scope", err)
	}
}

// TestOwnerTied checks the transport's tie: the ctx of the call the
// request came with names its client, while that call is in flight on
// this connection; not once it ended, and not on another connection.
func TestOwnerTied(t *testing.T) {
	r := newRelay()
	l := testLink("h", configs.TransportHTTP, "")
	other := testLink("h2", configs.TransportHTTP, "")
	a, b := &testClient{name: "A"}, &testClient{name: "B"}
	callA, endA := beginCall(r, l.u, a)
	_, endB := beginCall(r, l.u, b)
	defer endB()
	ctx := withCall(context.Background(), callA)
	if cl, wide, err := r.owner(ctx, l); err != nil || cl != a || wide {
		t.Fatalf("owner = %v, %v; want A", cl, err)
	}
	if cl, _, err := r.owner(ctx, other); err == nil {
		t.Errorf("a call tied on another connection reached %v", cl.(*testClient).name)
	}
	endA()
	if cl, _, err := r.owner(ctx, l); err == nil {
		t.Errorf("a request tied to an ended call reached %v", cl.(*testClient).name)
	}
}

// TestOwnerSessionConnection checks a scope = "session" connection: what
// arrives on it goes to a call of its session, the oldest in flight, and
// is refused when the session has none in flight.
func TestOwnerSessionConnection(t *testing.T) {
	r := newRelay()
	l := testLink("s", configs.TransportStdio, "A")
	if cl, _, err := r.owner(context.Background(), l); err == nil {
		t.Fatalf("with no call in flight the request reached %v", cl.(*testClient).name)
	}
	first, second := &testClient{name: "first", session: "A"}, &testClient{name: "second", session: "A"}
	_, end1 := beginCall(r, l.u, first)
	_, end2 := beginCall(r, l.u, second)
	defer end2()
	if cl, wide, err := r.owner(context.Background(), l); err != nil || cl != first || !wide {
		t.Fatalf("owner = %v, %v, %v; want the oldest call, for the session as a whole", cl, wide, err)
	}
	end1()
	if cl, _, err := r.owner(context.Background(), l); err != nil || cl != second {
		t.Fatalf("owner = %v, %v; want the call left", cl, err)
	}
}

// TestNotificationsStayOnTheirConnection checks that progress minted for a
// call on one connection is not relayed from another connection of the
// same upstream (a session's own), and that a session connection's log
// messages reach only that session.
func TestNotificationsStayOnTheirConnection(t *testing.T) {
	var broadcast int
	a := New(&configs.Config{}, Options{Hooks: Hooks{Log: func(up string, _ map[string]any) {
		if up != "u" {
			t.Errorf("a log message of upstream u was handed on as %q's", up)
		}
		broadcast++
	}}})
	shared := testLink("u", configs.TransportStdio, "")
	mine := testLink("u", configs.TransportStdio, "A")
	cl := &testClient{name: "B", session: "B"}
	tok, forget := a.relay.mintProgress(shared.u, cl, json.RawMessage(`"t"`))
	defer forget()
	var minted string
	json.Unmarshal(tok, &minted)
	progress := mcp.JSONRPCNotification{}
	progress.Method = string(mcp.MethodNotificationProgress)
	progress.Params.AdditionalFields = map[string]any{"progressToken": minted, "progress": 1}
	a.onNotification(mine, progress)
	if len(cl.notes) != 0 {
		t.Errorf("progress from session A's connection reached B: %v", cl.notes)
	}
	a.onNotification(shared, progress)
	if len(cl.notes) != 1 {
		t.Errorf("progress from the call's own connection: %v, want it relayed once", cl.notes)
	}

	logMsg := mcp.JSONRPCNotification{}
	logMsg.Method = string(mcp.MethodNotificationMessage)
	logMsg.Params.AdditionalFields = map[string]any{"level": "error", "data": "x"}
	a.onNotification(mine, logMsg)
	if broadcast != 0 {
		t.Errorf("a log message of session A's connection, with no call in flight, was spread to every session")
	}
	a.onNotification(shared, logMsg)
	if broadcast != 1 {
		t.Errorf("a log message of the shared connection with no call in flight reached onLog %d times, want 1", broadcast)
	}
}

// TestCallNotificationReachesItsCall: a log message that arrived on the
// response stream of one call (streamable HTTP) reaches that call's client
// even while another session's call is in flight on the same shared
// connection, and no one else; once that call ended it is no call's.
func TestCallNotificationReachesItsCall(t *testing.T) {
	a := New(&configs.Config{}, Options{})
	l := testLink("h", configs.TransportHTTP, "")
	ca, cb := &testClient{name: "A", session: "A"}, &testClient{name: "B", session: "B"}
	callA, endA := beginCall(a.relay, l.u, ca)
	_, endB := beginCall(a.relay, l.u, cb)
	defer endB()
	logMsg := mcp.JSONRPCNotification{}
	logMsg.Method = string(mcp.MethodNotificationMessage)
	logMsg.Params.AdditionalFields = map[string]any{"level": "info", "data": "for A"}
	ctx := withCall(context.Background(), callA)
	a.onCallNotification(ctx, l, logMsg)
	if len(ca.notes) != 1 || len(cb.notes) != 0 {
		t.Fatalf("A got %v, B got %v; want the log at A only", ca.notes, cb.notes)
	}
	endA()
	a.onCallNotification(ctx, l, logMsg)
	if len(ca.notes) != 1 || len(cb.notes) != 0 {
		t.Errorf("after A's call ended: A got %v, B got %v; want nothing more", ca.notes, cb.notes)
	}
}

// levelRecorder is a slog.Handler that records each record's level and
// message.
type levelRecorder struct {
	mu   sync.Mutex
	recs []string
}

func (h *levelRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *levelRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Level.String()+" "+r.Message)
	return nil
}
func (h *levelRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *levelRecorder) WithGroup(string) slog.Handler      { return h }

func (h *levelRecorder) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.recs
	h.recs = nil
	return out
}

// TestUnaskedRequestIsNotAWarning is issue 18, item 6: server-filesystem
// and server-everything send roots/list right after initialize, before any
// client exists. On a shared connection it is still refused (nothing can
// answer it), but logged once at info and then at debug, not as a warning
// on every start; asked while a client's call is in flight, it stays a
// warning, since that client's use of roots is what fails.
func TestUnaskedRequestIsNotAWarning(t *testing.T) {
	rec := &levelRecorder{}
	a := &Aggregator{relay: newRelay(), log: slog.New(rec)}
	h := clientHandler{a: a, l: testLink("fs", configs.TransportStdio, "")}
	want := []string{"INFO server→client request refused", "DEBUG server→client request refused", "DEBUG server→client request refused"}
	for range want {
		if _, err := h.relay(context.Background(), "roots/list", nil); !errors.Is(err, ErrAmbiguousCaller) {
			t.Fatalf("err = %v, want ErrAmbiguousCaller", err)
		}
	}
	if got := rec.take(); !slices.Equal(got, want) {
		t.Errorf("with no call in flight, logged %q, want %q", got, want)
	}

	_, end := beginCall(a.relay, h.l.u, &testClient{name: "other", session: "B"})
	defer end()
	if _, err := h.relay(context.Background(), "roots/list", nil); !errors.Is(err, ErrAmbiguousCaller) {
		t.Fatalf("err = %v, want ErrAmbiguousCaller", err)
	}
	if got := rec.take(); !slices.Equal(got, []string{"WARN server→client request refused"}) {
		t.Errorf("with another session's call in flight, logged %q, want one warning", got)
	}
}

// TestResourceUpdatedOwnership is issue 17, finding 6: a
// resources/updated is taken only from the upstream the URI routes to,
// through a listed resource, a rewritten clash, a template or a resource
// link; any other upstream's is dropped.
func TestResourceUpdatedOwnership(t *testing.T) {
	namer := Namer{Separator: "__", MaxLength: 64}
	tpl := mcp.NewResourceTemplate("tpl://{id}", "t")
	resCaps := mcp.ServerCapabilities{Resources: &struct {
		Subscribe   bool `json:"subscribe,omitempty"`
		ListChanged bool `json:"listChanged,omitempty"`
	}{}}
	sources := []*source{
		testSource("alpha", "alpha", &upstream.Catalog{Capabilities: resCaps,
			Resources: []mcp.Resource{{URI: "file:///a"}, {URI: "file:///shared"}}}, configs.RuleSet{}, nil, nil),
		testSource("beta", "beta", &upstream.Catalog{Capabilities: resCaps,
			Resources:         []mcp.Resource{{URI: "file:///shared"}},
			ResourceTemplates: []mcp.ResourceTemplate{tpl}}, configs.RuleSet{}, nil, nil),
		testSource("gamma", "gamma", &upstream.Catalog{}, configs.RuleSet{}, nil, nil),
	}
	var got []string
	a := &Aggregator{log: slog.New(slog.DiscardHandler), relay: newRelay(),
		opts: Options{Hooks: Hooks{ResourceUpdated: func(_, uri string) { got = append(got, uri) }}}}
	a.snap.Store(build(1, namer, sources))
	a.relay.learnLinks("gamma", []byte(`[{"type":"resource_link","uri":"link://g"}]`))
	send := func(from, uri string) {
		l := testLink(from, configs.TransportStdio, "")
		n := mcp.JSONRPCNotification{JSONRPC: mcp.JSONRPC_VERSION}
		n.Method = string(mcp.MethodNotificationResourceUpdated)
		n.Params.AdditionalFields = map[string]any{"uri": uri}
		a.onNotification(l, n)
	}
	for _, tc := range []struct {
		from, uri string
		want      string // the exposed URI delivered; "" = dropped
	}{
		{"alpha", "file:///a", "file:///a"},
		{"beta", "file:///a", ""},
		{"gamma", "file:///a", ""},
		{"alpha", "file:///shared", "file:///shared"},
		{"beta", "file:///shared", "viewmux-beta+file:///shared"}, // its rewritten claim
		{"beta", "tpl://42", "tpl://42"},
		{"alpha", "tpl://42", ""},
		{"gamma", "link://g", "link://g"},
		{"alpha", "link://g", ""},
		{"alpha", "file:///nobody", ""},
	} {
		got = nil
		send(tc.from, tc.uri)
		switch {
		case tc.want == "" && len(got) != 0:
			t.Errorf("%s's update of %s was delivered as %v, want it dropped", tc.from, tc.uri, got)
		case tc.want != "" && (len(got) != 1 || got[0] != tc.want):
			t.Errorf("%s's update of %s delivered %v, want [%s]", tc.from, tc.uri, got, tc.want)
		}
	}
}

// TestHopMeta: what the upstream hop gets of each member of a client's
// _meta. A progress token is minted anew; a key only case-folding decoders
// read as progressToken is dropped, so no client can hand an upstream a
// token viewmux did not mint (one that could be another session's); the
// client's own hop keys are dropped; anything else passes as sent.
func TestHopMeta(t *testing.T) {
	a := New(&configs.Config{}, Options{})
	u := testLink("u", configs.TransportStdio, "").u
	cl := &testClient{name: "A", session: "A"}
	params := json.RawMessage(`{"name":"t","_meta":{"ProgressToken":"viewmux-p-1","trace":{"x":1},"io.modelcontextprotocol/protocolVersion":"x","progressToken":"mine"}}`)
	var forget func()
	out, err := jsonrpc.Rewrite(params, map[string]any{"name": "t"}, func(k string, v json.RawMessage) json.RawMessage {
		v, f := a.hopMeta(u, cl, k, v)
		if f != nil {
			forget = f
		}
		return v
	})
	if err != nil {
		t.Fatal(err)
	}
	if forget == nil {
		t.Fatal("the progress token was not minted")
	}
	defer forget()
	var got struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	tok := string(got.Meta["progressToken"])
	if tok == "" || tok == `"mine"` || tok == `"viewmux-p-1"` {
		t.Errorf("progressToken = %s, want a minted one", tok)
	}
	if string(got.Meta["trace"]) != `{"x":1}` || len(got.Meta) != 2 || strings.Contains(string(out), "ProgressToken") || strings.Contains(string(out), "io.modelcontextprotocol") {
		t.Errorf("hop _meta = %s", out)
	}
}

// beginCall begins a call on u and returns it and the function that ends
// it.
func beginCall(r *relay, u *upstream.Upstream, cl Client) (*inflightCall, func()) {
	c := r.begin(u, cl)
	return c, func() { r.end(u, c) }
}
