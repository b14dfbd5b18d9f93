package sessions

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestLargeResultsReuseBuffers: large results through /mcp, from several
// sessions and stateless 2026-07-28 requests at once, and one after
// another, each arrive whole, from an upstream answering JSON or event
// streams. Their buffers go back to upstream's pool
// once written (upstream.Loan), and in tests the pool overwrites what it
// takes back with '#': an answer written from a buffer already given
// back, or from one another call took since, would show it.
func TestLargeResultsReuseBuffers(t *testing.T) {
	for _, sse := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "sse"}[sse], func(t *testing.T) { largeResultsReuseBuffers(t, sse) })
	}
}

// largeResultsReuseBuffers is TestLargeResultsReuseBuffers with an
// upstream that answers JSON bodies, or event streams (sse).
func largeResultsReuseBuffers(t *testing.T, sse bool) {
	const size = 300 << 10
	up := rawUpstream(t, size, sse)
	h := newBenchServer(t, up.URL, "").Handler()
	want := strings.Repeat("x", size)
	check := func(who string, body []byte, modern bool) bool {
		var m struct {
			Result struct {
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
				ResultType string `json:"resultType"`
			} `json:"result"`
		}
		err := json.Unmarshal(body, &m)
		if err != nil || len(m.Result.Content) != 1 || m.Result.Content[0].Text != want || modern != (m.Result.ResultType == "complete") {
			t.Errorf("%s: %d bytes, %v; not the result: %.200s", who, len(body), err, body)
			return false
		}
		return true
	}
	var wg sync.WaitGroup
	for range 3 {
		sid := openSession(t, h, "")
		wg.Go(func() {
			for range 5 {
				rec := post(h, "", sid, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"up__big","arguments":{}}}`)
				if !check("session "+sid, rec.Body.Bytes(), false) {
					return
				}
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for range 5 {
				req := newRequest("", "", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"up__big","arguments":{},`+
					`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`)
				req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
				req.Header.Set("Mcp-Method", "tools/call")
				req.Header.Set("Mcp-Name", "up__big")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if !check("2026-07-28 request", rec.Body.Bytes(), true) {
					return
				}
			}
		})
	}
	wg.Wait()
}
