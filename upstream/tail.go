package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/mcpmux/mcpmux/internal/jsonrpc"
	"github.com/mcpmux/mcpmux/upstream/wire"
)

// StreamThreshold is the size past which a result read under a loan that
// allows it (Loan.AllowTail) is handed over unread, as a Tail, rather than
// read whole: a JSON body whose Content-Length says more, or of unknown
// length that goes on past it. Below it a result is read whole, as before:
// a small call pays nothing for streaming. 256 KiB is where reading whole
// stops being cheap (a pooled buffer, a copy) compared with the write to
// the client, and a result that size is read in well under a millisecond.
const StreamThreshold = 256 << 10

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
	head     []byte  // the envelope up to "result": (checked again with the end, Finish)
	first    []byte  // bytes read past head, given first
	buf      *[]byte // the pooled buffer head and first are in (nil: none)
	body     io.ReadCloser
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
	if t.chunk == nil {
		t.chunk = chunkPool.Get().(*[64 << 10]byte)
	}
	for {
		n, err := t.body.Read(t.chunk[:])
		t.read += int64(n)
		if t.read > t.limit {
			t.err = &wire.TooLargeError{Limit: t.limit}
			return nil, t.err
		}
		if err != nil {
			if t.timedOut.Load() {
				err = fmt.Errorf("%w: reading the result", ErrTimeout)
			}
			t.err = err
		}
		if n > 0 {
			return t.chunk[:n], nil
		}
		if err != nil {
			return nil, err
		}
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
	t.body.Close()
	t.cancel()
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
