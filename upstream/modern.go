package upstream

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpmux/mcpmux/configs"
)

// modernSide is a 2026-07-28 client to the same streamable HTTP endpoint
// as a connection that negotiated an older protocol.
//
// mcpmux pins servers that speak both eras to 2025-11-25, because on that
// version they may ask a client for input in the middle of a call, which
// mcpmux relays to the legacy client that caused it. A 2026-07-28 client
// expects the other way: an input_required result it answers itself. Its
// requests go through this side instead, as the 2026-07-28 requests they
// are, so such a server answers them exactly as it would answer that
// client directly. A 2026-07-28 request needs no session, so the side has
// none. It is opened on first use and kept with its connection.
type modernSide struct {
	mu     sync.Mutex
	client *client.Client
	failed time.Time // last failed attempt; retried after modernRetry
}

// modernRetry is how long a failed attempt to speak 2026-07-28 to an
// endpoint is remembered.
const modernRetry = time.Minute

// modernClient returns the 2026-07-28 client of c's endpoint, opening it
// on first use, or nil when c is not an HTTP connection on an older
// protocol or the endpoint does not speak 2026-07-28.
func (c *conn) modernClient(ctx context.Context) *client.Client {
	if c.modern || c.kind != configs.TransportHTTP || c.u.cfg.Protocol != "" {
		return nil
	}
	s := &c.side
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != nil {
		return s.client
	}
	if !s.failed.IsZero() && time.Since(s.failed) < modernRetry {
		return nil
	}
	cl, err := c.openModern(context.WithoutCancel(ctx))
	if err != nil {
		s.failed = time.Now()
		c.u.log.Info("endpoint does not take 2026-07-28 requests; 2026-07-28 clients are served through its "+c.version+" session", "err", err)
		return nil
	}
	s.client = cl
	return cl
}

func (c *conn) openModern(ctx context.Context) (*client.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, c.u.connectTimeout())
	defer cancel()
	t, err := transport.NewStreamableHTTP(c.u.cfg.URL,
		transport.WithHTTPHeaders(c.u.cfg.Headers),
		transport.WithHTTPBasicClient(c.httpc),
		transport.WithHTTPLogger(c.u.log),
	)
	if err != nil {
		return nil, err
	}
	cl := client.NewClient(t, client.WithProtocolVersion(mcp.ProtocolVersion20260728))
	cl.OnNotification(c.handleNotification)
	if err := cl.Start(c.ctx); err != nil {
		return nil, err
	}
	var req mcp.InitializeRequest
	req.Params.ClientInfo = mcp.Implementation{Name: "mcpmux", Version: c.u.opts.ClientVersion}
	if _, err := cl.Initialize(ctx, req); err != nil {
		cl.Close()
		return nil, err
	}
	if !mcp.IsModernProtocol(cl.ProtocolVersion()) {
		cl.Close()
		return nil, fmt.Errorf("negotiated %s", cl.ProtocolVersion())
	}
	// mcp-go takes any answer to its server/discover probe as consent. A
	// server may answer it and still list only older versions (the Go
	// SDK's stateful server does); its 2026-07-28 requests then all fail
	// with -32022, so the side is used only when discover lists the
	// version it speaks.
	disc, err := cl.Discover(ctx, mcp.DiscoverRequest{})
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("server/discover: %w", err)
	}
	if !slices.Contains(disc.SupportedVersions, cl.ProtocolVersion()) {
		cl.Close()
		return nil, fmt.Errorf("server/discover lists %v, not %s", disc.SupportedVersions, cl.ProtocolVersion())
	}
	return cl, nil
}

// closeSide closes the modern side, if it was opened.
func (c *conn) closeSide() {
	c.side.mu.Lock()
	defer c.side.mu.Unlock()
	if c.side.client != nil {
		if err := c.side.client.Close(); err != nil {
			c.u.log.Debug("closing the 2026-07-28 side", "err", err)
		}
		c.side.client = nil
	}
}
