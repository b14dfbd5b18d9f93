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
}

// Parse decodes raw. A message that is not valid JSON returns an error; a
// message whose params are not the shape a method expects keeps its raw
// params and leaves the derived fields zero.
//
// Keys match exactly. encoding/json would also match "Method" or
// "Arguments"; a field the decision read under another spelling than the
// upstream reads would break "what is checked is what is forwarded".
func Parse(raw []byte) (*Message, error) {
	m := &Message{}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return m, err
	}
	m.ID, m.Params, m.Result, m.Error = top["id"], top["params"], top["result"], top["error"]
	if err := str(top["jsonrpc"], &m.JSONRPC); err != nil {
		return m, err
	}
	if err := str(top["method"], &m.Method); err != nil {
		return m, err
	}
	if len(m.Params) == 0 || m.Params[0] != '{' {
		return m, nil
	}
	var p map[string]json.RawMessage
	if json.Unmarshal(m.Params, &p) != nil {
		return m, nil
	}
	str(p["name"], &m.Name)
	str(p["uri"], &m.URI)
	m.Arguments = p["arguments"]
	if c, ok := p["cursor"]; ok {
		var cur string
		if str(c, &cur) == nil && string(c) != "null" {
			m.Cursor = &cur
		}
	}
	if raw, ok := p["_meta"]; ok {
		json.Unmarshal(raw, &m.Meta)
	}
	return m, nil
}

// str decodes a JSON string into dst; absent or null leaves it "".
func str(raw json.RawMessage, dst *string) error {
	if len(raw) == 0 || string(raw) == "null" {
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
// (decoders such as Go's match field names case-insensitively).
func CheckUnambiguous(params json.RawMessage) error {
	if len(params) == 0 {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(params))
	d.UseNumber()
	return checkValue(d, 0, true)
}

// maxDepth bounds the nesting CheckUnambiguous follows; deeper input is
// refused rather than recursed into.
const maxDepth = 512

func checkValue(d *json.Decoder, depth int, fold bool) error {
	if depth > maxDepth {
		return fmt.Errorf("%w: nested deeper than %d levels", ErrAmbiguous, maxDepth)
	}
	tok, err := d.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		seen := make(map[string]bool)
		var folded map[string]string
		if fold {
			folded = make(map[string]string)
		}
		for d.More() {
			kt, err := d.Token()
			if err != nil {
				return err
			}
			k := kt.(string)
			if seen[k] {
				return fmt.Errorf("%w: key %q appears twice", ErrAmbiguous, Printable(k))
			}
			seen[k] = true
			if fold {
				f := strings.ToLower(strings.ToUpper(k))
				if other, ok := folded[f]; ok {
					return fmt.Errorf("%w: keys %q and %q differ only in case", ErrAmbiguous, Printable(other), Printable(k))
				}
				folded[f] = k
			}
			// Case folding matters in params and in its arguments, the
			// objects upstream decoders bind to fields.
			if err := checkValue(d, depth+1, fold && depth == 0 && k == "arguments"); err != nil {
				return err
			}
		}
		_, err := d.Token() // '}'
		return err
	case json.Delim('['):
		for d.More() {
			if err := checkValue(d, depth+1, false); err != nil {
				return err
			}
		}
		_, err := d.Token() // ']'
		return err
	}
	return nil
}

// Rewrite returns params (a JSON object) with the listed fields replaced
// and, when meta is non-nil, its _meta object passed through meta (a nil
// or empty result removes _meta). Every other field keeps its bytes.
func Rewrite(params json.RawMessage, set map[string]any, meta func(map[string]json.RawMessage) map[string]json.RawMessage) (json.RawMessage, error) {
	fields := map[string]json.RawMessage{}
	if len(params) > 0 && string(params) != "null" {
		if err := json.Unmarshal(params, &fields); err != nil {
			return nil, fmt.Errorf("params are not a JSON object: %w", err)
		}
	}
	for k, v := range set {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		fields[k] = b
	}
	if meta != nil {
		m := map[string]json.RawMessage{}
		if raw, ok := fields["_meta"]; ok && string(raw) != "null" {
			if err := json.Unmarshal(raw, &m); err != nil {
				return nil, fmt.Errorf("_meta is not a JSON object: %w", err)
			}
		}
		m = meta(m)
		if len(m) == 0 {
			delete(fields, "_meta")
		} else {
			b, err := json.Marshal(m)
			if err != nil {
				return nil, err
			}
			fields["_meta"] = b
		}
	}
	return json.Marshal(fields)
}

// Response encodes a result answer to id.
func Response(id, result json.RawMessage) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b := make([]byte, 0, len(id)+len(result)+40)
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, id...)
	b = append(b, `,"result":`...)
	b = append(b, result...)
	return append(b, '}')
}

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
