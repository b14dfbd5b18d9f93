package jsonrpc

import (
	"encoding/json"
	"io"
)

// A Frame is one message in pieces: written one after the other, they are
// the message. A result answer is mcpmux's envelope around the upstream's
// result bytes, which are written out as they are, never copied into a new
// buffer (a result may be many megabytes).
type Frame [3][]byte

// ResponseFrame is Response in pieces: the envelope's head, result, and
// the closing brace.
func ResponseFrame(id, result json.RawMessage) Frame {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	if len(result) == 0 {
		result = json.RawMessage("null")
	}
	head := make([]byte, 0, len(id)+32)
	head = append(head, `{"jsonrpc":"2.0","id":`...)
	head = append(head, id...)
	head = append(head, `,"result":`...)
	return Frame{head, result, closeBrace}
}

var closeBrace = []byte("}")

// Whole is a frame of one piece.
func Whole(b []byte) Frame { return Frame{b} }

// Empty reports whether the frame holds nothing (no message).
func (f Frame) Empty() bool { return f.Len() == 0 }

// Len is the message's length in bytes.
func (f Frame) Len() int { return len(f[0]) + len(f[1]) + len(f[2]) }

// Bytes returns the message as one slice: the piece itself when there is
// only one, else a copy.
func (f Frame) Bytes() []byte {
	if len(f[1]) == 0 && len(f[2]) == 0 {
		return f[0]
	}
	out := make([]byte, 0, f.Len())
	return append(append(append(out, f[0]...), f[1]...), f[2]...)
}

// WriteTo writes the pieces to w in order.
func (f Frame) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for _, p := range f {
		if len(p) == 0 {
			continue
		}
		m, err := w.Write(p)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
