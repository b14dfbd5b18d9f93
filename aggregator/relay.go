package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/internal/lograte"
	"github.com/viewmux/viewmux/upstream"
)

// ErrAmbiguousCaller is returned when an upstream sends a request or a
// notification that belongs to one client session, and viewmux cannot tell
// which: never a guess.
var ErrAmbiguousCaller = errors.New("cannot tell which client session this belongs to")

// ErrClientLacksCapability is returned when an upstream asks the calling
// client for something (sampling, elicitation, roots) it did not declare.
var ErrClientLacksCapability = errors.New("the calling client did not declare this capability")

// relay tracks the requests viewmux has in flight on each upstream
// connection, so that what an upstream sends back (progress, log messages,
// sampling, elicitation and roots requests) reaches the client that caused
// it, and no other.
type relay struct {
	seq atomic.Uint64

	mu       sync.Mutex
	inflight map[*upstream.Upstream]map[*inflightCall]struct{} // connection → its calls
	spare    map[*inflightCall]struct{}                        // an empty one of inflight's, for reuse
	progress map[string]progressRoute                          // minted token → route
	links    map[string]string                                 // resource link URI → upstream
	subs     map[string]int                                    // "upstream\x00uri" → subscribers

	// keyLocks serialize forwarding the first subscribe and the last
	// unsubscribe of one URI, without one slow upstream holding up others.
	keyLocks map[string]*keyLock
}

// inflightCall is one client request in flight on one upstream connection.
// The ctx of its upstream request carries it (withCall), so that a
// transport that ties a server→client request to that request (streamable
// HTTP: the request's own response stream) hands it back.
type inflightCall struct {
	client Client
	seq    uint64 // order of beginning
}

type progressRoute struct {
	conn     *upstream.Upstream // the only connection whose progress it is
	client   Client
	original json.RawMessage
}

func newRelay() *relay {
	return &relay{
		inflight: make(map[*upstream.Upstream]map[*inflightCall]struct{}),
		progress: make(map[string]progressRoute),
		links:    make(map[string]string),
		subs:     make(map[string]int),
	}
}

// begin records a client request in flight on the connection u and returns
// it; end ends it.
func (r *relay) begin(u *upstream.Upstream, cl Client) *inflightCall {
	c := &inflightCall{client: cl, seq: r.seq.Add(1)}
	r.mu.Lock()
	m := r.inflight[u]
	if m == nil {
		if m, r.spare = r.spare, nil; m == nil {
			m = make(map[*inflightCall]struct{})
		}
		r.inflight[u] = m
	}
	m[c] = struct{}{}
	r.mu.Unlock()
	return c
}

// end ends the call c on u that begin returned.
func (r *relay) end(u *upstream.Upstream, c *inflightCall) {
	r.mu.Lock()
	m := r.inflight[u]
	delete(m, c)
	if len(m) == 0 {
		delete(r.inflight, u)
		r.spare = m // the next connection's first call reuses it
	}
	r.mu.Unlock()
}

// inflightCount returns how many client requests are in flight on u.
func (r *relay) inflightCount(u *upstream.Upstream) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.inflight[u])
}

// progressGrace is how long a call's progress token is still mapped back
// after the call returned: an upstream may write progress just after its
// result (mcp-go's server sends notifications from a queue of their own),
// and the client would get it directly. The door delivers it after the
// answer where it still can (a stream session), else lets it go.
const progressGrace = 2 * time.Second

// mintProgress replaces a client's progress token with one unique across
// every upstream connection and records where its notifications go: to cl,
// and only when they come from the connection u. The returned func
// forgets the mapping progressGrace later.
func (r *relay) mintProgress(u *upstream.Upstream, cl Client, original json.RawMessage) (json.RawMessage, func()) {
	tok := fmt.Sprintf("viewmux-%d", r.seq.Add(1))
	r.mu.Lock()
	r.progress[tok] = progressRoute{conn: u, client: cl, original: original}
	r.mu.Unlock()
	quoted, _ := json.Marshal(tok)
	return quoted, func() {
		time.AfterFunc(progressGrace, func() {
			r.mu.Lock()
			delete(r.progress, tok)
			r.mu.Unlock()
		})
	}
}

// connLink names one upstream connection for what it sends back: the
// connection itself (set as soon as upstream.New returns, before it is
// started) and, for a connection of a scope = "session" upstream, the one
// client session it serves.
type connLink struct {
	name    string
	u       *upstream.Upstream
	session string // "" for the shared connection

	// unaskedNoted is set once a request the upstream sent on its own
	// (no call in flight) was refused and logged at info: later ones are
	// logged at debug (clientHandler.relay).
	unaskedNoted atomic.Bool

	// spoofLog paces the log line of a resources/updated refused because
	// the connection's upstream does not serve that URI.
	spoofLog lograte.Every
}

// spoofLogEvery is how often a connection's refused resources/updated are
// logged at most; the line counts the ones in between.
const spoofLogEvery = 10 * time.Second

// owner returns the client a server→client request that arrived on the
// connection l belongs to, so that a request never reaches a session that
// did not cause it. It is the client whose call the transport tied the
// request to (ctx carries that call, see withCall), when that call is still
// in flight on this connection. Without such a tie, it is a call of l's
// session when l serves one session (a scope = "session" upstream): every
// call on that connection is that session's. Otherwise nothing says which
// call caused the request (stdio and websocket carry no link from a request
// to a call, and streamable HTTP has none outside a call's response stream),
// and the request is refused: delivering it to "the one call in flight"
// would hand one client's request, and the upstream the answer, to a session
// that did not cause it.
func (r *relay) owner(ctx context.Context, l *connLink) (cl Client, sessionWide bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	calls := r.inflight[l.u]
	if c := callFrom(ctx); c != nil {
		if _, ok := calls[c]; ok {
			return c.client, false, nil
		}
		return nil, false, fmt.Errorf("the call it was sent with has ended: %w", ErrAmbiguousCaller)
	}
	if l.session != "" {
		// The request is the session's, not any one call's: it is sent
		// through the oldest call in flight, and its answer is awaited for
		// as long as the session lasts (SessionWide), not only as long as
		// that call does.
		var first *inflightCall
		for c := range calls {
			if first == nil || c.seq < first.seq {
				first = c
			}
		}
		if first == nil {
			return nil, false, fmt.Errorf("no call of the client session this connection serves is in flight, and viewmux relays such requests only during a call: %w", ErrAmbiguousCaller)
		}
		return first.client, true, nil
	}
	return nil, false, fmt.Errorf("%w: %s", ErrAmbiguousCaller, untiedReason(l.u))
}

// sessionWideKey marks the ctx of a server→client request that belongs to
// a client session rather than to one of its calls (relay.owner).
type sessionWideKey struct{}

// SessionWide reports whether the server→client request whose ctx this is
// belongs to the client's session as a whole: one that a scope = "session"
// upstream sent outside any call's stream. Its answer is awaited for as
// long as the session lasts, and it may reach the client by another of the
// session's streams than the call it was handed to; a request tied to a
// call ends with that call.
func SessionWide(ctx context.Context) bool {
	v, _ := ctx.Value(sessionWideKey{}).(bool)
	return v
}

// unasked reports whether the connection l has no call in flight and ctx
// ties the request to none: the upstream sent it on its own (a roots/list
// right after initialize, say), not while serving a client.
func (r *relay) unasked(ctx context.Context, l *connLink) bool {
	if callFrom(ctx) != nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.inflight[l.u]) == 0
}

// untiedReason explains, to the upstream that sent it and in viewmux's log,
// why a server→client request on a shared connection was refused, and
// what to configure.
func untiedReason(u *upstream.Upstream) string {
	if u.Config().Scope == configs.ScopeSession {
		return fmt.Sprintf("this is upstream %q's shared connection, which serves its catalog and stateless requests: "+
			"only a client session's own connection takes requests for that session", u.Name())
	}
	how := "its " + u.Config().Transport + " transport does not say which call a request belongs to"
	if u.Config().Transport == configs.TransportHTTP {
		how = "it arrived outside the response stream of any call"
	}
	return fmt.Sprintf("upstream %q is one connection shared by every client session and %s; "+
		"to use sampling, elicitation or roots with this upstream, set scope = \"session\" in [upstreams.%s] "+
		"so that each client session gets a connection of its own", u.Name(), how, u.Name())
}

// logTarget returns the client a log message from the connection l goes
// to: for a shared connection, the only call in flight on it (nil with none
// or several: it is then no call's); for a session's connection, a call of
// that session (nil with none: it goes to nobody else).
func (r *relay) logTarget(l *connLink) Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	calls := r.inflight[l.u]
	if len(calls) != 1 && l.session == "" {
		return nil
	}
	var first *inflightCall
	for c := range calls {
		if first == nil || c.seq < first.seq {
			first = c
		}
	}
	if first == nil {
		return nil
	}
	return first.client
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

// learnLinks records the URIs of resource links in the content of a
// tools/call result, so that reading them is routed back to the upstream
// that returned them.
func (r *relay) learnLinks(upstream string, content []byte) {
	// The content items' own members only, in one pass that crosses a
	// large text or blob with bytes.IndexByte (bytes.Contains of a long
	// word is several times slower on it).
	var uris []string
	jsonrpc.ElementFields(content, linkKeys, func(f [][]byte) {
		var uri string
		if string(f[0]) == `"resource_link"` && json.Unmarshal(f[1], &uri) == nil && uri != "" {
			uris = append(uris, uri)
		}
	})
	r.learn(upstream, uris)
}

// learn records uris as resource links returned by upstream.
func (r *relay) learn(upstream string, uris []string) {
	if len(uris) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, uri := range uris {
		if len(r.links) < maxLinks {
			r.links[uri] = upstream
		}
	}
}

// linkKeys are the members of a content item learnLinks reads.
var linkKeys = []string{"type", "uri"}

// maxLinks bounds the link table; links past it are simply not routable.
const maxLinks = 100000

// linkFor returns the link table's entry for uri alone, in the shape
// Snapshot.RouteURI takes (nil when uri is no link).
func (r *relay) linkFor(uri string) map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if up, ok := r.links[uri]; ok {
		return map[string]string{uri: up}
	}
	return nil
}

func (r *relay) linkTable() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]string, len(r.links))
	for k, v := range r.links {
		out[k] = v
	}
	return out
}

// onCallNotification routes a notification that arrived on the response
// stream of the call ctx carries (see withCall): a log message goes to
// that call's client while the call is in flight on l, whatever else is
// in flight; everything else as onNotification.
// A log message of a call that has ended is no one else's: it is dropped
// (at debug), never handed to whichever call is in flight.
func (a *Aggregator) onCallNotification(ctx context.Context, l *connLink, n mcp.JSONRPCNotification) {
	call := callFrom(ctx)
	if n.Method != string(mcp.MethodNotificationMessage) || call == nil {
		a.onNotification(l, n)
		return
	}
	cl := a.relay.callClient(call, l)
	if cl == nil {
		a.log.Debug("log message from upstream not delivered: the call it came with has ended", "upstream", l.name)
		return
	}
	level, _ := n.Params.AdditionalFields["level"].(string)
	if want := cl.LogLevel(); want != "" && mcp.LoggingLevel(level).ShouldSendTo(want) {
		cl.Notify(string(mcp.MethodNotificationMessage), n.Params.AdditionalFields)
	}
}

// callClient returns the client of call when it is in flight on the
// connection l; else nil.
func (r *relay) callClient(call *inflightCall, l *connLink) Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.inflight[l.u][call]; ok {
		return call.client
	}
	return nil
}

// onNotification routes one notification from the connection l to the
// client it belongs to. It runs on the upstream's reader and must not
// block: Client.Notify only queues.
func (a *Aggregator) onNotification(l *connLink, n mcp.JSONRPCNotification) {
	switch n.Method {
	case string(mcp.MethodNotificationProgress):
		tok, _ := n.Params.AdditionalFields["progressToken"].(string)
		a.relay.mu.Lock()
		route, ok := a.relay.progress[tok]
		a.relay.mu.Unlock()
		if !ok || route.conn != l.u {
			return // minted tokens are guessable: another connection's is not relayed
		}
		params := make(map[string]any, len(n.Params.AdditionalFields))
		for k, v := range n.Params.AdditionalFields {
			params[k] = v
		}
		params["progressToken"] = route.original
		route.client.Notify(string(mcp.MethodNotificationProgress), params)
	case string(mcp.MethodNotificationMessage):
		cl := a.relay.logTarget(l)
		if cl == nil {
			// Not caused by any call (the upstream logs on its own): a
			// shared connection's goes to every session that asked for log
			// messages. With several calls in flight it may belong to one
			// of them, so it is not spread to others; a session's own
			// connection's belongs to that session only.
			if l.session == "" && a.relay.inflightCount(l.u) == 0 && a.opts.Hooks.Log != nil {
				a.opts.Hooks.Log(l.name, n.Params.AdditionalFields)
				return
			}
			a.log.Debug("log message from upstream not delivered", "upstream", l.name, "session", l.session)
			return
		}
		level, _ := n.Params.AdditionalFields["level"].(string)
		if want := cl.LogLevel(); want != "" && mcp.LoggingLevel(level).ShouldSendTo(want) {
			// Relayed with the upstream's params as sent.
			cl.Notify(string(mcp.MethodNotificationMessage), n.Params.AdditionalFields)
		}
	case string(mcp.MethodNotificationResourceUpdated):
		uri, _ := n.Params.AdditionalFields["uri"].(string)
		if uri == "" || a.opts.Hooks.ResourceUpdated == nil {
			return
		}
		exposed := uri
		snap := a.Snapshot()
		for _, rw := range snap.Rewrites {
			if rw.Upstream == l.name && rw.Original == uri {
				exposed = rw.Exposed
			}
		}
		// An upstream speaks only for itself: the update is taken only
		// from the upstream that URI is routed to, the one a read of it
		// would reach. Another's would tell clients of a change it cannot
		// know about, for a resource their view may not even show it.
		if owner, _, ok := snap.RouteURI(exposed, a.relay.linkFor(exposed)); !ok || owner != l.name {
			if log, more := l.spoofLog.Allow(); log {
				a.log.Warn("dropping resources/updated from upstream for a URI it does not serve",
					"upstream", l.name, "session", l.session, "uri", uri, "served_by", owner, "dropped_before", more)
			}
			return
		}
		// A session's own connection's update is that session's only:
		// the subscription it answers was made on that connection.
		a.opts.Hooks.ResourceUpdated(l.session, exposed)
	}
}

// clientHandler answers the sampling, elicitation and roots requests of
// the upstream connection l by asking the client whose call caused them
// (relay.owner), or refuses them when nothing says which client that is.
type clientHandler struct {
	a *Aggregator
	l *connLink
}

// onRequest is upstream.Options.OnRequest of the connection: the client's
// answer goes back as its bytes.
func (h clientHandler) onRequest(ctx context.Context, _ *upstream.Upstream, method string, params json.RawMessage) (json.RawMessage, error) {
	if len(params) == 0 {
		// No params member: none goes to the client either (a nil
		// json.RawMessage in an interface would be sent as "params":null,
		// which clients refuse).
		return h.relay(ctx, method, nil)
	}
	return h.relay(ctx, method, params)
}

// relay asks the calling client. A refusal's text reaches the upstream, so
// it says what to configure.
func (h clientHandler) relay(ctx context.Context, method string, params any) (json.RawMessage, error) {
	cl, sessionWide, err := h.a.relay.owner(ctx, h.l)
	if sessionWide {
		ctx = context.WithValue(ctx, sessionWideKey{}, true)
	}
	if err != nil {
		// A warning when the config can fix it (a shared upstream asked
		// while serving a client); otherwise what a scope = "session"
		// upstream's shared connection or an idle session's connection is
		// asked is only information. A shared connection asked with no
		// call in flight (servers ask for roots right after initialize,
		// before any client exists) is noted once at info, then at debug:
		// nobody waits for that answer, and it would warn on every start.
		level := slog.LevelWarn
		switch {
		case h.l.session == "" && h.a.relay.unasked(ctx, h.l):
			level = slog.LevelDebug
			if h.l.unaskedNoted.CompareAndSwap(false, true) {
				level = slog.LevelInfo
			}
		case h.l.session != "" || h.l.u.Config().Scope == configs.ScopeSession:
			level = slog.LevelInfo
		}
		h.a.log.Log(ctx, level, "server→client request refused", "upstream", h.l.name, "session", h.l.session, "method", method, "error", err)
		return nil, fmt.Errorf("%s from upstream %q: %w", method, h.l.name, err)
	}
	if err := checkCapability(cl, method); err != nil {
		return nil, fmt.Errorf("%s from upstream %q: %w", method, h.l.name, ErrClientLacksCapability)
	}
	return cl.Request(ctx, method, params)
}
