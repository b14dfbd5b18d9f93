package sessions

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/sessions/grant"
)

// This file is the one handler for the messages viewmux answers itself on
// every door, the ones the chain (chain.go) does not route to an upstream:
// the handshake (initialize, server/discover), ping, the four listings,
// and the JSON-RPC errors for what is malformed, removed or unknown. A
// door converts between its wire and messages, and calls respond for
// everything that is neither routed nor a notification or a response.
//
// The answers follow the protocol as the mcp-go server viewmux was first
// built on gave them, so that a client sees the same bytes: the same
// negotiated versions, capabilities and error texts.

// handshake is what a client said of itself in its initialize request.
type handshake struct {
	info     mcp.Implementation
	caps     mcp.ClientCapabilities
	protocol string // the version negotiated
}

// capabilities are the server capabilities viewmux offers on every door:
// list_changed for the three listings (each session is told when its own
// view changes), resource subscriptions, completions and logging.
func capabilities() mcp.ServerCapabilities {
	var c mcp.ServerCapabilities
	c.Logging = &struct{}{}
	c.Prompts = &struct {
		ListChanged bool `json:"listChanged,omitempty"`
	}{ListChanged: true}
	c.Resources = &struct {
		Subscribe   bool `json:"subscribe,omitempty"`
		ListChanged bool `json:"listChanged,omitempty"`
	}{Subscribe: true, ListChanged: true}
	c.Tools = &struct {
		ListChanged bool `json:"listChanged,omitempty"`
	}{ListChanged: true}
	c.Completions = &struct{}{}
	return c
}

// Texts of the errors for methods that belong to the other protocol era.
const (
	removedIn2026 = " was removed in protocol version " + mcp.ProtocolVersion20260728
	needs2026     = " requires protocol version " + mcp.ProtocolVersion20260728 + " or later"
)

// respond answers the request m, which the chain does not route, under b
// and its view: the handshake, ping, listings, and errors. parseErr is
// why the message's bytes did not parse, if they did not. It returns the
// encoded answer (nil for a notification or a response, which get none)
// and, for a successful initialize, what the client said of itself, which
// the door records for its session. code is the JSON-RPC error code of
// an error answer, else 0.
func (s *Server) respond(b grant.Binding, view *filter.View, m *jsonrpc.Message, parseErr error) (resp []byte, hs *handshake, code int) {
	if parseErr != nil {
		s.metrics.count("", outcomeError)
		return errorFrame(nil, mcp.PARSE_ERROR, "Failed to parse message"), nil, mcp.PARSE_ERROR
	}
	if m.JSONRPC != jsonrpc.Version {
		s.metrics.count(m.Method, outcomeError)
		return errorFrame(m.ID, mcp.INVALID_REQUEST, "Invalid JSON-RPC version"), nil, mcp.INVALID_REQUEST
	}
	if !m.HasID() || m.Method == "" {
		return nil, nil, 0 // a notification or a response: the door handles those
	}
	modern := isModern(m)
	var res json.RawMessage
	e := modernMeta(m, modern)
	if e == nil {
		res, hs, e = s.result(b, view, m, modern)
	}
	if e != nil {
		s.metrics.count(m.Method, outcomeError)
		return jsonrpc.ErrorResponse(m.ID, e), nil, e.Code
	}
	s.metrics.count(m.Method, outcomeOK)
	return jsonrpc.Response(m.ID, res), hs, 0
}

// modernMeta checks what every 2026-07-28 request carries in its _meta:
// a supported protocol version and the client's capabilities.
func modernMeta(m *jsonrpc.Message, modern bool) *jsonrpc.Error {
	if !modern {
		return nil
	}
	v := m.MetaString(mcp.MetaKeyProtocolVersion)
	if !mcp.IsValidProtocolVersion(v) {
		e := mcp.UnsupportedProtocolVersionError{Version: v, Supported: mcp.ValidProtocolVersions}.JSONRPCError().Error
		data, _ := json.Marshal(e.Data)
		return &jsonrpc.Error{Code: e.Code, Message: e.Message, Data: data}
	}
	var caps mcp.ClientCapabilities
	if raw, ok := m.Meta[mcp.MetaKeyClientCapabilities]; !ok || string(raw) == "null" || json.Unmarshal(raw, &caps) != nil {
		return &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: "missing or invalid _meta field " + mcp.MetaKeyClientCapabilities}
	}
	return nil
}

// result is respond's result for a request of either era.
func (s *Server) result(b grant.Binding, view *filter.View, m *jsonrpc.Message, modern bool) (json.RawMessage, *handshake, *jsonrpc.Error) {
	quoted := fmt.Sprintf("%q", m.Method)
	switch mcp.MCPMethod(m.Method) {
	case mcp.MethodInitialize:
		if modern {
			return nil, nil, &jsonrpc.Error{Code: mcp.METHOD_NOT_FOUND, Message: quoted + removedIn2026}
		}
		var p mcp.InitializeParams
		if len(m.Params) > 0 && string(m.Params) != "null" {
			if err := json.Unmarshal(m.Params, &p); err != nil {
				return nil, nil, &jsonrpc.Error{Code: mcp.INVALID_REQUEST, Message: "initialize: params: " + err.Error()}
			}
		}
		hs := &handshake{info: p.ClientInfo, caps: p.Capabilities, protocol: mcp.NegotiateLegacyVersion(p.ProtocolVersion)}
		res, err := json.Marshal(mcp.InitializeResult{
			ProtocolVersion: hs.protocol,
			Capabilities:    capabilities(),
			ServerInfo:      s.implementation(),
			Instructions:    s.instructions(b),
		})
		return res, hs, encodeErr(err)
	case mcp.MethodPing:
		if modern {
			return nil, nil, &jsonrpc.Error{Code: mcp.METHOD_NOT_FOUND, Message: quoted + removedIn2026}
		}
		return emptyResult, nil, nil
	case mcp.MethodServerDiscover:
		if !modern {
			return nil, nil, &jsonrpc.Error{Code: mcp.METHOD_NOT_FOUND, Message: quoted + needs2026}
		}
		r := &mcp.DiscoverResult{SupportedVersions: mcp.ValidProtocolVersions, Capabilities: capabilities(), Instructions: s.instructions(b)}
		s.decorate(&r.Result, &r.CacheableResult)
		res, err := json.Marshal(r)
		return res, nil, encodeErr(err)
	case mcp.MethodSubscriptionsListen:
		return nil, nil, &jsonrpc.Error{Code: mcp.METHOD_NOT_FOUND, Message: quoted + needs2026}
	case mcp.MethodSetLogLevel, mcp.MethodResourcesSubscribe, mcp.MethodResourcesUnsubscribe:
		// Routed for a session; a request without one has nothing to set.
		if modern {
			return nil, nil, &jsonrpc.Error{Code: mcp.METHOD_NOT_FOUND, Message: quoted + removedIn2026}
		}
		return emptyResult, nil, nil
	case mcp.MethodToolsList, mcp.MethodPromptsList, mcp.MethodResourcesList, mcp.MethodResourcesTemplatesList:
		res, err := s.list(b, view, m, modern)
		return res, nil, err
	case mcp.MethodTasksGet, mcp.MethodTasksList, mcp.MethodTasksResult, mcp.MethodTasksCancel:
		return nil, nil, &jsonrpc.Error{Code: mcp.METHOD_NOT_FOUND, Message: "tasks not supported"}
	}
	return nil, nil, &jsonrpc.Error{Code: mcp.METHOD_NOT_FOUND, Message: fmt.Sprintf("Method %s not found", m.Method)}
}

// implementation is what viewmux reports as itself.
func (s *Server) implementation() mcp.Implementation {
	return mcp.Implementation{Name: "viewmux", Version: s.version}
}

// decorate stamps what 2026-07-28 requires on a result: its type, the
// server's identity, and, for a cacheable one (c non-nil), caching hints
// that allow no reuse across callers.
func (s *Server) decorate(r *mcp.Result, c *mcp.CacheableResult) {
	r.SetResultType(mcp.ResultTypeComplete)
	r.EnsureResultMeta().SetServerInfo(s.implementation())
	if c != nil {
		c.SetCacheHints(0, mcp.CacheScopePrivate)
	}
}

// encodeErr is the answer to a result viewmux could not encode.
func encodeErr(err error) *jsonrpc.Error {
	if err == nil {
		return nil
	}
	return &jsonrpc.Error{Code: mcp.INTERNAL_ERROR, Message: "result could not be encoded: " + err.Error()}
}

// list answers a listing from the view: its items' listed bytes (the
// upstream's own, with the exposed name and viewmux's _meta), all of them
// in one page. A cursor, which viewmux never hands out, is read as the
// name after which to start, as the first page's answer would have made
// it; one that does not decode is invalid params. A 2026-07-28 listing
// carries that era's result fields.
func (s *Server) list(b grant.Binding, view *filter.View, m *jsonrpc.Message, modern bool) (json.RawMessage, *jsonrpc.Error) {
	if m.Cursor == nil && !modern {
		if m.Method == string(mcp.MethodToolsList) {
			return view.Encoded(), nil
		}
		return s.listingOf(view, b).Encoded(m.Method), nil
	}
	after := ""
	if m.Cursor != nil && *m.Cursor != "" {
		c, err := base64.StdEncoding.DecodeString(*m.Cursor)
		if err != nil {
			return nil, &jsonrpc.Error{Code: mcp.INVALID_PARAMS, Message: err.Error()}
		}
		after = string(c)
	}
	var key string
	var items []json.RawMessage
	listing := s.listingOf(view, b)
	pick := func(name string, raw json.RawMessage, item any) {
		if after != "" && name <= after {
			return
		}
		if raw == nil { // an item viewmux holds only decoded
			raw, _ = json.Marshal(item)
		}
		items = append(items, raw)
	}
	switch mcp.MCPMethod(m.Method) {
	case mcp.MethodToolsList:
		key = "tools"
		for _, t := range view.Tools {
			pick(t.Name, view.Lookup(t.Name).Definition(), t)
		}
	case mcp.MethodPromptsList:
		key = "prompts"
		for _, p := range listing.Prompts {
			pick(p.Name, listing.Definition(m.Method, p.Name), p)
		}
	case mcp.MethodResourcesList:
		key = "resources"
		for _, x := range listing.Resources {
			pick(x.Name, listing.Definition(m.Method, x.URI), x)
		}
	default:
		key = "resourceTemplates"
		for _, x := range listing.Templates {
			pick(x.Name, listing.Definition(m.Method, filter.TemplateString(x)), x)
		}
	}
	// Every listing's result is a page, with its items under key; one
	// page is the whole listing, so it has no nextCursor.
	var res mcp.PaginatedResult
	if modern {
		s.decorate(&res.Result, &res.CacheableResult)
	}
	out, err := json.Marshal(res)
	if err != nil {
		return nil, encodeErr(err)
	}
	out, err = jsonrpc.Splice(out, []jsonrpc.Member{{Key: key, Value: joinItems(items)}}, nil, nil) // appended: res has no such member
	if err != nil {
		return nil, encodeErr(err)
	}
	return out, nil
}

// joinItems returns the JSON array of items.
func joinItems(items []json.RawMessage) json.RawMessage {
	n := 2
	for _, it := range items {
		n += len(it) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, it...)
	}
	return append(b, ']')
}
