package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"sync"

	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// ReadEvent reads the next message of a text/event-stream body: the data
// of the next event whose type is "message" (or unnamed) with non-empty
// data. Comments, id, retry and other fields are skipped, as are events of
// other types (and priming events without data). A message over limit
// bytes is read to its end without being kept and returned as an
// oversize Frame carrying its id, like ReadMessage's. The stream ending,
// even in the middle of an event, is an error (io.EOF at a clean end).
func ReadEvent(r *bufio.Reader, limit int64) (Frame, error) {
	return ReadEventInto(r, limit, nil)
}

// ReadEventInto is ReadEvent putting a message's data into dst(n) when dst
// is set and returns room for its n bytes (an empty slice with that
// capacity), else into a new slice.
func ReadEventInto(r *bufio.Reader, limit int64, dst func(n int) []byte) (Frame, error) {
	var (
		data      blocks
		s         jsonrpc.IDScanner
		over      bool
		haveData  bool
		event     []byte
		lineStart = true
		field     string // the field of the line being read
	)
	defer data.release()
	appendData := func(b []byte) {
		switch {
		case over:
			s.Feed(b)
		case int64(data.n)+int64(len(b)) > limit:
			over = true
			data.feed(&s)
			s.Feed(b)
			data.release()
		default:
			data.write(b)
		}
	}
	for {
		chunk, err := r.ReadSlice('\n')
		end := err == nil
		if !end && !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) && (len(chunk) > 0 || !lineStart || haveData) {
				err = io.ErrUnexpectedEOF
			}
			return Frame{}, err
		}
		body := chunk
		if end {
			body = bytes.TrimSuffix(body[:len(body)-1], []byte("\r"))
		}
		if !lineStart {
			if field == "data" {
				appendData(body)
			}
			lineStart = end
			continue
		}
		lineStart = end
		if end && len(body) == 0 { // a blank line ends the event
			typ := string(event)
			if haveData && (typ == "" || typ == "message") {
				if over {
					id, method := s.End()
					return Frame{Oversize: true, ID: id, Method: method}, nil
				}
				if !data.blank() {
					return Frame{Data: data.join(dst)}, nil
				}
			}
			data.release()
			s, over, haveData, event = jsonrpc.IDScanner{}, false, false, nil
			continue
		}
		name, value, found := bytes.Cut(body, []byte(":"))
		if !found {
			value = nil
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		field = string(name)
		switch field {
		case "data":
			if haveData {
				appendData([]byte{'\n'})
			}
			haveData = true
			appendData(value)
		case "event":
			event = append(event[:0], value...)
			if len(event) > 64 {
				event = event[:64]
			}
		}
	}
}

// blockSize is the size of the blocks an event's data is gathered in.
const blockSize = 64 << 10

var blockPool = sync.Pool{New: func() any { return new([blockSize]byte) }}

// blocks gathers an event's data in pooled blocks and joins it once, so
// that a large message is copied twice (into the blocks, then out) rather
// than at every growth of one slice.
type blocks struct {
	full []*[blockSize]byte
	last int // bytes used in the last block
	n    int
}

func (d *blocks) write(b []byte) {
	d.n += len(b)
	for len(b) > 0 {
		if len(d.full) == 0 || d.last == blockSize {
			d.full = append(d.full, blockPool.Get().(*[blockSize]byte))
			d.last = 0
		}
		c := copy(d.full[len(d.full)-1][d.last:], b)
		d.last += c
		b = b[c:]
	}
}

// each calls fn with the data in order.
func (d *blocks) each(fn func([]byte)) {
	for i, blk := range d.full {
		end := blockSize
		if i == len(d.full)-1 {
			end = d.last
		}
		fn(blk[:end])
	}
}

func (d *blocks) feed(s *jsonrpc.IDScanner) { d.each(func(b []byte) { s.Feed(b) }) }

// blank reports whether the data is only whitespace.
func (d *blocks) blank() bool {
	blank := true
	d.each(func(b []byte) {
		if blank && len(bytes.TrimSpace(b)) > 0 {
			blank = false
		}
	})
	return blank
}

// join returns the data in one slice: dst(n) when dst gives room for it,
// else a new one (bytes.Join: not zeroed before it is copied into).
func (d *blocks) join(dst func(n int) []byte) []byte {
	if dst != nil {
		if out := dst(d.n); cap(out) >= d.n && len(out) == 0 {
			d.each(func(b []byte) { out = append(out, b...) })
			return out
		}
	}
	parts := make([][]byte, 0, len(d.full)+1)
	d.each(func(b []byte) { parts = append(parts, b) })
	if len(parts) < 2 {
		parts = append(parts, nil)
	}
	return bytes.Join(parts, nil)
}

// release gives the blocks back.
func (d *blocks) release() {
	for _, blk := range d.full {
		blockPool.Put(blk)
	}
	d.full, d.last, d.n = d.full[:0], 0, 0
}
