package door

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// This file bounds what the stream front doors read per message. A message
// over server.max_body_bytes is never held in memory: its first
// max_body_bytes are, then the rest is read and discarded while idScanner
// looks for its top-level "id", so that the client gets a JSON-RPC error for
// that request and the connection carries on.

// ReadMessage reads one whole message from r, holding at most max bytes.
// When the message is longer, data is nil, over is true, and id is the
// message's top-level id if it has one.
func ReadMessage(r io.Reader, max int64) (data []byte, id json.RawMessage, over bool, err error) {
	data, err = io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, nil, false, err
	}
	if int64(len(data)) <= max {
		return data, nil, false, nil
	}
	var sc idScanner
	sc.Write(data)
	if _, err := io.Copy(&sc, r); err != nil {
		return nil, nil, true, err
	}
	return nil, sc.result(), true, nil
}

// ReadLine reads one newline-terminated message from br (the newline, and a
// "\r" before it, removed), holding at most max bytes, like ReadMessage. A
// last line without a newline is a message too; after it, io.EOF.
func ReadLine(br *bufio.Reader, max int64) (line []byte, id json.RawMessage, over bool, err error) {
	var sc *idScanner
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case sc != nil:
			sc.Write(chunk)
		case int64(len(line)+len(chunk)) > max+2: // room for "\r\n"
			sc = &idScanner{}
			sc.Write(line)
			sc.Write(chunk)
			line = nil
		default:
			line = append(line, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && (!errors.Is(err, io.EOF) || (len(line) == 0 && sc == nil)) {
			return nil, nil, false, err
		}
		break
	}
	if sc != nil {
		return nil, sc.result(), true, nil
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	if int64(len(line)) > max {
		sc = &idScanner{}
		sc.Write(line)
		return nil, sc.result(), true, nil
	}
	return line, nil, false, nil
}

// maxScannedID bounds the id idScanner keeps; a longer id is not reported.
const maxScannedID = 256

// idScanner finds the value of the top-level "id" member of a JSON object
// streamed through Write, holding only that value. It never fails: on
// anything unexpected it reports no id.
type idScanner struct {
	depth      int
	inString   bool
	escaped    bool
	state      int    // at depth 1: scanKey, scanInKey, scanColon, scanValue
	key        []byte // the current top-level key, up to 2 bytes
	keyTooLong bool
	capturing  bool // inside the value of the top-level "id"
	value      []byte
	found      json.RawMessage
}

const (
	scanKey   = iota // expecting a key
	scanInKey        // inside a key
	scanColon        // expecting ':'
	scanValue        // inside a value
)

// Write implements io.Writer; it never fails.
func (sc *idScanner) Write(p []byte) (int, error) {
	for _, c := range p {
		sc.step(c)
	}
	return len(p), nil
}

func (sc *idScanner) step(c byte) {
	if sc.capturing {
		if !sc.inString && sc.depth == 1 && (c == ',' || c == '}') {
			sc.finish()
		} else if len(sc.value) < maxScannedID {
			sc.value = append(sc.value, c)
		} else {
			sc.capturing, sc.value = false, nil
		}
	}
	if sc.inString {
		inKey := sc.depth == 1 && sc.state == scanInKey
		switch {
		case sc.escaped:
			sc.escaped = false
		case c == '\\':
			sc.escaped = true
			sc.keyTooLong = sc.keyTooLong || inKey // an escaped key is not a plain "id"
		case c == '"':
			sc.inString = false
			if inKey {
				sc.state = scanColon
			}
		case inKey:
			if len(sc.key) < 2 {
				sc.key = append(sc.key, c)
			} else {
				sc.keyTooLong = true
			}
		}
		return
	}
	switch c {
	case '"':
		sc.inString = true
		if sc.depth == 1 && sc.state == scanKey {
			sc.state, sc.key, sc.keyTooLong = scanInKey, sc.key[:0], false
		}
	case '{', '[':
		sc.depth++
	case '}', ']':
		sc.depth--
	case ':':
		if sc.depth == 1 && sc.state == scanColon {
			sc.state = scanValue
			sc.capturing = !sc.keyTooLong && string(sc.key) == "id"
			sc.value = sc.value[:0]
		}
	case ',':
		if sc.depth == 1 {
			sc.state = scanKey
		}
	}
}

// finish keeps the captured value if it is a JSON-RPC id: a string or a
// number.
func (sc *idScanner) finish() {
	sc.capturing = false
	v := bytes.TrimSpace(sc.value)
	if len(v) > 0 && (v[0] == '"' || v[0] == '-' || (v[0] >= '0' && v[0] <= '9')) && json.Valid(v) {
		sc.found = bytes.Clone(v)
	}
}

// result returns the id found, or nil.
func (sc *idScanner) result() json.RawMessage { return sc.found }
