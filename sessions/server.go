// Package sessions owns downstream sessions, one model for every door: the
// registry, binding each session to its shared view, the /mcp and stdio
// doors and the host of the stream doors (package door: /ws, /sse), the
// gate that answers hidden and unknown tools, and notification fan-out
// when the catalog changes.
package sessions

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/viewmux/viewmux/aggregator"
	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/audit"
	"github.com/viewmux/viewmux/internal/glob"
	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/internal/ratelimit"
	"github.com/viewmux/viewmux/sessions/door"
	"github.com/viewmux/viewmux/sessions/grant"
	"github.com/viewmux/viewmux/sessions/httpd"
	"github.com/viewmux/viewmux/upstream"
)

// Server serves the aggregate to downstream clients. Build it with New; its
// Handler serves HTTP. Its methods are safe for concurrent use.
type Server struct {
	cfg      *configs.Config
	agg      *aggregator.Aggregator
	registry *filter.Registry
	resolver atomic.Pointer[grant.Resolver]
	log      *slog.Logger
	version  string
	// writeTimeout bounds each write to a client (Options.WriteTimeout).
	writeTimeout time.Duration
	tracer       trace.Tracer // nil = no spans (Options.Tracer)

	origins []*glob.Glob
	metrics *metrics
	audit   *audit.Log         // nil = no audit log
	limits  ratelimit.Limiters // sessions' rate limits; stateless callers' are in fleet
	fleet   *fleetRate         // stateless callers' rate limits, for the fleet (fleetrate.go)
	slots   sessionSlots       // server.max_sessions, every door (limits.go)
	unread  callerBytes        // server.max_pending_bytes_per_caller (backlog.go)
	reclaim reclaimer          // what callers over unread.max let go, back to the system (reclaim.go)

	started   atomic.Bool   // the first connection attempt of every upstream is over
	startedCh chan struct{} // closed by MarkStarted
	startOnce sync.Once

	mu sync.Mutex
	// sessions is the one registry of sessions, of every door, by id: a
	// stream door's from its connection (unbound until it initializes),
	// a /mcp session's from its initialize. Each holds a max_sessions slot
	// while it is here. nbound counts those that initialized (bound).
	sessions map[string]*session
	nbound   int
	// closing is set once shutdown began: no stream session is admitted.
	closing bool

	reloading sync.Mutex // one Reload at a time (reload.go)

	dyn  atomic.Pointer[dynamicSetup] // dynamic toolsets of the current resolver (dynamic.go)
	srch atomic.Pointer[searchSetup]  // tool search of the current resolver (search.go)

	doors     *door.Doors   // /ws, /sse and /message (doors.go)
	hooks     shutdownHooks // the http.Servers whose Shutdown ends the stream sessions (doors.go)
	listening listeners     // open 2026-07-28 subscriptions/listen streams (listen.go)
	held      *heldCalls    // 2026-07-28 calls waiting for their client's input (call.go)
	approvals *approvals    // 2026-07-28 calls waiting for a person's approval, in the store (approvals.go)
	flights   flights       // routed calls running and awaited, for shutdown (drain.go)
}

// replicaPrefix starts every session id this replica mints, on every
// door: server.replica_id and a dot (see docs/fleet.md). A load balancer
// routes a request carrying a session id to the replica named before the
// first dot (configs/examples/deploy/nginx.conf); replica_id holds no dot.
func replicaPrefix(cfg *configs.Config) string { return cfg.Server.ReplicaID + "." }

// MarkStarted tells the server that every upstream has had its first
// connection attempt; until then /readyz answers 503.
func (s *Server) MarkStarted() {
	s.startOnce.Do(func() {
		s.started.Store(true)
		close(s.startedCh)
	})
}

// waitStarted holds a request that arrived while the upstreams are still
// making their first connection, so that it never sees a partial catalog:
// until MarkStarted, ctx ends, or the longest connect_timeout.
func (s *Server) waitStarted(ctx context.Context) {
	if s.started.Load() {
		return
	}
	t := time.NewTimer(s.maxConnectTimeout())
	defer t.Stop()
	select {
	case <-s.startedCh:
	case <-ctx.Done():
	case <-t.C:
	}
}

// maxConnectTimeout is the longest connect_timeout of any upstream.
func (s *Server) maxConnectTimeout() time.Duration {
	d := 10 * time.Second
	for _, u := range s.cfg.Upstreams {
		d = max(d, u.ConnectTimeout)
	}
	return d
}

// Options configure a Server.
type Options struct {
	Logger   *slog.Logger     // nil = discard
	Registry *filter.Registry // nil = a new one
	Version  string           // reported as serverInfo.version
	// Audit receives the audit log's JSON lines ([audit]); nil = none.
	// The caller opens and closes it.
	Audit io.Writer
	// WriteTimeout bounds each write to a client, on every door: a client
	// that stops reading for longer ends its session. 0 =
	// server.write_timeout.
	WriteTimeout time.Duration
	// Tracer makes the span of each routed request (trace.go); nil = none.
	Tracer trace.Tracer
	// Aggregator configures the aggregator New builds for cfg. Its Hooks
	// and ServerInfo are the server's own: New sets them, replacing any
	// given here.
	Aggregator aggregator.Options
}

// New builds the server for cfg and the aggregator it serves (Aggregator),
// with the server's hooks fixed at the aggregator's construction. It
// starts no goroutines. The caller starts the aggregator and closes it
// after Shutdown.
func New(cfg *configs.Config, opts Options) (*Server, error) {
	s := &Server{cfg: cfg, registry: opts.Registry, log: opts.Logger, version: opts.Version, sessions: make(map[string]*session), startedCh: make(chan struct{})}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.registry == nil {
		s.registry = filter.NewRegistry()
	}
	if s.version == "" {
		s.version = "dev"
	}
	s.writeTimeout = cmp.Or(opts.WriteTimeout, cfg.Server.WriteTimeout, frameWriteTimeout)
	s.tracer = opts.Tracer
	s.unread.max, s.unread.crossed = cfg.Server.MaxPendingBytesPerCaller, s.reclaim.kick
	s.held = newHeldCalls(cfg.Server.ReplicaID, min(cfg.Server.MaxSessionsPerCaller, heldShare))
	s.flights.perCaller = cfg.Server.MaxSessionsPerCaller
	s.slots.max = int64(cfg.Server.MaxSessions)
	s.slots.callers.max = cfg.Server.MaxSessionsPerCaller
	res, err := grant.NewResolver(cfg, s.registry)
	if err != nil {
		return nil, err
	}
	s.resolver.Store(res)
	for _, o := range cfg.Server.AllowedOrigins {
		g, err := glob.Compile(o)
		if err != nil {
			return nil, fmt.Errorf("server.allowed_origins: %w", err)
		}
		s.origins = append(s.origins, g)
	}
	ao := opts.Aggregator
	ao.ServerInfo = s.implementation()
	ao.Hooks = aggregator.Hooks{Change: s.onSnapshot, ResourceUpdated: s.resourceUpdated, Log: s.upstreamLog}
	agg := aggregator.New(cfg, ao)
	s.agg = agg
	s.fleet = newFleetRate(agg.State(), cfg.Server.ReplicaID)
	s.approvals = newApprovals(agg.State(), min(cfg.Server.MaxSessionsPerCaller, heldShare))
	if opts.Audit != nil {
		// Every line is masked whole: a reason quoting an upstream's
		// error, or arguments quoting a key, hold no configured secret.
		w := maskedLines{w: opts.Audit, mask: agg.MaskSecrets}
		s.audit = audit.New(w, cfg.Audit.IncludeArguments, func(err error) {
			s.log.Error("audit log write failed", "error", err)
		})
	}
	s.metrics = newMetrics(s)
	s.doors = s.newDoors()
	s.onSnapshot(nil, agg.Snapshot())
	return s, nil
}

// Aggregator returns the aggregator New built. The caller starts it, and
// closes it after Shutdown.
func (s *Server) Aggregator() *aggregator.Aggregator { return s.agg }

// Registry returns the filter registry shared by every session.
func (s *Server) Registry() *filter.Registry { return s.registry }

// Resolver returns the current profile resolver.
func (s *Server) Resolver() *grant.Resolver { return s.resolver.Load() }

// View returns the current view through b's filter.
func (s *Server) View(b grant.Binding) *filter.View {
	snap := s.agg.Snapshot()
	return s.registry.View(snap.Version, snap.Tools, s.effective(b))
}

// onSnapshot tells each session whose view changed.
func (s *Server) onSnapshot(prev, next *aggregator.Snapshot) {
	s.metrics.setUpstreams(s.agg.Upstreams())
	s.recordPins(next.PinEvents)

	prints := func(b grant.Binding) viewPrints {
		v := s.registry.View(next.Version, next.Tools, s.effective(b))
		p, r := v.Listing(next.Catalog).Fingerprints()
		return viewPrints{tools: v.Fingerprint(), prompts: p, resources: r}
	}
	s.mu.Lock()
	var toolsIDs, promptsIDs, resourcesIDs []string
	for id, sess := range s.sessions {
		if !sess.bound {
			continue
		}
		fp := prints(sess.binding)
		if fp.tools != sess.listed {
			sess.listed = fp.tools
			toolsIDs = append(toolsIDs, id)
		}
		if fp.prompts != sess.listedPrompts {
			sess.listedPrompts = fp.prompts
			promptsIDs = append(promptsIDs, id)
		}
		if fp.resources != sess.listedResources {
			sess.listedResources = fp.resources
			resourcesIDs = append(resourcesIDs, id)
		}
	}
	s.mu.Unlock()
	s.notify(toolsIDs, string(mcp.MethodNotificationToolsListChanged), nil)
	if prev != nil {
		s.notify(promptsIDs, string(mcp.MethodNotificationPromptsListChanged), nil)
		s.notify(resourcesIDs, string(mcp.MethodNotificationResourcesListChanged), nil)
	}
	s.notifyListeners(prints, "")
}

// notify sends one notification to each listed session, where what
// belongs to none of its calls goes: a stream session's connection, a /mcp
// session's GET stream. It never waits: a session whose queue is full, or
// a /mcp session with no GET stream open, misses it, which is logged.
func (s *Server) notify(ids []string, method string, params map[string]any) {
	if len(ids) == 0 {
		return
	}
	var p any
	if params != nil {
		p = params
	}
	frame, err := jsonrpc.Notification(method, p)
	if err != nil {
		s.log.Error("notification not encodable", "method", method, "error", err)
		return
	}
	for _, id := range ids {
		s.mu.Lock()
		sess := s.boundLocked(id)
		s.mu.Unlock()
		if sess == nil {
			continue
		}
		if !s.push(sess, frame) {
			s.log.Debug("notification not delivered", "session", id, "method", method,
				"reason", "no GET stream is open, or the session's queue is full")
		}
	}
}

// push hands frame to the writer of sess for what belongs to none of its
// calls, without waiting, and reports whether it was taken.
func (s *Server) push(sess *session, frame []byte) bool {
	if sess.conn != nil {
		return sess.trySend(frame)
	}
	s.mu.Lock()
	g := sess.get
	s.mu.Unlock()
	return g != nil && g.offer(frame)
}

// upstreamLog sends a log message no call of up caused to the sessions
// logRecipients names.
func (s *Server) upstreamLog(up string, params map[string]any) {
	level, _ := params["level"].(string)
	s.notify(s.logRecipients(up, mcp.LoggingLevel(level)), string(mcp.MethodNotificationMessage), params)
}

// logRecipients returns the sessions that set a log level at or below
// level and may see up. An upstream a session may not see is, to it, no
// upstream at all: its log lines would tell the session what runs there.
func (s *Server) logRecipients(up string, level mcp.LoggingLevel) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, sess := range s.sessions {
		if l := sess.level(); sess.bound && l != "" && level.ShouldSendTo(l) && s.listing(sess.binding).Shows(up) {
			ids = append(ids, id)
		}
	}
	return ids
}

// resourceUpdated tells every session subscribed to uri whose view shows
// the upstream serving it; when the update came over one session's own
// connection (only a scope = "session" upstream has those), that session
// only.
func (s *Server) resourceUpdated(from, uri string) {
	up, _, routed := s.agg.RouteURI(uri)
	s.mu.Lock()
	var ids []string
	for id, sess := range s.sessions {
		if sess.bound && sess.subs[uri] && routed && s.listing(sess.binding).Shows(up) && (from == "" || id == from) {
			ids = append(ids, id)
		}
	}
	s.mu.Unlock()
	s.notify(ids, string(mcp.MethodNotificationResourceUpdated), map[string]any{"uri": uri})
	if from == "" {
		s.notifyListeners(nil, uri)
	}
}

// Handler returns the HTTP handler: /mcp (streamable HTTP), /ws
// (websocket), /sse and /message (legacy HTTP+SSE), /healthz, /readyz,
// /metrics and the status page (/ and /status.json). /mcp, /ws and /sse also answer under the paths of PathForms.
// Every MCP door resolves profiles and runs the gate the same way.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/mcp", s.serveMCP)
	mux.HandleFunc("GET /ws", s.doors.ServeWS)   // door/ws.go
	mux.HandleFunc("GET /sse", s.doors.ServeSSE) // door/sse.go
	// The path forms that select a profile or narrow the view
	// (resolve.go, PathForms); any other path under a door is 404.
	mux.HandleFunc("/mcp/", s.serveMCP)
	mux.HandleFunc("GET /ws/", s.doors.ServeWS)
	mux.HandleFunc("GET /sse/", s.doors.ServeSSE)
	mux.HandleFunc("POST /message", s.doors.ServeMessage) // door/sse.go
	// Protected Resource Metadata (auth.go), at the well-known path and
	// its per-path forms (RFC 9728 §3.1).
	mux.HandleFunc("GET "+grant.MetadataPath, s.serveMetadata)
	mux.HandleFunc("GET "+grant.MetadataPath+"/", s.serveMetadata)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", s.serveReady)
	mux.Handle("GET /metrics", s.withViewer(s.serveMetrics)) // views.go
	s.handleStatus(mux)                                      // GET / and GET /status.json (statuspage.go)
	s.handleConnect(mux)                                     // /oauth/connect/NAME, /oauth/callback (connect.go)
	return httpd.RecoverPanics(s.log, httpd.Guard(s.originAllowed, s.subjectTokens(mux)))
}

// serveReady answers 200 when every required upstream is up. It names the
// required upstreams that are down only to a viewer that sees all
// (views.go): a probe needs no token, and without one learns only ready
// or not.
func (s *Server) serveReady(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !s.started.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "starting\n")
		return
	}
	var down []string
	for _, u := range s.agg.Upstreams() {
		if u.Config().Required && u.State() != upstream.StateUp {
			down = append(down, u.Name())
		}
	}
	if len(down) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		if v, ok := s.viewerOf(r); !ok || !v.All {
			io.WriteString(w, "not ready: a required upstream is down\n")
			return
		}
		fmt.Fprintf(w, "required upstreams down: %s\n", strings.Join(down, ", "))
		return
	}
	io.WriteString(w, "ready\n")
}

// originAllowed reports whether a request r may come from origin: one of
// server.allowed_origins (httpd.Guard).
func (s *Server) originAllowed(r *http.Request, origin string) bool {
	// The connect pages' own form posts from viewmux's public URL
	// (connect.go).
	return httpd.Origins(s.origins, origin) || strings.HasPrefix(r.URL.Path, "/oauth/") && s.ownOrigin(origin)
}

// serveMCP is the /mcp door (streamable HTTP): it resolves the request's
// binding, parses a POSTed message once, finds its session, and answers:
// routed requests through the chain (chain.go), the rest through the one
// handler (handler.go); an initialize opens a session, a GET opens its
// stream of what belongs to none of its calls (standalone), a DELETE ends
// it. Responses to viewmux's own server→client requests go to the call
// waiting for them.
func (s *Server) serveMCP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost, http.MethodGet, http.MethodDelete:
	case http.MethodHead:
		w.WriteHeader(http.StatusOK)
		return
	default:
		http.NotFound(w, r)
		return
	}
	s.waitStarted(r.Context())
	// The token, profile and toolsets are checked here, once, by one
	// resolver; every later decision of the request is taken from chk. The
	// filter of a narrowing is built only once the session is, so that a
	// request refused for its session costs no filter.
	sel, err := grant.SelectionFromRequest(r)
	var chk *grant.Checked
	if err == nil {
		chk, err = s.Resolver().Check(sel)
	}
	if err != nil {
		s.endExpired(r.Header.Get(mcp.HeaderSessionID), err)
		writeResolveError(w, err)
		return
	}
	profile := chk.Profile()
	header := r.Header.Get(mcp.HeaderProtocolVersion)
	if r.Method != http.MethodPost && mcp.IsModernProtocol(header) {
		w.Header().Set("Allow", http.MethodPost)
		writeHTTPError(w, http.StatusMethodNotAllowed, r.Method+" is not supported in protocol version "+mcp.ProtocolVersion20260728+
			": server-to-client messages use subscriptions/listen")
		return
	}
	id := r.Header.Get(mcp.HeaderSessionID)
	m := &jsonrpc.Message{}
	if r.Method == http.MethodPost {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.Server.MaxBodyBytes))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				s.auditLimit(id, profile, "", "", audit.ReasonSize)
				writeJSONError(w, http.StatusRequestEntityTooLarge, nil, mcp.INVALID_REQUEST,
					fmt.Sprintf("request body exceeds server.max_body_bytes (%d bytes)", s.cfg.Server.MaxBodyBytes))
				return
			}
			writeJSONError(w, http.StatusBadRequest, nil, mcp.PARSE_ERROR, "reading request body: "+err.Error())
			return
		}
		if m, err = jsonrpc.Parse(body); err != nil {
			s.metrics.count("", outcomeError)
			writeJSONError(w, http.StatusBadRequest, nil, mcp.PARSE_ERROR, "request body is not valid json")
			return
		}
	}
	if m.Ambiguous != nil && !isRouted(m, true) {
		// Decoders that read keys case-insensitively, or keep another
		// of two equal keys, would act on a message viewmux did not see
		// (routed requests are refused by decide, with -32602).
		s.metrics.count(m.Method, outcomeDenied)
		writeJSONError(w, http.StatusBadRequest, m.ID, mcp.INVALID_REQUEST, "Invalid request: "+m.Ambiguous.Error())
		return
	}
	modern := isModern(m) || r.Method == http.MethodPost && mcp.IsModernProtocol(header)
	initialize := !modern && m.Method == string(mcp.MethodInitialize)
	if modern && m.Method == "" && m.HasID() {
		writeJSONError(w, http.StatusBadRequest, m.ID, mcp.INVALID_REQUEST, "client-to-server responses are not supported in protocol version "+
			mcp.ProtocolVersion20260728+": server-initiated requests were replaced by multi round-trip requests")
		return
	}
	if modern {
		if e := validateTransport(r, m); e != nil {
			writeAnswer(w, httpStatus(e.Code), jsonrpc.ErrorResponse(m.ID, e))
			return
		}
	} else if !initialize && header != "" && !mcp.IsValidProtocolVersion(header) {
		writeHTTPError(w, http.StatusBadRequest, "Unsupported protocol version: "+header)
		return
	}
	if id == "" && r.Method != http.MethodPost {
		// A stream or an end of nobody's session: nothing would ever be
		// sent on it, and it would hold a max_sessions slot for as long
		// as the client keeps it open.
		writeJSONError(w, http.StatusBadRequest, nil, mcp.INVALID_REQUEST, r.Method+" /mcp needs the Mcp-Session-Id of an initialized session")
		return
	}
	var sess *session
	var b grant.Binding
	if id != "" && !initialize && !modern {
		var bound grant.Binding // read under the lock: enabling a toolset (dynamic.go) or a reload replaces it
		var revoked error
		s.mu.Lock()
		sess = s.sessions[id]
		if sess != nil {
			bound, revoked = sess.binding, sess.revoked
		}
		s.mu.Unlock()
		// A stream door's session, or a session opened with another token
		// (DELETE and GET included), is answered as an unknown one: its id
		// is no capability of this caller's. An id viewmux never gave, or
		// one whose session ended, costs nothing: no filter, limiter
		// bucket or stream is made for it. A session a reload ended
		// answers the same, so that its client initializes again, under
		// the new config (reload.go).
		if owner := chk.Owner(); sess == nil || revoked != nil || sess.conn != nil || subtle.ConstantTimeCompare(owner[:], sess.owner[:]) != 1 {
			writeJSONError(w, http.StatusNotFound, m.ID, mcp.INVALID_REQUEST, "unknown session")
			return
		}
		if err := chk.Allows(bound.Profile); err != nil {
			writeJSONError(w, grant.StatusOf(err), m.ID, mcp.INVALID_REQUEST, err.Error())
			return
		}
		key := chk.Key()
		if sel.Profile == "" && profile != bound.Profile && sel.Narrowing {
			// The token's default profile changed since the session
			// bound: what the request narrows is read under the
			// session's own profile, which it keeps (reload.go).
			if key, err = chk.KeyUnder(bound.Profile); err != nil {
				writeResolveError(w, err)
				return
			}
		}
		if (sel.Profile != "" || sel.Narrowing) && key != bound.Requested {
			writeJSONError(w, http.StatusBadRequest, m.ID, mcp.INVALID_REQUEST,
				fmt.Sprintf("session is bound to profile %q; start a new session to use another", bound.Profile))
			return
		}
		b = bound
		defer s.touch(sess)() // it is not idle while this runs (limits.go)
	}
	switch r.Method {
	case http.MethodDelete:
		s.log.Info("session ended", "session", id, "profile", b.Profile, "reason", "closed by its client")
		s.unbind(id)
		w.WriteHeader(http.StatusOK)
		return
	case http.MethodGet:
		s.serveGET(w, r, id, sess, chk.Ends())
		return
	}
	if sess == nil && !initialize && !modern {
		// A legacy message outside any session.
		writeHTTPError(w, http.StatusNotFound, "Invalid session ID")
		return
	}
	if m.Method == "" && m.HasID() || !m.HasID() && m.JSONRPC == jsonrpc.Version {
		// A response to one of viewmux's server→client requests, or a
		// notification: accepted, and answered with nothing.
		switch {
		case sess != nil && m.IsResponse():
			sess.pending.deliver(m)
		case sess != nil && m.Method == string(mcp.MethodNotificationCancelled):
			sess.inflight.cancelNamed(m.Params)
		}
		w.WriteHeader(http.StatusAccepted)
		return
	}
	if b.Filter == nil {
		b = chk.Binding()
		b.Who = callerOf(r, b)
	}
	start := time.Now()
	defer func() { s.metrics.observeLatency(m.Method, time.Since(start)) }()
	view := s.View(b)
	if modern && m.IsRequest() && !isRouted(m, false) && m.Method != string(mcp.MethodSubscriptionsListen) {
		if e := validateModern(r, m, view); e != nil {
			writeAnswer(w, httpStatus(e.Code), jsonrpc.ErrorResponse(m.ID, e))
			return
		}
	}
	switch {
	case modern && m.IsRequest() && m.Method == string(mcp.MethodSubscriptionsListen):
		s.serveListen(w, r, m, b, view)
		return
	case isRouted(m, sess != nil):
		s.serveRouted(w, r, m, sel, b, view, id, sess)
		return
	case initialize:
		s.serveInitialize(w, m, chk, b, view)
		s.traceAnswer(r.Context(), r.Header, b, m, start, 0)
		return
	case m.IsRequest() && m.Cursor == nil && !modern && m.Method == string(mcp.MethodToolsList):
		// Served from the view's pre-encoded listing: no upstream, no
		// per-request encoding of the catalog.
		s.metrics.count(m.Method, outcomeOK)
		defer s.traceAnswer(r.Context(), r.Header, b, m, start, 0)
		w.Header().Set("Content-Type", "application/json")
		if err := writeList(w, m.ID, view); err != nil {
			s.log.Debug("tools/list: client went away", "error", err)
		}
		return
	}
	if listed := s.listed(b, view, m); listed != nil { // prompts and resources alike (visibility.go)
		s.metrics.count(m.Method, outcomeOK)
		defer s.traceAnswer(r.Context(), r.Header, b, m, start, 0)
		w.Header().Set("Content-Type", "application/json")
		if err := writeResult(w, m.ID, listed); err != nil {
			s.log.Debug("listing: client went away", "method", m.Method, "error", err)
		}
		return
	}
	resp, _, code := s.respond(b, view, m, nil)
	s.traceAnswer(r.Context(), r.Header, b, m, start, code)
	status := http.StatusOK
	if modern && code != 0 {
		status = httpStatus(code)
	}
	writeAnswer(w, status, resp)
}

// serveInitialize opens a /mcp session: it takes a server.max_sessions
// slot, answers the handshake, and binds the session under a new id,
// which the answer carries in its Mcp-Session-Id header.
func (s *Server) serveInitialize(w http.ResponseWriter, m *jsonrpc.Message, chk *grant.Checked, b grant.Binding, view *filter.View) {
	if err := s.takeSlot(b.Who); err != nil {
		s.refuseSession(w, m.ID, m.Method, b.Profile, err)
		return
	}
	resp, hs, _ := s.respond(b, view, m, nil)
	if hs == nil { // refused: no session
		s.giveSlot(b.Who)
		writeAnswer(w, http.StatusOK, resp)
		return
	}
	sess := s.newSession(replicaPrefix(s.cfg)+sessionIDPrefix+rand.Text(), doorMCP, b, chk.Owner(),
		s.newBacklog(b.Who, s.cfg.Server.MaxPendingBytes, maxCallsPerSession))
	s.bind(sess, hs)
	w.Header().Set(mcp.HeaderSessionID, sess.id)
	writeAnswer(w, http.StatusOK, resp)
}

// sessionIDPrefix follows the replica's prefix in every /mcp session id.
const sessionIDPrefix = "mcp-session-"

// writeHTTPError answers with a plain-text error, for what is wrong with
// the HTTP request itself rather than with a message in it.
func writeHTTPError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	io.WriteString(w, msg+"\n")
}

// Shutdown shuts the server down without dropping calls. Calls that arrive
// from now on are answered at once with a JSON-RPC error; calls in flight
// get until ctx is done to finish with their results, and the rest are then
// cancelled and answered with that error. Then every stream session is ended
// once its answers are written (within answerWait), and the /mcp sessions
// are closed, which ends their GET streams. A ctx that is never done waits
// for every call. Calling it again is harmless.
func (s *Server) Shutdown(ctx context.Context) error {
	s.drainCalls(ctx)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), answerWait)
	defer cancel()
	s.closeStreams(cctx)
	s.closeSessions()
	s.reclaim.stop()
	return nil
}

// Serve serves HTTP on ln until ctx is done, then shuts down: it stops
// accepting, gives the calls in flight cfg.Server.ShutdownGrace to finish
// and answers the rest with an error (see Shutdown), and returns once the
// connections are closed, at most a few answerWaits after the grace.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return httpd.Serve(ctx, ln, httpd.Config{
		Handler:       s.Handler(),
		ReadTimeout:   s.cfg.Server.ReadTimeout,
		ShutdownGrace: s.cfg.Server.ShutdownGrace,
		Drain:         s.Shutdown,
		CloseWait:     answerWait,
		Log:           s.log,
	})
}

func writeJSONError(w http.ResponseWriter, status int, id json.RawMessage, code int, msg string) {
	writeAnswer(w, status, errorFrame(id, code, msg))
}

// maskedLines writes each line (audit.Log writes one per Write) with every
// configured secret masked.
type maskedLines struct {
	w    io.Writer
	mask func(string) string
}

func (m maskedLines) Write(p []byte) (int, error) {
	if _, err := io.WriteString(m.w, m.mask(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
