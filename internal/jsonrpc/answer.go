package jsonrpc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// This file is the pass viewmux makes over what an upstream sends, which
// may be a result of many megabytes: it must be valid JSON (a result is
// spliced into the answer a client reads, and bytes that are not JSON
// could end the client's frame early and forge another message), but only
// the envelope's members are read. Valid checks the bytes in one pass that
// crosses long strings with bytes.IndexByte; ParseUpstream reads the
// envelope without descending into the result.

// maxValidDepth bounds the nesting Valid accepts: deeper input is refused
// rather than recursed into.
const maxValidDepth = 10000

// errTooDeep is why Valid refuses input nested deeper than maxValidDepth.
var errTooDeep = fmt.Errorf("JSON nested deeper than %d levels", maxValidDepth)

// Valid reports whether b is one valid JSON value (with optional
// surrounding whitespace), as encoding/json.Valid does, or why not. It
// accepts what encoding/json.Valid accepts, up to maxValidDepth levels of
// nesting.
func Valid(b []byte) error { return valid(b, nil) }

// valid is Valid, collecting the members of a top-level object in top
// (when non-nil) on the way: the envelope of an answer is read in the
// same pass that checks it.
func valid(b []byte, top *[]member) error {
	v := validator{b: b, top: top}
	i, err := v.value(v.ws(0), 0)
	if err != nil {
		return err
	}
	if i = v.ws(i); i != len(b) {
		return fmt.Errorf("invalid character %q after top-level value", b[i])
	}
	return nil
}

type validator struct {
	b   []byte
	top *[]member // when non-nil, collects the members of a top-level object
}

func (v *validator) ws(i int) int {
	for i < len(v.b) {
		switch v.b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

var errEnd = errors.New("unexpected end of JSON input")

func (v *validator) value(i, depth int) (int, error) {
	if i >= len(v.b) {
		return i, errEnd
	}
	switch c := v.b[i]; c {
	case '{':
		if depth >= maxValidDepth {
			return i, errTooDeep
		}
		i = v.ws(i + 1)
		if i < len(v.b) && v.b[i] == '}' {
			return i + 1, nil
		}
		for {
			if i >= len(v.b) {
				return i, errEnd
			}
			if v.b[i] != '"' {
				return i, fmt.Errorf("invalid character %q looking for the beginning of an object key", v.b[i])
			}
			keyStart := i
			var err error
			if i, err = v.str(i); err != nil {
				return i, err
			}
			keyEnd := i
			if i = v.ws(i); i >= len(v.b) {
				return i, errEnd
			}
			if v.b[i] != ':' {
				return i, fmt.Errorf("invalid character %q after object key", v.b[i])
			}
			valueStart := v.ws(i + 1)
			if i, err = v.value(valueStart, depth+1); err != nil {
				return i, err
			}
			if depth == 0 && v.top != nil {
				esc := bytes.IndexByte(v.b[keyStart+1:keyEnd-1], '\\') >= 0
				k := (&scanner{b: v.b}).key(keyStart, keyEnd, esc)
				*v.top = append(*v.top, member{key: k, keyStart: keyStart, valueStart: valueStart, valueEnd: i})
			}
			if i = v.ws(i); i >= len(v.b) {
				return i, errEnd
			}
			switch v.b[i] {
			case ',':
				i = v.ws(i + 1)
			case '}':
				return i + 1, nil
			default:
				return i, fmt.Errorf("invalid character %q after object key:value pair", v.b[i])
			}
		}
	case '[':
		if depth >= maxValidDepth {
			return i, errTooDeep
		}
		i = v.ws(i + 1)
		if i < len(v.b) && v.b[i] == ']' {
			return i + 1, nil
		}
		for {
			var err error
			if i, err = v.value(i, depth+1); err != nil {
				return i, err
			}
			if i = v.ws(i); i >= len(v.b) {
				return i, errEnd
			}
			switch v.b[i] {
			case ',':
				i = v.ws(i + 1)
			case ']':
				return i + 1, nil
			default:
				return i, fmt.Errorf("invalid character %q after array element", v.b[i])
			}
		}
	case '"':
		return v.str(i)
	case 't':
		return v.literal(i, "true")
	case 'f':
		return v.literal(i, "false")
	case 'n':
		return v.literal(i, "null")
	default:
		if c == '-' || c >= '0' && c <= '9' {
			return v.number(i)
		}
		return i, fmt.Errorf("invalid character %q looking for beginning of value", c)
	}
}

func (v *validator) literal(i int, lit string) (int, error) {
	if !bytes.HasPrefix(v.b[i:], []byte(lit)) {
		if len(v.b)-i < len(lit) && bytes.HasPrefix([]byte(lit), v.b[i:]) {
			return len(v.b), errEnd
		}
		return i, fmt.Errorf("invalid literal at offset %d", i)
	}
	return i + len(lit), nil
}

func (v *validator) digits(i int) int {
	for i < len(v.b) && v.b[i] >= '0' && v.b[i] <= '9' {
		i++
	}
	return i
}

// number checks a number as JSON defines it: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (v *validator) number(i int) (int, error) {
	start := i
	if v.b[i] == '-' {
		i++
	}
	switch {
	case i >= len(v.b):
		return i, errEnd
	case v.b[i] == '0':
		i++
	case v.b[i] >= '1' && v.b[i] <= '9':
		i = v.digits(i + 1)
	default:
		return i, fmt.Errorf("invalid number at offset %d", start)
	}
	if i < len(v.b) && v.b[i] == '.' {
		j := v.digits(i + 1)
		if j == i+1 {
			if j >= len(v.b) {
				return j, errEnd
			}
			return j, fmt.Errorf("invalid number at offset %d", start)
		}
		i = j
	}
	if i < len(v.b) && (v.b[i] == 'e' || v.b[i] == 'E') {
		i++
		if i < len(v.b) && (v.b[i] == '+' || v.b[i] == '-') {
			i++
		}
		j := v.digits(i)
		if j == i {
			if j >= len(v.b) {
				return j, errEnd
			}
			return j, fmt.Errorf("invalid number at offset %d", start)
		}
		i = j
	}
	return i, nil
}

// strBlock is how many bytes of a string str looks at in one go: each
// block is searched for a quote, then for a backslash and a control
// character while it is still in the CPU's cache, so that a string of many
// megabytes is read from memory once rather than three times.
const strBlock = 16 << 10

// str checks the string starting at i and returns the index after it: its
// runs of plain bytes are crossed with bytes.IndexByte, then checked for
// control characters, which JSON allows only escaped.
func (v *validator) str(i int) (int, error) {
	i++
	for {
		end := min(len(v.b), i+strBlock)
		run := v.b[i:end]
		q := bytes.IndexByte(run, '"')
		if q >= 0 {
			run = run[:q]
		}
		bs := bytes.IndexByte(run, '\\')
		if bs >= 0 {
			run = run[:bs]
		}
		if j := controlByte(run); j >= 0 {
			return i + j, fmt.Errorf("invalid control character %#x in string", run[j])
		}
		switch {
		case bs >= 0:
		case q >= 0:
			return i + q + 1, nil
		case end == len(v.b):
			return end, errEnd
		default:
			i = end // no quote in this block: the next one
			continue
		}
		i += bs + 1 // the byte after the backslash
		if i >= len(v.b) {
			return i, errEnd
		}
		switch v.b[i] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i++
		case 'u':
			if len(v.b)-i < 5 {
				return len(v.b), errEnd
			}
			for _, h := range v.b[i+1 : i+5] {
				if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
					return i, fmt.Errorf("invalid character %q in \\u escape", h)
				}
			}
			i += 5
		default:
			return i, fmt.Errorf("invalid escape %q in string", v.b[i])
		}
	}
}

// ParseUpstream is Parse for a message an upstream sent. A response, which
// may carry a large result, is checked with Valid and only its envelope is
// read (ID, Result or Error, JSONRPC); a request or notification, which
// viewmux may act on or forward, is parsed as Parse does. A response whose
// envelope holds a key twice is ambiguous (Ambiguous is set).
func ParseUpstream(raw []byte) (*Message, error) {
	sc := getScratch()
	defer putScratch(sc)
	if err := valid(raw, &sc.top); err != nil {
		return &Message{}, err
	}
	top := sc.top
	s := &scanner{b: raw, noCheck: true}
	if raw[s.ws(0)] != '{' {
		return &Message{}, errors.New("not a JSON-RPC message object")
	}
	m := &Message{}
	for i, f := range top {
		for _, before := range top[:i] {
			if before.key == f.key && m.Ambiguous == nil {
				m.Ambiguous = fmt.Errorf("%w: key %q appears twice", ErrAmbiguous, Printable(f.key))
			}
		}
		v := raw[f.valueStart:f.valueEnd]
		switch f.key {
		case "jsonrpc":
			str(v, &m.JSONRPC)
		case "id":
			m.ID = v
		case "method":
			return Parse(raw)
		case "params":
			m.Params = v
		case "result":
			m.Result = v
		case "error":
			m.Error = v
		}
	}
	return m, nil
}

// skipValue returns the index after the valid JSON value at i.
func (s *scanner) skipValue(i int) int {
	switch s.b[i] {
	case '{', '[':
		return s.skip(i)
	case '"':
		return s.strEnd(i)
	}
	return s.scalar(i)
}

// Lookup returns the value of the top-level member key of the valid JSON
// object obj, without looking into the other members' values; nil when obj
// is no object or has no such member.
func Lookup(obj []byte, key string) []byte { return Fields(obj, key)[0] }

// Fields is Lookup for several keys in one pass: the values of the named
// members, in the order of keys, nil for each one obj does not have. It
// allocates only the result: a key is compared as bytes unless it holds
// an escape.
func Fields(obj []byte, keys ...string) [][]byte {
	out := make([][]byte, len(keys))
	s := &scanner{b: obj, noCheck: true}
	if i := s.ws(0); i < len(obj) && obj[i] == '{' {
		s.fields(i, keys, out)
	}
	return out
}

// fields is Fields of the object at i, into out (which holds nil for
// each key); it returns the index after the object.
func (s *scanner) fields(i int, keys []string, out [][]byte) int {
	obj := s.b
	for i = s.ws(i + 1); i < len(obj) && obj[i] == '"'; {
		end, esc := s.str(i)
		vs := s.ws(s.ws(end) + 1) // past ':'
		ve := s.skipValue(vs)
		raw := obj[i+1 : end-1]
		for j, k := range keys {
			if out[j] != nil {
				continue
			}
			if !esc && string(raw) == k || esc && s.key(i, end, true) == k {
				out[j] = obj[vs:ve]
			}
		}
		if i = s.ws(ve); i < len(obj) && obj[i] == ',' {
			i = s.ws(i + 1)
		}
	}
	if i < len(obj) && obj[i] == '}' {
		return i + 1
	}
	return i
}

// ElementFields calls fn with Fields(elem, keys...) of each element of the
// valid JSON array arr that is an object, crossing each element once
// (Elements and then Fields cross it twice); other elements are skipped.
// fn must not keep its slice, which is reused.
func ElementFields(arr []byte, keys []string, fn func(fields [][]byte)) {
	s := &scanner{b: arr, noCheck: true}
	i := s.ws(0)
	if i >= len(arr) || arr[i] != '[' {
		return
	}
	out := make([][]byte, len(keys))
	for i = s.ws(i + 1); i < len(arr) && arr[i] != ']'; {
		var end int
		if arr[i] == '{' {
			clear(out)
			end = s.fields(i, keys, out)
			fn(out)
		} else {
			end = s.skipValue(i)
		}
		if i = s.ws(end); i < len(arr) && arr[i] == ',' {
			i = s.ws(i + 1)
		}
	}
}

// Elements calls fn with each element of the valid JSON array arr, without
// looking into them; nothing when arr is no array.
func Elements(arr []byte, fn func(elem []byte)) {
	s := &scanner{b: arr, noCheck: true}
	i := s.ws(0)
	if i >= len(arr) || arr[i] != '[' {
		return
	}
	for i = s.ws(i + 1); i < len(arr) && arr[i] != ']'; {
		end := s.skipValue(i)
		fn(arr[i:end])
		if i = s.ws(end); i < len(arr) && arr[i] == ',' {
			i = s.ws(i + 1)
		}
	}
}

// controlByte returns the index of the first byte below 0x20 in b, or -1.
// It looks at eight bytes at a time, four words per step: a word has such
// a byte when subtracting 0x20 from every byte borrows into a byte whose
// top bit was clear. The lowest byte flagged is always a true one (a
// borrow only flags bytes above a true one).
func controlByte(b []byte) int {
	const lo, hi = 0x2020202020202020, 0x8080808080808080
	i := 0
	for ; i+32 <= len(b); i += 32 {
		w := b[i : i+32 : i+32]
		x0 := binary.LittleEndian.Uint64(w)
		x1 := binary.LittleEndian.Uint64(w[8:])
		x2 := binary.LittleEndian.Uint64(w[16:])
		x3 := binary.LittleEndian.Uint64(w[24:])
		if ((x0-lo)&^x0|(x1-lo)&^x1|(x2-lo)&^x2|(x3-lo)&^x3)&hi != 0 {
			break
		}
	}
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		if m := (x - lo) &^ x & hi; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(b); i++ {
		if b[i] < 0x20 {
			return i
		}
	}
	return -1
}
