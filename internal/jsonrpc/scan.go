package jsonrpc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// This file is the one pass Parse makes over a message: a scanner over
// bytes already known to be valid JSON (json.Valid), which finds the
// members the request path routes on, checks every object for duplicate
// keys (and the params and arguments objects for keys equal under case
// folding), and remembers where each member's bytes are, so that Rewrite
// can splice new values in without decoding or re-encoding the rest.

// member is one member of a JSON object: its decoded key, and the spans of
// its key (with quotes) and of its value.
type member struct {
	key                  string
	keyStart, valueStart int
	valueEnd             int
}

// scanner walks valid JSON.
type scanner struct {
	b       []byte
	noCheck bool  // only find members
	err     error // the first ambiguity found
	// top and params collect the members of the message object and of its
	// params object, when non-nil.
	top, params *[]member
}

// role is what an object is in a message, which decides its checks.
type role int

const (
	roleOther     role = iota // exact duplicate keys only
	roleMessage               // the message itself
	roleParams                // its params: keys also compared case-folded
	roleArguments             // params.arguments: likewise
)

// childRole is the role of the value of member k of an object of role r.
func childRole(r role, k string) role {
	switch {
	case r == roleMessage && k == "params":
		return roleParams
	case r == roleParams && k == "arguments":
		return roleArguments
	}
	return roleOther
}

func (s *scanner) ws(i int) int {
	for i < len(s.b) {
		switch s.b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// str returns the index after the string starting at i, and whether it
// holds an escape.
func (s *scanner) str(i int) (int, bool) {
	esc := false
	for i++; i < len(s.b); {
		q := bytes.IndexByte(s.b[i:], '"')
		if q < 0 {
			break
		}
		bs := bytes.IndexByte(s.b[i:i+q], '\\')
		if bs < 0 {
			return i + q + 1, esc
		}
		esc = true
		i += bs + 2 // past the escaped byte
	}
	return len(s.b), esc
}

// strEnd returns the index after the string starting at i, crossing it in
// one pass: a quote ends it unless an odd run of backslashes is before it.
// It is str for a value nobody looks into (a large text is crossed once,
// not twice).
func (s *scanner) strEnd(i int) int {
	for i++; i < len(s.b); {
		q := bytes.IndexByte(s.b[i:], '"')
		if q < 0 {
			break
		}
		i += q
		n := 0
		for j := i - 1; j >= 0 && s.b[j] == '\\'; j-- {
			n++
		}
		i++
		if n%2 == 0 {
			return i
		}
	}
	return len(s.b)
}

// key decodes the string at [start, end) into a string of its own (one of
// the common keys, shared, or a copy).
func (s *scanner) key(start, end int, esc bool) string {
	if !esc {
		return ownKey(s.b[start+1 : end-1])
	}
	var k string
	json.Unmarshal(s.b[start:end], &k) // valid JSON: cannot fail
	return k
}

// peekKey is key for a key that is only looked at during the scan: an
// unescaped key is read in place, without a copy. The string shares s.b's
// bytes, so it must not be kept past the scan (object keeps the keys of
// the members it collects through ownKey).
func (s *scanner) peekKey(start, end int, esc bool) string {
	if !esc {
		b := s.b[start+1 : end-1]
		if len(b) == 0 {
			return ""
		}
		return unsafe.String(&b[0], len(b))
	}
	return s.key(start, end, esc)
}

// ownKey returns the key b as a string that does not share b's bytes:
// the keys of MCP's own members, which every message repeats, are shared
// constants, so reading them costs no allocation.
func ownKey(b []byte) string {
	switch string(b) {
	case "jsonrpc":
		return "jsonrpc"
	case "id":
		return "id"
	case "method":
		return "method"
	case "params":
		return "params"
	case "result":
		return "result"
	case "error":
		return "error"
	case "code":
		return "code"
	case "message":
		return "message"
	case "data":
		return "data"
	case "name":
		return "name"
	case "arguments":
		return "arguments"
	case "uri":
		return "uri"
	case "cursor":
		return "cursor"
	case "ref":
		return "ref"
	case "argument":
		return "argument"
	case "_meta":
		return "_meta"
	case "progressToken":
		return "progressToken"
	case "content":
		return "content"
	case "contents":
		return "contents"
	case "structuredContent":
		return "structuredContent"
	case "isError":
		return "isError"
	case "resultType":
		return "resultType"
	case "type":
		return "type"
	case "text":
		return "text"
	case "mimeType":
		return "mimeType"
	case "ttlMs":
		return "ttlMs"
	case "cacheScope":
		return "cacheScope"
	case "nextCursor":
		return "nextCursor"
	case "progress":
		return "progress"
	case "total":
		return "total"
	case "level":
		return "level"
	case "logger":
		return "logger"
	case "requestId":
		return "requestId"
	case "reason":
		return "reason"
	}
	return string(b)
}

// value skips the value at i, checking the objects in it by their role,
// and returns the index after it.
func (s *scanner) value(i, depth int, r role) int {
	i = s.ws(i)
	if i >= len(s.b) {
		return i
	}
	if depth > maxDepth && (s.b[i] == '{' || s.b[i] == '[') {
		if s.err == nil {
			s.err = fmt.Errorf("%w: nested deeper than %d levels", ErrAmbiguous, maxDepth)
		}
		return s.skip(i)
	}
	switch s.b[i] {
	case '{':
		return s.object(i, depth, r)
	case '[':
		i = s.ws(i + 1)
		if i < len(s.b) && s.b[i] == ']' {
			return i + 1
		}
		for i < len(s.b) {
			i = s.ws(s.value(i, depth+1, roleOther))
			if i >= len(s.b) {
				return len(s.b)
			}
			if s.b[i] == ']' {
				return i + 1
			}
			i++ // ','
		}
		return i
	case '"':
		end, _ := s.str(i)
		return end
	}
	return s.scalar(i)
}

// scalar returns the index after the number or literal at i.
func (s *scanner) scalar(i int) int {
	for i < len(s.b) {
		switch s.b[i] {
		case ',', ']', '}', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// smallObject is how many keys an object may have before duplicate checks
// use a map instead of comparing with every earlier key.
const smallObject = 16

func (s *scanner) object(i, depth int, r role) int {
	var members *[]member
	switch {
	case r == roleMessage && depth == 0:
		members = s.top
	case r == roleParams:
		members = s.params
	}
	top := r == roleMessage && depth == 0
	fold := r == roleParams || r == roleArguments || top
	// The keys seen so far start in arrays on the stack: a request's
	// objects are small, and this runs for every one of them.
	var keysBuf, foldedBuf [8]string
	keys, folded := keysBuf[:0], foldedBuf[:0]
	var seen, seenFolded map[string]bool
	i = s.ws(i + 1)
	if i < len(s.b) && s.b[i] == '}' {
		return i + 1
	}
	for i < len(s.b) {
		i = s.ws(i)
		kStart := i
		kEnd, esc := s.str(i)
		k := s.peekKey(kStart, kEnd, esc)
		if s.err == nil && !s.noCheck {
			var twice, foldedTwice bool
			keys, seen, twice = dup(keys, seen, k)
			if !twice && fold {
				folded, seenFolded, foldedTwice = dup(folded, seenFolded, foldKey(k))
			}
			if twice {
				s.err = fmt.Errorf("%w: key %q appears twice", ErrAmbiguous, Printable(k))
			} else if foldedTwice {
				s.err = fmt.Errorf("%w: keys that differ only in case, among them %q", ErrAmbiguous, Printable(k))
			} else if (r == roleParams && misspelled(k, routedParams)) || (top && misspelled(k, messageMembers)) {
				s.err = fmt.Errorf("%w: key %q is read by case-insensitive decoders as a member viewmux routes on", ErrAmbiguous, Printable(k))
			}
		}
		i = s.ws(kEnd) + 1 // ':'
		vStart := s.ws(i)
		i = s.value(vStart, depth+1, childRole(r, k))
		if members != nil {
			if !esc {
				k = ownKey(s.b[kStart+1 : kEnd-1])
			}
			*members = append(*members, member{key: k, keyStart: kStart, valueStart: vStart, valueEnd: i})
		}
		i = s.ws(i)
		if i >= len(s.b) {
			return len(s.b)
		}
		if s.b[i] == '}' {
			return i + 1
		}
		i++ // ','
	}
	return i
}

// foldKey is the form under which case-insensitive decoders (Go's among
// them) consider two keys equal. An ASCII key folds to its lower case
// (without allocating when it has no upper case letter); any other byte
// takes the full Unicode round trip, where "K" (Kelvin) meets "k".
func foldKey(k string) string {
	upper := false
	for i := 0; i < len(k); i++ {
		switch c := k[i]; {
		case c >= utf8.RuneSelf:
			return strings.ToLower(strings.ToUpper(k))
		case 'A' <= c && c <= 'Z':
			upper = true
		}
	}
	if upper {
		return strings.ToLower(k)
	}
	return k
}

// routedParams are the params members viewmux reads, checks or rewrites;
// messageMembers are a message's own.
var (
	routedParams   = []string{"name", "arguments", "uri", "_meta"}
	messageMembers = []string{"jsonrpc", "id", "method", "params", "result", "error"}
)

// misspelled reports whether k is not one of names but folds to one.
// Alone, such a key (`"Arguments"`, `"Method"`) is no duplicate, yet
// viewmux would not see that member while a decoder that folds case (mcp-go
// inside viewmux, or an upstream) would: what is acted on would not be what
// was checked.
func misspelled(k string, names []string) bool {
	f := foldKey(k)
	for _, name := range names {
		if f == name && k != name {
			return true
		}
	}
	return false
}

// skip returns the index after the object or array at i without
// recursing (for values past maxDepth): it only counts brackets outside
// strings.
func (s *scanner) skip(i int) int {
	depth := 0
	for i < len(s.b) {
		switch s.b[i] {
		case '"':
			i = s.strEnd(i)
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
		i++
	}
	return len(s.b)
}

// dup records k among keys (or in seen, once there are more than
// smallObject) and reports whether it was there already.
func dup(keys []string, seen map[string]bool, k string) ([]string, map[string]bool, bool) {
	if seen != nil {
		if seen[k] {
			return keys, seen, true
		}
		seen[k] = true
		return keys, seen, false
	}
	for _, x := range keys {
		if x == k {
			return keys, seen, true
		}
	}
	keys = append(keys, k)
	if len(keys) > smallObject {
		seen = make(map[string]bool, 2*smallObject)
		for _, x := range keys {
			seen[x] = true
		}
	}
	return keys, seen, false
}

// members returns the members of the valid JSON object b (no checks).
func members(b []byte) []member { return appendMembers(nil, b) }

// appendMembers appends the members of the valid JSON object b to dst.
func appendMembers(dst []member, b []byte) []member {
	s := &scanner{b: b, noCheck: true, params: &dst}
	if i := s.ws(0); i < len(b) && b[i] == '{' {
		s.object(i, 0, roleParams)
	}
	return dst
}
