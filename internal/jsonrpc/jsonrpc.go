// Package jsonrpc is mcpmux's JSON-RPC message engine: a message is parsed
// once into Message, checked for ambiguity, and rewritten field by field
// (a name, the hop's _meta) while every other byte of it is kept, so that
// what mcpmux checked is exactly what it forwards.
package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Version is the JSON-RPC version string.
const Version = "2.0"

// Message is one JSON-RPC message as mcpmux reads it: the envelope decoded,
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
	var top, params []member
	s := &scanner{b: raw, top: &top, params: &params}
	i := s.ws(0)
	if raw[i] != '{' {
		return m, errors.New("not a JSON-RPC message object")
	}
	s.object(i, 0, roleMessage)
	m.Ambiguous = s.err
	for _, f := range top {
		v := raw[f.valueStart:f.valueEnd]
		switch f.key {
		case "jsonrpc":
			str(v, &m.JSONRPC)
		case "id":
			m.ID = v
		case "method":
			str(v, &m.Method)
		case "params":
			m.Params = v
		case "result":
			m.Result = v
		case "error":
			m.Error = v
		}
	}
	for _, f := range params {
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
			json.Unmarshal(v, &m.Meta)
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

// MetaString returns the string value of a _meta key, or "".
func (m *Message) MetaString(key string) string {
	var s string
	if raw, ok := m.Meta[key]; ok {
		json.Unmarshal(raw, &s)
	}
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
// and, when meta is non-nil, its _meta object passed through meta (a nil
// or empty result removes _meta). Every other member keeps its bytes,
// spliced over without being decoded.
func Rewrite(params json.RawMessage, set map[string]any, meta func(map[string]json.RawMessage) map[string]json.RawMessage) (json.RawMessage, error) {
	var ms []member
	if len(params) > 0 && string(params) != "null" {
		if !json.Valid(params) || params[firstNonSpace(params)] != '{' {
			return nil, errors.New("params are not a JSON object")
		}
		ms = members(params)
	}
	out := make([]byte, 0, len(params)+128)
	out = append(out, '{')
	sep := func() {
		if len(out) > 1 {
			out = append(out, ',')
		}
	}
	var metaRaw json.RawMessage
	for _, f := range ms {
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
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v, err := json.Marshal(set[k])
		if err != nil {
			return nil, err
		}
		sep()
		out = appendMember(out, k, v)
	}
	if meta != nil {
		m := map[string]json.RawMessage{}
		if len(metaRaw) > 0 && string(metaRaw) != "null" {
			if err := json.Unmarshal(metaRaw, &m); err != nil {
				return nil, fmt.Errorf("_meta is not a JSON object: %w", err)
			}
		}
		if m = meta(m); len(m) > 0 {
			b, err := json.Marshal(m)
			if err != nil {
				return nil, err
			}
			sep()
			out = appendMember(out, "_meta", b)
		}
	}
	return append(out, '}'), nil
}

func appendMember(out []byte, k string, v []byte) []byte {
	kb, _ := json.Marshal(k)
	out = append(out, kb...)
	out = append(out, ':')
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
