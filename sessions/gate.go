package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpmux/mcpmux/filter"
)

// envelope is the part of a JSON-RPC message the gate needs. Everything else
// stays raw and reaches mcp-go untouched.
type envelope struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Meta      map[string]any  `json:"_meta"`
		Cursor    *string         `json:"cursor"`
	} `json:"params"`
}

// modern reports whether the message is a 2026-07-28 (stateless) request:
// one that carries its protocol version in _meta.
func (e *envelope) modern() bool {
	_, ok := e.Params.Meta["io.modelcontextprotocol/protocolVersion"]
	return ok
}

// isRequest reports whether the message is a request (has an id).
func (e *envelope) isRequest() bool { return len(e.ID) > 0 && string(e.ID) != "null" }

// maxToolNameInError bounds how much of a client-supplied name is echoed.
const maxToolNameInError = 128

// errorResponse is a JSON-RPC error answer the gate gives without involving
// mcp-go or any upstream.
type errorResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func newErrorResponse(id json.RawMessage, code int, msg string) *errorResponse {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	r := &errorResponse{JSONRPC: mcp.JSONRPC_VERSION, ID: id}
	r.Error.Code = code
	r.Error.Message = msg
	return r
}

// check is the gate every front door runs before mcp-go sees a message: a
// tools/call of a tool the view does not show, or with arguments a call_rule
// refuses, is answered here and never reaches an upstream. It returns nil
// when the message may proceed.
func check(view *filter.View, env *envelope) *errorResponse {
	if env.Method != string(mcp.MethodToolsCall) || !env.isRequest() {
		return nil
	}
	e := view.Lookup(env.Params.Name)
	if e == nil {
		return newErrorResponse(env.ID, mcp.METHOD_NOT_FOUND, "Tool not found: "+safeName(env.Params.Name))
	}
	if err := view.Filter.CheckCall(e, env.Params.Arguments); err != nil {
		return newErrorResponse(env.ID, mcp.INVALID_PARAMS, "Arguments not allowed for "+e.Tool.Name)
	}
	return nil
}

// safeName renders a client-supplied name for an error message: every rune
// that is not printable (control, format such as zero-width space or bidi
// marks, invalid UTF-8) becomes '?', and it is cut to 128 bytes on a rune
// boundary.
func safeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		if !unicode.IsPrint(r) || r == utf8.RuneError {
			r = '?'
		}
		if b.Len()+utf8.RuneLen(r) > maxToolNameInError {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

// gate is check plus what every door does around it: per-session rate
// limits on tools/call, and logging, metrics and audit for refusals. It
// returns nil when the message may proceed.
func (s *Server) gate(session string, b Binding, view *filter.View, env *envelope) *errorResponse {
	resp := check(view, env)
	reason := ""
	switch {
	case resp != nil && resp.Error.Code == mcp.METHOD_NOT_FOUND:
		reason = reasonNotFound
	case resp != nil:
		reason = reasonArguments
	case env.Method == string(mcp.MethodToolsCall) && env.isRequest() &&
		!s.limits.allow(session, s.Resolver().RateFor(b.Profile)):
		reason = reasonRate
		resp = newErrorResponse(env.ID, rateLimited,
			fmt.Sprintf("Rate limit exceeded: profile %q allows %d tool calls per minute per session", b.Profile, s.Resolver().RateFor(b.Profile)))
	default:
		return nil
	}
	s.log.Info("tools/call refused", "session", session, "tool", safeName(env.Params.Name), "profile", b.Profile, "reason", reason)
	s.metrics.count(env.Method, outcomeDenied)
	s.audit.write(auditRecord{
		Time: time.Now().UTC(), Session: session, Profile: b.Profile, Tool: safeName(env.Params.Name),
		Decision: decisionDenied, Reason: reason,
	}, env.Params.Arguments)
	return resp
}

// rateLimited is the JSON-RPC error code of a call refused by a rate limit:
// an implementation-defined server error.
const rateLimited = -32029

type bindingKey struct{}

// withBinding returns ctx carrying b.
func withBinding(ctx context.Context, b Binding) context.Context {
	return context.WithValue(ctx, bindingKey{}, b)
}

// bindingFrom returns the binding in ctx.
func bindingFrom(ctx context.Context) (Binding, bool) {
	b, ok := ctx.Value(bindingKey{}).(Binding)
	return b, ok && b.Filter != nil
}

// errNoBinding is returned when a handler runs without a resolved binding,
// which would be a bug in a front door; it fails closed.
var errNoBinding = errors.New("no profile binding for this request")

// accessError is the error for a call that passed mcp-go but not the view;
// it only happens if a front door skipped the gate, and fails closed.
func accessError(name string) error {
	return fmt.Errorf("Tool not found: %s", safeName(name))
}

// writeList writes a tools/list answer from the view's pre-encoded listing,
// in pieces, so that nothing the size of the listing is allocated per
// request.
func writeList(w io.Writer, id json.RawMessage, v *filter.View) error {
	for _, part := range [][]byte{[]byte(`{"jsonrpc":"2.0","id":`), id, []byte(`,"result":`), v.Encoded(), []byte("}\n")} {
		if _, err := w.Write(part); err != nil {
			return err
		}
	}
	return nil
}
