package aggregator

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// streamResults are results as upstreams write them, and as they might:
// whitespace between members, the envelope members finishResult edits in
// any place, resource links, escapes, numbers at a piece's end.
var streamResults = []string{
	`{"content":[{"type":"text","text":"hello"}]}`,
	`{"content":[{"type":"text","text":"a"}],"isError":true}`,
	`{"resultType":"complete","content":[{"type":"text","text":"x"}]}`,
	`{"content":[{"type":"text","text":"x"}],"resultType":"complete"}`,
	`{"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t"}},"content":[]}`,
	`{"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t"},"mine":1},"content":[],"resultType":"complete"}`,
	`{"content":[],"_meta":{"mine":true},"resultType":"complete"}`,
	` { "content" : [ {"type":"resource_link","uri":"file:///a","name":"a"} , {"type":"text","text":"\"q\"\\\n"} ] , "resultType" : "complete" , "zeta" : 1.5e3 } `,
	"{\n\t\"resultType\": \"complete\",\n\t\"structuredContent\": {\"n\": [1, 2, -0.25]},\n\t\"content\": []\n}",
	`{"contents":[{"uri":"x:/y","text":"\u00e9\ud83d\ude00"}]}`,
	`{"a":1,"b":2,"resultType":"complete"}`,
	`{"resultType":"complete"}`,
	`{}`,
	`{"isError":false,"isError":true,"content":[{"type":"resource_link","uri":"u:1"},{"type":"resource_link","uri":"u:2"}]}`,
	`{"resultType":"input_required","inputRequests":{}}`,
	`{"content":[{"type":"text","text":"` + strings.Repeat("0123456789abcdef", 5000) + `"}],"_meta":{"io.modelcontextprotocol/x":1}}`,
}

// streamEdit runs legacyEdit over result cut into pieces of size step,
// as a streamed result is edited.
func streamEdit(result []byte, step int) (out []byte, e *legacyEdit, err error) {
	var buf bytes.Buffer
	rest := result
	e = &legacyEdit{w: &buf, links: true, next: func() ([]byte, error) {
		if len(rest) == 0 {
			return nil, io.EOF
		}
		n := min(step, len(rest))
		piece := append([]byte(nil), rest[:n]...) // a piece is reused once consumed
		rest = rest[n:]
		return piece, nil
	}}
	if err := e.run(); err != nil {
		return nil, e, err
	}
	if len(bytes.TrimLeft(e.buf, " \t\r\n"))+len(bytes.TrimLeft(rest, " \t\r\n")) != 0 {
		return nil, e, io.ErrShortWrite
	}
	return buf.Bytes(), e, nil
}

// TestStreamedResultMatchesWhole: a result written as it is read reads
// byte for byte as the same result finished whole (finishResult), with
// the same isError and resource links, whatever the pieces it arrives in.
func TestStreamedResultMatchesWhole(t *testing.T) {
	a := &Aggregator{relay: newRelay()}
	for _, res := range streamResults {
		raw := json.RawMessage(res)
		if !json.Valid(raw) {
			t.Fatalf("case is not JSON: %s", res)
		}
		top := jsonrpc.Fields(raw, topKeys...)
		want := string(a.finishResult(nil, raw, top, false, false))
		var wantLinks []string
		jsonrpc.ElementFields(top[topContent], linkKeys, func(f [][]byte) {
			var uri string
			if string(f[0]) == `"resource_link"` && json.Unmarshal(f[1], &uri) == nil {
				wantLinks = append(wantLinks, uri)
			}
		})
		for _, step := range []int{1, 2, 3, 7, 64, 4096, len(res)} {
			got, e, err := streamEdit([]byte(strings.TrimSpace(res)), step)
			if err != nil {
				t.Errorf("pieces of %d of %.80s: %v", step, res, err)
				continue
			}
			if string(got) != want {
				t.Errorf("pieces of %d:\n got %.200s\nwant %.200s", step, got, want)
			}
			if e.isError != (string(top[topIsError]) == "true") || e.inputRequired != needsInput(top[topResultType]) {
				t.Errorf("pieces of %d of %.80s: isError %v inputRequired %v", step, res, e.isError, e.inputRequired)
			}
			if strings.Join(e.uris, " ") != strings.Join(wantLinks, " ") {
				t.Errorf("pieces of %d of %.80s: links %q, want %q", step, res, e.uris, wantLinks)
			}
		}
	}
}

// TestStreamedResultInvalid: bytes that are not a valid result object
// fail the stream; none is written out as if whole.
func TestStreamedResultInvalid(t *testing.T) {
	for _, res := range []string{
		`{"content":[{"type":"text","text":"a` + "\x01" + `"}]}`,
		`{"content":[1,]}`,
		`{"content":[{"type":"text","text":"abc`,
		`{"content":[]`,
		`{"content" [] }`,
		`{"a":1}}`,
		`{"a":1 "b":2}`,
		`[1]`,
		`{"a":tru}`,
	} {
		for _, step := range []int{1, 5, len(res)} {
			if out, _, err := streamEdit([]byte(res), step); err == nil {
				t.Errorf("pieces of %d of %q: accepted as %q", step, res, out)
			}
		}
	}
}

// FuzzStreamedResult: whatever the result object, the streamed edit and
// the whole one agree, and the streamed one accepts only valid JSON.
func FuzzStreamedResult(f *testing.F) {
	for _, r := range streamResults {
		if len(r) < 2000 {
			f.Add([]byte(r), uint8(3))
		}
	}
	a := &Aggregator{relay: newRelay()}
	f.Fuzz(func(t *testing.T, b []byte, step uint8) {
		got, _, err := streamEdit(b, int(step)+1)
		b = bytes.Trim(b, " \t\r\n") // JSON's whitespace: bytes.TrimSpace would take "\v" too
		valid := json.Valid(b) && len(b) > 0 && b[0] == '{'
		if !valid {
			if err == nil {
				t.Fatalf("invalid result %q accepted as %q", b, got)
			}
			return
		}
		if bytes.Count(b, []byte("[")) > 5000 || bytes.Count(b, []byte("{")) > 5000 {
			return
		}
		if err != nil {
			t.Fatalf("valid result %q refused: %v", b, err)
		}
		top := jsonrpc.Fields(b, topKeys...)
		if want := a.finishResult(nil, b, top, false, false); string(got) != string(want) {
			t.Fatalf("result %q: streamed %q, whole %q", b, got, want)
		}
		if !json.Valid(got) {
			t.Fatalf("result %q edited into invalid JSON %q", b, got)
		}
	})
}
