package jsonrpc

import (
	"encoding/json"
	"errors"
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
		{"Kelvin sign folds to k", "{\"name\":\"run\",\"arguments\":{\"k\":1,\"\u212a\":2}}", true},
		{"duplicate key deep inside", `{"name":"run","arguments":{"a":{"b":[{"c":1,"c":2}]}}}`, true},
		{"case differs deep inside is fine", `{"name":"run","arguments":{"headers":{"Accept":"a","accept":"b"}}}`, false},
		{"same key in sibling objects", `{"arguments":{"a":{"x":1},"b":{"x":2}}}`, false},
		{"empty", ``, false},
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

func TestCheckUnambiguousDepth(t *testing.T) {
	deep := `{"arguments":` + strings.Repeat(`[`, 100000) + strings.Repeat(`]`, 100000) + `}`
	if err := CheckUnambiguous(json.RawMessage(deep)); err == nil {
		t.Fatal("100,000 nested arrays accepted")
	}
}

func TestRewriteKeepsOtherBytes(t *testing.T) {
	params := json.RawMessage(`{"name":"gh__run","arguments":{"n":12345678901234567890,"s":"\u00e9"},"_meta":{"progressToken":7,"io.modelcontextprotocol/protocolVersion":"x","trace":"abc"}}`)
	out, err := Rewrite(params, map[string]any{"name": "run"}, func(m map[string]json.RawMessage) map[string]json.RawMessage {
		delete(m, "io.modelcontextprotocol/protocolVersion")
		m["progressToken"] = json.RawMessage(`"mcpmux-1"`)
		return m
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
	if string(got.Meta["progressToken"]) != `"mcpmux-1"` || string(got.Meta["trace"]) != `"abc"` || len(got.Meta) != 2 {
		t.Errorf("_meta = %s", out)
	}
	out, err = Rewrite(json.RawMessage(`{"name":"a","_meta":{"io.modelcontextprotocol/x":1}}`), nil,
		func(m map[string]json.RawMessage) map[string]json.RawMessage { return nil })
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
