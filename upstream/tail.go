package upstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/upstream/wire"
)

// StreamThreshold is the size past which a result read under a loan that
// allows it (Loan.AllowTail) is handed over unread, as a Tail, rather than
// read whole: a JSON body whose Content-Length says more, or of unknown
// length that goes on past it. Below it a result is read whole, as before:
// a small call pays nothing for streaming. 256 KiB is where reading whole
// stops being cheap (a pooled buffer, a copy) compared with the write to
// the client, and a result that size is read in well under a millisecond.
const StreamThreshold = 256 << 10

// WholeLimit is the max_message_bytes up to which an upstream's results
// are always read whole: holding one then costs little, and a result over
// the limit is refused with a clear "too large" error before its first
// byte reaches the client. Past it, a result streamed (StreamThreshold)
// that goes past the limit can only be aborted midway, unless its
// Content-Length said so first.
const WholeLimit = 4 << 20

// A Tail is a large result being read from its upstream's answer: the
// envelope was checked up to "result": and the answer is to the request;
// Next gives the result's bytes as they arrive, from its first byte to the
// end of the answer (the envelope's end after the result included, which
// Finish checks). Bytes past max_message_bytes fail Next with a
// *TooLargeError. Its owner must Close it. A Tail is used by one
// goroutine.
type Tail struct {
	p        *httpPeer
	id       string
	head     []byte        // the envelope up to "result": (checked again with the end, Finish)
	first    []byte        // bytes read past head, given first
	buf      *[]byte       // the pooled buffer head and first are in (nil: none)
	body     io.ReadCloser // a JSON answer's
	sse      *sseSource    // an event's data (then body is nil)
	rest     *eventStream  // the event stream the event is on, read on after it
	chunk    *[64 << 10]byte
	read     int64 // bytes of the answer read
	limit    int64
	err      error
	cancel   context.CancelFunc // ends the request (and its connection's read)
	timer    *time.Timer        // the call's timeout, still running
	timedOut atomic.Bool        // the timer fired
	closed   bool
}

// Upstream names the upstream the result comes from.
func (t *Tail) Upstream() string { return t.p.c.u.cfg.Name }

// Next returns the next bytes of the result, valid until the next call;
// io.EOF once the answer ended.
func (t *Tail) Next() ([]byte, error) {
	if b := t.first; b != nil {
		t.first = nil
		return b, nil
	}
	if t.err != nil {
		return nil, t.err
	}
	if t.sse != nil {
		b, err := t.sse.next()
		if t.count(len(b), err); t.read > t.limit {
			return nil, t.err
		}
		return b, t.err
	}
	if t.chunk == nil {
		t.chunk = chunkPool.Get().(*[64 << 10]byte)
	}
	for {
		n, err := t.body.Read(t.chunk[:])
		if t.count(n, err); t.read > t.limit {
			return nil, t.err
		}
		if n > 0 {
			return t.chunk[:n], nil
		}
		if err != nil {
			return nil, t.err
		}
	}
}

// count records n more bytes of the result read, with the error err the
// read gave: past the limit, the error is a *TooLargeError; a read that
// failed because the call's timeout fired says so. t.err is then the
// error Next gives from now on (nil while the result goes on).
func (t *Tail) count(n int, err error) {
	t.read += int64(n)
	switch {
	case t.read > t.limit:
		t.err = &wire.TooLargeError{Limit: t.limit}
	case err != nil && t.timedOut.Load():
		t.err = fmt.Errorf("%w: reading the result", ErrTimeout)
	case err != nil:
		t.err = err
	}
}

// maxEnvelopeEnd bounds what may follow a streamed result in its answer.
const maxEnvelopeEnd = 64 << 10

// Finish checks what follows the result in its answer: rest (read
// already) and the rest of the body must end the envelope that was begun,
// and the whole envelope must be the answer to the request, with no
// second result and no error beside it.
func (t *Tail) Finish(rest []byte) error {
	end := append([]byte(nil), rest...)
	for {
		b, err := t.Next()
		end = append(end, b...)
		if len(end) > maxEnvelopeEnd {
			return errors.New("the answer goes on after its result")
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	msg := make([]byte, 0, len(t.head)+4+len(end))
	msg = append(append(append(msg, t.head...), "null"...), end...)
	m, err := jsonrpc.ParseUpstream(msg)
	switch {
	case err != nil:
		return fmt.Errorf("the answer is not a JSON-RPC message: %w", err)
	case m.Method != "" || !idIs(m.ID, t.id) || len(m.Error) > 0 || string(m.Result) != "null" || m.Ambiguous != nil:
		return errors.New("the answer's envelope is not that of a result to the request")
	}
	return nil
}

// Abort makes the answer's reading fail (a pending Next returns an
// error). Unlike Close it may be called from any goroutine, any number of
// times.
func (t *Tail) Abort() { t.cancel() }

// tailKey marks the ctx of a request whose result may come back as a
// Tail (Request.Tail).
type tailKey struct{}

// Close ends the answer's reading and gives back what it held. A body not
// read to its end costs its connection (the upstream's MCP connection
// stays up). It may be called more than once.
func (t *Tail) Close() {
	if t.closed {
		return
	}
	t.closed = true
	if t.timer != nil {
		t.timer.Stop()
	}
	switch {
	case t.sse != nil && t.sse.ended && t.err == io.EOF:
		// The event was read to its end: the stream is read on, as after
		// any answer, so that its connection goes back to the pool.
		p, rest, cancel, id := t.p, t.rest, t.cancel, t.id
		p.wg.Go(func() {
			defer cancel()
			timer := time.AfterFunc(drainAfterAnswer, cancel)
			defer timer.Stop()
			p.readStream(rest, id)
		})
	case t.sse != nil:
		t.rest.close()
		t.cancel()
	default:
		t.body.Close()
		t.cancel()
	}
	if t.chunk != nil {
		chunkPool.Put(t.chunk)
		t.chunk = nil
	}
	if t.buf != nil {
		putBuffer(t.buf)
		t.buf = nil
	}
	t.head, t.first = nil, nil
}

// envelopeHead reads the envelope at the start of data up to the value of
// its "result" member: the members before it must be only "jsonrpc" and
// "id" (as every SDK writes them), the id that of the request. It returns
// the index of the result's first byte, or ok false when the envelope
// does not start that way (the answer is then read whole).
func envelopeHead(data []byte, id string) (at int, ok bool) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return 0, false
	}
	i++
	sawID := false
	for {
		i = skipSpace(data, i)
		if i >= len(data) || data[i] != '"' {
			return 0, false
		}
		var ks jsonrpc.ValueScanner
		n, done, err := ks.Scan(data[i:])
		if err != nil || !done {
			return 0, false
		}
		key := string(data[i+1 : i+n-1]) // an escaped key is not one of ours: refused below
		i = skipSpace(data, i+n)
		if i >= len(data) || data[i] != ':' {
			return 0, false
		}
		i = skipSpace(data, i+1)
		if key == "result" {
			return i, sawID && i < len(data)
		}
		var vs jsonrpc.ValueScanner
		n, done, err = vs.Scan(data[i:])
		if err != nil || !done {
			return 0, false
		}
		v := data[i : i+n]
		switch key {
		case "jsonrpc":
		case "id":
			if sawID || !idIs(v, id) {
				return 0, false
			}
			sawID = true
		default:
			return 0, false
		}
		i = skipSpace(data, i+n)
		if i >= len(data) || data[i] != ',' {
			return 0, false
		}
		i++
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// An answer on an event stream is handed over as a Tail too, when its
// event is larger than the threshold: the event is looked at before it is
// read (eventTail), and its data lines are then read as one stream of
// bytes (sseSource), joined with line feeds as an event's data is. After
// the event the stream is read to its end as after any answer (readStream).

// eventTail looks at the next event of s. When it is larger than above
// bytes and its data begins as the answer to id (envelopeHead), it returns
// a Tail of the rest of that data. Otherwise it returns nil, with s where
// the event starts: what was looked at is read again (s reads through a
// replay of it), so the event is read as before (ReadEventInto).
func (p *httpPeer) eventTail(s *eventStream, above int64, id string) *Tail {
	br := s.br
	// An event that ends within what the reader holds is read as before,
	// at no cost.
	scanned := 0
	for {
		if _, err := br.Peek(scanned + 1); err != nil {
			return nil // the stream's end, or an error: ReadEventInto says which
		}
		b, _ := br.Peek(br.Buffered())
		if hasBlankLine(b, max(0, scanned-2)) {
			return nil
		}
		if scanned = len(b); scanned >= br.Size() {
			break
		}
	}
	// A large event: its first bytes, up to above, as sent, in a pooled
	// buffer that holds them without growing (each read adds at most the
	// reader's size), which the Tail gives back when it closes (the data of
	// an event of one data line, as SDKs write them, is a slice of it). An
	// event that is not handed over is replayed from a copy, so the buffer
	// goes back at once.
	buf := getBuffer(int(above) + br.Size() + 1)
	var pre []byte
	if buf != nil {
		pre = (*buf)[:0]
	}
	replay := func(pre []byte) *Tail {
		if buf != nil {
			pre = bytes.Clone(pre)
			putBuffer(buf)
		}
		s.replay(pre)
		return nil
	}
	atLineStart := true
	for int64(len(pre)) <= above {
		chunk, err := br.ReadSlice('\n')
		pre = append(pre, chunk...)
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return replay(pre)
		}
		if err == nil && atLineStart && (len(chunk) == 1 || len(chunk) == 2 && chunk[0] == '\r') {
			return replay(pre) // the event ended: small enough after all
		}
		atLineStart = err == nil
	}
	if data, src, ok := decodeEventHead(pre); ok {
		if at, ok := envelopeHead(data, id); ok {
			src.br = br
			return &Tail{p: p, id: id, head: data[:at], first: data[at:], buf: buf, sse: src, rest: s,
				read: int64(len(data)), limit: p.limit}
		}
	}
	return replay(pre)
}

// hasBlankLine reports whether b holds a blank line (an event's end)
// that starts at or after from, or at b's start.
func hasBlankLine(b []byte, from int) bool {
	if len(b) > 0 && (b[0] == '\n' || len(b) > 1 && b[0] == '\r' && b[1] == '\n') {
		return true
	}
	for i := from; i < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		if i+1 < len(b) && (b[i+1] == '\n' || b[i+1] == '\r' && i+2 < len(b) && b[i+2] == '\n') {
			return true
		}
	}
	return false
}

// replay makes s read pre again before what its reader holds.
func (s *eventStream) replay(pre []byte) {
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(io.MultiReader(bytes.NewReader(pre), s.br))
	s.under = append(s.under, s.br)
	s.br = br
}

// decodeEventHead decodes the start of an event's lines, pre (which does
// not end it): the data so far, and the state to read the rest of it in.
// ok is false when the event is not a message's, or pre ends where its
// state cannot be told (inside a field name). The data of the event's
// first data line is a slice of pre, not a copy; a second data line makes
// data a copy that joins them.
func decodeEventHead(pre []byte) (data []byte, src *sseSource, ok bool) {
	src = &sseSource{}
	haveData := false
	for len(pre) > 0 {
		src.inData = false
		line, rest, ended := bytes.Cut(pre, []byte("\n"))
		pre = rest
		if ended {
			line = bytes.TrimSuffix(line, []byte("\r"))
		}
		name, value, found := bytes.Cut(line, []byte(":"))
		if !ended && (!found || string(name) == "data" && len(value) == 0) {
			return nil, nil, false // a field name, or whether a space follows "data:", is still to come
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(name) {
		case "data":
			if haveData {
				data = append(data, '\n')
			}
			haveData = true
			if !ended && len(value) > 0 && value[len(value)-1] == '\r' {
				value, src.cr = value[:len(value)-1], true // a line end, perhaps
			}
			if data == nil {
				data = value[:len(value):len(value)] // appending to it copies
			} else {
				data = append(data, value...)
			}
			src.inData = !ended
		case "event":
			if !ended || string(value) != "" && string(value) != "message" {
				return nil, nil, false
			}
		}
		src.lineStart = ended
	}
	return data, src, haveData
}

// sseSource reads the rest of an event's data as bytes: the rest of the
// data line it is in, then each further data line after a line feed,
// until the blank line that ends the event. Lines end at '\n', a '\r'
// before it dropped, as ReadEventInto reads them.
type sseSource struct {
	br        *bufio.Reader
	lineStart bool   // at the start of a line
	inData    bool   // inside a data line (when not at a line's start)
	cr        bool   // a '\r' held back: it is data unless '\n' follows
	pending   []byte // given before anything else is read
	ended     bool   // the blank line was read
}

var (
	lineFeed = []byte{'\n'}
	carriage = []byte{'\r'}
)

func (s *sseSource) next() ([]byte, error) {
	if p := s.pending; p != nil {
		s.pending = nil
		return p, nil
	}
	for {
		if s.ended {
			return nil, io.EOF
		}
		chunk, err := s.br.ReadSlice('\n')
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		ended := err == nil
		body := chunk
		if ended {
			body = body[:len(body)-1]
		}
		held := s.cr
		s.cr = false
		if !s.lineStart {
			// The rest of a line.
			s.lineStart = ended
			if !s.inData {
				continue
			}
			if ended {
				if len(body) == 0 && held {
					held = false // the '\r' ended the line
				}
				body = bytes.TrimSuffix(body, carriage)
			} else if len(body) > 0 && body[len(body)-1] == '\r' {
				body, s.cr = body[:len(body)-1], true
			}
			if held {
				s.pending = body
				return carriage, nil
			}
			if len(body) == 0 {
				continue
			}
			return body, nil
		}
		// A new line.
		s.lineStart = ended
		if ended && len(bytes.TrimSuffix(body, carriage)) == 0 {
			s.ended = true
			return nil, io.EOF
		}
		if ended {
			body = bytes.TrimSuffix(body, carriage)
		}
		name, value, _ := bytes.Cut(body, []byte(":"))
		switch string(name) {
		case "data":
			s.inData = true
			value = bytes.TrimPrefix(value, []byte(" "))
			if !ended && len(value) > 0 && value[len(value)-1] == '\r' {
				value, s.cr = value[:len(value)-1], true
			}
			s.pending = value
			if len(value) == 0 {
				s.pending = nil
			}
			return lineFeed, nil
		case "event":
			if v := string(bytes.TrimPrefix(value, []byte(" "))); !ended || v != "" && v != "message" {
				return nil, errors.New("the answer's event changed its type midway")
			}
		}
		s.inData = false
	}
}
