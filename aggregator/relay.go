package aggregator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

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
// and roots requests) reaches the client session that caused it.
type relay struct {
	seq atomic.Uint64

	mu       sync.Mutex
	inflight map[string]map[uint64]context.Context // upstream → call id → downstream ctx
	progress map[string]progressRoute              // minted token → route
	links    map[string]string                     // resource link URI → upstream
	subs     map[string]int                        // "upstream\x00uri" → subscribers
}

type progressRoute struct {
	ctx      context.Context
	original mcp.ProgressToken
}

func newRelay() *relay {
	return &relay{
		inflight: make(map[string]map[uint64]context.Context),
		progress: make(map[string]progressRoute),
		links:    make(map[string]string),
		subs:     make(map[string]int),
	}
}

// begin records a downstream request in flight to upstream and returns the
// function that ends it.
func (r *relay) begin(upstream string, ctx context.Context) func() {
	id := r.seq.Add(1)
	r.mu.Lock()
	m := r.inflight[upstream]
	if m == nil {
		m = make(map[uint64]context.Context)
		r.inflight[upstream] = m
	}
	m[id] = ctx
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
func (r *relay) mintProgress(ctx context.Context, original mcp.ProgressToken) (mcp.ProgressToken, func()) {
	tok := fmt.Sprintf("mcpmux-%d", r.seq.Add(1))
	r.mu.Lock()
	r.progress[tok] = progressRoute{ctx: ctx, original: original}
	r.mu.Unlock()
	return tok, func() {
		r.mu.Lock()
		delete(r.progress, tok)
		r.mu.Unlock()
	}
}

// caller returns the downstream context of the request that caused ctx's
// upstream request: ctx itself when the transport tied it to the call, else
// the only request in flight to that upstream.
func (r *relay) caller(ctx context.Context, upstream string) (context.Context, error) {
	if server.ClientSessionFromContext(ctx) != nil && server.ServerFromContext(ctx) != nil {
		return ctx, nil
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

// learnLinks records the URIs of resource links an upstream returned, so
// that reading them is routed back to it.
func (r *relay) learnLinks(upstream string, res *mcp.CallToolResult) {
	if res == nil {
		return
	}
	for _, c := range res.Content {
		var uri string
		switch v := c.(type) {
		case mcp.ResourceLink:
			uri = v.URI
		case *mcp.ResourceLink:
			uri = v.URI
		default:
			continue
		}
		r.mu.Lock()
		if len(r.links) < maxLinks {
			r.links[uri] = upstream
		}
		r.mu.Unlock()
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

// callState is carried in the context of each routed call, so that
// notifications forwarded on its behalf can be accounted for.
type callState struct{ notified atomic.Bool }

type callStateKey struct{}

func withCallState(ctx context.Context) (context.Context, *callState) {
	st := &callState{}
	return context.WithValue(ctx, callStateKey{}, st), st
}

func markNotified(ctx context.Context) {
	if st, ok := ctx.Value(callStateKey{}).(*callState); ok {
		st.notified.Store(true)
	}
}

// Bounds of settle: how long a result may wait for the notifications it
// follows, and the grace after the queue is empty.
const (
	settleMax   = 50 * time.Millisecond
	settleGrace = 2 * time.Millisecond
)

// settle delays a result whose call forwarded notifications until the
// session's notification queue has drained, plus a short grace. mcp-go's
// streamable HTTP server drops a notification that its per-request
// forwarder dequeued after the response completed (mcp-go #969), so a
// progress or log message relayed just before the result would otherwise be
// lost on this hop.
func settle(ctx context.Context, st *callState) {
	if !st.notified.Load() {
		return
	}
	sess := server.ClientSessionFromContext(ctx)
	if sess == nil {
		return
	}
	deadline := time.Now().Add(settleMax)
	for len(sess.NotificationChannel()) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Microsecond)
	}
	time.Sleep(settleGrace)
}

// onNotification routes one upstream notification to the session it
// belongs to. It runs on the upstream's reader and must not block; every
// send below is a non-blocking queue write.
func (a *Aggregator) onNotification(u *upstream.Upstream, n mcp.JSONRPCNotification) {
	switch n.Method {
	case string(mcp.MethodNotificationProgress):
		tok := fmt.Sprint(n.Params.AdditionalFields["progressToken"])
		a.relay.mu.Lock()
		route, ok := a.relay.progress[tok]
		a.relay.mu.Unlock()
		if !ok {
			return
		}
		params := make(map[string]any, len(n.Params.AdditionalFields))
		for k, v := range n.Params.AdditionalFields {
			params[k] = v
		}
		params["progressToken"] = route.original
		if srv := server.ServerFromContext(route.ctx); srv != nil {
			markNotified(route.ctx)
			if err := srv.SendNotificationToClient(route.ctx, string(mcp.MethodNotificationProgress), params); err != nil {
				a.log.Debug("progress not delivered", "upstream", u.Name(), "error", err)
			}
		}
	case string(mcp.MethodNotificationMessage):
		ctx, err := a.relay.caller(context.Background(), u.Name())
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
		if !logWanted(ctx, mcp.LoggingLevel(level)) {
			return
		}
		// Relayed with the upstream's params as sent: mcp-go's
		// SendLogMessageToClient would rebuild them (adding "logger": "").
		if srv := server.ServerFromContext(ctx); srv != nil {
			markNotified(ctx)
			if err := srv.SendNotificationToClient(ctx, string(mcp.MethodNotificationMessage), n.Params.AdditionalFields); err != nil {
				a.log.Debug("log message not delivered", "upstream", u.Name(), "error", err)
			}
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

// logWanted applies the calling client's log level: the per-request level
// of a 2026-07-28 request (none: no log messages), else the level the session
// set with logging/setLevel, as mcp-go does for its own log messages.
func logWanted(ctx context.Context, level mcp.LoggingLevel) bool {
	if info := server.RequestProtocolInfoFromContext(ctx); info != nil && info.Modern {
		return info.LogLevel != "" && level.ShouldSendTo(info.LogLevel)
	}
	sess, ok := server.ClientSessionFromContext(ctx).(server.SessionWithLogging)
	return ok && level.ShouldSendTo(sess.GetLogLevel())
}

// clientHandler answers an upstream's sampling, elicitation and roots
// requests by asking the client session whose call caused them.
type clientHandler struct {
	a        *Aggregator
	upstream string
}

var (
	_ client.SamplingHandler    = clientHandler{}
	_ client.ElicitationHandler = clientHandler{}
	_ client.RootsHandler       = clientHandler{}
)

func (h clientHandler) target(ctx context.Context, method string, has func(mcp.ClientCapabilities) bool) (context.Context, *server.MCPServer, error) {
	dctx, err := h.a.relay.caller(ctx, h.upstream)
	if err != nil {
		return nil, nil, fmt.Errorf("%s from upstream %q: %w", method, h.upstream, err)
	}
	srv := server.ServerFromContext(dctx)
	sess := server.ClientSessionFromContext(dctx)
	if srv == nil || sess == nil {
		return nil, nil, fmt.Errorf("%s from upstream %q: %w", method, h.upstream, ErrAmbiguousCaller)
	}
	if ci, ok := sess.(server.SessionWithClientInfo); ok && !has(ci.GetClientCapabilities()) {
		return nil, nil, fmt.Errorf("%s from upstream %q: %w", method, h.upstream, ErrClientLacksCapability)
	}
	return dctx, srv, nil
}

// CreateMessage relays sampling/createMessage.
func (h clientHandler) CreateMessage(ctx context.Context, req mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
	dctx, srv, err := h.target(ctx, "sampling/createMessage", func(c mcp.ClientCapabilities) bool { return c.Sampling != nil })
	if err != nil {
		return nil, err
	}
	return srv.RequestSampling(dctx, req)
}

// Elicit relays elicitation/create. It waits as long as the calling
// client's request lives: no fixed cap on human-paced answers.
func (h clientHandler) Elicit(ctx context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	dctx, srv, err := h.target(ctx, "elicitation/create", func(c mcp.ClientCapabilities) bool { return c.Elicitation != nil })
	if err != nil {
		return nil, err
	}
	return srv.RequestElicitation(dctx, req)
}

// ListRoots relays roots/list: the upstream gets the calling client's roots.
func (h clientHandler) ListRoots(ctx context.Context, req mcp.ListRootsRequest) (*mcp.ListRootsResult, error) {
	dctx, srv, err := h.target(ctx, "roots/list", func(c mcp.ClientCapabilities) bool { return c.Roots != nil })
	if err != nil {
		return nil, err
	}
	return srv.RequestRoots(dctx, req)
}
