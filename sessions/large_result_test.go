package sessions

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

// TestLargeResultsReuseBuffers: large results through /mcp, from several
// sessions at once and one after another, each arrive whole. Their
// buffers go back to upstream's pool once written (upstream.Loan), and in
// tests the pool overwrites what it takes back with '#': an answer
// written from a buffer already given back, or from one another call
// took since, would show it.
func TestLargeResultsReuseBuffers(t *testing.T) {
	const size = 300 << 10
	up := rawUpstream(t, size, false)
	h := newBenchServer(t, up.URL, "").Handler()
	want := strings.Repeat("x", size)
	body := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"up__big","arguments":{}}}`
	var wg sync.WaitGroup
	for range 4 {
		sid := openSession(t, h, "")
		wg.Go(func() {
			for range 5 {
				rec := post(h, "", sid, body)
				var m struct {
					Result struct {
						Content []struct {
							Text string `json:"text"`
						} `json:"content"`
					} `json:"result"`
				}
				if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil || len(m.Result.Content) != 1 || m.Result.Content[0].Text != want {
					t.Errorf("session %s: %d bytes, %v; not the result: %.200s", sid, rec.Body.Len(), err, rec.Body.String())
					return
				}
			}
		})
	}
	wg.Wait()
}
