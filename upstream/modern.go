package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
)

// modernSide is a 2026-07-28 client to the same streamable HTTP endpoint
// as a connection that negotiated an older protocol.
//
// viewmux pins servers that speak both eras to 2025-11-25, because on that
// version they may ask a client for input in the middle of a call, which
// viewmux relays to the legacy client that caused it. A 2026-07-28 client
// expects the other way: an input_required result it answers itself. Its
// requests go through this side instead, as the 2026-07-28 requests they
// are, so such a server answers them exactly as it would answer that
// client directly. A 2026-07-28 request needs no session, so the side has
// none. It is opened on first use and kept with its connection.
type modernSide struct {
	mu     sync.Mutex
	peer   *httpPeer
	failed time.Time // last failed attempt; retried after modernRetry
}

// modernRetry is how long a failed attempt to speak 2026-07-28 to an
// endpoint is remembered.
const modernRetry = time.Minute

// modernPeer returns the 2026-07-28 side of c's endpoint, opening it on
// first use, or nil when c is not an HTTP connection on an older protocol
// or the endpoint does not speak 2026-07-28.
func (c *conn) modernPeer(ctx context.Context) *httpPeer {
	if c.modern || c.kind != configs.TransportHTTP || c.u.cfg.Protocol != "" {
		return nil
	}
	s := &c.side
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.peer != nil {
		return s.peer
	}
	if !s.failed.IsZero() && time.Since(s.failed) < modernRetry {
		return nil
	}
	p, err := c.openModern(context.WithoutCancel(ctx))
	if err != nil {
		s.failed = time.Now()
		c.u.log.Info("endpoint does not take 2026-07-28 requests; 2026-07-28 clients are served through its "+c.version+" session", "err", err)
		return nil
	}
	s.peer = p
	return p
}

// openModern opens the side and asks server/discover whether the endpoint
// speaks 2026-07-28. A server may answer it and still list only older
// versions (the Go SDK's stateful server does); its 2026-07-28 requests
// then all fail with -32022, so the side is used only when discover lists
// the version.
func (c *conn) openModern(ctx context.Context) (*httpPeer, error) {
	if c.ctx.Err() != nil {
		return nil, context.Cause(c.ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, c.u.connectTimeout())
	defer cancel()
	version := mcp.ProtocolVersion20260728
	p := c.newHTTPPeer(version)
	fail := func(err error) (*httpPeer, error) {
		p.close()
		p.wait()
		return nil, err
	}
	params, err := c.modernParams(version, c.clientCaps(), "", nil)
	if err != nil {
		return fail(err)
	}
	method := string(mcp.MethodServerDiscover)
	raw, err := p.call(ctx, method, params, standardHeaders(version, method, params, nil))
	if err != nil {
		return fail(fmt.Errorf("server/discover: %w", err))
	}
	var disc mcp.DiscoverResult
	if err := json.Unmarshal(raw, &disc); err != nil {
		return fail(fmt.Errorf("server/discover result: %w", err))
	}
	if !slices.Contains(disc.SupportedVersions, version) {
		return fail(fmt.Errorf("server/discover lists %v, not %s", disc.SupportedVersions, version))
	}
	return p, nil
}

// closeSide closes the modern side, if it was opened, and waits for what
// it started.
func (c *conn) closeSide() {
	c.side.mu.Lock()
	p := c.side.peer
	c.side.peer = nil
	c.side.mu.Unlock()
	if p != nil {
		if err := p.close(); err != nil {
			c.u.log.Debug("closing the 2026-07-28 side", "err", err)
		}
		p.wait()
	}
}
