package wire

import "github.com/viewmux/viewmux/internal/jsonrpc"

// OversizeScan gathers what a message over a transport's limit keeps: its
// top-level id and whether it has a method. A transport whose framing is
// not lines nor one message per frame (such as an SSE event stream) feeds
// it the message's bytes as they arrive, keeping none of them, then hands
// Frame to the engine, so that only the call it answers fails.
type OversizeScan struct{ s jsonrpc.IDScanner }

// Feed scans b, a continuation of what was fed before.
func (o *OversizeScan) Feed(b []byte) { o.s.Feed(b) }

// Frame ends the message and returns it as an oversize Frame.
func (o *OversizeScan) Frame() Frame {
	id, method := o.s.End()
	return Frame{Oversize: true, ID: id, Method: method}
}
