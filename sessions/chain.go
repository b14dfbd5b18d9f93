package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/aggregator"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/audit"
	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/sessions/grant"
	"github.com/viewmux/viewmux/upstream"
)

// This file is the request path every front door shares for the requests
// viewmux routes to upstreams itself (tools/call, prompts/get,
// resources/read, completion/complete, and for sessions resources/subscribe,
// resources/unsubscribe and logging/setLevel). It runs in this order:
//
//	parse once (the door) → binding (the door) → decide (decide: view, call
//	rules, ambiguity, rate) → route the checked entry (route; for a tools/call
//	of an upstream's tool, human approval first: approve.go) → forward
//	(aggregator, upstream.Send) → answer (the door's writer)
//
// mcp-go's server never sees these requests; it keeps the handshake,
// listings, ping and the streams.

// routedMethods are the methods the chain answers.
var routedMethods = map[string]bool{
	string(mcp.MethodToolsCall):            true,
	string(mcp.MethodPromptsGet):           true,
	string(mcp.MethodResourcesRead):        true,
	string(mcp.MethodCompletionComplete):   true,
	string(mcp.MethodResourcesSubscribe):   true,
	string(mcp.MethodResourcesUnsubscribe): true,
	string(mcp.MethodSetLogLevel):          true,
}

// sessionMethods are routed only for a session: a stateless request has no
// subscriptions or session log level, and mcp-go answers it.
var sessionMethods = map[string]bool{
	string(mcp.MethodResourcesSubscribe):   true,
	string(mcp.MethodResourcesUnsubscribe): true,
	string(mcp.MethodSetLogLevel):          true,
}

// isRouted reports whether the chain answers m (session: whether the
// request belongs to a session).
func isRouted(m *jsonrpc.Message, session bool) bool {
	return m.IsRequest() && routedMethods[m.Method] && (session || !sessionMethods[m.Method])
}

// caller is the aggregator.Client of one routed request.
type caller struct {
	modern bool
	// session is the id of the session the request belongs to; "" for a
	// 2026-07-28 request, which has none (set by callFor).
	session string
	// who is the caller the session belongs to, for its shares
	// (Binding.Who; set by callFor).
	who   string
	caps  mcp.ClientCapabilities
	level func() mcp.LoggingLevel
	// queue hands a frame to the request's writer without blocking; it
	// reports false when the frame was dropped.
	queue func(frame []byte) bool
	// ask sends a server→client request; nil when the client cannot take
	// one (a 2026-07-28 request).
	ask func(ctx context.Context, method string, params any) (json.RawMessage, error)
	log func(msg string, args ...any)
	// params are a 2026-07-28 request's own params, where the retry of a
	// call viewmux asked approval for carries the answer (approve.go),
	// also when the call it approves is relayed (viewmux__call_tool).
	params json.RawMessage
	// stream is the call's result when it is written as it is read
	// (TakeResult); nil otherwise.
	stream *aggregator.ResultStream
}

var _ aggregator.ResultTaker = (*caller)(nil)

// TakeResult keeps the call's large result to write as it is read. Only a
// /mcp request before 2026-07-28 is handed one (its loan allows it,
// serveRouted); the caller's writer closes it.
func (c *caller) TakeResult(r *aggregator.ResultStream) { c.stream = r }

func (c *caller) Notify(method string, params any) {
	frame, err := jsonrpc.Notification(method, params)
	if err != nil || !c.queue(frame) {
		c.log("notification to the client dropped", "method", method, "error", err)
	}
}

func (c *caller) Request(ctx context.Context, method string, params any) (json.RawMessage, error) {
	if c.ask == nil {
		return nil, fmt.Errorf("%s: %w", method, errNoServerRequests)
	}
	return c.ask(ctx, method, params)
}

func (c *caller) Capabilities() mcp.ClientCapabilities { return c.caps }
func (c *caller) Modern() bool                         { return c.modern }
func (c *caller) Session() string                      { return c.session }
func (c *caller) Caller() string                       { return c.who }
func (c *caller) LogLevel() mcp.LoggingLevel {
	if c.level == nil {
		return ""
	}
	return c.level()
}

// errNoServerRequests is returned for an upstream's mid-call request to a
// 2026-07-28 client, which takes input only through input_required results.
var errNoServerRequests = errors.New("the client uses protocol 2026-07-28 and takes no server→client requests during a call")

// modernCaller returns the caller of a 2026-07-28 request: its capabilities
// and log level come from the request's own _meta.
func modernCaller(m *jsonrpc.Message, queue func([]byte) bool, log func(string, ...any)) *caller {
	c := &caller{modern: true, queue: queue, log: log, params: m.Params}
	if raw, ok := m.Meta[mcp.MetaKeyClientCapabilities]; ok {
		json.Unmarshal(raw, &c.caps)
	}
	level := mcp.LoggingLevel(m.MetaString(mcp.MetaKeyLogLevel))
	c.level = func() mcp.LoggingLevel { return level }
	return c
}

// isModern reports whether m is a 2026-07-28 (stateless) request: one that
// carries a 2026-07-28 or later protocol version in its _meta.
func isModern(m *jsonrpc.Message) bool {
	return mcp.IsModernProtocol(m.MetaString(mcp.MetaKeyProtocolVersion))
}

// decide is the one decision of the chain for a routed request: for
// tools/call, an ambiguous message, the view (hidden and unknown tools
// answer alike), the call rules and the rate limit; for the other routed
// methods, an ambiguous message and a prompt, resource or completion ref
// of an upstream the view hides, which answers as a nonexistent one. It
// returns the checked entry or the refusal, and logs, counts and audits
// refusals. The entry of a tools/call is the tool's; that of prompts/get,
// resources/read, resources/subscribe and completion/complete names only
// the upstream serving the target (Upstream, "" when none does), which
// route pins the request to.
func (s *Server) decide(session string, b grant.Binding, view *filter.View, m *jsonrpc.Message) (*filter.Entry, *jsonrpc.Error) {
	var e *filter.Entry
	var refusal *jsonrpc.Error
	reason := ""
	switch m.Method {
	case string(mcp.MethodToolsCall):
		// Ambiguity first: it is decided on the bytes alone, so it answers
		// alike for visible, hidden and unknown tools.
		if m.Ambiguous != nil {
			reason, refusal = audit.ReasonAmbiguous, &jsonrpc.Error{Code: mcp.INVALID_PARAMS,
				Message: fmt.Sprintf("Arguments not allowed for %s: %v", jsonrpc.Printable(m.Name), m.Ambiguous)}
			break
		}
		e = view.Lookup(m.Name)
		resting := ""
		var fixErr error
		if e == nil {
			resting = s.restarting(view, m.Name)
		} else {
			fixErr = fixArguments(e, m)
		}
		switch {
		case resting != "":
			reason, refusal = audit.ReasonRestarting, &jsonrpc.Error{Code: mcp.INTERNAL_ERROR, Message: fmt.Sprintf("upstream %s is restarting; retry shortly", resting)}
		case e == nil:
			reason, refusal = audit.ReasonNotFound, &jsonrpc.Error{Code: mcp.METHOD_NOT_FOUND, Message: "Tool not found: " + jsonrpc.Printable(m.Name)}
		case fixErr != nil:
			reason, refusal = audit.ReasonArguments, &jsonrpc.Error{Code: mcp.INVALID_PARAMS,
				Message: fmt.Sprintf("Arguments not allowed for %s: %v", e.Tool.Name, fixErr)}
		case view.Filter.CheckCall(e, m.Arguments) != nil:
			reason, refusal = audit.ReasonArguments, &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: "Arguments not allowed for " + e.Tool.Name}
		case isRelay(e): // call_tool counts as the call it relays (relay)
		default:
			if refusal = s.rateCheck(session, b); refusal != nil { // fleetrate.go
				reason = audit.ReasonRate
			}
		}
	default:
		if m.Ambiguous != nil {
			return nil, &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: m.Method + ": " + m.Ambiguous.Error()}
		}
		up, ok := s.targetOf(m)
		if !ok {
			return nil, nil
		}
		if up != "" && !s.listingOf(view, b).Shows(up) {
			s.log.Info("request refused", "session", session, "method", m.Method, "profile", b.Profile, "reason", "upstream not shown")
			s.metrics.count(m.Method, outcomeDenied)
			return nil, s.errorFor(m, notFoundFor(m), isModern(m))
		}
		return &filter.Entry{Upstream: up}, nil
	}
	if refusal == nil {
		return e, nil
	}
	s.log.Info("tools/call refused", "session", session, "tool", jsonrpc.Printable(m.Name), "profile", b.Profile, "subject", b.Subject, "reason", reason)
	s.metrics.count(m.Method, outcomeDenied)
	s.audit.Write(audit.Record{
		Time: time.Now().UTC(), Session: session, Caller: callerName(b), Profile: b.Profile, Tool: jsonrpc.Printable(m.Name),
		Decision: audit.Denied, Reason: reason,
	}, m.Arguments)
	return nil, refusal
}

// fixArguments gives m, a tools/call of e, the arguments e's override
// fixes ([upstreams.U.overrides.TOOL] args): its params and arguments
// become what is forwarded, so that call rules, the audit log and the
// upstream all see the same arguments. A call that sends a fixed
// argument itself is refused, and m is left as it came.
func fixArguments(e *filter.Entry, m *jsonrpc.Message) error {
	if len(e.Fixed) == 0 {
		return nil
	}
	params, args, err := aggregator.InjectFixed(e, m.Params, m.Arguments)
	if err != nil {
		return err
	}
	m.Params, m.Arguments = params, args
	return nil
}

// restarting returns the upstream of the tool named name when that
// upstream is down or reconnecting and the tool, as it was when last
// listed, passes view's filter; else "". Hidden tools stay "not found".
func (s *Server) restarting(view *filter.View, name string) string {
	if e := s.agg.Snapshot().Resting(name); e != nil && view.Filter.Allows(e) {
		return e.Upstream
	}
	return ""
}

// route forwards a routed request that decide allowed (e is its checked
// entry) and returns the result bytes or the error to answer with.
func (s *Server) route(ctx context.Context, session string, b grant.Binding, e *filter.Entry, m *jsonrpc.Message, cl *caller) (json.RawMessage, error) {
	switch m.Method {
	case string(mcp.MethodToolsCall):
		if e.Upstream == "" { // one of viewmux's own tools (dynamic.go, search.go)
			if isRelay(e) {
				return s.relay(ctx, session, b, e, m, cl)
			}
			return s.ownCall(session, b, e, m, cl)
		}
		// Human approval, the last step of the decision (approve.go).
		approval, refused := s.approve(ctx, session, b, e, m, cl)
		if refused != nil {
			return refused.result, refused.err
		}
		start := time.Now()
		res, toolError, err := s.agg.CallTool(ctx, cl, e, m.Params)
		done := func(toolError bool, err error) {
			d := time.Since(start)
			s.metrics.observeCall(e.Upstream, toolError, err, d)
			rec := audit.Record{Time: start.UTC(), Session: session, Caller: callerName(b), Profile: b.Profile, Tool: e.Tool.Name, Upstream: e.Upstream,
				Decision: audit.Allowed, Approval: approval, Duration: float64(d.Microseconds()) / 1000}
			if errors.Is(err, aggregator.ErrCallerShare) {
				rec.Decision, rec.Reason = audit.Denied, audit.ReasonBusy
			} else if err != nil {
				rec.Decision, rec.Reason = audit.Error, s.agg.Redact(err.Error())
			} else if toolError {
				rec.Reason = audit.ReasonToolError
			}
			s.audit.Write(rec, m.Arguments)
		}
		if err == nil && cl.stream != nil {
			// Audited once it has passed: isError, and whether it
			// passed whole, are known at its end.
			cl.stream.OnEnd(done)
		} else {
			done(toolError, err)
		}
		return res, err
	case string(mcp.MethodPromptsGet):
		p := s.agg.Snapshot().Prompt(m.Name)
		if p == nil {
			return nil, &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: "Prompt not found: " + jsonrpc.Printable(m.Name)}
		}
		return s.agg.GetPrompt(pin(ctx, e, m), cl, p, m.Params)
	case string(mcp.MethodResourcesRead):
		return s.agg.ReadResource(pin(ctx, e, m), cl, m.URI, m.Params)
	case string(mcp.MethodCompletionComplete):
		return s.agg.Complete(pin(ctx, e, m), cl, m.Params)
	case string(mcp.MethodResourcesSubscribe), string(mcp.MethodResourcesUnsubscribe):
		on := m.Method == string(mcp.MethodResourcesSubscribe)
		if up, _, ok := s.agg.RouteURI(m.URI); on && ok && (e == nil || up != e.Upstream) {
			return nil, notFoundFor(m) // served by another upstream than decide checked
		}
		return emptyResult, s.subscribe(ctx, session, m.URI, on)
	case string(mcp.MethodSetLogLevel):
		var p struct {
			Level mcp.LoggingLevel `json:"level"`
		}
		if err := json.Unmarshal(m.Params, &p); err != nil || p.Level == "" {
			return nil, &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: "logging/setLevel: params.level is required"}
		}
		s.setLevel(session, p.Level)
		return emptyResult, nil
	}
	return nil, &jsonrpc.Error{Code: mcp.METHOD_NOT_FOUND, Message: "Method not found: " + jsonrpc.Printable(m.Method)}
}

var emptyResult = json.RawMessage(`{}`)

// errorFor is the JSON-RPC error a client gets for err from route: an
// upstream's own error unchanged but for configured secrets, which are
// masked whoever's they are (an upstream may quote another's key or a
// gateway token), and viewmux's own errors without transport internals. It returns nil when the client cancelled (no answer is due).
func (s *Server) errorFor(m *jsonrpc.Message, err error, modern bool) *jsonrpc.Error {
	var rpc *upstream.RPCError
	var own *jsonrpc.Error
	var ue *aggregator.UpstreamError
	switch {
	case errors.As(err, &rpc):
		return &jsonrpc.Error{Code: rpc.Code, Message: s.agg.MaskSecrets(rpc.Message), Data: s.maskData(rpc.Data)}
	case errors.As(err, &own):
		return own
	case errors.Is(err, aggregator.ErrCallerShare):
		// It names the upstream and the limit, nothing of a transport.
		return &jsonrpc.Error{Code: errBusyCode, Message: err.Error()}
	case errors.As(err, &ue):
		s.log.Warn("upstream request failed", "upstream", ue.Upstream, "method", m.Method, "error", err)
		return &jsonrpc.Error{Code: mcp.INTERNAL_ERROR, Message: ue.Public()}
	case errors.Is(err, aggregator.ErrResourceNotFound):
		code := mcp.RESOURCE_NOT_FOUND
		if modern {
			code = mcp.INVALID_PARAMS
		}
		_, uri := refOf(m)
		return &jsonrpc.Error{Code: code, Message: "Resource not found: " + jsonrpc.Printable(uri)}
	case errors.Is(err, aggregator.ErrPromptNotFound):
		name, _ := refOf(m)
		return &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: "Prompt not found: " + jsonrpc.Printable(name)}
	case errors.Is(err, context.Canceled):
		return nil
	}
	var ce *ClientError
	if errors.As(err, &ce) {
		return &jsonrpc.Error{Code: ce.Code, Message: ce.Message, Data: ce.Data}
	}
	s.log.Error("request failed", "method", m.Method, "error", err)
	return &jsonrpc.Error{Code: mcp.INTERNAL_ERROR, Message: m.Method + " failed; see viewmux's log"}
}

// maskData returns an upstream error's data with every configured secret
// masked; data that holds one but would not stay valid JSON masked is
// dropped.
func (s *Server) maskData(data json.RawMessage) json.RawMessage {
	if len(data) == 0 {
		return data
	}
	masked := s.agg.MaskSecrets(string(data))
	switch {
	case masked == string(data):
		return data
	case json.Valid([]byte(masked)):
		return json.RawMessage(masked)
	}
	return nil
}

// refOf is the prompt name and resource URI m names: its params' own,
// or for completion/complete those of its ref.
func refOf(m *jsonrpc.Message) (name, uri string) {
	if m.Method != string(mcp.MethodCompletionComplete) {
		return m.Name, m.URI
	}
	var p struct {
		Ref struct {
			Name string `json:"name"`
			URI  string `json:"uri"`
		} `json:"ref"`
	}
	json.Unmarshal(m.Params, &p)
	return p.Ref.Name, p.Ref.URI
}

// subscribe records a session's resources/subscribe or unsubscribe and
// forwards it upstream (the aggregator counts subscribers per URI). The
// session's record changes first, under the lock, so two concurrent
// subscribes of one URI count once; a failed forward puts it back.
func (s *Server) subscribe(ctx context.Context, id, uri string, on bool) error {
	if on && len(uri) > maxSubscriptionURI {
		return &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: fmt.Sprintf("resources/subscribe: a subscribed URI may be at most %d bytes", maxSubscriptionURI)}
	}
	s.mu.Lock()
	sess := s.boundLocked(id)
	if sess == nil || sess.subs[uri] == on {
		s.mu.Unlock()
		return nil
	}
	if len(sess.subs) >= maxSessionSubscriptions && on {
		s.mu.Unlock()
		return &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: fmt.Sprintf("resources/subscribe: at most %d subscriptions per session", maxSessionSubscriptions)}
	}
	record := func(on bool) {
		if sess.subs == nil {
			sess.subs = make(map[string]bool)
		}
		if on {
			sess.subs[uri] = true
		} else {
			delete(sess.subs, uri)
		}
	}
	record(on)
	s.mu.Unlock()
	var err error
	if on {
		err = s.agg.Subscribe(ctx, id, sess.who, uri)
	} else {
		err = s.agg.Unsubscribe(ctx, id, uri)
	}
	if err != nil {
		s.mu.Lock()
		record(!on)
		s.mu.Unlock()
	}
	return err
}

// maxSessionSubscriptions bounds the resources one session subscribes to,
// and maxSubscriptionURI the length of each URI, which viewmux keeps (twice:
// the session's and the upstream subscription's) while it is subscribed:
// together at most about 4 MB per session, where a URI as long as
// max_body_bytes would let one session keep gigabytes.
const (
	maxSessionSubscriptions = 1000
	maxSubscriptionURI      = 2048
)

// setLevel records a session's log level: it filters what that session
// gets, and nothing else. Upstreams are asked for every message once, when
// they connect (upstream.conn.askForAllLogs), so no client's level is ever
// forwarded and none changes what another gets.
func (s *Server) setLevel(id string, level mcp.LoggingLevel) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sess := s.boundLocked(id); sess != nil {
		sess.logLevel.Store(&level)
	}
}
