package aggregator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/upstream"
	"github.com/viewmux/viewmux/upstream/oauth"
)

// Client is the downstream client a routed request comes from. The front
// door (package sessions) hands one to every routed call; it is how what an
// upstream sends back during the call (progress, log messages, sampling,
// elicitation and roots requests) reaches that client and no other.
// Implementations must be safe for concurrent use.
type Client interface {
	// Notify queues a notification for the client. Whatever is queued
	// before the call returns reaches the client before its answer. It must
	// not block: it runs on an upstream connection's reader.
	Notify(method string, params any)
	// Request sends a server→client request (sampling/createMessage,
	// elicitation/create, roots/list) and waits for the client's result.
	// A JSON-RPC error from the client is returned as *jsonrpc.Error.
	Request(ctx context.Context, method string, params any) (json.RawMessage, error)
	// Capabilities returns what the client declared.
	Capabilities() mcp.ClientCapabilities
	// LogLevel is the least severe log level the client asked for; "" means
	// it asked for no log messages.
	LogLevel() mcp.LoggingLevel
	// Modern reports whether the request uses protocol 2026-07-28 or later
	// (results then carry resultType and serverInfo, and input_required
	// results are the client's to answer).
	Modern() bool
	// Session is the id of the client session the request belongs to, or
	// "" for a request outside any session (a 2026-07-28 stateless one).
	// A session's requests to a scope = "session" upstream go over that
	// session's own connection (see EndSession); stateless ones use the
	// shared connection.
	Session() string
	// Caller names who the session belongs to (a token, or a client
	// address), for its share of scope = "session" connections
	// (server.max_children_per_caller); "" counts against no share.
	Caller() string
}

// A ResultTaker is a Client that can take a large result as a stream
// (ResultStream) rather than whole: the front door's /mcp requests before
// 2026-07-28. A routed call of such a client may end with no result and
// no error, its result handed to TakeResult instead.
type ResultTaker interface {
	Client
	// TakeResult is handed the result of the call, to write to the client
	// and close. It runs before the call returns.
	TakeResult(*ResultStream)
}

// UpstreamError is viewmux's own failure to get an answer from an upstream:
// it is down or restarting, or did not answer in time. Its Public text is
// what a client may see: it names the upstream and what to do, never a URL,
// an address or a child process's output. Err holds the whole story, for
// logs.
type UpstreamError struct {
	Upstream string
	Method   string
	// Temporary is true when retrying later may succeed (down, restarting).
	Temporary bool
	// Timeout is the call_timeout that elapsed, or 0.
	Timeout time.Duration
	// TooLarge is the max_message_bytes the upstream's answer exceeded,
	// or 0.
	TooLarge int64
	// OutcomeUnknown is set when the connection ended after the request
	// reached the upstream: it may have run, and it is not sent again.
	OutcomeUnknown bool
	// Unreadable is why viewmux refused to parse the upstream's answer
	// (upstream.ErrUnreadable), or "".
	Unreadable string
	// Login is true when the upstream wants an OAuth login, or a wider
	// scope than the stored one grants: an operator must run `viewmux
	// auth login`; nothing the client does helps.
	Login bool
	// Connect, on a per-user upstream, is the link the caller connects
	// its account with (ErrNotConnected): a ticket good once, for this
	// caller only. It is in Public, never in Err, so that it is not
	// logged.
	Connect string
	// Reconnect, on a per-user upstream, is the link the caller connects
	// its account with again, for the scopes in MoreScope its login lacks
	// (a call refused with 403 insufficient_scope); like Connect, it is in
	// Public only. Unlike Connect it is never offered by URL elicitation:
	// the caller is connected, and waiting for a login would not tell a
	// wider one from the one it has.
	Reconnect string
	MoreScope []string
	// Anonymous is set for a call on a per-user upstream that carries no
	// identity (ErrNoIdentity).
	Anonymous bool
	// NoOAuth is set for a call on an exchange upstream made without an
	// OAuth access token (a static token's): there is nothing to exchange.
	NoOAuth bool
	Err     error
}

func (e *UpstreamError) Error() string { return e.Err.Error() }
func (e *UpstreamError) Unwrap() error { return e.Err }

// Public returns the message a client is given.
func (e *UpstreamError) Public() string {
	switch {
	case errors.Is(e.Err, oauth.ErrNoExchange):
		return fmt.Sprintf("upstream %s exchanges callers' tokens, and the identity provider does not offer token exchange (RFC 8693); an operator must change its credentials", e.Upstream)
	case errors.Is(e.Err, oauth.ErrExchangeRefused):
		return fmt.Sprintf("upstream %s: the identity provider refused to exchange your access token for one this upstream accepts", e.Upstream)
	case errors.Is(e.Err, oauth.ErrExchange):
		return fmt.Sprintf("upstream %s: your access token could not be exchanged for one this upstream accepts; see viewmux's log", e.Upstream)
	case e.Reconnect != "":
		return fmt.Sprintf("upstream %s needs more access from your account for %s (scope %s): open %s in a browser to connect it again with that access (the link works once, for ten minutes), then retry",
			e.Upstream, e.Method, strings.Join(e.MoreScope, " "), e.Reconnect)
	case e.Connect != "":
		return fmt.Sprintf("upstream %s acts with each user's own account, and yours is not connected: open %s in a browser to connect it (the link works once, for ten minutes), then retry", e.Upstream, e.Connect)
	case e.NoOAuth:
		return fmt.Sprintf("upstream %s acts as each caller by exchanging the caller's OAuth access token, and this call was not made with one (a static token cannot be exchanged): sign in with the identity provider", e.Upstream)
	case e.Anonymous:
		return fmt.Sprintf("upstream %s acts with each user's own account, and this call carries no identity: viewmux must be set up with [[auth.tokens]] or [auth.oauth] to tell its users apart", e.Upstream)
	case e.OutcomeUnknown:
		return fmt.Sprintf("upstream %q closed the connection after receiving the call; it may or may not have run", e.Upstream)
	case e.Unreadable != "":
		return fmt.Sprintf("upstream %q sent an answer viewmux cannot read: %s", e.Upstream, e.Unreadable)
	case e.TooLarge > 0:
		return fmt.Sprintf("upstream %s answered %s with a result too large: it exceeds max_message_bytes (%d bytes); ask for less, or raise max_message_bytes", e.Upstream, e.Method, e.TooLarge)
	case e.Timeout > 0:
		return fmt.Sprintf("upstream %s did not answer %s within its call_timeout (%s); retry, or raise call_timeout", e.Upstream, e.Method, e.Timeout)
	case e.Login:
		return fmt.Sprintf("upstream %s needs an OAuth login with more access for %s: an operator must run `viewmux auth login %s`", e.Upstream, e.Method, e.Upstream)
	case e.Temporary:
		return fmt.Sprintf("upstream %s is restarting or unavailable; retry shortly", e.Upstream)
	}
	return fmt.Sprintf("upstream %s failed to answer %s; see viewmux's log", e.Upstream, e.Method)
}

// upstreamErr classifies an error of upstream.Send. An upstream's own
// JSON-RPC error and the caller's cancellation pass through unchanged.
func upstreamErr(name, method string, timeout time.Duration, err error) error {
	var (
		rpc        *upstream.RPCError
		big        *upstream.TooLargeError
		unreadable *upstream.UnreadableError
		own        *UpstreamError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &own):
		// Classified already (a per-user upstream's refusal, peruser.go).
		if own.Method == "" {
			own.Method = method
		}
		return own
	case errors.As(err, &big):
		return &UpstreamError{Upstream: name, Method: method, TooLarge: big.Limit, Err: err}
	case errors.As(err, &unreadable):
		return &UpstreamError{Upstream: name, Method: method, Unreadable: unreadable.Reason.Error(), Err: err}
	case errors.Is(err, upstream.ErrOutcomeUnknown):
		// Not Temporary: a retry may run the call a second time.
		return &UpstreamError{Upstream: name, Method: method, OutcomeUnknown: true, Err: err}
	case errors.As(err, &rpc), errors.Is(err, context.Canceled) && !errors.Is(err, upstream.ErrDown):
		return err
	case errors.Is(err, upstream.ErrNeedsLogin), errors.Is(err, upstream.ErrInsufficientScope):
		return &UpstreamError{Upstream: name, Method: method, Login: true, Err: err}
	case errors.Is(err, upstream.ErrTimeout):
		return &UpstreamError{Upstream: name, Method: method, Timeout: timeout, Err: err}
	case errors.Is(err, upstream.ErrDown):
		return &UpstreamError{Upstream: name, Method: method, Temporary: true, Err: err}
	}
	return &UpstreamError{Upstream: name, Method: method, Err: err}
}

// userErrorResult returns the tools/call result of a per-user upstream's
// refusal to act for this caller (not connected, or no identity): a tool
// error (isError) the model and the user can read, that says what to do.
// nil for any other err.
func userErrorResult(err error) json.RawMessage {
	if err == nil {
		return nil
	}
	var ue *UpstreamError
	if !errors.As(err, &ue) || ue.Connect == "" && ue.Reconnect == "" && !ue.Anonymous && !ue.NoOAuth {
		return nil
	}
	b, _ := json.Marshal(map[string]any{"content": []map[string]any{{"type": "text", "text": ue.Public()}}, "isError": true})
	return b
}

// MaxInputRounds bounds how many times viewmux answers an upstream's
// input_required result for a client that cannot (one before 2026-07-28).
const MaxInputRounds = 10

// CallTool forwards a tools/call of the exposed tool e, which the caller
// has checked, to e's upstream. params are the client's params bytes: only
// the name and the hop's _meta are rewritten. The result bytes come back
// with the upstream hop's _meta removed (see finishResult); isError
// reports whether the result says isError.
func (a *Aggregator) CallTool(ctx context.Context, cl Client, e *filter.Entry, params json.RawMessage) (res json.RawMessage, isError bool, err error) {
	if e.Placeholder {
		return a.callPlaceholder(ctx, cl, e) // first.go: nothing is sent upstream
	}
	tool := e.Tool
	tool.Name = e.Original
	res, top, err := a.route(ctx, cl, e.Upstream, string(mcp.MethodToolsCall), e.Tool.Name, params, map[string]any{"name": e.Original}, &tool, true)
	if ue := notConnectedErr(err); ue != nil && a.elicitConnect(ctx, cl, e.Upstream, ue) { // connect_elicit.go
		res, top, err = a.route(ctx, cl, e.Upstream, string(mcp.MethodToolsCall), e.Tool.Name, params, map[string]any{"name": e.Original}, &tool, true)
	}
	if r := userErrorResult(err); r != nil {
		return r, true, nil
	}
	if err != nil || res == nil { // res nil: streamed (ResultTaker), links learned as it passes
		return nil, false, err
	}
	a.relay.learnLinks(e.Upstream, top[topContent])
	return res, string(top[topIsError]) == "true", nil
}

// GetPrompt forwards prompts/get of the exposed prompt p.
func (a *Aggregator) GetPrompt(ctx context.Context, cl Client, p *Prompt, params json.RawMessage) (json.RawMessage, error) {
	res, _, err := a.route(ctx, cl, p.Upstream, string(mcp.MethodPromptsGet), p.Prompt.Name, params, map[string]any{"name": p.Original}, nil, false)
	return res, err
}

// ReadResource forwards resources/read of uri (as the client named it) to
// the upstream serving it. Contents come back under the URI the client
// asked for.
func (a *Aggregator) ReadResource(ctx context.Context, cl Client, uri string, params json.RawMessage) (json.RawMessage, error) {
	up, original, ok := a.RouteURI(uri)
	if !ok {
		return nil, fmt.Errorf("resource %q: %w", uri, ErrResourceNotFound)
	}
	// Contents renamed are decoded whole (renameContents): not streamed.
	res, _, err := a.route(ctx, cl, up, string(mcp.MethodResourcesRead), uri, params, map[string]any{"uri": original}, nil, original == uri)
	if err != nil || original == uri {
		return res, err
	}
	return renameContents(res, original, uri)
}

// RouteURI returns the upstream serving uri and the URI that upstream
// knows it by.
func (a *Aggregator) RouteURI(uri string) (up, original string, ok bool) {
	return a.Snapshot().RouteURI(uri, a.relay.linkTable())
}

// Complete forwards completion/complete for a prompt (by exposed name) or
// a resource template (by exposed template). An upstream without the
// completions capability answers with no values.
func (a *Aggregator) Complete(ctx context.Context, cl Client, params json.RawMessage) (json.RawMessage, error) {
	up, target, ref, err := a.Snapshot().completionRef(params)
	if err == nil {
		err = checkPin(ctx, up)
	}
	if err != nil {
		return nil, err
	}
	u, err := a.upstream(up)
	if err != nil {
		return nil, upstreamErr(up, "completion/complete", 0, err)
	}
	if cat := u.Catalog(); cat != nil && cat.Capabilities.Completions == nil {
		return json.RawMessage(`{"completion":{"values":[]}}`), nil
	}
	res, _, err := a.route(ctx, cl, up, string(mcp.MethodCompletionComplete), target, params, map[string]any{"ref": ref}, nil, false)
	return res, err
}

// CompletionUpstream returns the upstream a completion/complete with these
// params would be sent to, and the ref's type ("ref/prompt" or
// "ref/resource"), by the same reading of params as Complete; or the error
// Complete would answer (ErrPromptNotFound, ErrResourceNotFound, or a
// *jsonrpc.Error for malformed params).
func (a *Aggregator) CompletionUpstream(params json.RawMessage) (up, refType string, err error) {
	up, _, ref, err := a.Snapshot().completionRef(params)
	if err != nil {
		return "", "", err
	}
	refType, _ = ref["type"].(string)
	return up, refType, nil
}

// completionRef reads the ref of completion/complete params: the upstream
// that serves it, the exposed target (for logs), and the ref as that
// upstream knows it.
func (s *Snapshot) completionRef(params json.RawMessage) (up, target string, ref map[string]any, err error) {
	var p struct {
		Ref struct {
			Type string `json:"type"`
			Name string `json:"name"`
			URI  string `json:"uri"`
		} `json:"ref"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return "", "", nil, &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: "completion/complete: " + err.Error()}
	}
	ref = map[string]any{"type": p.Ref.Type}
	switch p.Ref.Type {
	case "ref/prompt":
		pr := s.Prompt(p.Ref.Name)
		if pr == nil {
			return "", "", nil, fmt.Errorf("prompt %q: %w", p.Ref.Name, ErrPromptNotFound)
		}
		up, target, ref["name"] = pr.Upstream, p.Ref.Name, pr.Original
	case "ref/resource":
		target = p.Ref.URI
		if t := s.Template(p.Ref.URI); t != nil {
			up, ref["uri"] = t.Upstream, t.OriginalTemplate
		} else {
			var original string
			var ok bool
			if up, original, ok = s.RouteURI(p.Ref.URI, nil); !ok {
				return "", "", nil, fmt.Errorf("resource %q: %w", p.Ref.URI, ErrResourceNotFound)
			}
			ref["uri"] = original
		}
	default:
		return "", "", nil, &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: fmt.Sprintf("completion/complete: unsupported ref type %q", jsonrpc.Printable(p.Ref.Type))}
	}
	return up, target, ref, nil
}

// route is the one way a client's request reaches an upstream: params are
// rewritten (set, plus the hop's _meta), sent with upstream.Send, and an
// input_required result is answered by viewmux for a client that cannot.
// top holds the values of the upstream's result members named by the top*
// indexes, read in the one pass that crosses the result.
//
// With stream, a large result for a ResultTaker client (before
// 2026-07-28) is handed to it as a ResultStream: route then returns no
// result and no error.
func (a *Aggregator) route(ctx context.Context, cl Client, up, method, target string, params json.RawMessage, set map[string]any, tool *mcp.Tool, stream bool) (res json.RawMessage, top [][]byte, err error) {
	if err := checkPin(ctx, up); err != nil {
		return nil, nil, err
	}
	u, done, err := a.connFor(ctx, cl, up)
	if err != nil {
		return nil, nil, upstreamErr(up, method, 0, err)
	}
	// The connection is in use until the result has passed: a result
	// handed on as a ResultStream is read from it after route returns.
	streamed := false
	defer func() {
		if !streamed {
			done()
		}
	}()
	var forget func()
	out, err := jsonrpc.Rewrite(params, set, func(k string, v json.RawMessage) json.RawMessage {
		v, f := a.hopMeta(u, cl, k, v)
		if f != nil {
			forget = f
		}
		return v
	})
	if forget != nil {
		defer forget()
	}
	if err != nil {
		return nil, nil, &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: method + ": " + err.Error()}
	}
	req := upstream.Request{Method: method, Target: target, Params: out, LogLevel: cl.LogLevel(), Tool: tool, Modern: cl.Modern()}
	taker, _ := cl.(ResultTaker)
	req.Tail = stream && taker != nil && !cl.Modern()
	caps := cl.Capabilities()
	req.Caps = &caps
	call := a.relay.begin(u, cl)
	defer a.relay.end(u, call)
	ctx = withCall(ctx, call)
	for round := 0; ; round++ {
		res, err = u.Send(ctx, req)
		if err != nil {
			if u.Config().Credentials == configs.CredentialsPerUser && errors.Is(err, upstream.ErrNeedsLogin) {
				// The user's login no longer works: connect again.
				return nil, nil, a.notConnected(up, cl.Caller(), "the upstream refused the stored login")
			}
			if u.Config().Credentials == configs.CredentialsPerUser && errors.Is(err, upstream.ErrInsufficientScope) {
				if ue := a.needsMoreScope(u, up, method, cl.Caller(), err); ue != nil {
					return nil, nil, ue
				}
			}
			return nil, nil, upstreamErr(up, method, u.Config().CallTimeout, err)
		}
		if res == nil && req.Tail {
			if t := upstream.LoanFrom(ctx).TakeTail(); t != nil {
				rs := &ResultStream{a: a, tail: t, up: up, method: method, links: method == string(mcp.MethodToolsCall)}
				rs.OnEnd(func(bool, error) { done() })
				streamed = true
				taker.TakeResult(rs)
				return nil, nil, nil
			}
		}
		// The result's own members, read once: a large text in it is
		// crossed, not looked into.
		top = jsonrpc.Fields(res, topKeys...)
		if cl.Modern() || !needsInput(top[topResultType]) {
			return a.finishResult(upstream.LoanFrom(ctx), res, top, cl.Modern(), method == string(mcp.MethodResourcesRead)), top, nil
		}
		if round == MaxInputRounds {
			return nil, nil, &UpstreamError{Upstream: up, Method: method,
				Err: fmt.Errorf("upstream %q: %s %q: still asking for input after %d rounds", up, method, target, MaxInputRounds)}
		}
		if req.Params, err = a.answerInput(ctx, cl, out, res); err != nil {
			return nil, nil, err
		}
	}
}

// topKeys are the members of a result that route reads, at the indexes
// named top*.
var topKeys = []string{"resultType", "_meta", "content", "isError"}

const (
	topResultType = iota
	topMeta
	topContent
	topIsError
)

// needsInput reports whether a result whose resultType member is
// resultType is an input_required result.
func needsInput(resultType []byte) bool {
	return string(resultType) == `"`+string(mcp.ResultTypeInputRequired)+`"`
}

// answerInput fulfils an input_required result for a client from before
// 2026-07-28: each input request becomes a real server→client request to
// that client, and the returned params retry the original request with the
// answers and the upstream's requestState.
func (a *Aggregator) answerInput(ctx context.Context, cl Client, params, res json.RawMessage) (json.RawMessage, error) {
	var r struct {
		InputRequests map[string]struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		} `json:"inputRequests"`
		RequestState string `json:"requestState"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return nil, fmt.Errorf("input_required result: %w", err)
	}
	answers := make(map[string]json.RawMessage, len(r.InputRequests))
	for key, ir := range r.InputRequests {
		var p any
		if len(ir.Params) > 0 {
			p = ir.Params
		}
		if err := checkCapability(cl, ir.Method); err != nil {
			return nil, err
		}
		ans, err := cl.Request(ctx, ir.Method, p)
		if err != nil {
			return nil, err
		}
		answers[key] = ans
	}
	set := map[string]any{"inputResponses": answers}
	if r.RequestState != "" {
		set["requestState"] = r.RequestState
	}
	return jsonrpc.Rewrite(params, set, nil)
}

// checkCapability refuses a server→client request the client did not
// declare support for.
func checkCapability(cl Client, method string) error {
	caps := cl.Capabilities()
	ok := true
	switch mcp.MCPMethod(method) {
	case mcp.MethodSamplingCreateMessage:
		ok = caps.Sampling != nil
	case mcp.MethodElicitationCreate:
		ok = caps.Elicitation != nil
	case mcp.MethodListRoots:
		ok = caps.Roots != nil
	}
	if !ok {
		return &jsonrpc.Error{Code: mcp.MISSING_REQUIRED_CLIENT_CAPABILITY,
			Message: fmt.Sprintf("the client did not declare the capability %s needs", method)}
	}
	return nil
}

// hopMeta is the upstream hop's value of the client's _meta member k: a
// key of the client's own hop (io.modelcontextprotocol/*) is dropped (nil),
// and a progress token is replaced by one unique across upstream
// connections, whose notifications from the connection u are mapped back
// to cl; the returned func forgets that mapping (nil when there is none).
// A key that only case-folding decoders read as progressToken is dropped
// too: the upstream would take it for a token viewmux never minted, one
// that could name another session's.
func (a *Aggregator) hopMeta(u *upstream.Upstream, cl Client, k string, v json.RawMessage) (json.RawMessage, func()) {
	switch {
	case upstream.IsReservedMeta(k):
		return nil, nil
	case k == "progressToken":
		if string(v) == "null" {
			return v, nil
		}
		return a.relay.mintProgress(u, cl, v)
	case jsonrpc.FoldEqual(k, "progressToken"):
		return nil, nil
	}
	return v, nil
}

// finishResult removes what belongs to the upstream hop from a result
// (io.modelcontextprotocol/* _meta keys, and a plain "complete" resultType
// for a legacy client) and, for a 2026-07-28 client, stamps viewmux's own
// resultType and serverInfo, and on a cacheable result (resources/read)
// the caching hints 2026-07-28 requires when the upstream gave none: ttlMs
// 0 and cacheScope "private", the fail-closed defaults (a shared gateway
// must not let one principal's data be served to another). Other bytes
// are kept.
func (a *Aggregator) finishResult(loan *upstream.Loan, res json.RawMessage, top [][]byte, modern, cacheable bool) json.RawMessage {
	if !modern {
		if top[topResultType] == nil && !bytes.Contains(top[topMeta], []byte("io.modelcontextprotocol/")) {
			return res // nothing of another era's and no reserved _meta: as sent
		}
		// The edit a streamed result gets (stream.go), so that a result
		// reads the same whichever way it went.
		if out, _, err := editLegacyWhole(loan, res); err == nil {
			return out
		}
		return res // not an object: nothing to edit
	}
	var rt string
	json.Unmarshal(top[topResultType], &rt)
	meta := map[string]json.RawMessage{}
	if len(top[topMeta]) > 0 {
		json.Unmarshal(top[topMeta], &meta)
	}
	for k := range meta {
		if upstream.IsReservedMeta(k) {
			delete(meta, k)
		}
	}
	if modern {
		if b, err := json.Marshal(a.opts.ServerInfo); err == nil {
			meta[mcp.MetaKeyServerInfo] = b
		}
	}
	var metaBytes json.RawMessage // nil: no _meta
	if len(meta) > 0 {
		metaBytes, _ = json.Marshal(meta)
	}
	var add []jsonrpc.Member
	switch {
	case modern && rt == "":
		add = append(add, jsonrpc.Member{Key: "resultType", Value: json.RawMessage(`"complete"`)})
	}
	if modern && cacheable && rt != string(mcp.ResultTypeInputRequired) {
		hints := jsonrpc.Fields(res, "ttlMs", "cacheScope")
		if hints[0] == nil {
			add = append(add, jsonrpc.Member{Key: "ttlMs", Value: json.RawMessage(`0`)})
		}
		if hints[1] == nil {
			add = append(add, jsonrpc.Member{Key: "cacheScope", Value: json.RawMessage(`"private"`)})
		}
	}
	if top[topMeta] == nil && metaBytes != nil {
		add = append(add, jsonrpc.Member{Key: "_meta", Value: metaBytes})
	}
	// The envelope's members change; every other member keeps its bytes
	// and its place (a large content is copied once, not decoded), into a
	// buffer of the caller's loan, if any (upstream.Loan).
	return jsonrpc.AppendEdit(loan.Buffer(len(res)+len(metaBytes)+editRoom), res, func(key string, v []byte) []byte {
		switch key {
		case "resultType":
			if !modern && rt == string(mcp.ResultTypeComplete) {
				return nil
			}
		case "_meta":
			return metaBytes
		}
		return v
	}, add...)
}

// editRoom is what finishResult's edits may add to a result besides its
// _meta: resultType and the caching hints.
const editRoom = 64

// renameContents gives resources/read contents that the upstream returned
// under original the URI the client asked for.
func renameContents(res json.RawMessage, original, exposed string) (json.RawMessage, error) {
	var r map[string]json.RawMessage
	if err := json.Unmarshal(res, &r); err != nil {
		return res, nil
	}
	var contents []map[string]json.RawMessage
	if json.Unmarshal(r["contents"], &contents) != nil {
		return res, nil
	}
	want, _ := json.Marshal(original)
	to, _ := json.Marshal(exposed)
	for _, c := range contents {
		if bytes.Equal(c["uri"], want) {
			c["uri"] = to
		}
	}
	b, err := json.Marshal(contents)
	if err != nil {
		return res, nil
	}
	r["contents"] = b
	return json.Marshal(r)
}

// Subscribe forwards resources/subscribe of uri for the client session
// session ("" for a subscriber outside any session, such as a 2026-07-28
// listener), which belongs to the caller who (Client.Caller). On a scope =
// "session" upstream a session subscribes on its own connection (opening
// it if needed, within who's share), whose updates reach that session
// only; the front door forwards each session's subscription once.
// Otherwise it is forwarded on the shared connection the first time any
// client subscribes to uri, and the count of subscribers is raised only
// when that succeeds.
func (a *Aggregator) Subscribe(ctx context.Context, session, who, uri string) error {
	up, original, ok := a.RouteURI(uri)
	if !ok {
		return fmt.Errorf("resource %q: %w", uri, ErrResourceNotFound)
	}
	method, params := string(mcp.MethodResourcesSubscribe), map[string]any{"uri": original}
	if a.perUser(up) != nil {
		// Updates of one user's resources must reach that user only;
		// viewmux does not route them per user yet.
		return &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: fmt.Sprintf("resources/subscribe: upstream %s acts with each user's own account, and viewmux does not relay its resource updates; read the resource instead", up)}
	}
	if shared := a.sessionScoped(session, up); shared != nil {
		sc, err := a.sessionConn(ctx, session, who, shared)
		if err != nil {
			return upstreamErr(up, method, 0, err)
		}
		defer a.scoped.release(sc)
		if err := a.sendOn(ctx, sc.u, method, uri, params); err != nil {
			return err
		}
		a.scoped.subscribed(sc, 1)
		return nil
	}
	key := up + "\x00" + original
	defer a.relay.lockKey(key)() // serializes the first subscribe and the last unsubscribe of a URI
	if a.relay.subscribers(key) == 0 {
		if err := a.send(ctx, up, method, uri, params); err != nil {
			return err
		}
	}
	a.relay.addSubscriber(key, 1)
	return nil
}

// Unsubscribe forwards resources/unsubscribe of uri for session: on the
// session's own connection for a scope = "session" upstream (nothing when
// that connection is gone, and the subscription with it), else when the
// last subscriber of uri leaves.
func (a *Aggregator) Unsubscribe(ctx context.Context, session, uri string) error {
	up, original, ok := a.RouteURI(uri)
	if !ok {
		return nil
	}
	method, params := string(mcp.MethodResourcesUnsubscribe), map[string]any{"uri": original}
	if a.perUser(up) != nil {
		return nil // never subscribed (Subscribe)
	}
	if a.sessionScoped(session, up) != nil {
		sc := a.openSessionConn(session, up)
		if sc == nil {
			return nil
		}
		defer a.scoped.release(sc)
		if err := a.sendOn(ctx, sc.u, method, uri, params); err != nil {
			return err
		}
		a.scoped.subscribed(sc, -1)
		return nil
	}
	key := up + "\x00" + original
	defer a.relay.lockKey(key)()
	if a.relay.subscribers(key) == 0 {
		return nil
	}
	if a.relay.addSubscriber(key, -1) > 0 {
		return nil
	}
	return a.send(ctx, up, method, uri, params)
}

// send makes a request of viewmux's own (not on a client's behalf) to up's
// shared connection.
func (a *Aggregator) send(ctx context.Context, up, method, target string, params any) error {
	u, err := a.upstream(up)
	if err != nil {
		return upstreamErr(up, method, 0, err)
	}
	return a.sendOn(ctx, u, method, target, params)
}

// sendOn makes a request of viewmux's own on the connection u.
func (a *Aggregator) sendOn(ctx context.Context, u *upstream.Upstream, method, target string, params any) error {
	b, err := json.Marshal(params)
	if err != nil {
		return err
	}
	_, err = u.Send(ctx, upstream.Request{Method: method, Target: target, Params: b})
	return upstreamErr(u.Name(), method, u.Config().CallTimeout, err)
}

// callKey carries the routed call in the ctx of its upstream request,
// where a transport that ties server→client requests to the request hands
// it back: mcp-go's streamable HTTP client handles a request that arrives
// on a POST's response stream with a ctx derived from that POST's. Stdio
// and websocket hand the connection's own ctx, which carries none.
type callKey struct{}

func withCall(ctx context.Context, c *inflightCall) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

func callFrom(ctx context.Context) *inflightCall {
	c, _ := ctx.Value(callKey{}).(*inflightCall)
	return c
}
