package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/upstream/wire"
)

// peer is the seam under a conn: how one JSON-RPC request, notification
// and close travel. Stdio, websocket and legacy SSE connections speak
// through viewmux's own engine (wirePeer); streamable HTTP, and the
// 2026-07-28 side of a legacy HTTP connection (modern.go), through
// httpPeer (streamable.go). Everything above it (Send, the catalog fetch,
// probes, logging/setLevel) goes through conn.rawRequest or conn.call,
// whichever peer is below.
type peer interface {
	// call sends a request with params as they are and returns the
	// result's bytes; a JSON-RPC error answer is *RPCError. header is for
	// HTTP transports (2026-07-28 standard headers); others ignore it.
	// When ctx ends first, the upstream is told where the transport needs
	// it (notifications/cancelled with viewmux's own id).
	call(ctx context.Context, method string, params json.RawMessage, header http.Header) (json.RawMessage, error)
	notify(ctx context.Context, method string, params json.RawMessage) error
	// close starts closing: pending calls fail. wait then waits for what
	// the peer started (after a stdio child was shut down).
	close() error
	wait()
}

// wirePeer is a connection through viewmux's own engine.
type wirePeer struct{ w *wire.Conn }

func (p wirePeer) call(ctx context.Context, method string, params json.RawMessage, _ http.Header) (json.RawMessage, error) {
	return p.w.Call(ctx, method, params)
}

func (p wirePeer) notify(ctx context.Context, method string, params json.RawMessage) error {
	return p.w.Notify(ctx, method, params)
}

func (p wirePeer) close() error { return p.w.Close() }
func (p wirePeer) wait()        { p.w.Wait() }

// rawRequest is the one primitive viewmux's own requests to the upstream
// go through (the catalog fetch, probes, logging/setLevel, discovery):
// on a 2026-07-28 connection it adds the protocol _meta with the
// capabilities viewmux declares for itself, then calls the peer.
func (c *conn) rawRequest(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	var header http.Header
	if mcp.IsModernProtocol(c.version) {
		var err error
		if params, err = c.modernParams(c.version, c.clientCaps(), "", params); err != nil {
			return nil, err
		}
		header = standardHeaders(c.version, method, params, nil)
	}
	res, err := c.peer.call(ctx, method, params, header)
	if err == nil && len(res) == 0 {
		return nil, errNoResult
	}
	return res, err
}

// clientCaps are the capabilities viewmux declares to its upstreams: the
// server→client requests it relays.
func (c *conn) clientCaps() *mcp.ClientCapabilities {
	caps := &mcp.ClientCapabilities{}
	if c.u.opts.OnRequest != nil {
		caps.Sampling = &mcp.SamplingCapability{}
		caps.Roots = &struct {
			ListChanged bool `json:"listChanged,omitempty"`
		}{ListChanged: true}
		caps.Elicitation = &mcp.ElicitationCapability{}
	}
	return caps
}

// modernParams adds the per-request protocol _meta that 2026-07-28 requires
// (protocol version, client capabilities and identity, log level) to params.
// Whatever the client sent under those keys was removed before (they belong
// to its own hop).
func (c *conn) modernParams(version string, caps *mcp.ClientCapabilities, level mcp.LoggingLevel, params json.RawMessage) (json.RawMessage, error) {
	fields := map[string]json.RawMessage{}
	if len(params) > 0 {
		if err := json.Unmarshal(params, &fields); err != nil {
			return nil, fmt.Errorf("params are not a JSON object: %w", err)
		}
	}
	meta := map[string]json.RawMessage{}
	if raw, ok := fields["_meta"]; ok {
		if err := json.Unmarshal(raw, &meta); err != nil {
			return nil, fmt.Errorf("_meta is not a JSON object: %w", err)
		}
	}
	if caps == nil {
		caps = &mcp.ClientCapabilities{}
	}
	set := func(k string, v any) {
		b, err := json.Marshal(v)
		if err == nil {
			meta[k] = b
		}
	}
	set(mcp.MetaKeyProtocolVersion, version)
	set(mcp.MetaKeyClientCapabilities, caps)
	set(mcp.MetaKeyClientInfo, mcp.Implementation{Name: "viewmux", Version: c.u.opts.ClientVersion})
	if level != "" {
		set(mcp.MetaKeyLogLevel, level)
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
func standardHeaders(version, method string, params json.RawMessage, tool *mcp.Tool) http.Header {
	std := mcp.StandardHeaders(version, mcp.MCPMethod(method), params)
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

// isMethodNotFound reports whether err is the upstream's method-not-found
// answer.
func isMethodNotFound(err error) bool {
	var e *RPCError
	return (errors.As(err, &e) && e.Code == mcp.METHOD_NOT_FOUND) || errors.Is(err, mcp.ErrMethodNotFound)
}
