package sessions

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// A stream session's server→client requests (sampling, elicitation,
// roots), sent over its own connection, and the client's answers to them.

// request sends a server→client request with a session-unique id and waits
// for the client's answer, ctx, or the end of the session. When ctx ends
// first, the client is told with notifications/cancelled.
func (sess *session) request(ctx context.Context, method mcp.MCPMethod, params any) (json.RawMessage, error) {
	return sess.requestVia(ctx, method, params, sess.send)
}

// requestVia is request with the frame handed to send: a routed call's
// writer, so that the request follows the call's earlier frames.
func (sess *session) requestVia(ctx context.Context, method mcp.MCPMethod, params any, send func(context.Context, []byte) error) (json.RawMessage, error) {
	if sess.conn.Ended() {
		return nil, fmt.Errorf("session %s: %s: %w", sess.ID(), method, ErrSessionClosed)
	}
	id, reply := sess.pending.open()
	defer sess.pending.close(id)
	frame, err := jsonrpc.Request(jsonrpc.StringID(id), string(method), params)
	if err != nil {
		return nil, fmt.Errorf("session %s: encoding %s: %w", sess.ID(), method, err)
	}
	if err := send(ctx, frame); err != nil {
		return nil, fmt.Errorf("session %s: %s: %w", sess.ID(), method, err)
	}
	select {
	case r := <-reply:
		if ce, ok := r.err.(*ClientError); ok {
			ce.Method = string(method)
		}
		return r.result, r.err
	case <-ctx.Done():
		sess.notifyCancelled(id, ctx)
		return nil, ctx.Err()
	case <-sess.Done():
		return nil, fmt.Errorf("session %s: %s: %w", sess.ID(), method, ErrSessionClosed)
	}
}

// notifyCancelled tells the client that the server→client request id is no
// longer wanted. It never blocks: a full queue drops the notice.
func (sess *session) notifyCancelled(id string, ctx context.Context) {
	frame, err := cancelledFrame(id, ctx)
	if err != nil {
		return
	}
	sess.offer(jsonrpc.Whole(frame))
}

// cancelledFrame is the notifications/cancelled that withdraws the
// server→client request id, whose ctx ended: its reason is ctx's cause.
func cancelledFrame(id string, ctx context.Context) ([]byte, error) {
	reason := "cancelled"
	if err := context.Cause(ctx); err != nil {
		reason = err.Error()
	}
	return json.Marshal(mcp.JSONRPCNotification{
		JSONRPC: mcp.JSONRPC_VERSION,
		Notification: mcp.Notification{
			Method: string(mcp.MethodNotificationCancelled),
			Params: mcp.NotificationParams{AdditionalFields: map[string]any{"requestId": id, "reason": reason}},
		},
	})
}

// deliver hands a client's response to the server→client request waiting
// for it. A response nobody waits for (late, or never asked) is dropped.
func (sess *session) deliver(m *jsonrpc.Message) {
	if !sess.pending.deliver(m) {
		sess.srv.log.Debug("response to no pending request dropped", "session", sess.ID())
	}
}
