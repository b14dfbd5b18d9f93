package jsonrpc

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestCheckUnambiguous(t *testing.T) {
	tests := []struct {
		name, params string
		ambiguous    bool
	}{
		{"plain", `{"name":"run","arguments":{"command":"git status"}}`, false},
		{"case-folded argument keys", `{"name":"run","arguments":{"command":"git status","Command":"rm -rf /tmp/x"}}`, true},
		{"duplicate argument key", `{"name":"run","arguments":{"command":"git status","command":"rm -rf /tmp/x"}}`, true},
		{"duplicate name", `{"name":"run","name":"other","arguments":{}}`, true},
		{"case-folded params keys", `{"name":"run","Name":"other"}`, true},
		{"routed member spelled in another case, alone", `{"name":"run","Arguments":{"command":"rm -rf /"}}`, true},
		{"routed member through a fold, alone", "{\"name\":\"run\",\"argument\u017f\":{}}", true},
		{"Name alone", `{"Name":"run"}`, true},
		{"URI alone", `{"URI":"file:///etc/passwd"}`, true},
		{"_META alone", `{"name":"run","_META":{}}`, true},
		{"other members may use any case", `{"name":"run","Cursor":"x","ref":{"Name":"n"}}`, false},
		{"Kelvin sign folds to k", "{\"name\":\"run\",\"arguments\":{\"k\":1,\"\u212a\":2}}", true},
		{"duplicate key deep inside", `{"name":"run","arguments":{"a":{"b":[{"c":1,"c":2}]}}}`, true},
		{"case differs deep inside is fine", `{"name":"run","arguments":{"headers":{"Accept":"a","accept":"b"}}}`, false},
		{"same key in sibling objects", `{"arguments":{"a":{"x":1},"b":{"x":2}}}`, false},
		{"empty", ``, false},
		{"duplicate through an escape", `{"arguments":{"command":"a","\u0063ommand":"b"}}`, true},
		{"case fold through an escape", `{"arguments":{"command":"a","\u0043ommand":"b"}}`, true},
		{"big object without duplicates", `{"arguments":{` + manyKeys(40, false) + `}}`, false},
		{"big object with a late duplicate", `{"arguments":{` + manyKeys(40, true) + `}}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckUnambiguous(json.RawMessage(tt.params))
			if got := errors.Is(err, ErrAmbiguous); got != tt.ambiguous {
				t.Errorf("CheckUnambiguous(%s) = %v, want ambiguous=%v", tt.params, err, tt.ambiguous)
			}
		})
	}
}

func manyKeys(n int, dupLast bool) string {
	var parts []string
	for i := range n {
		parts = append(parts, fmt.Sprintf(`"k%d":%d`, i, i))
	}
	if dupLast {
		parts = append(parts, `"k3":0`)
	}
	return strings.Join(parts, ",")
}

func TestParseAmbiguous(t *testing.T) {
	for _, raw := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"tools/list","params":{}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"x":1,"X":2}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","Name":"b"}}`,
		`{"jsonrpc":"2.0","id":1,"Method":"initialize","params":{}}`,
		`{"jsonrpc":"2.0","id":1,"method":"resources/read","Params":{"uri":"x"}}`,
		`{"jsonrpc":"2.0","ID":1,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping","METHOD":"tools/call"}`,
		`{"jsonrpc":"2.0","id":1,"Result":{}}`,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"_meta":{},"_Meta":{}}}`,
	} {
		m, err := Parse([]byte(raw))
		if err != nil || !errors.Is(m.Ambiguous, ErrAmbiguous) {
			t.Errorf("Parse(%s): Ambiguous = %v, err %v", raw, m.Ambiguous, err)
		}
	}
	m, _ := Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"x":{"y":1},"z":{"y":2}},"_meta":{"X":1,"x":2}}}`))
	if m.Ambiguous != nil {
		t.Errorf("unambiguous message refused: %v", m.Ambiguous)
	}
}

// FuzzCheckUnambiguous compares the scanner with encoding/json's
// tokenizer on exact duplicate keys: they must agree on every valid input.
func FuzzCheckUnambiguous(f *testing.F) {
	for _, s := range []string{`{"a":1,"a":2}`, `{"a":{"b":[{"c":1},{"c":1,"c":2}]}}`, `{"arguments":{"x":"\u0078","\u0078":1}}`, `[1,{"a":1}]`, `"s"`, `{"a":"}\"{","b":[]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if !json.Valid([]byte(in)) {
			return
		}
		s := &scanner{b: []byte(in)}
		s.value(0, 0, roleOther)
		want := refDuplicate(t, in)
		if got := s.err != nil; got != want && !strings.Contains(fmt.Sprint(s.err), "nested deeper") {
			t.Errorf("scanner duplicate=%v (%v), encoding/json says %v, for %q", got, s.err, want, in)
		}
	})
}

// refDuplicate reports, with encoding/json's tokenizer, whether any object
// in the valid JSON in has a key twice.
func refDuplicate(t *testing.T, in string) bool {
	d := json.NewDecoder(strings.NewReader(in))
	d.UseNumber()
	var walk func() bool
	walk = func() bool {
		tok, err := d.Token()
		if err != nil {
			t.Fatalf("token: %v", err)
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			found := false
			for d.More() {
				k, _ := d.Token()
				if seen[k.(string)] {
					found = true
				}
				seen[k.(string)] = true
				if walk() {
					found = true
				}
			}
			d.Token()
			return found
		case json.Delim('['):
			found := false
			for d.More() {
				if walk() {
					found = true
				}
			}
			d.Token()
			return found
		}
		return false
	}
	return walk()
}

func TestCheckUnambiguousDepth(t *testing.T) {
	deep := `{"arguments":` + strings.Repeat(`[`, 100000) + strings.Repeat(`]`, 100000) + `}`
	if err := CheckUnambiguous(json.RawMessage(deep)); err == nil {
		t.Fatal("100,000 nested arrays accepted")
	}
}

func TestRewriteKeepsOtherBytes(t *testing.T) {
	params := json.RawMessage(`{"name":"gh__run","arguments":{"n":12345678901234567890,"s":"\u00e9"},"_meta":{"progressToken":7,"io.modelcontextprotocol/protocolVersion":"x","trace":"abc"}}`)
	out, err := Rewrite(params, map[string]any{"name": "run"}, func(k string, v json.RawMessage) json.RawMessage {
		switch k {
		case "io.modelcontextprotocol/protocolVersion":
			return nil
		case "progressToken":
			return json.RawMessage(`"viewmux-1"`)
		}
		return v
	})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Name      string                     `json:"name"`
		Arguments json.RawMessage            `json:"arguments"`
		Meta      map[string]json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if got.Name != "run" || string(got.Arguments) != `{"n":12345678901234567890,"s":"\u00e9"}` {
		t.Errorf("rewritten params = %s", out)
	}
	if string(got.Meta["progressToken"]) != `"viewmux-1"` || string(got.Meta["trace"]) != `"abc"` || len(got.Meta) != 2 {
		t.Errorf("_meta = %s", out)
	}
	// The kept members of _meta keep their bytes and order.
	if !strings.Contains(string(out), `"_meta":{"progressToken":"viewmux-1","trace":"abc"}`) {
		t.Errorf("_meta not kept in place: %s", out)
	}
	out, err = Rewrite(json.RawMessage(`{"name":"a","_meta":{"io.modelcontextprotocol/x":1}}`), nil,
		func(string, json.RawMessage) json.RawMessage { return nil })
	if err != nil || string(out) != `{"name":"a"}` {
		t.Errorf("empty _meta not removed: %s, %v", out, err)
	}
	if _, err := Rewrite(json.RawMessage(`[1]`), nil, nil); err == nil {
		t.Error("array params accepted")
	}
}

func TestParse(t *testing.T) {
	m, err := Parse([]byte(`{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"a","arguments":{"k":1},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`))
	if err != nil || !m.IsRequest() || m.Name != "a" || string(m.Arguments) != `{"k":1}` || m.MetaString("io.modelcontextprotocol/protocolVersion") != "2026-07-28" {
		t.Errorf("Parse = %+v, %v", m, err)
	}
	r, _ := Parse([]byte(`{"jsonrpc":"2.0","id":3,"result":{}}`))
	if !r.IsResponse() || r.IsRequest() {
		t.Errorf("response not recognised: %+v", r)
	}
	odd, _ := Parse([]byte(`{"jsonrpc":"2.0","id":1,"Method":"tools/call","params":{"Name":"a","Arguments":{"k":1}}}`))
	if odd.Method != "" || odd.Name != "" || odd.Arguments != nil {
		t.Errorf("keys matched case-insensitively: %+v", odd)
	}
	if _, err := Parse([]byte(`{`)); err == nil {
		t.Error("malformed JSON parsed")
	}
	if got := string(ErrorResponse(nil, &Error{Code: -32601, Message: "Tool not found: x"})); got != `{"jsonrpc":"2.0","id":null,"error":{"code":-32601,"message":"Tool not found: x"}}` {
		t.Errorf("ErrorResponse = %s", got)
	}
}

// TestParseDeep checks that nesting past maxDepth is refused as ambiguous
// without the spans running past the message (which once sliced out of
// range and panicked), and that Rewrite handles it.
func TestParseDeep(t *testing.T) {
	for _, n := range []int{maxDepth - 5, maxDepth + 5, 5000} {
		deep := strings.Repeat(`[`, n) + strings.Repeat(`]`, n)
		params := `{"name":"a","arguments":{"a":` + deep + `},"b":{"c":` + deep + `}}`
		raw := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":` + params + `}`)
		m, err := Parse(raw[:len(raw):len(raw)])
		if err != nil {
			t.Fatalf("depth %d: %v", n, err)
		}
		if string(m.Params) != params || m.Name != "a" {
			t.Fatalf("depth %d: params span wrong (%d bytes, want %d)", n, len(m.Params), len(params))
		}
		if tooDeep := n+3 > maxDepth; tooDeep != (m.Ambiguous != nil) {
			t.Errorf("depth %d: Ambiguous = %v", n, m.Ambiguous)
		}
		out, err := Rewrite(m.Params, map[string]any{"name": "b"}, nil)
		if err != nil || !json.Valid(out) {
			t.Fatalf("depth %d: Rewrite: %v (valid %v)", n, err, json.Valid(out))
		}
	}
}

// TestFoldKeyFastPath: the ASCII shortcut folds exactly as the Unicode
// round trip does.
func TestFoldKeyFastPath(t *testing.T) {
	for _, k := range []string{"name", "Name", "NAME", "progressToken", "_meta", "a1-B2_c3", "\u212aey", "ſcheme", "naïve", "NAÏVE", ""} {
		if got, want := foldKey(k), strings.ToLower(strings.ToUpper(k)); got != want {
			t.Errorf("foldKey(%q) = %q, want %q", k, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { foldKey("arguments") }); n != 0 {
		t.Errorf("foldKey of a lower-case ASCII key allocates %v times", n)
	}
}

// smallCall is a typical client request on the request path.
const smallCall = `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"up__tool_0001","arguments":{"query":"x","limit":5},"_meta":{"progressToken":"p-1"}}}`

// BenchmarkParseSmallCall measures the parse every client request gets:
// its allocations are paid on every call.
func BenchmarkParseSmallCall(b *testing.B) {
	raw := []byte(smallCall)
	b.ReportAllocs()
	for b.Loop() {
		m, err := Parse(raw)
		if err != nil || m.Name != "up__tool_0001" || m.MetaString("progressToken") != "p-1" {
			b.Fatalf("%+v, %v", m, err)
		}
	}
}

// BenchmarkRewriteSmallCall measures the rewrite of a call's params for
// its upstream hop: the name set, the _meta handed to the hop's function.
func BenchmarkRewriteSmallCall(b *testing.B) {
	m, err := Parse([]byte(smallCall))
	if err != nil {
		b.Fatal(err)
	}
	set := map[string]any{"name": "tool_0001"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Rewrite(m.Params, set, func(_ string, v json.RawMessage) json.RawMessage { return v }); err != nil {
			b.Fatal(err)
		}
	}
}
