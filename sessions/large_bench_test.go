package sessions

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// rawUpstream is a streamable HTTP upstream that answers from prebuilt
// bytes, so that a benchmark through it measures mcpmux, not the
// upstream: one tool, "big", whose result is a text of size bytes.
func rawUpstream(tb testing.TB, size int, sse bool) *httptest.Server {
	tb.Helper()
	text := strings.Repeat("x", size)
	result := fmt.Sprintf(`,"result":{"content":[{"type":"text","text":%q}]}}`, text)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		json.Unmarshal(body, &m)
		w.Header().Set("Content-Type", "application/json")
		switch m.Method {
		case "initialize":
			w.Header().Set("Mcp-Session-Id", "raw-1")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"raw","version":"1"}}}`, m.ID)
		case "tools/list":
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"big","inputSchema":{"type":"object"}}]}}`, m.ID)
		case "tools/call":
			if sse { // as a server answers once it has sent a notification
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, "event: message\ndata: ")
			}
			io.WriteString(w, `{"jsonrpc":"2.0","id":`)
			w.Write(m.ID)
			io.WriteString(w, result)
			if sse {
				io.WriteString(w, "\n\n")
			}
		case "":
			w.WriteHeader(http.StatusAccepted)
		default:
			if len(m.ID) == 0 {
				w.WriteHeader(http.StatusAccepted)
				return
			}
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{}}`, m.ID)
		}
	}))
	tb.Cleanup(hs.Close)
	return hs
}

// BenchmarkLargeResult measures a tools/call whose result is 1 MiB through
// mcpmux's handler, in-process, from an upstream that sends prebuilt
// bytes: the CPU mcpmux spends per MiB of result (go test -bench
// LargeResult -cpuprofile).
func BenchmarkLargeResult(b *testing.B) {
	for _, sse := range []bool{false, true} {
		size := 1 << 20
		name := fmt.Sprintf("%dKiB/json", size>>10)
		if sse {
			name = fmt.Sprintf("%dKiB/sse", size>>10)
		}
		b.Run(name, func(b *testing.B) {
			up := rawUpstream(b, size, sse)
			s := newBenchServer(b, up.URL, "")
			h := s.Handler()
			sid := openSession(b, h, "")
			body := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"up__big","arguments":{}}}`
			b.SetBytes(int64(size))
			b.ResetTimer()
			for range b.N {
				w := postSink(h, "", sid, body)
				if w.n < size || !bytes.Contains(w.head, []byte(`"result"`)) {
					b.Fatalf("call not answered: %d bytes: %.200s", w.n, w.head)
				}
			}
		})
	}
}
