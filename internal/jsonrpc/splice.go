package jsonrpc

import (
	"encoding/json"
	"errors"
	"slices"
)

// Member is one member of a JSON object to splice in: a key and its value,
// already encoded.
type Member struct {
	Key   string
	Value json.RawMessage
}

// ErrNotObject is returned, wrapped, by Splice for input that is not a JSON
// object, or whose _meta is not one.
var ErrNotObject = errors.New("not a JSON object")

// Splice returns obj, a JSON object, with only these changes:
//   - each member of set gets its value: in the place of the first member
//     of that key, or appended when obj has none;
//   - each member of add is appended when obj has no member of that key;
//   - when meta is non-empty, its members are set in obj's _meta object
//     (which is created when absent), replacing members of those keys.
//
// Every other byte of obj, the other members of its _meta included, is
// kept as it was, in its place. Keys are compared as decoders that fold
// case read them (Go's do): a "Name" beside "name" is the same member to
// them, so every member a changed key folds to is dropped but the one
// written, and no decoder can read the old value. Of several _meta
// members, the last (the one decoders keep) is the one merged into. It
// fails on input that is not valid JSON, not an object, or whose _meta is
// present and not an object (null counts as absent).
func Splice(obj json.RawMessage, set, add, meta []Member) (json.RawMessage, error) {
	if !json.Valid(obj) || obj[firstNonSpace(obj)] != '{' {
		return nil, ErrNotObject
	}
	ms := members(obj)
	changed := func(k string) (json.RawMessage, bool) {
		f := foldKey(k)
		for _, m := range set {
			if foldKey(m.Key) == f {
				return m.Value, true
			}
		}
		return nil, false
	}
	const metaKey = "_meta"
	var base json.RawMessage // the _meta object merged into
	if len(meta) > 0 {
		for _, f := range ms {
			if foldKey(f.key) == metaKey {
				base = obj[f.valueStart:f.valueEnd]
			}
		}
		if len(base) > 0 && string(base) != "null" && base[0] != '{' {
			return nil, errors.New("_meta: " + ErrNotObject.Error())
		}
	}
	out := make([]byte, 0, len(obj)+64)
	out = append(out, '{')
	sep := func() {
		if len(out) > 1 {
			out = append(out, ',')
		}
	}
	written := map[string]bool{}
	for _, f := range ms {
		fk := foldKey(f.key)
		if v, ok := changed(f.key); ok {
			if !written[fk] {
				sep()
				out = appendMember(out, keyOf(set, fk), v)
				written[fk] = true
			}
			continue
		}
		if len(meta) > 0 && fk == metaKey {
			if !written[fk] {
				sep()
				out = appendMember(out, metaKey, mergeMeta(base, meta))
				written[fk] = true
			}
			continue
		}
		sep()
		out = append(out, obj[f.keyStart:f.valueEnd]...)
	}
	for _, m := range set {
		if fk := foldKey(m.Key); !written[fk] {
			sep()
			out = appendMember(out, m.Key, m.Value)
			written[fk] = true
		}
	}
	for _, m := range add {
		fk := foldKey(m.Key)
		if written[fk] || slices.ContainsFunc(ms, func(f member) bool { return foldKey(f.key) == fk }) {
			continue
		}
		sep()
		out = appendMember(out, m.Key, m.Value)
		written[fk] = true
	}
	if len(meta) > 0 && !written[metaKey] {
		sep()
		out = appendMember(out, metaKey, mergeMeta(nil, meta))
	}
	return append(out, '}'), nil
}

// keyOf returns the key of the member of set that folds to fk.
func keyOf(set []Member, fk string) string {
	for _, m := range set {
		if foldKey(m.Key) == fk {
			return m.Key
		}
	}
	return fk
}

// mergeMeta returns the object base (nil or null = empty) with meta's
// members set: base's members of other keys keep their bytes and order,
// meta's follow.
func mergeMeta(base json.RawMessage, meta []Member) json.RawMessage {
	out := []byte{'{'}
	if len(base) > 0 && base[0] == '{' {
		for _, f := range members(base) {
			fk := foldKey(f.key)
			if slices.ContainsFunc(meta, func(m Member) bool { return foldKey(m.Key) == fk }) {
				continue
			}
			if len(out) > 1 {
				out = append(out, ',')
			}
			out = append(out, base[f.keyStart:f.valueEnd]...)
		}
	}
	for _, m := range meta {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = appendMember(out, m.Key, m.Value)
	}
	return append(out, '}')
}

// Edit returns the valid JSON object obj with each top-level member passed
// through fn, which returns the member's new value, or nil to drop the
// member, followed by the members of add. Every other byte of obj is kept
// as it was, in its place, and the members' values are crossed, not
// decoded: it is for a result of many megabytes, already validated (see
// ParseUpstream), whose envelope alone changes. obj that is not an object
// is returned as it is.
func Edit(obj []byte, fn func(key string, value []byte) []byte, add ...Member) []byte {
	return AppendEdit(make([]byte, 0, len(obj)+64), obj, fn, add...)
}

// AppendEdit is Edit appending the edited object to dst (which should
// have room for it), for a caller that brings its own buffer. obj that is
// not an object is returned as it is.
func AppendEdit(dst, obj []byte, fn func(key string, value []byte) []byte, add ...Member) []byte {
	s := &scanner{b: obj, noCheck: true}
	i := s.ws(0)
	if i >= len(obj) || obj[i] != '{' {
		return obj
	}
	start := len(dst)
	out := append(dst, '{')
	sep := func() {
		if len(out) > start+1 {
			out = append(out, ',')
		}
	}
	for i = s.ws(i + 1); i < len(obj) && obj[i] == '"'; {
		end, esc := s.str(i)
		vs := s.ws(s.ws(end) + 1) // past ':'
		ve := s.skipValue(vs)
		switch v := fn(s.key(i, end, esc), obj[vs:ve]); {
		case len(v) == 0:
		case len(v) == ve-vs && &v[0] == &obj[vs]: // unchanged: as it was
			sep()
			out = append(out, obj[i:ve]...)
		default:
			sep()
			out = append(append(append(out, obj[i:end]...), ':'), v...)
		}
		if i = s.ws(ve); i < len(obj) && obj[i] == ',' {
			i = s.ws(i + 1)
		}
	}
	for _, m := range add {
		sep()
		out = appendMember(out, m.Key, m.Value)
	}
	return append(out, '}')
}

// Without returns obj, a JSON object, without its members whose key is
// one of keys (compared exactly); every other member keeps its bytes and
// order. It fails on input that is not a valid JSON object.
func Without(obj json.RawMessage, keys []string) (json.RawMessage, error) {
	if !json.Valid(obj) || obj[firstNonSpace(obj)] != '{' {
		return nil, ErrNotObject
	}
	return Edit(obj, func(k string, v []byte) []byte {
		if slices.Contains(keys, k) {
			return nil
		}
		return v
	}), nil
}

// Keys returns the keys of obj's members, in order, as decoded (escapes
// resolved). It fails on input that is not a valid JSON object.
func Keys(obj json.RawMessage) ([]string, error) {
	if !json.Valid(obj) || obj[firstNonSpace(obj)] != '{' {
		return nil, ErrNotObject
	}
	ms := members(obj)
	keys := make([]string, len(ms))
	for i, f := range ms {
		keys[i] = f.key
	}
	return keys, nil
}

// FoldEqual reports whether decoders that match keys without regard to
// case (Go's do) take a and b for the same key.
func FoldEqual(a, b string) bool { return foldKey(a) == foldKey(b) }
