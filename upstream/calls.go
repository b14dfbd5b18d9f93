package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// Request is one JSON-RPC request to forward to the upstream as it is: the
// params bytes travel unchanged but for the protocol _meta keys this hop
// owns on a 2026-07-28 connection (see Send).
type Request struct {
	Method string
	// Target names what the request is about (a tool, a prompt, a URI), for
	// errors and logs.
	Target string
	// Params is the JSON params object, or nil.
	Params json.RawMessage
	// Caps are the capabilities declared upstream for this request on a
	// 2026-07-28 connection: those of the client the request comes from, so
	// that the upstream asks only for what that client can give. nil =
	// none.
	Caps *mcp.ClientCapabilities
	// LogLevel is declared upstream for this request on a 2026-07-28
	// connection; "" = no log messages.
	LogLevel mcp.LoggingLevel
	// Tool is the upstream's definition of the tool a tools/call names, for
	// its x-mcp-header parameter headers on 2026-07-28 HTTP; nil = none.
	Tool *mcp.Tool
	// Modern asks for the request to reach the upstream as a 2026-07-28
	// request (it comes from a 2026-07-28 client): over the connection
	// when it speaks 2026-07-28, else over a 2026-07-28 side to the same
	// HTTP endpoint when the endpoint takes one (modern.go), else over the
	// connection as it is.
	Modern bool
}

// RPCError is a JSON-RPC error the upstream answered with. It reaches the
// client unchanged: code, message and data exactly as sent.
type RPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *RPCError) Error() string {
	return fmt.Sprintf("upstream answered with JSON-RPC error %d: %s", e.Code, e.Message)
}

// ErrTimeout is returned, wrapped, by a request the upstream did not answer
// within call_timeout.
var ErrTimeout = errors.New("timed out")

// requestSeq numbers the requests Send makes. Its ids are strings, so they
// never meet the numeric ids mcp-go's client mints on the same connection.
var requestSeq atomic.Uint64

// Send forwards req on the current connection and returns the upstream's
// result bytes. An upstream JSON-RPC error is returned as *RPCError; every
// other error wraps ErrDown (no connection, or it was lost meanwhile),
// ErrTimeout (cfg.CallTimeout) or ctx's error, and names the upstream, the
// method and the target. When ctx ends first, the upstream is told with
// notifications/cancelled (except on 2026-07-28 HTTP, where ending the
// request's stream is the cancellation). Safe for concurrent use.
func (u *Upstream) Send(ctx context.Context, req Request) (json.RawMessage, error) {
	c := u.current()
	if c == nil {
		return nil, u.downErr(req.Method, req.Target)
	}
	cl, modern := c.client, c.modern
	if req.Modern && !modern {
		if side := c.modernClient(ctx); side != nil {
			cl, modern = side, true
		}
	}
	params := req.Params
	var header http.Header
	if modern {
		var err error
		if params, err = c.modernParams(cl, req); err != nil {
			return nil, fmt.Errorf("upstream %q: %s %q: %w", u.cfg.Name, req.Method, req.Target, err)
		}
		header = standardHeaders(cl, req.Method, params, req.Tool)
	}
	out := transport.JSONRPCRequest{
		JSONRPC: mcp.JSONRPC_VERSION,
		ID:      mcp.NewRequestId("mcpmux-" + strconv.FormatUint(requestSeq.Add(1), 10)),
		Method:  req.Method,
		Header:  header,
	}
	if len(params) > 0 {
		out.Params = params
	}
	callCtx, done := c.callContext(ctx)
	defer done()
	id := out.ID.Value().(string)
	c.raw.expect(id)
	resp, err := cl.GetTransport().SendRequest(callCtx, out)
	if err != nil {
		c.raw.forget(id)
		if callCtx.Err() != nil && c.ctx.Err() == nil && !modern {
			c.cancelUpstream(out)
		}
		return nil, c.callErr(callCtx, req.Method, req.Target, err)
	}
	if resp.Error != nil {
		return nil, rpcError(resp.Error, c.raw.take(id))
	}
	c.raw.forget(id)
	if len(resp.Result) == 0 {
		// mcp-go passes on any JSON body, a gateway's error page included.
		return nil, fmt.Errorf("upstream %q: %s %q: %w", u.cfg.Name, req.Method, req.Target, errNoResult)
	}
	return resp.Result, nil
}

// rawRequest sends one request of mcpmux's own (a listing) on c, through
// the transport Send uses, and returns the result bytes exactly as the
// upstream sent them. A JSON-RPC error is returned as *RPCError; any other
// error is the transport's, unwrapped, so that the caller can tell a lost
// connection (isConnectionLoss). On a 2026-07-28 connection the request
// carries the per-request _meta and the standard headers. When ctx ends
// first, the upstream is told, as Send tells it.
func (c *conn) rawRequest(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	var header http.Header
	if c.modern {
		// The connection's own capabilities, as mcp-go's client declares
		// them: an upstream may list by them.
		caps := c.client.GetClientCapabilities()
		var err error
		if params, err = c.modernParams(c.client, Request{Method: method, Params: params, Caps: &caps}); err != nil {
			return nil, err
		}
		header = standardHeaders(c.client, method, params, nil)
	}
	out := transport.JSONRPCRequest{
		JSONRPC: mcp.JSONRPC_VERSION,
		ID:      mcp.NewRequestId("mcpmux-" + strconv.FormatUint(requestSeq.Add(1), 10)),
		Method:  method,
		Header:  header,
	}
	if len(params) > 0 {
		out.Params = params
	}
	id := out.ID.Value().(string)
	c.raw.expect(id)
	resp, err := c.client.GetTransport().SendRequest(ctx, out)
	if err != nil {
		c.raw.forget(id)
		if ctx.Err() != nil && c.ctx.Err() == nil {
			c.cancelUpstream(out)
		}
		return nil, err
	}
	if resp.Error != nil {
		return nil, rpcError(resp.Error, c.raw.take(id))
	}
	c.raw.forget(id)
	if len(resp.Result) == 0 {
		return nil, errNoResult
	}
	return resp.Result, nil
}

// rpcError keeps an upstream's error as it was sent: from raw, the error
// object's bytes when the connection's tap caught them, else from what the
// transport decoded (whose data numbers went through float64).
func rpcError(d *mcp.JSONRPCErrorDetails, raw json.RawMessage) *RPCError {
	e := &RPCError{Code: d.Code, Message: d.Message}
	var exact RPCError
	if len(raw) > 0 && json.Unmarshal(raw, &exact) == nil && exact.Code == d.Code && exact.Message == d.Message {
		e.Data = exact.Data
		return e
	}
	if d.Data != nil {
		if b, err := json.Marshal(d.Data); err == nil {
			e.Data = b
		}
	}
	return e
}

// modernParams adds the per-request protocol _meta that 2026-07-28 requires
// (protocol version, client capabilities and identity, log level) to params.
// Whatever the client sent under those keys was removed before (they belong
// to its own hop).
func (c *conn) modernParams(cl *client.Client, req Request) (json.RawMessage, error) {
	fields := map[string]json.RawMessage{}
	if len(req.Params) > 0 {
		if err := json.Unmarshal(req.Params, &fields); err != nil {
			return nil, fmt.Errorf("params are not a JSON object: %w", err)
		}
	}
	meta := map[string]json.RawMessage{}
	if raw, ok := fields["_meta"]; ok {
		if err := json.Unmarshal(raw, &meta); err != nil {
			return nil, fmt.Errorf("_meta is not a JSON object: %w", err)
		}
	}
	caps := req.Caps
	if caps == nil {
		caps = &mcp.ClientCapabilities{}
	}
	set := func(k string, v any) {
		b, err := json.Marshal(v)
		if err == nil {
			meta[k] = b
		}
	}
	set(mcp.MetaKeyProtocolVersion, cl.ProtocolVersion())
	set(mcp.MetaKeyClientCapabilities, caps)
	set(mcp.MetaKeyClientInfo, mcp.Implementation{Name: "mcpmux", Version: c.u.opts.ClientVersion})
	if req.LogLevel != "" {
		set(mcp.MetaKeyLogLevel, req.LogLevel)
	}
	m, err := json.Marshal(meta)
	if err != nil {
		return nil, err
	}
	fields["_meta"] = m
	return json.Marshal(fields)
}

// standardHeaders returns the Mcp-Method, Mcp-Name and Mcp-Param-* headers
// of a 2026-07-28 request (transports other than HTTP ignore them).
func standardHeaders(cl *client.Client, method string, params json.RawMessage, tool *mcp.Tool) http.Header {
	std := mcp.StandardHeaders(cl.ProtocolVersion(), mcp.MCPMethod(method), params)
	if len(std) == 0 {
		return nil
	}
	h := make(http.Header, len(std))
	for k, v := range std {
		h.Set(k, v)
	}
	if tool != nil && method == string(mcp.MethodToolsCall) {
		for k, v := range mcp.GenerateParamHeaders(tool, params) {
			h.Set(k, v)
		}
	}
	return h
}

// cancelNoticeTimeout bounds the notifications/cancelled sent for a request
// whose caller went away.
const cancelNoticeTimeout = 5 * time.Second

// cancelUpstream tells the upstream to stop working on req. On 2026-07-28
// HTTP, ending the request's stream already was the cancellation; on every
// other transport (legacy HTTP included, where a disconnect is not a cancel)
// the notification is the only way. It is best effort and off the caller's
// path.
func (c *conn) cancelUpstream(req transport.JSONRPCRequest) {
	if c.modern && (c.kind == "http") {
		return
	}
	n := mcp.JSONRPCNotification{JSONRPC: mcp.JSONRPC_VERSION}
	n.Method = string(mcp.MethodNotificationCancelled)
	n.Params.AdditionalFields = map[string]any{"requestId": req.ID, "reason": "the client cancelled the request"}
	c.spawn("cancel notice", func() {
		ctx, cancel := context.WithTimeout(c.ctx, cancelNoticeTimeout)
		defer cancel()
		if err := c.client.GetTransport().SendNotification(ctx, n); err != nil {
			c.u.log.Debug("notifications/cancelled not sent", "err", err)
		}
	})
}

// errNoResult is returned for an answer that holds neither a result nor an
// error.
var errNoResult = errors.New("the upstream's answer holds neither a result nor an error")

// errCallTimeout is the cause of a call's ctx when CallTimeout elapsed.
var errCallTimeout = errors.New("call timeout")

func (u *Upstream) downErr(method, target string) error {
	return fmt.Errorf("upstream %q: %s %q: %w", u.cfg.Name, method, target, ErrDown)
}

// callContext derives a call's ctx from parent: it also ends at CallTimeout
// and as soon as the connection is lost, so that no call waits on a dead
// connection (stdio notices EOF by itself, SSE would wait up to its own 60s
// response timeout).
func (c *conn) callContext(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	stop := context.AfterFunc(c.ctx, func() { cancel(context.Cause(c.ctx)) })
	cancelTimeout := context.CancelFunc(func() {})
	if d := c.u.cfg.CallTimeout; d > 0 {
		ctx, cancelTimeout = context.WithTimeoutCause(ctx, d, errCallTimeout)
	}
	return ctx, func() {
		stop()
		cancelTimeout()
		cancel(nil)
	}
}

// callErr wraps err from a call made on c with the upstream, method and
// target, marking the connection lost when err says so.
func (c *conn) callErr(ctx context.Context, method, target string, err error) error {
	name := c.u.cfg.Name
	switch {
	case c.ctx.Err() != nil:
		return fmt.Errorf("upstream %q: %s %q: %w: %w", name, method, target, ErrDown, context.Cause(c.ctx))
	case isConnectionLoss(err):
		c.lost(err)
		return fmt.Errorf("upstream %q: %s %q: %w: %w", name, method, target, ErrDown, err)
	case errors.Is(context.Cause(ctx), errCallTimeout):
		return fmt.Errorf("upstream %q: %s %q: %w after %s: %w", name, method, target, ErrTimeout, c.u.cfg.CallTimeout.Round(time.Millisecond), err)
	}
	return fmt.Errorf("upstream %q: %s %q: %w", name, method, target, err)
}

// reservedMetaPrefix marks _meta keys that belong to the protocol itself.
// A downstream's values must not travel upstream: mcp-go classifies a request
// by them (PROTOCOL §7.10); Send sets this hop's own where needed.
const reservedMetaPrefix = "io.modelcontextprotocol/"

// IsReservedMeta reports whether a _meta key belongs to one hop only.
func IsReservedMeta(key string) bool { return strings.HasPrefix(key, reservedMetaPrefix) }
