// Package jsonrpc is viewmux's JSON-RPC message engine: a message is parsed
// once into Message, checked for ambiguity, and rewritten field by field
// (a name, the hop's _meta) while every other byte of it is kept, so that
// what viewmux checked is exactly what it forwards.
package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Version is the JSON-RPC version string.
const Version = "2.0"

// Message is one JSON-RPC message as viewmux reads it: the envelope decoded,
// params kept raw, and the params fields the request path routes on
// decoded from those same bytes.
type Message struct {
	JSONRPC string
	ID      json.RawMessage
	Method  string
	Params  json.RawMessage
	Result  json.RawMessage
	Error   json.RawMessage

	// Fields of Params (zero when absent or when params is not an object).
	Name      string          // tools/call, prompts/get
	URI       string          // resources/read, subscribe, unsubscribe
	Arguments json.RawMessage // tools/call
	Cursor    *string         // */list
	Meta      map[string]json.RawMessage

	// Ambiguous is set when some object in the message holds a key twice,
	// or params or params.arguments hold two keys equal under Unicode case
	// folding: decoders would disagree on what the message says.
	Ambiguous error
}

// Parse decodes raw in one pass. A message that is not valid JSON returns
// an error; a message whose params are not the shape a method expects
// keeps its raw params and leaves the derived fields zero.
//
// Keys match exactly. encoding/json would also match "Method" or
// "Arguments"; a field the decision read under another spelling than the
// upstream reads would break "what is checked is what is forwarded".
func Parse(raw []byte) (*Message, error) {
	m := &Message{}
	if !json.Valid(raw) {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return m, err
		}
		return m, errors.New("invalid JSON")
	}
	sc := getScratch()
	defer putScratch(sc)
	s := &scanner{b: raw, top: &sc.top, params: &sc.params}
	i := s.ws(0)
	if raw[i] != '{' {
		return m, errors.New("not a JSON-RPC message object")
	}
	s.object(i, 0, roleMessage)
	m.Ambiguous = s.err
	for _, f := range sc.top {
		v := raw[f.valueStart:f.valueEnd]
		switch f.key {
		case "jsonrpc":
			if string(v) == `"`+Version+`"` {
				m.JSONRPC = Version
			} else {
				str(v, &m.JSONRPC)
			}
		case "id":
			m.ID = v
		case "method":
			if k := knownMethod(v); k != "" {
				m.Method = k
			} else {
				str(v, &m.Method)
			}
		case "params":
			m.Params = v
		case "result":
			m.Result = v
		case "error":
			m.Error = v
		}
	}
	for _, f := range sc.params {
		v := raw[f.valueStart:f.valueEnd]
		switch f.key {
		case "name":
			str(v, &m.Name)
		case "uri":
			str(v, &m.URI)
		case "arguments":
			m.Arguments = v
		case "cursor":
			var cur string
			if string(v) != "null" && str(v, &cur) == nil {
				m.Cursor = &cur
			}
		case "_meta":
			m.Meta = metaOf(v)
		}
	}
	return m, nil
}

// str decodes a JSON string into dst; null leaves it "". Another type is an
// error and leaves dst alone.
func str(raw json.RawMessage, dst *string) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if len(raw) >= 2 && raw[0] == '"' && !bytes.ContainsRune(raw, '\\') {
		*dst = string(raw[1 : len(raw)-1])
		return nil
	}
	return json.Unmarshal(raw, dst)
}

// IsRequest reports whether m has a (non-null) id and a method.
func (m *Message) IsRequest() bool { return m.Method != "" && m.HasID() }

// HasID reports whether m carries a non-null id.
func (m *Message) HasID() bool { return len(m.ID) > 0 && string(m.ID) != "null" }

// IsResponse reports whether m answers a request (an id, no method, and a
// result or an error).
func (m *Message) IsResponse() bool {
	return m.Method == "" && m.HasID() && (len(m.Result) > 0 || len(m.Error) > 0)
}

// metaOf reads params._meta, valid JSON, as encoding/json would into a
// map (the last of a key twice wins; anything but an object is no _meta),
// its values sharing v's bytes.
func metaOf(v []byte) map[string]json.RawMessage {
	if len(v) == 0 || v[0] != '{' {
		return nil
	}
	sc := getScratch()
	defer putScratch(sc)
	sc.params = appendMembers(sc.params, v)
	meta := make(map[string]json.RawMessage, len(sc.params))
	for _, f := range sc.params {
		meta[f.key] = v[f.valueStart:f.valueEnd:f.valueEnd]
	}
	return meta
}

// scratch holds the member lists of one parse. Every request is parsed,
// so they are pooled rather than allocated each time.
type scratch struct{ top, params []member }

var scratchPool = sync.Pool{New: func() any {
	return &scratch{top: make([]member, 0, 8), params: make([]member, 0, 8)}
}}

func getScratch() *scratch { return scratchPool.Get().(*scratch) }

// putScratch gives sc back, emptied (its keys are not kept alive).
func putScratch(sc *scratch) {
	if cap(sc.top) > 64 || cap(sc.params) > 64 {
		return // an object of many members: let it go
	}
	clear(sc.top)
	clear(sc.params)
	sc.top, sc.params = sc.top[:0], sc.params[:0]
	scratchPool.Put(sc)
}

// knownMethod returns the method named by the JSON string v when it is one
// of those every session sends (a shared string, no allocation), else "".
func knownMethod(v []byte) string {
	if len(v) < 2 || v[0] != '"' {
		return ""
	}
	switch string(v[1 : len(v)-1]) {
	case "tools/call":
		return "tools/call"
	case "tools/list":
		return "tools/list"
	case "resources/read":
		return "resources/read"
	case "resources/list":
		return "resources/list"
	case "resources/templates/list":
		return "resources/templates/list"
	case "prompts/get":
		return "prompts/get"
	case "prompts/list":
		return "prompts/list"
	case "ping":
		return "ping"
	case "initialize":
		return "initialize"
	case "notifications/initialized":
		return "notifications/initialized"
	case "notifications/progress":
		return "notifications/progress"
	case "notifications/message":
		return "notifications/message"
	case "notifications/cancelled":
		return "notifications/cancelled"
	case "completion/complete":
		return "completion/complete"
	}
	return ""
}

// MetaString returns the string value of a _meta key, or "".
func (m *Message) MetaString(key string) string {
	raw, ok := m.Meta[key]
	if !ok {
		return ""
	}
	if len(raw) >= 2 && raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1])
	}
	var s string
	json.Unmarshal(raw, &s)
	return s
}

// ErrAmbiguous is returned by CheckUnambiguous.
var ErrAmbiguous = errors.New("ambiguous message")

// CheckUnambiguous refuses params that different decoders would read
// differently: an object anywhere in them with the same key twice (one
// decoder keeps the first, another the last), or, in params itself and in
// its "arguments" object, two keys equal under Unicode case folding
// (decoders such as Go's match field names case-insensitively). Parse
// makes the same check on a whole message (Message.Ambiguous).
func CheckUnambiguous(params json.RawMessage) error {
	if len(params) == 0 {
		return nil
	}
	if !json.Valid(params) {
		return errors.New("params are not valid JSON")
	}
	s := &scanner{b: params}
	s.value(0, 0, roleParams)
	return s.err
}

// maxDepth bounds the nesting the checks follow; deeper input is refused
// as ambiguous rather than recursed into.
const maxDepth = 512

// Rewrite returns params (a JSON object) with the listed fields replaced
// and, when meta is non-nil, each member of its _meta object passed
// through meta, which returns the member's new value, or nil to drop it
// (a _meta left empty is removed). Every other member, and every kept
// member of _meta, keeps its bytes and its place, spliced over without
// being decoded.
func Rewrite(params json.RawMessage, set map[string]any, meta func(key string, value json.RawMessage) json.RawMessage) (json.RawMessage, error) {
	sc := getScratch()
	defer putScratch(sc)
	if len(params) > 0 && string(params) != "null" {
		if !json.Valid(params) || params[firstNonSpace(params)] != '{' {
			return nil, errors.New("params are not a JSON object")
		}
		sc.params = appendMembers(sc.params, params)
	}
	out := make([]byte, 0, len(params)+128)
	out = append(out, '{')
	sep := func() {
		if len(out) > 1 {
			out = append(out, ',')
		}
	}
	var metaRaw json.RawMessage
	for _, f := range sc.params {
		if _, replaced := set[f.key]; replaced {
			continue
		}
		if f.key == "_meta" && meta != nil {
			metaRaw = params[f.valueStart:f.valueEnd]
			continue
		}
		sep()
		out = append(out, params[f.keyStart:f.valueEnd]...)
	}
	appendSet := func(k string, v any) error {
		sep()
		var err error
		out, err = appendValue(append(appendString(out, k), ':'), v)
		return err
	}
	if len(set) == 1 {
		for k, v := range set {
			if err := appendSet(k, v); err != nil {
				return nil, err
			}
		}
	} else if len(set) > 1 {
		keys := make([]string, 0, len(set))
		for k := range set {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if err := appendSet(k, set[k]); err != nil {
				return nil, err
			}
		}
	}
	if len(metaRaw) > 0 && string(metaRaw) != "null" {
		if metaRaw[0] != '{' {
			return nil, errors.New("_meta is not a JSON object")
		}
		mark := len(out)
		sep()
		out = append(out, `"_meta":`...)
		edited := len(out)
		out = AppendEdit(out, metaRaw, func(k string, v []byte) []byte { return meta(k, v) })
		if string(out[edited:]) == "{}" {
			out = out[:mark]
		}
	}
	return append(out, '}'), nil
}

// appendValue appends the JSON encoding of v: a plain string directly,
// anything else through encoding/json.
func appendValue(out []byte, v any) ([]byte, error) {
	if s, ok := v.(string); ok {
		return appendString(out, s), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(out, b...), nil
}

// appendString appends s as a JSON string, as encoding/json writes it: a
// string of printable ASCII that needs no escape is copied between quotes.
func appendString(out []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(out, q...)
		}
	}
	out = append(out, '"')
	out = append(out, s...)
	return append(out, '"')
}

func appendMember(out []byte, k string, v []byte) []byte {
	out = append(appendString(out, k), ':')
	return append(out, v...)
}

func firstNonSpace(b []byte) int {
	for i, c := range b {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return i
		}
	}
	return 0
}

// Response encodes a result answer to id in one slice (ResponseFrame
// leaves the result where it is).
func Response(id, result json.RawMessage) []byte { return ResponseFrame(id, result).Bytes() }

// Error is a JSON-RPC error object.
type Error struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("JSON-RPC error %d: %s", e.Code, e.Message) }

// ErrorResponse encodes an error answer to id (null when id is empty).
func ErrorResponse(id json.RawMessage, e *Error) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	body, err := json.Marshal(e)
	if err != nil { // only a Data that is not JSON
		body, _ = json.Marshal(&Error{Code: e.Code, Message: e.Message})
	}
	b := make([]byte, 0, len(id)+len(body)+40)
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, id...)
	b = append(b, `,"error":`...)
	b = append(b, body...)
	return append(b, '}')
}

// Request encodes a request.
func Request(id json.RawMessage, method string, params any) ([]byte, error) {
	return json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  string          `json:"method"`
		Params  any             `json:"params,omitempty"`
	}{Version, id, method, params})
}

// Notification encodes a notification.
func Notification(method string, params any) ([]byte, error) {
	return json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		Method  string `json:"method"`
		Params  any    `json:"params,omitempty"`
	}{Version, method, params})
}

// StringID returns a JSON string id.
func StringID(s string) json.RawMessage { return json.RawMessage(strconv.Quote(s)) }

// maxPrintable bounds how much of a client-supplied string is echoed.
const maxPrintable = 128

// Printable renders a client-supplied string for an error message: every
// rune that is not printable (control, format such as zero-width space or
// bidi marks, invalid UTF-8) becomes '?', and it is cut to 128 bytes on a
// rune boundary.
func Printable(s string) string {
	var b strings.Builder
	for _, r := range s {
		if !unicode.IsPrint(r) || r == utf8.RuneError {
			r = '?'
		}
		if b.Len()+utf8.RuneLen(r) > maxPrintable {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}
