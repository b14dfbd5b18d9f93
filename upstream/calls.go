package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/internal/tracing"
	"github.com/viewmux/viewmux/upstream/wire"
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
	// Tail lets a large result (of tools/call or resources/read, read
	// under a loan that allows it: Loan.AllowTail) come back unread: Send
	// then returns no result and no error, and the result is the loan's
	// Tail (TakeTail). Only a streamable HTTP connection's JSON answer is
	// handed over so; any other is read whole.
	Tail bool
}

// RPCError is a JSON-RPC error the upstream answered with. It reaches the
// client unchanged: code, message and data exactly as sent.
type RPCError = wire.Error

// ErrTooLarge is returned, wrapped and naming the upstream, the method and
// max_message_bytes, by a call whose answer exceeded max_message_bytes. Only
// that call fails; the connection stays up.
var ErrTooLarge = wire.ErrTooLarge

// TooLargeError is the error behind ErrTooLarge; it carries the limit.
type TooLargeError = wire.TooLargeError

// ErrOutcomeUnknown is returned, wrapped with ErrDown and naming the
// upstream, the method and the target, by a call whose connection ended
// after its request left: the upstream may have run it, or not. No
// request that may have reached an upstream is sent again, so the caller
// is told that it cannot know, rather than that the upstream is down.
var ErrOutcomeUnknown = wire.ErrOutcomeUnknown

// ErrUnreadable is returned, wrapped and naming the upstream, the method
// and the target, by a call whose answer viewmux refused to parse (not
// JSON, nested too deep): the answer's id named the call, so it ends at
// once rather than at its timeout. The connection stays up.
var ErrUnreadable = wire.ErrUnreadable

// UnreadableError is the error behind ErrUnreadable; it carries the
// reason.
type UnreadableError = wire.UnreadableError

// ErrTimeout is returned, wrapped, by a request the upstream did not answer
// within call_timeout.
var ErrTimeout = errors.New("timed out")

// Send forwards req on the current connection, once, and returns the
// upstream's result bytes. An upstream JSON-RPC error is returned as
// *RPCError; every other error wraps ErrDown (no connection, or it was
// lost meanwhile: then also ErrOutcomeUnknown once the request may have
// reached the upstream), ErrTimeout (cfg.CallTimeout), ErrTooLarge,
// ErrUnreadable or ctx's error, and names the upstream, the method and
// the target. When ctx ends first, the upstream is told with
// notifications/cancelled (except on 2026-07-28 HTTP, where ending the
// request's stream is the cancellation). Safe for concurrent use.
func (u *Upstream) Send(ctx context.Context, req Request) (json.RawMessage, error) {
	c := u.current()
	if c == nil {
		return nil, u.downErr(req.Method, req.Target)
	}
	p, version := c.peer, c.version
	if req.Modern && !c.modern {
		if side := c.modernPeer(ctx); side != nil {
			p, version = side, side.version
		}
	}
	params := req.Params
	if tracing.Active(ctx) {
		params = withTraceMeta(ctx, params)
	}
	var header http.Header
	if mcp.IsModernProtocol(version) {
		var err error
		if params, err = c.modernParams(version, req.Caps, req.LogLevel, params); err != nil {
			return nil, fmt.Errorf("upstream %q: %s %q: %w", u.cfg.Name, req.Method, req.Target, err)
		}
		header = standardHeaders(version, req.Method, params, req.Tool)
	}
	_, overHTTP := p.(*httpPeer)
	callCtx, done := c.callContext(ctx, !overHTTP)
	defer done()
	if req.Tail && !req.Modern {
		callCtx = context.WithValue(callCtx, tailKey{}, true)
	}
	res, err := p.call(callCtx, req.Method, params, header)
	var rpc *RPCError
	switch {
	case errors.As(err, &rpc):
		return nil, rpc
	case err != nil:
		return nil, c.callErr(callCtx, req.Method, req.Target, err)
	case len(res) == 0 && req.Tail && LoanFrom(ctx).hasTail():
		return nil, nil // the result is the loan's Tail
	case len(res) == 0:
		// The peer gave neither a result nor an error.
		return nil, fmt.Errorf("upstream %q: %s %q: %w", u.cfg.Name, req.Method, req.Target, errNoResult)
	}
	return res, nil
}

// cancelNoticeTimeout bounds the notifications/cancelled sent for a request
// whose caller went away.
const cancelNoticeTimeout = 5 * time.Second

// errNoResult is returned for an answer that holds neither a result nor an
// error.
var errNoResult = errors.New("the upstream's answer holds neither a result nor an error")

// errCallTimeout is the cause of a call's ctx when CallTimeout elapsed.
var errCallTimeout = errors.New("call timeout")

func (u *Upstream) downErr(method, target string) error {
	return fmt.Errorf("upstream %q: %s %q: %w", u.cfg.Name, method, target, ErrDown)
}

// callContext derives a call's ctx from parent: it also ends at CallTimeout
// (with the cause errCallTimeout) and, when watchConn, as soon as the
// connection is lost, so that no call waits on a dead connection (with a
// cause that wraps wire.ErrClosed: the engine then fails a call already
// sent with ErrOutcomeUnknown, and sends no cancel notice). An HTTP
// peer's calls need no watch: each of its requests runs under a context of
// the connection's own, which its loss cancels (httpPeer.call), so a second
// registration per call on the one connection context, under its lock,
// would buy nothing. callErr tells a lost connection by c's own ctx.
func (c *conn) callContext(parent context.Context, watchConn bool) (context.Context, func()) {
	ctx, lose := context.WithCancelCause(parent)
	cancel := func() { lose(nil) }
	if d := c.u.cfg.CallTimeout; d > 0 {
		var stopTimer context.CancelFunc
		ctx, stopTimer = context.WithTimeoutCause(ctx, d, errCallTimeout)
		cancel = func() {
			stopTimer()
			lose(nil)
		}
	}
	if !watchConn {
		return ctx, cancel
	}
	stop := context.AfterFunc(c.ctx, func() {
		lose(fmt.Errorf("%w: %w", wire.ErrClosed, context.Cause(c.ctx)))
	})
	return ctx, func() {
		stop()
		cancel()
	}
}

// callErr wraps err from a call made on c with the upstream, method and
// target, marking the connection lost when err says so.
func (c *conn) callErr(ctx context.Context, method, target string, err error) error {
	name := c.u.cfg.Name
	switch {
	case errors.Is(err, ErrTooLarge), errors.Is(err, ErrUnreadable):
		return fmt.Errorf("upstream %q: %s %q: %w", name, method, target, err)
	case errors.Is(err, ErrOutcomeUnknown):
		// The request may have reached the upstream: it is not sent
		// again, and the caller hears that it may have run. One HTTP
		// exchange cut off is one TCP connection lost, not the upstream.
		var cut *unansweredError
		if errors.As(err, &cut) {
			return fmt.Errorf("upstream %q: %s %q: %w", name, method, target, err)
		}
		c.lost(err)
		return fmt.Errorf("upstream %q: %s %q: %w: %w", name, method, target, ErrDown, err)
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
// A downstream's values must not travel upstream: an mcp-go upstream
// classifies a request by its protocol version key, and a mismatch fails it;
// Send sets this hop's own where needed.
const reservedMetaPrefix = "io.modelcontextprotocol/"

// IsReservedMeta reports whether a _meta key belongs to one hop only.
func IsReservedMeta(key string) bool { return strings.HasPrefix(key, reservedMetaPrefix) }
