package wire

import "encoding/json"

// OversizeScan gathers what a message over a transport's limit keeps: its
// top-level id and whether it has a method. A transport whose framing is
// not lines nor one message per frame (such as an SSE event stream) feeds
// it the message's bytes as they arrive, keeping none of them, then hands
// Frame to the engine, so that only the call it answers fails.
type OversizeScan struct{ s idScanner }

// Feed scans b, a continuation of what was fed before.
func (o *OversizeScan) Feed(b []byte) { o.s.Feed(b) }

// Frame ends the message and returns it as an oversize Frame.
func (o *OversizeScan) Frame() Frame {
	o.s.Feed([]byte{'\n'}) // ends an id that is the last member
	return Frame{Oversize: true, ID: o.s.ID(), Method: o.s.hasMethod}
}

// TopLevelID returns the top-level id of data, a message that need not be
// valid JSON, and whether it has a top-level method, without parsing the
// rest: one pass over its bytes, no recursion into nested values, and an
// id longer than any viewmux mints is none. It is how the answer to a
// call is still found in a message too deep or too broken to parse.
func TopLevelID(data []byte) (id json.RawMessage, method bool) {
	var s idScanner
	s.Feed(data)
	s.Feed([]byte{'\n'}) // ends an id that is the last member
	return s.ID(), s.hasMethod
}
