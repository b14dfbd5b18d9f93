package jsonrpc

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func raw(s string) json.RawMessage { return json.RawMessage(s) }

func TestSplice(t *testing.T) {
	name := []Member{{"name", raw(`"up__echo"`)}}
	title := []Member{{"title", raw(`"echo"`)}}
	meta := []Member{{"viewmux/upstream", raw(`"up"`)}, {"viewmux/original", raw(`"echo"`)}}
	cases := []struct {
		name           string
		in             string
		set, add, meta []Member
		want           string
	}{
		{"name and meta, the rest byte for byte", `{"name":"echo","description":"Say <it> & \u00e9","inputSchema":{"type":"object","oneOf":[{"required":["a"]}],"$schema":"x"},"x-unknown":[1,2.50,1e3]}`,
			name, nil, meta,
			`{"name":"up__echo","description":"Say <it> & \u00e9","inputSchema":{"type":"object","oneOf":[{"required":["a"]}],"$schema":"x"},"x-unknown":[1,2.50,1e3],"_meta":{"viewmux/upstream":"up","viewmux/original":"echo"}}`},
		{"nothing added that was absent", `{"name":"p","arguments":[{"name":"a","required":false}]}`,
			[]Member{{"name", raw(`"x__p"`)}}, nil, nil,
			`{"name":"x__p","arguments":[{"name":"a","required":false}]}`},
		{"upstream meta kept in place, ours replace same keys", `{"_meta":{"a":1,"viewmux/upstream":"forged","b":{"c":[]}},"name":"echo"}`,
			name, nil, meta,
			`{"_meta":{"a":1,"b":{"c":[]},"viewmux/upstream":"up","viewmux/original":"echo"},"name":"up__echo"}`},
		{"null meta counts as absent", `{"name":"echo","_meta":null}`, name, nil, meta,
			`{"name":"up__echo","_meta":{"viewmux/upstream":"up","viewmux/original":"echo"}}`},
		{"duplicate names: one written, first place", `{"name":"a","x":1,"name":"b"}`, name, nil, nil, `{"name":"up__echo","x":1}`},
		{"a case-folded name is the same member", `{"Name":"evil","name":"echo"}`, name, nil, nil, `{"name":"up__echo"}`},
		{"duplicate metas: the last is merged", `{"_meta":{"a":1},"name":"e","_meta":{"b":2}}`, name, nil, meta,
			`{"_meta":{"b":2,"viewmux/upstream":"up","viewmux/original":"echo"},"name":"up__echo"}`},
		{"add only when absent", `{"name":"echo"}`, name, title, nil, `{"name":"up__echo","title":"echo"}`},
		{"add skipped when present", `{"title":"Echo","name":"echo"}`, name, title, nil, `{"title":"Echo","name":"up__echo"}`},
		{"whitespace around members", "{ \"name\" : \"echo\" ,\n \"k\" : [ 1 ] }", name, nil, nil, `{"name":"up__echo","k" : [ 1 ]}`},
		{"empty object", `{}`, name, nil, meta, `{"name":"up__echo","_meta":{"viewmux/upstream":"up","viewmux/original":"echo"}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Splice(raw(c.in), c.set, c.add, c.meta)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("Splice(%s)\n got %s\nwant %s", c.in, got, c.want)
			}
			if !json.Valid(got) {
				t.Errorf("result is not valid JSON: %s", got)
			}
		})
	}
}

func TestSpliceRefuses(t *testing.T) {
	name := []Member{{"name", raw(`"n"`)}}
	meta := []Member{{"k", raw(`1`)}}
	for _, in := range []string{``, `[]`, `"x"`, `{"name":`, `{"_meta":"string"}`, `{"_meta":[1]}`, `{"_meta":3}`} {
		if _, err := Splice(raw(in), name, nil, meta); !errors.Is(err, ErrNotObject) && !strings.Contains(fmtErr(err), "not a JSON object") {
			t.Errorf("Splice(%q) = %v, want a not-an-object error", in, err)
		}
	}
	// A _meta that is not an object is only refused when viewmux writes one.
	if got, err := Splice(raw(`{"_meta":"s","name":"a"}`), name, nil, nil); err != nil || string(got) != `{"_meta":"s","name":"n"}` {
		t.Errorf("without meta: %s, %v", got, err)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestSpliceHuge(t *testing.T) {
	// A large definition (a 4 MB schema, 20,000 properties) and deep nesting
	// pass through unchanged but for the name.
	var b strings.Builder
	b.WriteString(`{"name":"big","inputSchema":{"type":"object","properties":{`)
	for i := range 20000 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"p` + strings.Repeat("x", 180) + string(rune('a'+i%26)) + `":{"type":"string"}`)
	}
	b.WriteString(`}},"deep":` + strings.Repeat("[", 2000) + strings.Repeat("]", 2000) + `}`)
	in := b.String()
	got, err := Splice(raw(in), []Member{{"name", raw(`"up__big"`)}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(in, `"name":"big"`, `"name":"up__big"`, 1); string(got) != want {
		t.Errorf("huge definition changed beyond its name (%d bytes in, %d out)", len(in), len(got))
	}
}

// TestEdit: members fn leaves alone keep their bytes and place, a nil
// value drops a member, add appends, and what is not an object is left.
func TestEdit(t *testing.T) {
	obj := []byte(`{ "a" : "x\"}" , "b":{"c":[1,2]},"d":null}`)
	got := Edit(obj, func(k string, v []byte) []byte {
		switch k {
		case "b":
			return nil
		case "d":
			return []byte(`7`)
		}
		return v
	}, Member{Key: "e", Value: []byte(`"new"`)})
	if want := `{"a" : "x\"}","d":7,"e":"new"}`; string(got) != want {
		t.Errorf("Edit = %s, want %s", got, want)
	}
	if got := Edit([]byte(`[1]`), func(string, []byte) []byte { return nil }); string(got) != `[1]` {
		t.Errorf("Edit of an array = %s", got)
	}
}

// TestWithout checks that removing members keeps every other member's
// bytes and order, and compares keys exactly (decoded).
func TestWithout(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"a":1,"b":{"x":[1,2]},"c":"\u00e9"}`, `{"b":{"x":[1,2]},"c":"\u00e9"}`},
		{`{"b":2,"a":1}`, `{"b":2}`},
		{`{"\u0061":1,"A":2}`, `{"A":2}`},
		{`{"a":1}`, `{}`},
		{`{}`, `{}`},
		{` { "b" : 2 , "a" : 1 } `, `{"b" : 2}`},
	} {
		got, err := Without(json.RawMessage(tc.in), []string{"a"})
		if err != nil || string(got) != tc.want {
			t.Errorf("Without(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{`[1]`, `"a"`, `{"a":}`, ``} {
		if _, err := Without(json.RawMessage(bad), []string{"a"}); err == nil {
			t.Errorf("Without(%q) did not fail", bad)
		}
	}
}

func TestKeys(t *testing.T) {
	got, err := Keys(json.RawMessage(`{"a":1,"\u0062":{"c":2},"A":3}`))
	if err != nil || strings.Join(got, ",") != "a,b,A" {
		t.Errorf("Keys = %v, %v", got, err)
	}
	if _, err := Keys(json.RawMessage(`[]`)); err == nil {
		t.Error("Keys of an array did not fail")
	}
	if !FoldEqual("owner", "OWNER") || !FoldEqual("ſ", "s") || FoldEqual("owner", "owners") {
		t.Error("FoldEqual")
	}
}
