package aggregator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpmux/mcpmux/upstream"
)

// ErrAmbiguousCaller is returned when an upstream sends a request or a
// notification that belongs to one client session, and mcpmux cannot tell
// which: never a guess.
var ErrAmbiguousCaller = errors.New("cannot tell which client session this belongs to")

// ErrClientLacksCapability is returned when an upstream asks the calling
// client for something (sampling, elicitation, roots) it did not declare.
var ErrClientLacksCapability = errors.New("the calling client did not declare this capability")

// relay tracks the requests mcpmux has in flight to each upstream, so that
// what an upstream sends back (progress, log messages, sampling, elicitation
// and roots requests) reaches the client that caused it.
type relay struct {
	seq atomic.Uint64

	mu       sync.Mutex
	inflight map[string]map[uint64]Client // upstream → call id → client
	progress map[string]progressRoute     // minted token → route
	links    map[string]string            // resource link URI → upstream
	subs     map[string]int               // "upstream\x00uri" → subscribers

	// keyLocks serialize forwarding the first subscribe and the last
	// unsubscribe of one URI, without one slow upstream holding up others.
	keyLocks map[string]*keyLock
}

type progressRoute struct {
	upstream string // the only upstream whose progress it is
	client   Client
	original json.RawMessage
}

func newRelay() *relay {
	return &relay{
		inflight: make(map[string]map[uint64]Client),
		progress: make(map[string]progressRoute),
		links:    make(map[string]string),
		subs:     make(map[string]int),
	}
}

// begin records a client request in flight to upstream and returns the
// function that ends it.
func (r *relay) begin(upstream string, cl Client) func() {
	id := r.seq.Add(1)
	r.mu.Lock()
	m := r.inflight[upstream]
	if m == nil {
		m = make(map[uint64]Client)
		r.inflight[upstream] = m
	}
	m[id] = cl
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.inflight[upstream], id)
		r.mu.Unlock()
	}
}

// inflightCount returns how many client requests are in flight to upstream.
func (r *relay) inflightCount(upstream string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.inflight[upstream])
}

// mintProgress replaces a client's progress token with one unique across
// every upstream connection and records where its notifications go.
func (r *relay) mintProgress(upstream string, cl Client, original json.RawMessage) (json.RawMessage, func()) {
	tok := fmt.Sprintf("mcpmux-%d", r.seq.Add(1))
	r.mu.Lock()
	r.progress[tok] = progressRoute{upstream: upstream, client: cl, original: original}
	r.mu.Unlock()
	quoted, _ := json.Marshal(tok)
	return quoted, func() {
		r.mu.Lock()
		delete(r.progress, tok)
		r.mu.Unlock()
	}
}

// caller returns the client whose call caused an upstream's request or
// notification: the one ctx carries when the transport tied it to the call,
// else the only request in flight to that upstream.
func (r *relay) caller(ctx context.Context, upstream string) (Client, error) {
	if cl := clientFrom(ctx); cl != nil {
		return cl, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.inflight[upstream]
	if len(m) == 1 {
		for _, c := range m {
			return c, nil
		}
	}
	return nil, fmt.Errorf("upstream %q: %d client requests in flight: %w", upstream, len(m), ErrAmbiguousCaller)
}

type keyLock struct {
	mu sync.Mutex
	n  int // holders and waiters
}

// lockKey locks key and returns the function that unlocks it.
func (r *relay) lockKey(key string) func() {
	r.mu.Lock()
	if r.keyLocks == nil {
		r.keyLocks = make(map[string]*keyLock)
	}
	l := r.keyLocks[key]
	if l == nil {
		l = &keyLock{}
		r.keyLocks[key] = l
	}
	l.n++
	r.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		r.mu.Lock()
		if l.n--; l.n == 0 {
			delete(r.keyLocks, key)
		}
		r.mu.Unlock()
	}
}

// subscribers returns the number of subscribers of key.
func (r *relay) subscribers(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.subs[key]
}

// addSubscriber changes the number of subscribers of key by delta and
// returns the new number.
func (r *relay) addSubscriber(key string, delta int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.subs[key] + delta
	if n <= 0 {
		delete(r.subs, key)
		return 0
	}
	r.subs[key] = n
	return n
}

// learnLinks records the URIs of resource links in a tools/call result,
// so that reading them is routed back to the upstream that returned them.
func (r *relay) learnLinks(upstream string, res json.RawMessage) {
	if !bytes.Contains(res, []byte(`"resource_link"`)) {
		return
	}
	var result struct {
		Content []struct {
			Type string `json:"type"`
			URI  string `json:"uri"`
		} `json:"content"`
	}
	if json.Unmarshal(res, &result) != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range result.Content {
		if c.Type == "resource_link" && c.URI != "" && len(r.links) < maxLinks {
			r.links[c.URI] = upstream
		}
	}
}

// maxLinks bounds the link table; links past it are simply not routable.
const maxLinks = 100000

func (r *relay) linkTable() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]string, len(r.links))
	for k, v := range r.links {
		out[k] = v
	}
	return out
}

// onNotification routes one upstream notification to the client it
// belongs to. It runs on the upstream's reader and must not block:
// Client.Notify only queues.
func (a *Aggregator) onNotification(u *upstream.Upstream, n mcp.JSONRPCNotification) {
	switch n.Method {
	case string(mcp.MethodNotificationProgress):
		tok, _ := n.Params.AdditionalFields["progressToken"].(string)
		a.relay.mu.Lock()
		route, ok := a.relay.progress[tok]
		a.relay.mu.Unlock()
		if !ok || route.upstream != u.Name() {
			return // minted tokens are guessable: another upstream's is not relayed
		}
		params := make(map[string]any, len(n.Params.AdditionalFields))
		for k, v := range n.Params.AdditionalFields {
			params[k] = v
		}
		params["progressToken"] = route.original
		route.client.Notify(string(mcp.MethodNotificationProgress), params)
	case string(mcp.MethodNotificationMessage):
		cl, err := a.relay.caller(context.Background(), u.Name())
		if err != nil {
			// Not caused by any call (the upstream logs on its own): it
			// goes to every session that asked for log messages. With
			// several calls in flight it may belong to one of them, so it
			// is not spread to others.
			if a.relay.inflightCount(u.Name()) == 0 && a.onLog != nil {
				a.onLog(n.Params.AdditionalFields)
				return
			}
			a.log.Debug("log message from upstream not delivered", "upstream", u.Name(), "error", err)
			return
		}
		level, _ := n.Params.AdditionalFields["level"].(string)
		if want := cl.LogLevel(); want != "" && mcp.LoggingLevel(level).ShouldSendTo(want) {
			// Relayed with the upstream's params as sent.
			cl.Notify(string(mcp.MethodNotificationMessage), n.Params.AdditionalFields)
		}
	case string(mcp.MethodNotificationResourceUpdated):
		uri, _ := n.Params.AdditionalFields["uri"].(string)
		if uri == "" || a.onResourceUpdated == nil {
			return
		}
		exposed := uri
		snap := a.Snapshot()
		for _, rw := range snap.Rewrites {
			if rw.Upstream == u.Name() && rw.Original == uri {
				exposed = rw.Exposed
			}
		}
		a.onResourceUpdated(exposed)
	}
}

// clientHandler answers an upstream's sampling, elicitation and roots
// requests by asking the client whose call caused them.
type clientHandler struct {
	a        *Aggregator
	upstream string
}

var (
	_ client.SamplingHandler    = clientHandler{}
	_ client.ElicitationHandler = clientHandler{}
	_ client.RootsHandler       = clientHandler{}
)

// ask relays one server→client request to the calling client and decodes
// its answer into out.
func (h clientHandler) ask(ctx context.Context, method string, params, out any) error {
	cl, err := h.a.relay.caller(ctx, h.upstream)
	if err != nil {
		return fmt.Errorf("%s from upstream %q: %w", method, h.upstream, err)
	}
	if err := checkCapability(cl, method); err != nil {
		return fmt.Errorf("%s from upstream %q: %w", method, h.upstream, ErrClientLacksCapability)
	}
	res, err := cl.Request(ctx, method, params)
	if err != nil {
		return err
	}
	return json.Unmarshal(res, out)
}

// CreateMessage relays sampling/createMessage.
func (h clientHandler) CreateMessage(ctx context.Context, req mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
	var res mcp.CreateMessageResult
	if err := h.ask(ctx, string(mcp.MethodSamplingCreateMessage), req.CreateMessageParams, &res); err != nil {
		return nil, err
	}
	content, err := mcp.ParseSamplingContent(res.Content)
	if err != nil {
		return nil, fmt.Errorf("sampling/createMessage from upstream %q: the client's result: %w", h.upstream, err)
	}
	res.Content = content
	return &res, nil
}

// Elicit relays elicitation/create. It waits as long as the calling
// client's request lives: no fixed cap on human-paced answers.
func (h clientHandler) Elicit(ctx context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	var res mcp.ElicitationResult
	if err := h.ask(ctx, string(mcp.MethodElicitationCreate), req.Params, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// ListRoots relays roots/list: the upstream gets the calling client's roots.
func (h clientHandler) ListRoots(ctx context.Context, req mcp.ListRootsRequest) (*mcp.ListRootsResult, error) {
	var res mcp.ListRootsResult
	if err := h.ask(ctx, string(mcp.MethodListRoots), req.Params, &res); err != nil {
		return nil, err
	}
	return &res, nil
}
