package jsonrpc

import (
	"bytes"
	"encoding/json"
)

// IDScanner finds the top-level "id" of a JSON-RPC message fed to it in
// pieces, keeping only that value: what a message over a size limit
// needs so that only its own call fails, without buffering the message,
// and what a message too deep or too broken to parse needs so that its
// call still ends. It also notes whether the message has a top-level
// "method" (a request or notification from the peer, never an answer).
//
// It is a tolerant state machine, not a validator: on input that is not
// JSON it finds nothing, or an id that matches no call. It never
// recurses, keeps at most maxIDBytes of the id and maxKeyBytes of a key,
// and looks at each byte a bounded number of times, however deep the
// nesting. The zero value is ready; it is not safe for concurrent use.
type IDScanner struct {
	depth     int
	inString  bool
	escape    bool
	expectKey bool   // the next top-level string is a key
	inKey     bool   // reading a top-level key
	key       []byte // the last top-level key (cut at maxKeyBytes+1)
	wantColon bool   // a top-level key was read; ':' comes next
	wantValue bool   // the top-level id's value starts at the next non-space byte
	capturing bool   // inside the top-level id's value
	id        []byte
	found     bool
	overflow  bool // the id outgrew maxIDBytes
	hasMethod bool
}

// maxIDBytes bounds a captured id; a longer one cannot be an id viewmux
// minted.
const maxIDBytes = 128

// maxKeyBytes bounds a captured top-level key ("id", "method").
const maxKeyBytes = 8

// End ends the message and returns its top-level id's raw bytes (nil
// when none was found, or it was longer than any id viewmux mints) and
// whether it has a top-level method.
func (s *IDScanner) End() (id json.RawMessage, method bool) {
	s.step('\n') // ends an id that is the last member
	if !s.found || s.overflow {
		return nil, s.hasMethod
	}
	return s.id, s.hasMethod
}

// TopLevelID returns the top-level id of data, a whole message that need
// not be valid JSON, and whether it has a top-level method, without
// parsing the rest (IDScanner): how the answer to a call is still found
// in a message Parse or ParseUpstream refuses.
func TopLevelID(data []byte) (id json.RawMessage, method bool) {
	var s IDScanner
	s.Feed(data)
	return s.End()
}

// Feed scans b, a continuation of what was fed before. Bytes no state
// depends on are crossed in runs rather than stepped through one by one:
// the inside of a string nobody reads (up to its next quote or
// backslash), and below the top level everything but strings and
// brackets. Each byte is looked at a bounded number of times.
func (s *IDScanner) Feed(b []byte) {
	quote := -1 // the index of the next quote in b at or after i; len(b) when none
	for i := 0; i < len(b); {
		switch {
		case s.inString && !s.escape && !s.capturing && !s.inKey:
			if quote < i {
				if quote = bytes.IndexByte(b[i:], '"'); quote < 0 {
					quote = len(b)
				} else {
					quote += i
				}
			}
			if bs := bytes.IndexByte(b[i:quote], '\\'); bs >= 0 {
				i += bs
			} else {
				i = quote
			}
			if i == len(b) {
				return
			}
		case !s.inString && s.depth > 1 && !s.capturing && !s.wantValue:
			for ; i < len(b) && s.depth > 1 && b[i] != '"'; i++ {
				switch b[i] {
				case '{', '[':
					s.depth++
					s.expectKey = false
				case '}', ']':
					s.depth--
				}
			}
			if i == len(b) {
				return
			}
			if s.depth <= 1 {
				continue // back at the top level: step from here
			}
			// b[i] starts a string: step it
		}
		s.step(b[i])
		i++
	}
}

func (s *IDScanner) step(c byte) {
	if s.inString {
		if s.capturing {
			s.keep(c)
		} else if s.inKey && !s.escape && c != '"' && len(s.key) <= maxKeyBytes {
			s.key = append(s.key, c)
		}
		switch {
		case s.escape:
			s.escape = false
		case c == '\\':
			s.escape = true
			if s.inKey {
				s.key = append(s.key, '\\') // no key of ours has an escape
			}
		case c == '"':
			s.inString = false
			if s.inKey {
				s.inKey, s.wantColon = false, true
			}
			if s.capturing {
				s.capturing, s.found = false, true
			}
		}
		return
	}
	if s.capturing { // a number or a literal
		switch c {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			s.capturing, s.found = false, true
		default:
			s.keep(c)
			return
		}
	}
	if s.wantValue {
		switch c {
		case ' ', '\t', '\r', '\n':
			return
		case '{', '[': // not an id: leave it to the structure below
			s.wantValue = false
		case '"':
			s.wantValue, s.capturing, s.inString = false, true, true
			s.keep(c)
			return
		default:
			s.wantValue, s.capturing = false, true
			s.keep(c)
			return
		}
	}
	switch c {
	case '"':
		s.inString = true
		if s.depth == 1 && s.expectKey {
			s.inKey, s.expectKey, s.key = true, false, s.key[:0]
		}
	case ':':
		if s.depth == 1 && s.wantColon {
			s.wantColon = false
			switch string(s.key) {
			case "id":
				s.wantValue = !s.found
			case "method":
				s.hasMethod = true
			}
		}
	case ',':
		s.expectKey = s.depth == 1
	case '{', '[':
		s.depth++
		s.expectKey = s.depth == 1 && c == '{'
	case '}', ']':
		s.depth--
	}
}

func (s *IDScanner) keep(c byte) {
	if len(s.id) >= maxIDBytes {
		s.overflow = true
		return
	}
	s.id = append(s.id, c)
}
