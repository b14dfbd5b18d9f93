//go:build unix

package itest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// A recording upstream: a raw streamable HTTP MCP server (no SDK between
// the wire and the test) that keeps the exact bytes of every request it is
// sent and answers with exact bytes the test chose. It is what lets the
// recording tests say what viewmux forwarded, and that it forwarded nothing.

// RecSecret is the query secret of every recorder's URL: it must appear
// nowhere viewmux writes (client errors, logs).
const RecSecret = "SEKRET123"

// recTools is what a recorder lists. run has the call rule of the
// recording profile; echo has none; fail answers the canned error its
// "case" argument names; hang answers only when the request ends;
// secret_tool is hidden by the profile.
const recTools = `{"tools":[` +
	`{"name":"run","description":"runs a command","inputSchema":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}},` +
	`{"name":"echo","description":"answers a canned result","inputSchema":{"type":"object"}},` +
	`{"name":"fail","description":"answers a canned JSON-RPC error","inputSchema":{"type":"object","properties":{"case":{"type":"string"}}}},` +
	`{"name":"hang","description":"never answers","inputSchema":{"type":"object"}},` +
	`{"name":"secret_tool","description":"hidden by the profile","inputSchema":{"type":"object"}}]}`

// RecToolResult is the result of run and echo: unusual but legal JSON
// (escapes, a big integer, a huge float, nesting) that must reach the
// client unchanged in meaning.
const RecToolResult = `{"content":[{"type":"text","text":"h\u00e9llo \ud83d\ude00 \"quoted\" \u2028"}],` +
	`"structuredContent":{"big":12345678901234567890,"huge":1.5e300,"neg":-0.25,"nested":{"a":[1,{"b":null},true,"\u0000"]}},` +
	`"_meta":{"com.example/upstream":{"n":1}},"isError":false}`

// recError is a canned JSON-RPC error: Body is the error object, sent as
// these exact bytes; Status is the HTTP status a 2026-07-28 recorder
// answers it with; Stream sends the answer as an SSE event instead of a
// JSON body.
type recError struct {
	Body   string
	Status int
	Stream bool
}

// RecErrors are the errors fail answers, by its "case" argument; the
// prompt "broken" and the resource rec://<name>/broken answer "prompt" and
// "resource".
var RecErrors = map[string]recError{
	"missing capability":        {Body: `{"code":-32021,"message":"Missing required client capability: sampling","data":{"requiredCapabilities":{"sampling":{}}}}`, Status: 400},
	"custom with data":          {Body: `{"code":-32099,"message":"custom server error","data":{"retryAfterMs":1500,"nested":{"list":[1,"two",null,true,{"x":-0.5}]},"text":"h\u00e9llo \u2603 \"q\""}}`, Status: 200},
	"invalid params, no data":   {Body: `{"code":-32602,"message":"Invalid params: path must be relative"}`, Status: 400},
	"string data":               {Body: `{"code":-32603,"message":"internal upstream failure","data":"plain string data"}`, Status: 200},
	"array data, positive code": {Body: `{"code":1234,"message":"application-defined error","data":[1,2,3]}`, Status: 200},
	"unicode message":           {Body: `{"code":-32000,"message":"quote \" backslash \\ \u00e9 \u65e5\u672c \n newline"}`, Status: 200},
	"as an SSE event":           {Body: `{"code":-32098,"message":"sent on an event stream","data":{"k":"v"}}`, Status: 200, Stream: true},
	"big integer in data":       {Body: `{"code":-32097,"message":"big numbers","data":{"id":12345678901234567890,"huge":1.5e300}}`, Status: 200},
	"prompt":                    {Body: `{"code":-32096,"message":"prompt backend down","data":{"prompt":"broken"}}`, Status: 200},
	"resource":                  {Body: `{"code":-32002,"message":"Resource not found","data":{"uri":"the upstream's own"}}`, Status: 200},
}

// Recorder is one recording upstream. Its methods are safe for concurrent
// use.
type Recorder struct {
	Name   string
	Modern bool   // speaks 2026-07-28 only (server/discover, no initialize)
	URL    string // with the query secret
	Addr   string // host:port

	srv  *httptest.Server
	stop chan struct{} // closed by Close: hang returns

	Mu   sync.Mutex
	Seen []RecRequest
}

// RecRequest is one POST the recorder was sent.
type RecRequest struct {
	Method string
	Body   []byte // exactly as received
	Header http.Header
	Query  string
}

// Params returns the request's params object, by key.
func (r RecRequest) Params(t testing.TB) map[string]json.RawMessage {
	t.Helper()
	var m struct {
		Params map[string]json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("recorded %s request is not JSON: %v: %s", r.Method, err, r.Body)
	}
	return m.Params
}

// StartRecorder starts a recorder named name; modern makes it a
// 2026-07-28-only server. It is closed at cleanup.
func StartRecorder(t *testing.T, name string, modern bool) *Recorder {
	t.Helper()
	u := &Recorder{Name: name, Modern: modern, stop: make(chan struct{})}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	u.Addr = u.srv.Listener.Addr().String()
	u.URL = u.srv.URL + "/mcp?api_key=" + RecSecret
	t.Cleanup(u.Close)
	return u
}

// Close stops the recorder: its listener and every connection close, and
// later requests find nothing listening. It is idempotent.
func (u *Recorder) Close() {
	u.Mu.Lock()
	select {
	case <-u.stop:
		u.Mu.Unlock()
		return
	default:
		close(u.stop)
	}
	u.Mu.Unlock()
	u.srv.CloseClientConnections()
	u.srv.Close()
}

// Mark returns a position in the record, for since.
func (u *Recorder) Mark() int {
	u.Mu.Lock()
	defer u.Mu.Unlock()
	return len(u.Seen)
}

// Since returns the routed requests (tools/call, prompts/get,
// resources/read, completion/complete) recorded after mark: what a client
// caused, as opposed to viewmux's own handshake, listings and pings.
func (u *Recorder) Since(mark int) []RecRequest {
	u.Mu.Lock()
	defer u.Mu.Unlock()
	var out []RecRequest
	for _, r := range u.Seen[mark:] {
		switch mcp.MCPMethod(r.Method) {
		case mcp.MethodToolsCall, mcp.MethodPromptsGet, mcp.MethodResourcesRead, mcp.MethodCompletionComplete:
			out = append(out, r)
		}
	}
	return out
}

// Containing returns every request recorded so far whose bytes contain s.
func (u *Recorder) Containing(s string) []RecRequest {
	u.Mu.Lock()
	defer u.Mu.Unlock()
	var out []RecRequest
	for _, r := range u.Seen {
		if bytes.Contains(r.Body, []byte(s)) {
			out = append(out, r)
		}
	}
	return out
}

func (u *Recorder) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("api_key") != RecSecret {
		http.Error(w, "missing api_key", http.StatusUnauthorized)
		return
	}
	switch r.Method {
	case http.MethodDelete:
		w.WriteHeader(http.StatusOK)
		return
	case http.MethodPost:
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name      string          `json:"name"`
			URI       string          `json:"uri"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"params"`
	}
	if err := json.Unmarshal(body, &msg); err != nil {
		http.Error(w, "not JSON", http.StatusBadRequest)
		return
	}
	u.Mu.Lock()
	u.Seen = append(u.Seen, RecRequest{Method: msg.Method, Body: body, Header: r.Header.Clone(), Query: r.URL.RawQuery})
	u.Mu.Unlock()
	if len(msg.ID) == 0 || msg.Method == "" { // a notification or a response
		w.WriteHeader(http.StatusAccepted)
		return
	}
	result := func(res string) { u.answer(w, 200, false, msg.ID, `"result":`+res) }
	fail := func(e recError) { u.answer(w, e.Status, e.Stream, msg.ID, `"error":`+e.Body) }
	notFound := func(what string) {
		fail(recError{Body: fmt.Sprintf(`{"code":-32601,"message":%q}`, what), Status: 404})
	}
	caps := `{"tools":{},"prompts":{},"resources":{"subscribe":true},"completions":{}}`
	info := fmt.Sprintf(`{"name":%q,"version":"1.0.0"}`, "recorder-"+u.Name)
	switch mcp.MCPMethod(msg.Method) {
	case mcp.MethodInitialize:
		if u.Modern {
			notFound("Method not found: initialize")
			return
		}
		w.Header().Set("Mcp-Session-Id", "recorder-session")
		result(fmt.Sprintf(`{"protocolVersion":"2025-11-25","capabilities":%s,"serverInfo":%s}`, caps, info))
	case mcp.MethodServerDiscover:
		if !u.Modern {
			notFound("Method not found: server/discover")
			return
		}
		result(fmt.Sprintf(`{"supportedVersions":["2026-07-28"],"capabilities":%s,"serverInfo":%s,"resultType":"complete"}`, caps, info))
	case mcp.MethodPing:
		result(`{}`)
	case mcp.MethodToolsList:
		result(u.stamp(recTools))
	case mcp.MethodPromptsList:
		result(u.stamp(`{"prompts":[{"name":"greet","arguments":[{"name":"who"}]},{"name":"broken"}]}`))
	case mcp.MethodResourcesList:
		result(u.stamp(fmt.Sprintf(`{"resources":[{"uri":"rec://%[1]s/notes","name":"notes"},{"uri":"rec://%[1]s/broken","name":"broken"}]}`, u.Name)))
	case mcp.MethodResourcesTemplatesList:
		result(u.stamp(fmt.Sprintf(`{"resourceTemplates":[{"uriTemplate":"rec://%s/files/{path}","name":"files"}]}`, u.Name)))
	case mcp.MethodCompletionComplete:
		result(u.stamp(`{"completion":{"values":["recorded"]}}`))
	case mcp.MethodResourcesSubscribe, mcp.MethodResourcesUnsubscribe:
		result(u.stamp(`{}`))
	case mcp.MethodToolsCall:
		switch msg.Params.Name {
		case "run", "echo", "secret_tool":
			result(u.stamp(RecToolResult))
		case "fail":
			var a struct {
				Case string `json:"case"`
			}
			json.Unmarshal(msg.Params.Arguments, &a)
			e, ok := RecErrors[a.Case]
			if !ok {
				e = recError{Body: `{"code":-32602,"message":"fail: unknown case"}`, Status: 400}
			}
			fail(e)
		case "hang":
			select {
			case <-r.Context().Done():
			case <-u.stop:
			case <-time.After(time.Minute):
			}
		default:
			fail(recError{Body: `{"code":-32602,"message":"Unknown tool"}`, Status: 400})
		}
	case mcp.MethodPromptsGet:
		if msg.Params.Name == "broken" {
			fail(RecErrors["prompt"])
			return
		}
		result(u.stamp(`{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}]}`))
	case mcp.MethodResourcesRead:
		if strings.HasSuffix(msg.Params.URI, "/broken") {
			fail(RecErrors["resource"])
			return
		}
		result(u.stamp(fmt.Sprintf(`{"contents":[{"uri":%q,"text":"notes"}]}`, msg.Params.URI)))
	default:
		notFound("Method not found: " + msg.Method)
	}
}

// stamp adds the resultType a 2026-07-28 server puts on every result.
func (u *Recorder) stamp(res string) string {
	if !u.Modern {
		return res
	}
	return `{"resultType":"complete",` + res[1:]
}

// answer writes one JSON-RPC answer to id whose member after the id is
// member, as a JSON body or, with stream, one SSE event. Legacy recorders
// answer every error with 200, as legacy streamable HTTP does.
func (u *Recorder) answer(w http.ResponseWriter, status int, stream bool, id json.RawMessage, member string) {
	if !u.Modern {
		status = http.StatusOK
	}
	frame := `{"jsonrpc":"2.0","id":` + string(id) + `,` + member + `}`
	if stream {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(status)
		fmt.Fprintf(w, "event: message\ndata: %s\n\n", frame)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, frame)
}

// recCanon decodes JSON text into a value that compares equal (with
// reflect.DeepEqual) to that of any JSON text with the same meaning:
// whitespace, key order, string escapes and number spelling (1.5e300,
// 1.5E+300) do not matter; every digit of a number does.
func recCanon(raw []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("trailing data after the JSON value")
	}
	return recCanonValue(v), nil
}

func recCanonValue(v any) any {
	switch x := v.(type) {
	case json.Number:
		if r, ok := new(big.Rat).SetString(string(x)); ok {
			return "number:" + r.RatString()
		}
		return "number?" + string(x)
	case map[string]any:
		for k, e := range x {
			x[k] = recCanonValue(e)
		}
	case []any:
		for i, e := range x {
			x[i] = recCanonValue(e)
		}
	}
	return v
}

// RecSameJSON reports whether a and b are the same JSON value in meaning
// (see recCanon); text that is not JSON is never the same.
func RecSameJSON(a, b []byte) bool {
	ca, errA := recCanon(a)
	cb, errB := recCanon(b)
	return errA == nil && errB == nil && reflect.DeepEqual(ca, cb)
}
