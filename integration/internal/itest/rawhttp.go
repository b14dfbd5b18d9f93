//go:build unix

package itest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Raw HTTP access to viewmux's streamable HTTP endpoint, for what the SDK
// client hides: status codes, response headers, exact bodies, and requests
// no well-behaved client would send.

// RawProtocolVersion is the protocol version the raw requests speak: a
// legacy (initialize-based) one, so that sessions are stateful.
const RawProtocolVersion = "2025-06-18"

// RawResponse is one HTTP exchange with viewmux.
type RawResponse struct {
	Status int
	Header http.Header
	Body   []byte
	// Msg is the JSON-RPC message of the body: the body itself when it is
	// JSON, the first "data:" event with a result or an error when it is
	// an event stream. nil when there is none.
	Msg *rpcMessage
	// RawMsg is Msg's JSON text, byte for byte as sent.
	RawMsg []byte
}

// rpcMessage is a JSON-RPC response.
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *RPCError       `json:"error"`
}

type RPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

// String describes the exchange for failure messages.
func (r RawResponse) String() string {
	var h []string
	for _, k := range []string{"Content-Type", "Mcp-Session-Id", "Www-Authenticate"} {
		if v := r.Header.Get(k); v != "" {
			h = append(h, k+": "+v)
		}
	}
	return fmt.Sprintf("HTTP %d [%s] %s", r.Status, strings.Join(h, "; "), bytes.TrimSpace(r.Body))
}

var RawClient = &http.Client{Timeout: 30 * time.Second}

// RawPost POSTs body (a JSON-RPC message) to url with the headers a
// streamable HTTP client sends plus headers, and reads the whole answer.
func RawPost(t testing.TB, url string, headers map[string]string, body string) RawResponse {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := RawClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: reading the answer: %v", url, err)
	}
	r := RawResponse{Status: resp.StatusCode, Header: resp.Header, Body: b}
	r.RawMsg = RPCPayload(resp.Header.Get("Content-Type"), b)
	if r.RawMsg != nil {
		var m rpcMessage
		if err := json.Unmarshal(r.RawMsg, &m); err == nil {
			r.Msg = &m
		}
	}
	return r
}

// RPCPayload extracts the JSON-RPC response from a body.
func RPCPayload(contentType string, body []byte) []byte {
	if strings.HasPrefix(contentType, "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(body))
		sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
		var data []string
		flush := func() []byte {
			defer func() { data = data[:0] }()
			if len(data) == 0 {
				return nil
			}
			msg := []byte(strings.Join(data, "\n"))
			var probe struct {
				Result json.RawMessage `json:"result"`
				Error  json.RawMessage `json:"error"`
			}
			if json.Unmarshal(msg, &probe) == nil && (probe.Result != nil || probe.Error != nil) {
				return msg
			}
			return nil
		}
		for sc.Scan() {
			line := sc.Text()
			if line == "" {
				if m := flush(); m != nil {
					return m
				}
				continue
			}
			if v, ok := strings.CutPrefix(line, "data:"); ok {
				data = append(data, strings.TrimPrefix(v, " "))
			}
		}
		return flush()
	}
	if trimmed := bytes.TrimSpace(body); len(trimmed) > 0 && trimmed[0] == '{' {
		return trimmed
	}
	return nil
}

// InitializeBody is an initialize request with id 1.
func InitializeBody() string {
	return `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + RawProtocolVersion +
		`","capabilities":{},"clientInfo":{"name":"viewmux-integration-raw","version":"1.0.0"}}}`
}

// RawInitialize sends initialize to url with headers and returns the answer.
func RawInitialize(t testing.TB, url string, headers map[string]string) RawResponse {
	t.Helper()
	return RawPost(t, url, headers, InitializeBody())
}

// RawSession is a legacy session opened with raw HTTP.
type RawSession struct {
	URL     string
	ID      string
	Headers map[string]string // sent with every request after initialize
}

// OpenRawSession initializes a session at url with headers, sends
// notifications/initialized, and returns it. Any failure fails the test.
func OpenRawSession(t testing.TB, url string, headers map[string]string) *RawSession {
	t.Helper()
	r := RawInitialize(t, url, headers)
	if r.Status != http.StatusOK || r.Msg == nil || r.Msg.Error != nil {
		t.Fatalf("initialize %s (headers %v): %s", url, headers, r)
	}
	id := r.Header.Get("Mcp-Session-Id")
	if id == "" {
		t.Fatalf("initialize %s: no Mcp-Session-Id header: %s", url, r)
	}
	s := &RawSession{URL: url, ID: id, Headers: headers}
	n := s.Post(t, "", nil, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if n.Status != http.StatusAccepted && n.Status != http.StatusOK {
		t.Fatalf("notifications/initialized on session %s: %s", id, n)
	}
	return s
}

// Post sends body on the session. url "" means the session's URL; headers
// are sent on top of the session's own (nil values remove one).
func (s *RawSession) Post(t testing.TB, url string, headers map[string]*string, body string) RawResponse {
	t.Helper()
	if url == "" {
		url = s.URL
	}
	h := map[string]string{"Mcp-Session-Id": s.ID, "Mcp-Protocol-Version": RawProtocolVersion}
	for k, v := range s.Headers {
		h[k] = v
	}
	for k, v := range headers {
		if v == nil {
			delete(h, k)
		} else {
			h[k] = *v
		}
	}
	return RawPost(t, url, h, body)
}

// Ptr returns a pointer to s, for RawSession.post's headers.
func Ptr(s string) *string { return &s }

// ToolsListBody is a tools/list request with the given id.
func ToolsListBody(id int) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list","params":{}}`, id)
}

// ToolsCallBody is a tools/call request with the given id.
func ToolsCallBody(t testing.TB, id int, name string, args any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"jsonrpc": "2.0", "id": id, "method": "tools/call",
		"params": map[string]any{"name": name, "arguments": args},
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// ToolNames decodes a tools/list result's names (one page; viewmux does not
// paginate a listing this small).
func (r RawResponse) ToolNames(t testing.TB) []string {
	t.Helper()
	if r.Msg == nil || r.Msg.Result == nil {
		t.Fatalf("no tools/list result: %s", r)
	}
	var res struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
		NextCursor string `json:"nextCursor"`
	}
	if err := json.Unmarshal(r.Msg.Result, &res); err != nil {
		t.Fatalf("decode tools/list result: %v: %s", err, r)
	}
	if res.NextCursor != "" {
		t.Fatalf("tools/list paginated (nextCursor %q); this helper reads one page", res.NextCursor)
	}
	names := make([]string, len(res.Tools))
	for i, tool := range res.Tools {
		names[i] = tool.Name
	}
	return names
}
