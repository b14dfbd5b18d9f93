package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/upstream/wire"
)

// discoverProbeTimeout bounds a server/discover probe before falling back
// to initialize: a server before 2026-07-28 may never answer it.
const discoverProbeTimeout = 5 * time.Second

// openWire starts the engine over t and performs the handshake the
// upstream's pin asks for (see pinnedVersion): initialize with a version
// before 2026-07-28, or server/discover, falling back to initialize with
// 2025-11-25 when the upstream does not take it.
func (c *conn) openWire(ctx context.Context, t wire.Transport) (*mcp.InitializeResult, error) {
	disarm := context.AfterFunc(ctx, func() { c.lost(context.Cause(ctx)) })
	defer disarm()
	u := c.u
	w := wire.New(t, wire.Options{
		Name:           u.cfg.Name,
		Limit:          u.maxMessage(),
		Logger:         u.log,
		OnNotification: c.wireNotification,
		OnRequest:      c.wireRequest,
		OnLost: func(err error) {
			if c.kind == "stdio" {
				c.lost(fmt.Errorf("stdout closed: %w", err))
				return
			}
			c.lost(fmt.Errorf("stream lost: %w", err))
		},
	})
	c.peer = wirePeer{w}
	w.Start()

	init, err := c.handshake(ctx)
	if err != nil {
		if cause := context.Cause(c.ctx); cause != nil && !errors.Is(err, cause) {
			err = fmt.Errorf("%w (%w)", err, cause) // e.g. the child exited
		}
		return nil, fmt.Errorf("initialize: %w", err)
	}
	c.caps = init.Capabilities
	c.modern = mcp.IsModernProtocol(c.version)
	return init, nil
}

func (c *conn) handshake(ctx context.Context) (*mcp.InitializeResult, error) {
	pinned := c.u.pinnedVersion()
	if pinned == "" && c.kind == configs.TransportSSE {
		// HTTP+SSE is a legacy transport: no server/discover probe unless
		// the config pins a 2026-07-28 version.
		pinned = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	}
	if pinned == "" || mcp.IsModernProtocol(pinned) {
		init, err := c.discover(ctx, pinned)
		if err == nil {
			return init, nil
		}
		if ctx.Err() != nil || isConnectionLoss(err) || errors.Is(err, ErrNeedsLogin) || errors.Is(err, ErrInsufficientScope) {
			// An OAuth refusal is not a version disagreement: an
			// initialize would meet it too, and hide it.
			return nil, err
		}
		c.u.log.Debug("server/discover refused; initializing with 2025-11-25", "err", err)
		pinned = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	}
	return c.initialize(ctx, pinned)
}

// discover probes for 2026-07-28 (or the pinned modern version), moving
// once to a modern version the server names as supported. The server must
// list the version it is spoken to with.
func (c *conn) discover(ctx context.Context, version string) (*mcp.InitializeResult, error) {
	if version == "" {
		version = mcp.LATEST_PROTOCOL_VERSION
	}
	ctx, cancel := context.WithTimeout(ctx, discoverProbeTimeout)
	defer cancel()
	for range 2 {
		c.version = version
		raw, err := c.rawRequest(ctx, string(mcp.MethodServerDiscover), nil)
		if err == nil {
			var res mcp.DiscoverResult
			if err := json.Unmarshal(raw, &res); err != nil {
				c.version = ""
				return nil, fmt.Errorf("server/discover result: %w", err)
			}
			if len(res.SupportedVersions) > 0 && !slices.Contains(res.SupportedVersions, version) {
				c.version = ""
				return nil, fmt.Errorf("server/discover does not list %s (it lists %v)", version, res.SupportedVersions)
			}
			init := &mcp.InitializeResult{ProtocolVersion: version, Capabilities: res.Capabilities, Instructions: res.Instructions}
			if info := res.GetResultMeta().ServerInfo(); info != nil {
				init.ServerInfo = *info
			}
			return init, nil
		}
		var e *RPCError
		if errors.As(err, &e) && e.Code == mcp.UNSUPPORTED_PROTOCOL_VERSION {
			var data mcp.UnsupportedProtocolVersionData
			json.Unmarshal(e.Data, &data)
			if next := mcp.NegotiateMutuallySupportedVersion(data.Supported); next != "" && mcp.IsModernProtocol(next) && next != version {
				version = next
				continue
			}
		}
		c.version = ""
		return nil, err
	}
	c.version = ""
	return nil, errors.New("server/discover: no mutually supported 2026-07-28 version")
}

// initialize performs the handshake before 2026-07-28 with version, then
// sends notifications/initialized.
func (c *conn) initialize(ctx context.Context, version string) (*mcp.InitializeResult, error) {
	c.version = ""
	params, err := json.Marshal(struct {
		ProtocolVersion string                  `json:"protocolVersion"`
		ClientInfo      mcp.Implementation      `json:"clientInfo"`
		Capabilities    *mcp.ClientCapabilities `json:"capabilities"`
	}{version, mcp.Implementation{Name: "viewmux", Version: c.u.opts.ClientVersion}, c.clientCaps()})
	if err != nil {
		return nil, err
	}
	raw, err := c.rawRequest(ctx, string(mcp.MethodInitialize), params)
	if err != nil {
		return nil, err
	}
	var init mcp.InitializeResult
	if err := json.Unmarshal(raw, &init); err != nil {
		return nil, fmt.Errorf("initialize result: %w", err)
	}
	if !mcp.IsValidProtocolVersion(init.ProtocolVersion) {
		return nil, mcp.UnsupportedProtocolVersionError{Version: init.ProtocolVersion}
	}
	c.version = init.ProtocolVersion
	if err := c.peer.notify(ctx, string(mcp.MethodNotificationInitialized), nil); err != nil {
		return nil, fmt.Errorf("notifications/initialized: %w", err)
	}
	return &init, nil
}

// wireNotification hands a notification from the engine to
// handleNotification in the form OnNotification takes.
// Nothing is tied on stdio and websocket, where every frame shares one
// stream.
func (c *conn) wireNotification(_, method string, params json.RawMessage) {
	if !c.admit(method) {
		return
	}
	n := mcp.JSONRPCNotification{JSONRPC: mcp.JSONRPC_VERSION}
	n.Method = method
	if len(params) > 0 {
		if err := json.Unmarshal(params, &n.Params); err != nil {
			c.u.log.Warn("dropping a notification from upstream with malformed params", "method", method, "err", err)
			return
		}
	}
	c.handleNotification(n)
}

// wireRequest answers a server→client request through Options.OnRequest.
func (c *conn) wireRequest(ctx context.Context, _, method string, params json.RawMessage) (json.RawMessage, error) {
	h := c.u.opts.OnRequest
	if h == nil {
		return nil, &RPCError{Code: mcp.METHOD_NOT_FOUND, Message: "viewmux does not relay " + method}
	}
	return h(ctx, c.u, method, params)
}
