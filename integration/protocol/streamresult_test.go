//go:build unix

package protocol

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// A large result is written to its /mcp client while viewmux reads it from
// the upstream (issue 16): it arrives byte for byte; one that turns out
// too large (no Content-Length said so) or not valid JSON midway is
// aborted, visibly, and fails nothing else.

// streamUpstream is a raw streamable HTTP upstream: "big" answers a text
// of the "bytes" asked for, "invalid" a large result with a control byte
// in its middle, "slow" a small result after a second. Its answers carry
// no Content-Length (as mcp-go's do); with ?sse=1 they are events.
func streamUpstream(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name      string `json:"name"`
				Arguments struct {
					Bytes int `json:"bytes"`
				} `json:"arguments"`
			} `json:"params"`
		}
		if json.NewDecoder(r.Body).Decode(&m) != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if len(m.ID) == 0 {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		var result string
		switch m.Method {
		case "initialize":
			result = `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"stream","version":"1"}}`
		case "tools/list":
			result = `{"tools":[{"name":"big","inputSchema":{"type":"object"}},{"name":"invalid","inputSchema":{"type":"object"}},{"name":"slow","inputSchema":{"type":"object"}}]}`
		case "tools/call":
			switch m.Params.Name {
			case "big":
				result = streamBigResult(m.Params.Arguments.Bytes)
			case "invalid":
				half := strings.Repeat("v", 1<<20)
				result = `{"content":[{"type":"text","text":"` + half + "\x01" + half + `"}]}`
			case "slow":
				time.Sleep(time.Second)
				result = `{"content":[{"type":"text","text":"slow done"}]}`
			}
		default:
			result = `{}`
		}
		msg := `{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":` + result + `}`
		if r.URL.Query().Has("sse") {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "event: message\ndata: "+msg+"\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush() // no Content-Length
		io.WriteString(w, msg)
	}))
	t.Cleanup(up.Close)
	return up
}

// streamBigResult is the result of big for n bytes of text: the bytes a
// client must read unchanged.
func streamBigResult(n int) string {
	return `{"content":[{"type":"text","text":"` + strings.Repeat("0123456789abcdef", n/16) + `"}],"isError":false}`
}

// streamPost posts body on session id and reads the whole answer; err is
// what reading it failed with (a cut connection).
func streamPost(url, id, body string) (status int, answer []byte, err error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("Mcp-Protocol-Version", itest.RawProtocolVersion)
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, itest.RPCPayload(resp.Header.Get("Content-Type"), b), err
}

func streamCall(id int, tool string, bytes int) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{"bytes":%d}}}`, id, tool, bytes)
}

func TestLargeResultStreams(t *testing.T) {
	t.Parallel()
	up := streamUpstream(t)
	mux := itest.StartMux(t, fmt.Sprintf(`[upstreams.jbig]
url = %[1]s
max_message_bytes = "64MiB"

[upstreams.jover]
url = %[1]s
max_message_bytes = "8MiB"

[upstreams.sbig]
url = %[2]s
max_message_bytes = "64MiB"

[upstreams.sover]
url = %[2]s
max_message_bytes = "8MiB"
`, itest.TomlString(up.URL), itest.TomlString(up.URL+"?sse=1")))
	for _, mode := range []string{"j", "s"} {
		name := map[string]string{"j": "JSON answers", "s": "event-stream answers"}[mode]
		t.Run(name, func(t *testing.T) {
			a := itest.OpenRawSession(t, mux.URL(), nil)
			b := itest.OpenRawSession(t, mux.URL(), nil)

			// 50 MB arrive byte for byte.
			const size = 50 << 20
			status, answer, err := streamPost(mux.URL(), a.ID, streamCall(2, mode+"big__big", size))
			if err != nil || status != http.StatusOK {
				t.Fatalf("the 50 MB call: HTTP %d, %v", status, err)
			}
			var msg struct {
				ID     json.RawMessage `json:"id"`
				Result json.RawMessage `json:"result"`
			}
			if err := json.Unmarshal(answer, &msg); err != nil || string(msg.ID) != "2" {
				t.Fatalf("the 50 MB answer (%d bytes) is not the answer to id 2: %v", len(answer), err)
			}
			if want := streamBigResult(size); string(msg.Result) != want {
				t.Fatalf("the 50 MB result arrived as %d bytes, not the upstream's %d", len(msg.Result), len(want))
			}

			// An oversize result beside another session's call on the
			// same upstream: it is cut, the other call succeeds.
			var wg sync.WaitGroup
			var otherStatus int
			var other []byte
			var otherErr error
			wg.Go(func() {
				otherStatus, other, otherErr = streamPost(mux.URL(), b.ID, streamCall(3, mode+"over__slow", 0))
			})
			time.Sleep(200 * time.Millisecond)
			status, answer, err = streamPost(mux.URL(), a.ID, streamCall(4, mode+"over__big", 10<<20))
			wg.Wait()
			if err == nil {
				t.Fatalf("an oversize result (10 MiB past max_message_bytes 8MiB) was answered in full: HTTP %d, %.300s", status, answer)
			}
			if answer != nil && json.Valid(answer) {
				t.Fatalf("the cut answer parses: %.300s", answer)
			}
			if otherErr != nil || otherStatus != http.StatusOK || !strings.Contains(string(other), "slow done") {
				t.Fatalf("the other session's call beside the oversize one: HTTP %d, %v, %.300s", otherStatus, otherErr, other)
			}

			// Bytes that are not JSON midway: cut, never a parsed answer.
			status, answer, err = streamPost(mux.URL(), a.ID, streamCall(5, mode+"big__invalid", 0))
			if err == nil {
				t.Fatalf("a result with a control byte midway was answered in full: HTTP %d, %.300s", status, answer)
			}

			// The session, and the upstreams, serve the next call.
			status, answer, err = streamPost(mux.URL(), a.ID, streamCall(6, mode+"over__big", 1<<20))
			if err != nil || status != http.StatusOK || !json.Valid(answer) || !strings.Contains(string(answer), `"id":6`) {
				t.Fatalf("a call after the aborted ones: HTTP %d, %v, %d bytes", status, err, len(answer))
			}
		})
	}
	itest.WaitUntil(t, 10*time.Second, "the aborts to be logged", func() bool {
		log := mux.Stderr()
		return strings.Count(log, "result aborted") >= 4 && strings.Contains(log, "jover") && strings.Contains(log, "sbig")
	})
}
