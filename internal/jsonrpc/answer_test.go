package jsonrpc

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

var validCases = []string{
	`{}`, `[]`, `""`, `0`, `-0`, `1.5e+10`, `-12.25E-3`, `true`, `false`, `null`,
	` {"a" : [1, 2, {"b": "c\"d\\e\/\u00e9\n"}], "x": null} `,
	`{"a":"\ud83d\ude00"}`, `"tab\tin"`, "\"raw\ttab\"", "\"ctl\x01\"", `01`, `1.`, `.5`, `-`, `1e`, `1e+`,
	`{"a":1,}`, `[1,]`, `{"a" 1}`, `{a:1}`, `"\x"`, `"\u12g4"`, `tru`, `nul`, `{"a":1}x`, `[`, `{"a":`, `"abc`,
	`"a\`, `"\u12`, "\"é\"", "\"\xff\"", `[[[[]]]]`, `{"a":{"b":{"c":[true,false,null]}}}`,
}

// TestValidMatchesEncodingJSON: Valid accepts exactly what
// encoding/json.Valid accepts.
func TestValidMatchesEncodingJSON(t *testing.T) {
	for _, c := range validCases {
		if got, want := Valid([]byte(c)) == nil, json.Valid([]byte(c)); got != want {
			t.Errorf("Valid(%q) = %v, encoding/json says %v", c, got, want)
		}
	}
	deep := strings.Repeat("[", maxValidDepth+1) + strings.Repeat("]", maxValidDepth+1)
	if Valid([]byte(deep)) == nil {
		t.Error("nesting past maxValidDepth was accepted")
	}
}

func FuzzValid(f *testing.F) {
	for _, c := range validCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b) == nil, json.Valid(b); got != want && !(want && bytes.Count(b, []byte("[")) > maxValidDepth) {
			t.Fatalf("Valid(%q) = %v, encoding/json says %v", b, got, want)
		}
	})
}

// TestParseUpstream: a response's envelope is read without looking into
// its result; a request is parsed in full; a key twice in the envelope is
// ambiguous; what is not JSON is refused.
func TestParseUpstream(t *testing.T) {
	big := `{"content":[{"type":"text","text":"` + strings.Repeat(`x\"}`, 1000) + `"}],"isError":true}`
	m, err := ParseUpstream([]byte(`{"jsonrpc":"2.0","id":"mcpmux-7","result":` + big + `}`))
	if err != nil || m.JSONRPC != "2.0" || string(m.ID) != `"mcpmux-7"` || string(m.Result) != big || m.Ambiguous != nil {
		t.Fatalf("response: %+v, %v", m, err)
	}
	if got := string(Lookup(m.Result, "isError")); got != "true" {
		t.Fatalf("Lookup(isError) = %q", got)
	}
	if got := Lookup(m.Result, "text"); got != nil {
		t.Fatalf("Lookup found a nested key: %q", got)
	}
	m, err = ParseUpstream([]byte(`{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"m"}}`))
	if err != nil || string(m.Error) != `{"code":-1,"message":"m"}` || !m.IsResponse() {
		t.Fatalf("error response: %+v, %v", m, err)
	}
	m, err = ParseUpstream([]byte(`{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{"a":1,"a":2}}`))
	if err != nil || m.Method != "sampling/createMessage" || m.Ambiguous == nil {
		t.Fatalf("request: %+v, %v", m, err)
	}
	m, err = ParseUpstream([]byte(`{"jsonrpc":"2.0","id":1,"result":{},"id":2}`))
	if err != nil || m.Ambiguous == nil {
		t.Fatalf("id twice: %+v, %v", m, err)
	}
	if _, err := ParseUpstream([]byte(`{"jsonrpc":"2.0","id":1,"result":{"a":"b}` + "\n" + `{"jsonrpc":"2.0","id":2,"result":{}}`)); err == nil {
		t.Fatal("a result that is not JSON was accepted")
	}
}

func BenchmarkParseUpstream(b *testing.B) {
	raw := []byte(`{"jsonrpc":"2.0","id":"mcpmux-7","result":{"content":[{"type":"text","text":"` + strings.Repeat("lorem ipsum ", 1<<20/12) + `"}]}}`)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := ParseUpstream(raw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseLarge(b *testing.B) {
	raw := []byte(`{"jsonrpc":"2.0","id":"mcpmux-7","result":{"content":[{"type":"text","text":"` + strings.Repeat("lorem ipsum ", 1<<20/12) + `"}]}}`)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := Parse(raw); err != nil {
			b.Fatal(err)
		}
	}
}
