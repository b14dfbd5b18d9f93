package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

// The upstream answers a session's calls in one of two states, and the
// small-call series (echo at c=1 and in the throughput phase) and the
// large-result series (blob) measure every path in the same one.
// mcp-go's streamable HTTP server answers a session's calls with one JSON
// body until it has sent that session a notification, and as an event
// stream (text/event-stream, the result in one SSE event) for good after
// that. viewmux keeps one upstream session per upstream entry, shared by
// all its clients, so once anything through it has had progress (the
// notifying series does) every result viewmux gets from that entry is an
// event stream, while a fresh direct or floor session is still answered
// with JSON. Comparing those would measure the state, not the hop, so each
// state has sessions of its own on every path:
//
//   - stateSSE: fresh direct and floor sessions each make one notifying
//     call first (notifyOnce), and viewmux's path is its "up" entry, sent
//     one notifying call too.
//   - stateJSON: fresh direct and floor sessions that never had a
//     notification, and viewmux's path is a second entry in its config for
//     the same upstream URL ("quiet", only echo and blob), which has an
//     upstream session of its own that no call ever makes notify.
//
// The upstream counts the echo and blob calls it answered as an event
// stream, and a phase whose counts do not match its state fails the run
// rather than print a figure under the wrong name (checkState).
type upState int

const (
	stateSSE upState = iota
	stateJSON
)

func (s upState) String() string {
	if s == stateSSE {
		return "an event stream"
	}
	return "JSON"
}

// label heads a state's figures in the output.
func (s upState) label() string {
	if s == stateSSE {
		return "upstream answering as an event stream (after one notification)"
	}
	return "upstream answering as JSON"
}

// tag is the state's short name in table rows.
func (s upState) tag() string {
	if s == stateSSE {
		return "sse"
	}
	return "json"
}

// note says how each path came to be in the state.
func (s upState) note() string {
	if s == stateSSE {
		return "each direct and floor session sent one notification first; viewmux through its shared upstream session " + muxUpstream + ", sent one too"
	}
	return "fresh direct and floor sessions; viewmux through its second upstream entry " + quietUpstream + ", whose upstream session never had a notification"
}

// muxTool is tool's name through viewmux in state s: on the "up" entry or
// on the "quiet" one.
func (s upState) muxTool(tool string) string {
	if s == stateSSE {
		return muxUpstream + "__" + tool
	}
	return quietUpstream + "__" + tool
}

// muxUpstream is viewmux's main entry for the upstream; quietUpstream the
// second one, the stateJSON path, with the tools quietTools.
const (
	muxUpstream   = "up"
	quietUpstream = "quiet"
)

var quietTools = []string{echoTool, blobTool}

// quietUpstreamConfig is the stateJSON entry of viewmux's config (see
// upState). It exposes echo and blob only, so the catalog grows by two
// tools.
func quietUpstreamConfig(upURL string) string {
	return fmt.Sprintf(`
# the same upstream again, with an upstream session of its own that never
# gets a notification: the path through viewmux with the upstream answering
# as JSON (integration/load/state.go, upState)
[upstreams.%s]
url = %q
tools = [%q, %q]
max_message_bytes = "300MiB"
`, quietUpstream, upURL, quietTools[0], quietTools[1])
}

// parseStates reads --upstream-state: sse, json or both (sse first).
func parseStates(v string) ([]upState, error) {
	switch v {
	case "both":
		return []upState{stateSSE, stateJSON}, nil
	case "sse":
		return []upState{stateSSE}, nil
	case "json":
		return []upState{stateJSON}, nil
	}
	return nil, fmt.Errorf("--upstream-state must be sse, json or both, not %q", v)
}

// notifyOnce makes one call of tool (notify) with a progress token, so the
// upstream sends the session one progress notification, and checks that it
// did. The call is added to sent, which the upstream's count must match.
func notifyOnce(ctx context.Context, c *client.Client, tool string, sent *atomic.Int64) error {
	var req mcp.CallToolRequest
	req.Params.Name = tool
	req.Params.Arguments = map[string]any{"count": 1}
	req.Params.Meta = &mcp.Meta{ProgressToken: "load-state"}
	res, err := c.CallTool(ctx, req)
	if err != nil {
		return fmt.Errorf("tools/call %s (to switch the upstream to event streams): %w", tool, err)
	}
	sent.Add(1)
	return checkText(tool, res, notifiedText(1))
}

// primeSSE puts paths into stateSSE: each of own (direct and floor
// sessions, each an upstream session of its own) and mux (any session of
// viewmux: its upstream session for "up" is shared, so one call through any
// of its sessions switches it) makes one notifying call.
func primeSSE(ctx context.Context, own []*client.Client, mux *client.Client, sent *atomic.Int64) error {
	for _, c := range own {
		if err := notifyOnce(ctx, c, notifyTool, sent); err != nil {
			return err
		}
	}
	return notifyOnce(ctx, mux, stateSSE.muxTool(notifyTool), sent)
}

// checkState reports an error unless calls of tool made in state st were
// answered the way st says: sse of them as an event stream, out of calls
// (all, or none). what names the phase.
func checkState(st upState, what, tool string, calls, sse int64) error {
	want := calls
	if st == stateJSON {
		want = 0
	}
	if sse != want {
		return fmt.Errorf("%s, %s: the upstream answered %d of %d %s calls as an event stream, want %d", what, st.label(), sse, calls, tool, want)
	}
	return nil
}

// settledCounts reads the upstream's counts once every echo and blob call
// it has received has been answered, so that its event-stream counts,
// taken when a handler returns, are complete: a client can have its result
// a moment before the handler that sent it returns.
func settledCounts(read func() (counts, error)) (counts, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := read()
		if err != nil {
			return c, fmt.Errorf("upstream counts: %w", err)
		}
		open := c.Calls[echoTool] - c.Answered[echoTool] + c.Calls[blobTool] - c.Answered[blobTool]
		if open == 0 {
			return c, nil
		}
		if time.Now().After(deadline) {
			return c, fmt.Errorf("upstream counts: %d echo and blob calls still unanswered after 5s", open)
		}
		time.Sleep(time.Millisecond)
	}
}
