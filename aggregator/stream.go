package aggregator

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/upstream"
)

// A large result (upstream.StreamThreshold) of a client before 2026-07-28
// is written to the client while it is read from the upstream: its bytes
// are checked (jsonrpc.ValueScanner) and its top-level members edited as
// they pass, as finishResult edits a whole one, through the same code
// (legacyEdit), so that a result reads the same whichever way it went.
// The small members finishResult edits (_meta, resultType, isError) are
// held until they end; any other member (content, structuredContent, …)
// passes as bytes.

// errInputRequiredStreamed is the error of a streamed result that turns
// out to be input_required, which viewmux must answer for a client before
// 2026-07-28 and so must hold whole: such results are small, and one past
// upstream.StreamThreshold is refused.
var errInputRequiredStreamed = errors.New("an input_required result larger than viewmux holds whole")

// maxHeldMember bounds an envelope member (_meta, resultType, isError) or
// a key held while a result streams; a larger one fails the result.
const maxHeldMember = 1 << 20

// maxLinkItem bounds a content item looked into for a resource link while
// a result streams: a link is small, and a larger item (a long text or
// blob) is passed without being held. A resource_link item larger than
// this in a streamed result is not learned (its URI is not routable).
const maxLinkItem = 64 << 10

// ResultStream is a large result being read from its upstream and written
// to its client (WriteTo). It is used by one goroutine.
type ResultStream struct {
	a      *Aggregator
	tail   *upstream.Tail
	up     string
	method string
	links  bool // learn resource links from content (tools/call)

	// IsError reports, after WriteTo, whether the result said isError.
	IsError bool

	endOnce sync.Once
	onEnd   []func(isError bool, err error)
}

// Upstream names the upstream the result comes from.
func (r *ResultStream) Upstream() string { return r.up }

// OnEnd adds fn to what runs once the result has been written or has
// failed (err), before WriteTo returns; it runs from Close for a result
// never written.
func (r *ResultStream) OnEnd(fn func(isError bool, err error)) { r.onEnd = append(r.onEnd, fn) }

func (r *ResultStream) end(err error) {
	r.endOnce.Do(func() {
		for _, fn := range r.onEnd {
			fn(r.IsError, err)
		}
	})
}

// WriteTo writes the edited result to w as it reads it. An error means
// what was written is not a whole result: the caller must make the
// response visibly broken (abort it), never end it as if it were whole.
func (r *ResultStream) WriteTo(w io.Writer) (int64, error) {
	bw := writerPool.Get().(*bufio.Writer)
	cw := &countWriter{w: w}
	bw.Reset(cw)
	defer func() {
		bw.Reset(nil)
		writerPool.Put(bw)
	}()
	e := &legacyEdit{next: r.tail.Next, w: bw, links: r.links}
	err := e.run()
	if err == nil {
		err = r.tail.Finish(e.buf)
	}
	if err == nil {
		err = bw.Flush()
	}
	r.IsError = e.isError
	if err == nil && e.inputRequired {
		err = errInputRequiredStreamed
	}
	if err == nil && r.links && len(e.uris) > 0 {
		r.a.relay.learn(r.up, e.uris)
	}
	if err != nil {
		err = fmt.Errorf("upstream %q: %s: streaming the result: %w", r.up, r.method, err)
	}
	r.end(err)
	return cw.n, err
}

// Abort makes a WriteTo in progress fail (its read from the upstream
// ends). It may be called from any goroutine.
func (r *ResultStream) Abort() { r.tail.Abort() }

// Close gives back the upstream connection the result was read from. It
// may be called more than once.
func (r *ResultStream) Close() {
	r.end(errors.New("the result was not written"))
	r.tail.Close()
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

var writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 32<<10) }}

// legacyEdit edits a result object for a client before 2026-07-28 as it
// passes from next to w: a resultType "complete" is dropped; reserved
// (io.modelcontextprotocol/*) keys of _meta are dropped, and the _meta
// with them when nothing is left; every other byte is kept, the
// whitespace between members included. Members of the result object are
// written in order: the separator before a member is held until the
// member is known to stay.
//
// With whole set, next gives the whole result, already checked valid, in
// one piece: values are crossed, not checked again.
type legacyEdit struct {
	next  func() ([]byte, error)
	w     io.Writer
	links bool
	whole bool

	buf []byte // read, not consumed
	eof error  // what next returned last, once buf is spent

	isError       bool
	inputRequired bool
	uris          []string
	held          []byte // scratch for a held member
	keyBuf        []byte
	sep           []byte
}

// errTruncated is the error of a result whose bytes end before it does.
var errTruncated = errors.New("the result ends before its last byte")

// fill makes buf hold at least one byte.
func (e *legacyEdit) fill() error {
	for len(e.buf) == 0 {
		if e.eof != nil {
			if e.eof == io.EOF {
				return errTruncated
			}
			return e.eof
		}
		e.buf, e.eof = e.next()
	}
	return nil
}

// ws consumes whitespace, appending it to dst.
func (e *legacyEdit) ws(dst []byte) ([]byte, error) {
	for {
		if err := e.fill(); err != nil {
			return dst, err
		}
		i := 0
		for i < len(e.buf) && isSpace(e.buf[i]) {
			i++
		}
		dst = append(dst, e.buf[:i]...)
		e.buf = e.buf[i:]
		if len(e.buf) > 0 {
			return dst, nil
		}
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// value consumes one JSON value: appended to dst when hold (at most
// maxHeldMember bytes), else written to w, and also appended to capture
// while capture is below maxLinkItem (nil: no capture). over reports a
// capture that went past it.
func (e *legacyEdit) value(dst []byte, hold bool, capture *[]byte) (_ []byte, over bool, err error) {
	if e.whole {
		if err := e.fill(); err != nil {
			return dst, false, err
		}
		n := jsonrpc.ValueEnd(e.buf)
		v := e.buf[:n]
		e.buf = e.buf[n:]
		if capture != nil {
			if len(v) <= maxLinkItem {
				*capture = append(*capture, v...)
			} else {
				over = true
			}
		}
		if hold {
			return append(dst, v...), over, nil
		}
		_, err := e.w.Write(v)
		return dst, over, err
	}
	var s jsonrpc.ValueScanner
	for {
		if err := e.fill(); err != nil {
			if err == errTruncated && s.Finish() == nil {
				return dst, over, nil
			}
			return dst, over, err
		}
		n, done, err := s.Scan(e.buf)
		v := e.buf[:n]
		e.buf = e.buf[n:]
		if capture != nil && !over {
			if len(*capture)+len(v) <= maxLinkItem {
				*capture = append(*capture, v...)
			} else {
				over = true
			}
		}
		if hold {
			if len(dst)+len(v) > maxHeldMember {
				return dst, over, fmt.Errorf("a held member is larger than %d bytes", maxHeldMember)
			}
			dst = append(dst, v...)
		} else if _, werr := e.w.Write(v); werr != nil {
			return dst, over, werr
		}
		if err != nil {
			return dst, over, err
		}
		if done {
			return dst, over, nil
		}
	}
}

// expect consumes the byte c.
func (e *legacyEdit) expect(c byte) error {
	if err := e.fill(); err != nil {
		return err
	}
	if e.buf[0] != c {
		return fmt.Errorf("invalid character %q in the result, looking for %q", e.buf[0], c)
	}
	e.buf = e.buf[1:]
	return nil
}

func (e *legacyEdit) write(b []byte) error {
	_, err := e.w.Write(b)
	return err
}

// writeKey writes the separator read before the member (unless it is the
// first one written) and the member's key with its colon.
func (e *legacyEdit) writeKey(first bool) error {
	if !first {
		if err := e.write(e.sep); err != nil {
			return err
		}
	}
	return e.write(e.keyBuf)
}

// run edits one result object.
func (e *legacyEdit) run() error {
	lead, err := e.ws(nil)
	if err != nil {
		return err
	}
	_ = lead // a result starts at its first byte (the envelope's whitespace is not the result's)
	if err := e.expect('{'); err != nil {
		return err
	}
	if err := e.write([]byte{'{'}); err != nil {
		return err
	}
	w0, err := e.ws(nil)
	if err != nil {
		return err
	}
	if err := e.write(w0); err != nil {
		return err
	}
	if e.buf[0] == '}' {
		e.buf = e.buf[1:]
		return e.write([]byte{'}'})
	}
	first := true
	seen := map[string]bool{}
	e.sep = e.sep[:0]
	for {
		// A member: its key, the whitespace and colon after it.
		e.keyBuf = e.keyBuf[:0]
		if err := e.fill(); err != nil {
			return err
		}
		if e.buf[0] != '"' {
			return fmt.Errorf("invalid character %q in the result, looking for a member", e.buf[0])
		}
		if e.keyBuf, _, err = e.value(e.keyBuf, true, nil); err != nil {
			return err
		}
		keyEnd := len(e.keyBuf)
		if e.keyBuf, err = e.ws(e.keyBuf); err != nil {
			return err
		}
		if err := e.expect(':'); err != nil {
			return err
		}
		e.keyBuf = append(e.keyBuf, ':')
		if e.keyBuf, err = e.ws(e.keyBuf); err != nil {
			return err
		}
		key := memberKey(e.keyBuf[:keyEnd])
		firstOfKey := !seen[key]
		seen[key] = true

		switch key {
		case "resultType", "_meta", "isError":
			e.held = e.held[:0]
			if e.held, _, err = e.value(e.held, true, nil); err != nil {
				return err
			}
			v := e.held
			switch key {
			case "resultType":
				if firstOfKey && needsInput(v) {
					e.inputRequired = true
				}
				if string(v) == `"complete"` {
					v = nil
				}
			case "_meta":
				v = legacyMeta(v)
			case "isError":
				if firstOfKey {
					e.isError = string(v) == "true"
				}
			}
			if v == nil {
				break // dropped, with the separator before it
			}
			if err := e.writeKey(first); err != nil {
				return err
			}
			first = false
			if err := e.write(v); err != nil {
				return err
			}
		default:
			if err := e.writeKey(first); err != nil {
				return err
			}
			first = false
			if key == "content" && firstOfKey && e.links {
				err = e.content()
			} else {
				_, _, err = e.value(nil, false, nil)
			}
			if err != nil {
				return err
			}
		}
		// After the member: whitespace, then ',' and the next, or '}'.
		if e.sep, err = e.ws(e.sep[:0]); err != nil {
			return err
		}
		switch e.buf[0] {
		case ',':
			e.buf = e.buf[1:]
			e.sep = append(e.sep, ',')
			if e.sep, err = e.ws(e.sep); err != nil {
				return err
			}
		case '}':
			e.buf = e.buf[1:]
			// The whitespace before the brace stays, whether or not the
			// member before it did.
			i := bytes.LastIndexByte(e.sep, ',') + 1
			if err := e.write(e.sep[i:]); err != nil {
				return err
			}
			return e.write([]byte{'}'})
		default:
			return fmt.Errorf("invalid character %q in the result after a member", e.buf[0])
		}
	}
}

// content passes a content array through, looking into each item small
// enough for a resource link (learnLinks).
func (e *legacyEdit) content() error {
	if err := e.fill(); err != nil {
		return err
	}
	if e.buf[0] != '[' {
		_, _, err := e.value(nil, false, nil)
		return err
	}
	e.buf = e.buf[1:]
	if err := e.write([]byte{'['}); err != nil {
		return err
	}
	var item []byte
	for n := 0; ; n++ {
		sp, err := e.ws(e.held[:0])
		if err != nil {
			return err
		}
		if err := e.write(sp); err != nil {
			return err
		}
		if n == 0 && e.buf[0] == ']' {
			e.buf = e.buf[1:]
			return e.write([]byte{']'})
		}
		item = item[:0]
		_, over, err := e.value(nil, false, &item)
		if err != nil {
			return err
		}
		if !over && len(item) > 0 && item[0] == '{' {
			f := jsonrpc.Fields(item, linkKeys...)
			var uri string
			if string(f[0]) == `"resource_link"` && json.Unmarshal(f[1], &uri) == nil && uri != "" {
				e.uris = append(e.uris, uri)
			}
		}
		if sp, err = e.ws(e.held[:0]); err != nil {
			return err
		}
		if err := e.write(sp); err != nil {
			return err
		}
		switch e.buf[0] {
		case ',':
			e.buf = e.buf[1:]
			if err := e.write([]byte{','}); err != nil {
				return err
			}
		case ']':
			e.buf = e.buf[1:]
			return e.write([]byte{']'})
		default:
			return fmt.Errorf("invalid character %q in content after an item", e.buf[0])
		}
	}
}

// memberKey decodes a member's key (a valid JSON string).
func memberKey(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1])
	}
	var k string
	json.Unmarshal(raw, &k)
	return k
}

// legacyMeta is a result's _meta for a client before 2026-07-28: without
// the reserved keys of the upstream hop, nil (dropped) when nothing is
// left; as sent when it has none.
func legacyMeta(v []byte) []byte {
	if !bytes.Contains(v, []byte("io.modelcontextprotocol/")) {
		return v
	}
	meta := map[string]json.RawMessage{}
	if json.Unmarshal(v, &meta) != nil {
		return v // not an object: nothing of the hop's to drop
	}
	for k := range meta {
		if upstream.IsReservedMeta(k) {
			delete(meta, k)
		}
	}
	if len(meta) == 0 {
		return nil
	}
	b, err := json.Marshal(meta)
	if err != nil {
		return v
	}
	return b
}

// editLegacyWhole is legacyEdit over a whole result (already checked
// valid), into a buffer of loan.
func editLegacyWhole(loan *upstream.Loan, res []byte) ([]byte, bool, error) {
	out := bytes.NewBuffer(loan.Buffer(len(res) + editRoom))
	given := false
	e := &legacyEdit{w: out, whole: true, next: func() ([]byte, error) {
		if given {
			return nil, io.EOF
		}
		given = true
		return res, nil
	}}
	if err := e.run(); err != nil {
		return nil, false, err
	}
	return out.Bytes(), e.inputRequired, nil
}
