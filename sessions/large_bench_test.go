package sessions

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"
)

// rawUpstream is a streamable HTTP upstream that answers from prebuilt
// bytes, so that a benchmark through it measures viewmux, not the
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

// BenchmarkLargeResult measures a tools/call whose result is 1 or 10 MiB
// through viewmux's handler, in-process, from an upstream that sends
// prebuilt bytes, beside the same call through httputil.ReverseProxy (the
// floor: a byte-for-byte proxy) in the same run. The upstream's and the
// client's costs are in both, so the difference between the two is what
// viewmux adds per MiB (go test -bench LargeResult -cpuprofile).
func BenchmarkLargeResult(b *testing.B) {
	body := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"up__big","arguments":{}}}`
	for _, size := range []int{1 << 20, 10 << 20} {
		for _, sse := range []bool{false, true} {
			kind := "json"
			if sse {
				kind = "sse"
			}
			up := rawUpstream(b, size, sse)
			b.Run(fmt.Sprintf("%dMiB/%s/floor", size>>20, kind), func(b *testing.B) {
				target, _ := url.Parse(up.URL)
				floor := httputil.NewSingleHostReverseProxy(target)
				floorBody := strings.Replace(body, "up__big", "big", 1)
				b.SetBytes(int64(size))
				b.ResetTimer()
				cpu := processCPU()
				for range b.N {
					w := postSink(floor, "", "raw-1", floorBody)
					if w.n < size || !bytes.Contains(w.head, []byte(`"result"`)) {
						b.Fatalf("call not answered: %d bytes: %.200s", w.n, w.head)
					}
				}
				reportCPUPerMiB(b, cpu, size)
			})
			b.Run(fmt.Sprintf("%dMiB/%s/viewmux", size>>20, kind), func(b *testing.B) {
				s := newBenchServer(b, up.URL, "")
				h := s.Handler()
				sid := openSession(b, h, "")
				b.SetBytes(int64(size))
				b.ResetTimer()
				cpu := processCPU()
				for range b.N {
					w := postSink(h, "", sid, body)
					if w.n < size || !bytes.Contains(w.head, []byte(`"result"`)) {
						b.Fatalf("call not answered: %d bytes: %.200s", w.n, w.head)
					}
				}
				reportCPUPerMiB(b, cpu, size)
			})
		}
	}
}

// processCPU is the CPU time this process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPUPerMiB reports the process's CPU time since start per MiB of
// result: the upstream's, the proxy's and the client's, on both sides.
func reportCPUPerMiB(b *testing.B, start time.Duration, size int) {
	b.StopTimer()
	used := processCPU() - start
	b.ReportMetric(float64(used.Microseconds())/1000/float64(b.N)/(float64(size)/(1<<20)), "cpu-ms/MiB")
}

// BenchmarkSmallCallSSE measures a small tools/call through viewmux's
// handler from an upstream that answers as an event stream, as an mcp-go
// server does for good once it has sent its session a notification:
// viewmux's own CPU per call on that path (-cpuprofile).
func BenchmarkSmallCallSSE(b *testing.B) {
	for _, sse := range []bool{false, true} {
		name := "json"
		if sse {
			name = "sse"
		}
		b.Run(name, func(b *testing.B) {
			up := rawUpstream(b, 2, sse)
			s := newBenchServer(b, up.URL, "")
			h := s.Handler()
			sid := openSession(b, h, "")
			body := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"up__big","arguments":{}}}`
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if w := postSink(h, "", sid, body); !bytes.Contains(w.head, []byte(`"result"`)) {
					b.Fatalf("call not answered: %.200s", w.head)
				}
			}
		})
	}
}

// TestAnswerFirstWithoutFlush: a call answered before its upstream's event
// stream ends (upstream.Loan.AnswerFirst) flushes its answer; a response
// writer that cannot flush (a middleware that hides http.Flusher) still
// gets the answer when the handler returns, and the session goes on: the
// next call on it is answered too.
func TestAnswerFirstWithoutFlush(t *testing.T) {
	up := rawUpstream(t, 2, true)
	s := newBenchServer(t, up.URL, "")
	h := s.Handler()
	sid := openSession(t, h, "")
	body := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"up__big","arguments":{}}}`
	for i := range 3 {
		if w := postSink(h, "", sid, body); !bytes.Contains(w.head, []byte(`"result"`)) {
			t.Fatalf("call %d not answered: %.200s", i, w.head)
		}
	}
}
