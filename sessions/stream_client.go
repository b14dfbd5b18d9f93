package sessions

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcpmux/mcpmux/internal/jsonrpc"
)

// What mcp-go sees of a stream session: server.ClientSession and the
// optional interfaces it looks for (logging level, client info and
// capabilities, protocol version), and the server→client requests
// (sampling, elicitation, roots) sent over the session's own stream.

var (
	_ server.ClientSession              = (*streamSession)(nil)
	_ server.SessionWithLogging         = (*streamSession)(nil)
	_ server.SessionWithClientInfo      = (*streamSession)(nil)
	_ server.SessionWithProtocolVersion = (*streamSession)(nil)
	_ server.SessionWithSampling        = (*streamSession)(nil)
	_ server.SessionWithElicitation     = (*streamSession)(nil)
	_ server.SessionWithRoots           = (*streamSession)(nil)
)

// SessionID implements server.ClientSession.
func (ss *streamSession) SessionID() string { return ss.id }

// NotificationChannel implements server.ClientSession. mcp-go sends without
// blocking; the writer drains it.
func (ss *streamSession) NotificationChannel() chan<- mcp.JSONRPCNotification { return ss.notes }

// Initialize implements server.ClientSession.
func (ss *streamSession) Initialize() { ss.initialized.Store(true) }

// Initialized implements server.ClientSession.
func (ss *streamSession) Initialized() bool { return ss.initialized.Load() }

// SetLogLevel implements server.SessionWithLogging.
func (ss *streamSession) SetLogLevel(level mcp.LoggingLevel) { ss.logLevel.Store(level) }

// GetLogLevel implements server.SessionWithLogging; the default is "error",
// as in mcp-go's own sessions.
func (ss *streamSession) GetLogLevel() mcp.LoggingLevel {
	if l, ok := ss.logLevel.Load().(mcp.LoggingLevel); ok {
		return l
	}
	return mcp.LoggingLevelError
}

// GetClientInfo implements server.SessionWithClientInfo.
func (ss *streamSession) GetClientInfo() mcp.Implementation {
	if p := ss.clientInfo.Load(); p != nil {
		return *p
	}
	return mcp.Implementation{}
}

// SetClientInfo implements server.SessionWithClientInfo.
func (ss *streamSession) SetClientInfo(info mcp.Implementation) { ss.clientInfo.Store(&info) }

// GetClientCapabilities implements server.SessionWithClientInfo.
func (ss *streamSession) GetClientCapabilities() mcp.ClientCapabilities {
	if p := ss.clientCaps.Load(); p != nil {
		return *p
	}
	return mcp.ClientCapabilities{}
}

// SetClientCapabilities implements server.SessionWithClientInfo.
func (ss *streamSession) SetClientCapabilities(caps mcp.ClientCapabilities) {
	ss.clientCaps.Store(&caps)
}

// ProtocolVersion implements server.SessionWithProtocolVersion.
func (ss *streamSession) ProtocolVersion() string {
	if p := ss.protocol.Load(); p != nil {
		return *p
	}
	return ""
}

// SetProtocolVersion records the version negotiated at initialize (mcp-go
// calls it through an unexported interface).
func (ss *streamSession) SetProtocolVersion(v string) { ss.protocol.Store(&v) }

// RequestSampling implements server.SessionWithSampling: it sends
// sampling/createMessage to the client and waits for its answer.
func (ss *streamSession) RequestSampling(ctx context.Context, req mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
	if ss.GetClientCapabilities().Sampling == nil {
		return nil, fmt.Errorf("session %s: %s: %w", ss.id, mcp.MethodSamplingCreateMessage, ErrClientCapability)
	}
	raw, err := ss.request(ctx, mcp.MethodSamplingCreateMessage, req.CreateMessageParams)
	if err != nil {
		return nil, err
	}
	var res mcp.CreateMessageResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("session %s: decoding %s result: %w", ss.id, mcp.MethodSamplingCreateMessage, err)
	}
	if res.Content, err = mcp.ParseSamplingContent(res.Content); err != nil {
		return nil, fmt.Errorf("session %s: decoding %s content: %w", ss.id, mcp.MethodSamplingCreateMessage, err)
	}
	return &res, nil
}

// RequestElicitation implements server.SessionWithElicitation.
func (ss *streamSession) RequestElicitation(ctx context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	if ss.GetClientCapabilities().Elicitation == nil {
		return nil, fmt.Errorf("session %s: %s: %w", ss.id, mcp.MethodElicitationCreate, ErrClientCapability)
	}
	raw, err := ss.request(ctx, mcp.MethodElicitationCreate, req.Params)
	if err != nil {
		return nil, err
	}
	var res mcp.ElicitationResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("session %s: decoding %s result: %w", ss.id, mcp.MethodElicitationCreate, err)
	}
	return &res, nil
}

// ListRoots implements server.SessionWithRoots.
func (ss *streamSession) ListRoots(ctx context.Context, req mcp.ListRootsRequest) (*mcp.ListRootsResult, error) {
	if ss.GetClientCapabilities().Roots == nil {
		return nil, fmt.Errorf("session %s: %s: %w", ss.id, mcp.MethodListRoots, ErrClientCapability)
	}
	raw, err := ss.request(ctx, mcp.MethodListRoots, req.Params)
	if err != nil {
		return nil, err
	}
	var res mcp.ListRootsResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("session %s: decoding %s result: %w", ss.id, mcp.MethodListRoots, err)
	}
	return &res, nil
}

// request sends a server→client request with a session-unique id and waits
// for the client's answer, ctx, or the end of the session. When ctx ends
// first, the client is told with notifications/cancelled.
func (ss *streamSession) request(ctx context.Context, method mcp.MCPMethod, params any) (json.RawMessage, error) {
	return ss.requestVia(ctx, method, params, ss.send)
}

// requestVia is request with the frame handed to send: a routed call's
// writer, so that the request follows the call's earlier frames.
func (ss *streamSession) requestVia(ctx context.Context, method mcp.MCPMethod, params any, send func(context.Context, []byte) error) (json.RawMessage, error) {
	id := ss.nextID.Add(1)
	key := strconv.FormatInt(id, 10)
	reply := make(chan pendingReply, 1)
	ss.mu.Lock()
	if ss.ended {
		ss.mu.Unlock()
		return nil, fmt.Errorf("session %s: %s: %w", ss.id, method, ErrSessionClosed)
	}
	ss.pending[key] = reply
	ss.mu.Unlock()
	defer func() {
		ss.mu.Lock()
		delete(ss.pending, key)
		ss.mu.Unlock()
	}()

	frame, err := json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		ID      int64  `json:"id"`
		Method  string `json:"method"`
		Params  any    `json:"params,omitempty"`
	}{mcp.JSONRPC_VERSION, id, string(method), params})
	if err != nil {
		return nil, fmt.Errorf("session %s: encoding %s: %w", ss.id, method, err)
	}
	if err := send(ctx, frame); err != nil {
		return nil, fmt.Errorf("session %s: %s: %w", ss.id, method, err)
	}
	select {
	case r := <-reply:
		if ce, ok := r.err.(*ClientError); ok {
			ce.Method = string(method)
		}
		return r.result, r.err
	case <-ctx.Done():
		ss.notifyCancelled(id, ctx)
		return nil, ctx.Err()
	case <-ss.ctx.Done():
		return nil, fmt.Errorf("session %s: %s: %w", ss.id, method, ErrSessionClosed)
	}
}

// notifyCancelled tells the client that the server→client request id is no
// longer wanted. It never blocks: a full queue drops the notice.
func (ss *streamSession) notifyCancelled(id int64, ctx context.Context) {
	reason := "cancelled"
	if err := context.Cause(ctx); err != nil {
		reason = err.Error()
	}
	frame, err := json.Marshal(mcp.JSONRPCNotification{
		JSONRPC: mcp.JSONRPC_VERSION,
		Notification: mcp.Notification{
			Method: string(mcp.MethodNotificationCancelled),
			Params: mcp.NotificationParams{AdditionalFields: map[string]any{"requestId": id, "reason": reason}},
		},
	})
	if err != nil {
		return
	}
	select {
	case ss.out <- frame:
	default:
	}
}

// deliver hands a client's response to the server→client request waiting
// for it. A response nobody waits for (late, or never asked) is dropped.
func (ss *streamSession) deliver(env *jsonrpc.Message) {
	ss.mu.Lock()
	reply, ok := ss.pending[string(env.ID)]
	ss.mu.Unlock()
	if !ok {
		ss.srv.log.Debug("response to no pending request dropped", "session", ss.id)
		return
	}
	var r pendingReply
	if len(env.Error) > 0 {
		ce := &ClientError{}
		if err := json.Unmarshal(env.Error, ce); err != nil {
			ce.Code, ce.Message = mcp.PARSE_ERROR, "unreadable error object"
		}
		r.err = ce
	} else {
		r.result = env.Result
	}
	select {
	case reply <- r:
	default: // a duplicate answer
	}
}
