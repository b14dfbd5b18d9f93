package jsonrpc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
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
		// The same bytes inside a long string, across the end of the
		// first block str looks at.
		in := acrossBlock(len(b)%9, b)
		if got, want := Valid(in) == nil, json.Valid(in); got != want && !(want && bytes.Count(in, []byte("[")) > maxValidDepth) {
			t.Fatalf("Valid(%q…%q) = %v, encoding/json says %v", in[:8], in[strBlock-16:], got, want)
		}
	})
}

// acrossBlock returns a JSON string's opening quote and plain bytes up to
// k bytes before the end of str's first block, followed by tail.
func acrossBlock(k int, tail []byte) []byte {
	in := append([]byte{'"'}, bytes.Repeat([]byte("x"), strBlock-k)...)
	return append(in, tail...)
}

// TestValidAcrossBlocks: a string longer than one block of str is checked
// as a whole: a quote, an escape or a control character just before, on
// or just after a block's end is where encoding/json finds it.
func TestValidAcrossBlocks(t *testing.T) {
	tails := []string{`"`, `\"`, `\\\"`, `\\"`, `\u0041"`, `\u00"`, `\x"`, "\x01\"", `ab"`, `\`, ``, `"x`, `",1`}
	for k := 0; k <= 8; k++ {
		for _, tail := range tails {
			for _, in := range [][]byte{
				acrossBlock(k, []byte(tail)),
				append([]byte(`{"a":[`), append(acrossBlock(k, []byte(tail)), `]}`...)...),
				acrossBlock(k-strBlock, []byte(tail)), // the second block's end
			} {
				if got, want := Valid(in) == nil, json.Valid(in); got != want {
					t.Errorf("k=%d tail %q (%d bytes): Valid = %v, encoding/json says %v", k, tail, len(in), got, want)
				}
			}
		}
	}
}

// TestParseUpstream: a response's envelope is read without looking into
// its result; a request is parsed in full; a key twice in the envelope is
// ambiguous; what is not JSON is refused.
func TestParseUpstream(t *testing.T) {
	big := `{"content":[{"type":"text","text":"` + strings.Repeat(`x\"}`, 1000) + `"}],"isError":true}`
	m, err := ParseUpstream([]byte(`{"jsonrpc":"2.0","id":"viewmux-7","result":` + big + `}`))
	if err != nil || m.JSONRPC != "2.0" || string(m.ID) != `"viewmux-7"` || string(m.Result) != big || m.Ambiguous != nil {
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
	raw := []byte(`{"jsonrpc":"2.0","id":"viewmux-7","result":{"content":[{"type":"text","text":"` + strings.Repeat("lorem ipsum ", 1<<20/12) + `"}]}}`)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := ParseUpstream(raw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseLarge(b *testing.B) {
	raw := []byte(`{"jsonrpc":"2.0","id":"viewmux-7","result":{"content":[{"type":"text","text":"` + strings.Repeat("lorem ipsum ", 1<<20/12) + `"}]}}`)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := Parse(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// TestFieldsCrossesEscapes: the one-pass string skip ends a string at the
// first quote after an even run of backslashes, and nowhere else, so a
// text holding `\"`, `\\` and `\\\"` cannot hide or forge a member.
func TestFieldsCrossesEscapes(t *testing.T) {
	texts := []string{`a\"b`, `a\\`, `a\\\"b`, `\\\\`, `\"\"\"`, `x\\\\\"y\\`, `"isError":true,"x":"`}
	for _, text := range texts {
		obj := map[string]any{"content": []any{map[string]any{"type": "text", "text": text}}, "isError": true}
		raw, _ := json.Marshal(obj)
		if err := Valid(raw); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		f := Fields(raw, "content", "isError")
		if string(f[1]) != "true" {
			t.Errorf("%s: isError = %q", raw, f[1])
		}
		var back []any
		if err := json.Unmarshal(f[0], &back); err != nil {
			t.Errorf("%s: content %q is not the whole array: %v", raw, f[0], err)
		}
		var n int
		Elements(f[0], func([]byte) { n++ })
		if n != 1 {
			t.Errorf("%s: %d content items, want 1", raw, n)
		}
	}
}

// FuzzFields: for any valid object, Fields finds exactly the top-level
// members encoding/json decodes.
func FuzzFields(f *testing.F) {
	f.Add([]byte(`{"a":"x\\\"y","b":[1,{"a":2}],"c":"\\\\"}`))
	f.Add([]byte(`{"a":{"b":"}"},"b":"\""}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var want map[string]json.RawMessage
		if !utf8.Valid(b) || json.Unmarshal(b, &want) != nil || len(want) == 0 {
			return // encoding/json rewrites keys that are not UTF-8
		}
		for k, v := range want {
			got := Fields(b, k)[0]
			if !bytes.Equal(bytes.TrimSpace(got), bytes.TrimSpace(v)) && !hasDupKey(b, k) {
				t.Fatalf("Fields(%q, %q) = %q, encoding/json: %q", b, k, got, v)
			}
		}
	})
}

// FuzzElementFields: ElementFields finds, in each object element, what
// Fields finds in it, element by element as Elements gives them.
func FuzzElementFields(f *testing.F) {
	f.Add([]byte(`[{"type":"text","text":"a\\\"}"},1,"x",{"uri":"u","type":"resource_link"},[{"type":"no"}],{}]`), "type", "uri")
	f.Add([]byte(`[{"a":{"type":"x"},"type":"y"}, {"type":"z","type":"w"}]`), "type", "a")
	f.Fuzz(func(t *testing.T, b []byte, k1, k2 string) {
		if !json.Valid(b) {
			return
		}
		keys := []string{k1, k2}
		var want []string
		Elements(b, func(elem []byte) {
			if elem[0] == '{' {
				want = append(want, fmt.Sprintf("%q", Fields(elem, keys...)))
			}
		})
		var got []string
		ElementFields(b, keys, func(f [][]byte) { got = append(got, fmt.Sprintf("%q", f)) })
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("ElementFields(%q, %q) = %v, Elements and Fields: %v", b, keys, got, want)
		}
	})
}

// hasDupKey reports whether key appears more than once in b's text (the
// first and the last of two differ by design: Fields takes the first).
func hasDupKey(b []byte, key string) bool {
	k, _ := json.Marshal(key)
	return bytes.Count(b, k) > 1 || strings.Contains(string(b), `\u`)
}

// TestOneLine: line breaks become spaces, the message means the same, and
// a message without any is returned as it is.
func TestOneLine(t *testing.T) {
	in := []byte("{\"a\":[\r\n{\"b\":\"x\\ny\"}\n],\r\"c\":1}")
	out := OneLine(in)
	if bytes.ContainsAny(out, "\r\n") {
		t.Fatalf("OneLine left a line break: %q", out)
	}
	var a, b any
	if json.Unmarshal(in, &a) != nil || json.Unmarshal(out, &b) != nil || fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("OneLine changed the message: %q → %q", in, out)
	}
	if !bytes.Contains(in, []byte("\n")) {
		t.Fatal("OneLine changed its input")
	}
	plain := []byte(`{"a":1}`)
	if got := OneLine(plain); &got[0] != &plain[0] {
		t.Fatal("OneLine copied a message without line breaks")
	}
}

// BenchmarkParseUpstreamSmall measures the parse of a small result, the
// upstream's answer to most calls.
func BenchmarkParseUpstreamSmall(b *testing.B) {
	raw := []byte(`{"jsonrpc":"2.0","id":"viewmux-7","result":{"content":[{"type":"text","text":"ok"}]}}`)
	b.ReportAllocs()
	for b.Loop() {
		if m, err := ParseUpstream(raw); err != nil || len(m.Result) == 0 {
			b.Fatal(err)
		}
	}
}
