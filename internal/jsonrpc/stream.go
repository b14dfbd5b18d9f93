package jsonrpc

import (
	"bytes"
	"errors"
	"fmt"
)

// ValueScanner checks one JSON value that arrives in pieces, as Valid
// checks one that is whole: it accepts exactly what Valid accepts. It is
// for a result streamed to its client while it is read (a value of many
// megabytes is never held whole): each piece is checked as it passes, and
// the scanner says where the value ends. Long strings are crossed with
// bytes.IndexByte, as Valid crosses them. The zero value is ready to scan
// one value; a ValueScanner is not safe for concurrent use.
type ValueScanner struct {
	stack []byte // the open containers, '{' or '['
	state uint8
	key   bool   // the string being scanned is an object's key
	lit   string // the rest of the literal being scanned (true, false, null)
	hex   uint8  // hex digits left in a \u escape
}

// States of a ValueScanner: what the next byte may be.
const (
	svValue     uint8 = iota // a value (after optional whitespace)
	svObjFirst               // after '{': a key or '}'
	svObjKey                 // after ',' in an object: a key
	svColon                  // after a key: ':'
	svObjNext                // after a member: ',' or '}'
	svArrFirst               // after '[': a value or ']'
	svArrNext                // after an element: ',' or ']'
	svStr                    // in a string
	svStrEsc                 // after a backslash
	svStrHex                 // in a \u escape
	svNeg                    // after '-'
	svZero                   // a number's integer part "0"
	svInt                    // in a number's integer part (1-9 first)
	svDot                    // after '.'
	svFrac                   // in the fraction
	svExp                    // after 'e'
	svExpSign                // after 'e' and a sign
	svExpDigits              // in the exponent
	svLit                    // in true, false or null
	svDone                   // the value ended
)

// errValueEnded is Scan's error for a call after the value ended.
var errValueEnded = errors.New("the JSON value ended already")

// Scan checks the next piece b of the value. It returns how many bytes of
// b belong to the value and whether the value ended with them: the rest of
// b (b[n:]) is what follows it. A number is known to end only at the byte
// after it, which Scan does not consume. err says why the bytes are not
// valid JSON.
func (s *ValueScanner) Scan(b []byte) (n int, done bool, err error) {
	if s.state == svDone {
		return 0, true, errValueEnded
	}
	// Positions of the next '"', '\\' and control byte in b at or after
	// the string being crossed: found once, used until passed, so that a
	// string full of escapes is crossed in linear time. quote: -2 not
	// looked for yet, -1 none in the rest of b. A backslash or control byte
	// matters only before the string's closing quote, so back and ctrl are
	// looked for up to it (to b's end when there is none) and are that
	// bound when there is none before it: a short string, such as a key
	// at the start of a large piece, costs its own length, not the rest of
	// the piece's.
	quote, back, ctrl := -2, -2, -2
	i := 0
	for i < len(b) {
		c := b[i]
		switch s.state {
		case svStr:
			if quote != -1 && quote < i {
				quote = indexFrom(b, i, '"')
			}
			lim := quote
			if lim < 0 {
				lim = len(b)
			}
			if back < i {
				back = lim
				if j := bytes.IndexByte(b[i:lim], '\\'); j >= 0 {
					back = i + j
				}
			}
			if ctrl < i {
				ctrl = lim
				if j := controlByte(b[i:lim]); j >= 0 {
					ctrl = i + j
				}
			}
			next := min(lim, back, ctrl)
			if next == len(b) {
				return len(b), false, nil
			}
			i = next
			switch b[i] {
			case '"':
				i++
				if s.key {
					s.key, s.state = false, svColon
				} else if s.end() {
					return i, true, nil
				}
			case '\\':
				i++
				s.state = svStrEsc
			default:
				return i, false, fmt.Errorf("invalid control character %#x in string", b[i])
			}
			continue
		case svStrEsc:
			switch c {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.state = svStr
			case 'u':
				s.state, s.hex = svStrHex, 4
			default:
				return i, false, fmt.Errorf("invalid escape %q in string", c)
			}
			i++
			continue
		case svStrHex:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return i, false, fmt.Errorf("invalid character %q in \\u escape", c)
			}
			if s.hex--; s.hex == 0 {
				s.state = svStr
			}
			i++
			continue
		case svLit:
			if c != s.lit[0] {
				return i, false, fmt.Errorf("invalid character %q in literal", c)
			}
			i++
			if s.lit = s.lit[1:]; s.lit == "" && s.end() {
				return i, true, nil
			}
			continue
		case svNeg, svZero, svInt, svDot, svFrac, svExp, svExpSign, svExpDigits:
			ended, err := s.number(c)
			if err != nil {
				return i, false, err
			}
			if !ended {
				i++
				continue
			}
			if s.end() {
				return i, true, nil // the byte after the number is not the value's
			}
			continue // the byte after the number, read in the new state
		}
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			i++
			continue
		}
		switch s.state {
		case svValue, svArrFirst:
			if s.state == svArrFirst && c == ']' {
				s.stack = s.stack[:len(s.stack)-1]
				i++
				if s.end() {
					return i, true, nil
				}
				continue
			}
			if err := s.begin(c); err != nil {
				return i, false, err
			}
		case svObjFirst, svObjKey:
			switch {
			case c == '"':
				s.state, s.key = svStr, true
			case c == '}' && s.state == svObjFirst:
				s.stack = s.stack[:len(s.stack)-1]
				i++
				if s.end() {
					return i, true, nil
				}
				continue
			default:
				return i, false, fmt.Errorf("invalid character %q looking for an object key", c)
			}
		case svColon:
			if c != ':' {
				return i, false, fmt.Errorf("invalid character %q after an object key", c)
			}
			s.state = svValue
		case svObjNext, svArrNext:
			closer, next := byte('}'), svObjKey
			if s.state == svArrNext {
				closer, next = ']', svValue
			}
			switch c {
			case ',':
				s.state = next
			case closer:
				s.stack = s.stack[:len(s.stack)-1]
				i++
				if s.end() {
					return i, true, nil
				}
				continue
			default:
				return i, false, fmt.Errorf("invalid character %q after a value in a container", c)
			}
		}
		i++
	}
	return i, false, nil
}

// Finish reports whether the value is complete at the end of its input:
// a value that ended, or a number that its input's end ends.
func (s *ValueScanner) Finish() error {
	switch s.state {
	case svDone:
		return nil
	case svZero, svInt, svFrac, svExpDigits:
		if len(s.stack) == 0 {
			s.state = svDone
			return nil
		}
	}
	return errEnd
}

// begin starts the value whose first byte is c.
func (s *ValueScanner) begin(c byte) error {
	switch {
	case c == '{' || c == '[':
		if len(s.stack) >= maxValidDepth {
			return errTooDeep
		}
		s.stack = append(s.stack, c)
		s.state = svObjFirst
		if c == '[' {
			s.state = svArrFirst
		}
	case c == '"':
		s.state = svStr
	case c == '-':
		s.state = svNeg
	case c == '0':
		s.state = svZero
	case c >= '1' && c <= '9':
		s.state = svInt
	case c == 't':
		s.state, s.lit = svLit, "rue"
	case c == 'f':
		s.state, s.lit = svLit, "alse"
	case c == 'n':
		s.state, s.lit = svLit, "ull"
	default:
		return fmt.Errorf("invalid character %q looking for a value", c)
	}
	return nil
}

// number takes c in a number; ended reports that c is not part of it (the
// number ended before it).
func (s *ValueScanner) number(c byte) (ended bool, err error) {
	digit := c >= '0' && c <= '9'
	switch s.state {
	case svNeg:
		switch {
		case c == '0':
			s.state = svZero
		case digit:
			s.state = svInt
		default:
			return false, fmt.Errorf("invalid character %q in number", c)
		}
		return false, nil
	case svZero, svInt:
		switch {
		case digit && s.state == svInt:
		case c == '.':
			s.state = svDot
		case c == 'e' || c == 'E':
			s.state = svExp
		default:
			return true, nil
		}
		return false, nil
	case svDot, svFrac:
		switch {
		case digit:
			s.state = svFrac
		case s.state == svFrac && (c == 'e' || c == 'E'):
			s.state = svExp
		case s.state == svFrac:
			return true, nil
		default:
			return false, fmt.Errorf("invalid character %q in number", c)
		}
		return false, nil
	case svExp:
		switch {
		case c == '+' || c == '-':
			s.state = svExpSign
		case digit:
			s.state = svExpDigits
		default:
			return false, fmt.Errorf("invalid character %q in exponent", c)
		}
		return false, nil
	case svExpSign:
		if !digit {
			return false, fmt.Errorf("invalid character %q in exponent", c)
		}
		s.state = svExpDigits
		return false, nil
	}
	// svExpDigits
	if digit {
		return false, nil
	}
	return true, nil
}

// end records that a value ended: the scan is done when it was the
// outermost one, else its container goes on.
func (s *ValueScanner) end() bool {
	if len(s.stack) == 0 {
		s.state = svDone
		return true
	}
	s.state = svObjNext
	if s.stack[len(s.stack)-1] == '[' {
		s.state = svArrNext
	}
	return false
}

// indexFrom is the index of c in b at or after i, or -1.
func indexFrom(b []byte, i int, c byte) int {
	if j := bytes.IndexByte(b[i:], c); j >= 0 {
		return i + j
	}
	return -1
}

// ValueEnd returns the index after the JSON value at the start of b,
// which must be valid JSON (it is crossed, not checked).
func ValueEnd(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	s := &scanner{b: b, noCheck: true}
	return s.skipValue(0)
}
