package jsonrpc

import (
	"bytes"
	"encoding/json"
	"io"
)

// A Frame is one message in pieces: written one after the other, they are
// the message. A result answer is viewmux's envelope around the upstream's
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

// joinBelow is the size under which Joined makes one piece of a frame:
// one write of a small message is cheaper than three.
const joinBelow = 32 << 10

// Joined returns f as one piece when it is small, for a writer that pays
// per write (a pipe, a websocket frame); a large frame stays in pieces.
func (f Frame) Joined() Frame {
	if (len(f[1]) == 0 && len(f[2]) == 0) || f.Len() >= joinBelow {
		return f
	}
	return Whole(f.Bytes())
}

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

// OneLine returns msg with every carriage return and line feed replaced by
// a space: msg itself when it has none, else a copy. In valid JSON those
// bytes can only be whitespace between tokens (a string holds them
// escaped), so the message means the same; on a transport that ends a
// message at a line break (stdio, both ways; an event stream's data line)
// it stays one message. Without it, a client's request pretty-printed
// around a second request smuggles that request to a stdio upstream past
// every check, and an upstream's result forges messages to a stdio client.
func OneLine(msg []byte) []byte {
	i := bytes.IndexByte(msg, '\n')
	j := bytes.IndexByte(msg, '\r')
	if i < 0 && j < 0 {
		return msg
	}
	if i < 0 || j >= 0 && j < i {
		i = j
	}
	out := bytes.Clone(msg)
	for k := i; k < len(out); k++ {
		if out[k] == '\n' || out[k] == '\r' {
			out[k] = ' '
		}
	}
	return out
}

// OneLine is jsonrpc.OneLine for each piece of f.
func (f Frame) OneLine() Frame {
	for i := range f {
		f[i] = OneLine(f[i])
	}
	return f
}

// ResponseHead is the frame of a result answer to id whose result is
// written after it, as it is read: the envelope up to "result":. The
// writer writes the result and then the closing brace.
func ResponseHead(id json.RawMessage) Frame {
	f := ResponseFrame(id, nil)
	return Frame{f[0]}
}
