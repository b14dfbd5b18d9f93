package jsonrpc

import (
	"strings"
	"testing"
)

func TestIDScanner(t *testing.T) {
	cases := []struct {
		name, in, id string
		method       bool
	}{
		{"string id first", `{"id":"viewmux-7","jsonrpc":"2.0","result":{}}`, `"viewmux-7"`, false},
		{"id after result", `{"jsonrpc":"2.0","result":{"id":"inner","content":[{"id":1}]},"id":"viewmux-9"}`, `"viewmux-9"`, false},
		{"numeric id", `{"jsonrpc":"2.0","id":42,"result":{}}`, `42`, false},
		{"id last without space", `{"result":{},"id":"a"}`, `"a"`, false},
		{"numeric id last", `{"result":{},"id":12}`, `12`, false},
		{"spaces", `{ "id" : "x" , "result" : 1 }`, `"x"`, false},
		{"escaped quote in a value", `{"result":"a\"id\":\"no","id":"yes"}`, `"yes"`, false},
		{"no id", `{"jsonrpc":"2.0","result":{"id":"inner"}}`, ``, false},
		{"request", `{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{}}`, `"s1"`, true},
		{"key with escape is not id", `{"\u0069d":"x","result":1}`, ``, false},
		{"object id is none", `{"id":{"x":1},"result":1}`, ``, false},
		{"overlong id", `{"id":"` + strings.Repeat("a", 500) + `","result":1}`, ``, false},
		{"garbage", `not json at all`, ``, false},
		{"brackets and quotes in nested strings", `{"result":[{"s":"a]\"}[","id":"inner"},["\\\\",{"t":"}}}"}]],"id":"outer"}`, `"outer"`, false},
		{"method after nesting", `{"id":"s2","params":[[[{"method":"no"}]]],"method":"roots/list"}`, `"s2"`, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Fed one byte at a time and whole: the result must not depend
			// on where the pieces break.
			for _, step := range []int{1, 3, len(tc.in)} {
				var s IDScanner
				for i := 0; i < len(tc.in); i += step {
					s.Feed([]byte(tc.in[i:min(i+step, len(tc.in))]))
				}
				id, method := s.End()
				if got := string(id); got != tc.id {
					t.Errorf("step %d: id = %q, want %q", step, got, tc.id)
				}
				if method != tc.method {
					t.Errorf("step %d: method = %v, want %v", step, method, tc.method)
				}
			}
		})
	}
}

// TestTopLevelIDBounded: the id of a message too deep to parse is found
// in one pass, before or after the nesting, and one inside it is not the
// message's.
func TestTopLevelIDBounded(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat(`{"id":"inner","a":`, 100000) + "1" + strings.Repeat("}", 100000)
	for _, tc := range []struct{ in, id string }{
		{`{"id":"viewmux-1","result":` + deep + `}`, `"viewmux-1"`},
		{`{"result":` + deep + `,"id":"viewmux-2"}`, `"viewmux-2"`},
		{`{"result":` + deep + `}`, ``},
	} {
		if id, method := TopLevelID([]byte(tc.in)); string(id) != tc.id || method {
			t.Errorf("TopLevelID(%.40q…) = %s, %v; want %s", tc.in, id, method, tc.id)
		}
	}
}

// nested is a JSON value n arrays deep.
func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

// BenchmarkUnreadableAnswer is what an answer that does not parse costs:
// the parse viewmux makes of every answer (ParseUpstream, which refuses
// it), then TopLevelID, which finds the call it answers. Compare the
// ns/op of the two sub-benchmarks, for an answer nested 200,000 deep and
// for one of 16 MiB with the id after its (broken) result.
func BenchmarkUnreadableAnswer(b *testing.B) {
	for _, in := range []struct {
		name string
		msg  []byte
	}{
		{"deep", []byte(`{"jsonrpc":"2.0","id":"viewmux-1","result":` + nested(200000) + `}`)},
		{"16MiB", []byte(`{"jsonrpc":"2.0","result":{"content":[{"type":"text","text":"` + strings.Repeat("x", 16<<20) + `"}],"broken":},"id":"viewmux-1"}`)},
	} {
		b.Run(in.name+"/parse", func(b *testing.B) {
			b.SetBytes(int64(len(in.msg)))
			for b.Loop() {
				if _, err := ParseUpstream(in.msg); err == nil {
					b.Fatal("parsed")
				}
			}
		})
		b.Run(in.name+"/toplevelid", func(b *testing.B) {
			b.SetBytes(int64(len(in.msg)))
			for b.Loop() {
				if id, _ := TopLevelID(in.msg); string(id) != `"viewmux-1"` {
					b.Fatalf("id = %s", id)
				}
			}
		})
	}
}
