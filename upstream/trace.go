package upstream

import (
	"context"
	"encoding/json"

	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/internal/tracing"
)

// withTraceMeta returns params with ctx's span context (viewmux's span of
// the routed request) as _meta traceparent and tracestate, for every
// transport: the upstream's parent span is viewmux's, whatever trace
// context the client put there (its own is the parent of viewmux's span).
// params are returned unchanged when ctx carries no span context, which is
// always the case with tracing off, and when they are not a JSON object
// (the upstream answers those itself). The HTTP transports also send it
// as headers (httpPeer.call, sseTransport.WriteFrame).
func withTraceMeta(ctx context.Context, params json.RawMessage) json.RawMessage {
	ms := tracing.MetaMembers(ctx)
	if ms == nil {
		return params
	}
	obj := params
	if len(obj) == 0 || string(obj) == "null" {
		obj = json.RawMessage(`{}`)
	}
	out, err := jsonrpc.Splice(obj, nil, nil, ms)
	if err != nil {
		return params
	}
	return out
}
