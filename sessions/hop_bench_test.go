package sessions

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
)

// BenchmarkHop measures one small tools/call at a time over real loopback
// HTTP, all in this process: to an mcp-go upstream directly, through a
// byte-for-byte httputil reverse proxy (the floor of integration/load),
// and through viewmux's HTTP server (Server.Serve). Subtracting direct's
// p50 from the others' gives what each hop adds on its own, without the
// cross-process wake-ups that dominate integration/load's c=1 figure on
// a loaded machine. Run the three together, interleaved with -count.
func BenchmarkHop(b *testing.B) {
	benchHop(b, false)
}

// BenchmarkHopParallel is BenchmarkHop with 8 sessions per core calling in
// a closed loop: with both cores busy, ns/op tracks the CPU a call costs
// the whole process (clients, hop and upstream), so the floor's and
// viewmux's difference is what each hop costs in CPU, as integration/load's
// CPU per call bar counts it, without its cross-process scheduling.
func BenchmarkHopParallel(b *testing.B) {
	benchHop(b, true)
}

func benchHop(b *testing.B, parallel bool) {
	up := newUpstreamServer(b, 10)
	target, _ := url.Parse(up.http.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 64}
	rp.FlushInterval = -1
	floor := httptest.NewServer(rp)
	b.Cleanup(floor.Close)

	s := newBenchServer(b, up.http.URL, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { s.Serve(ctx, ln); close(served) }()
	b.Cleanup(func() { cancel(); <-served })
	mux := "http://" + ln.Addr().String()

	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	// open initializes a session at base and returns its id.
	open := func(base string) string {
		resp := hopPost(b, hc, base, "", initializeBody)
		id := resp.Header.Get("Mcp-Session-Id")
		hopPost(b, hc, base, id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		return id
	}
	for _, p := range []struct{ name, base, tool string }{
		{"direct", up.http.URL, "tool_0001"},
		{"floor", floor.URL, "tool_0001"},
		{"viewmux", mux, "up__tool_0001"},
	} {
		b.Run(p.name, func(b *testing.B) {
			body := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"` + p.tool + `","arguments":{"query":"x"}}}`
			if parallel {
				b.SetParallelism(8)
				b.RunParallel(func(pb *testing.PB) {
					hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
					id := open(p.base)
					for pb.Next() {
						resp := hopPost(b, hc, p.base, id, body)
						if !bytes.Contains(resp.body, []byte(`"ok"`)) {
							b.Errorf("%s: call not answered: %.200s", p.name, resp.body)
							return
						}
					}
				})
				return
			}
			id := open(p.base)
			timeEach(b, func() {
				resp := hopPost(b, hc, p.base, id, body)
				if !bytes.Contains(resp.body, []byte(`"ok"`)) {
					b.Fatalf("%s: call not answered: %.200s", p.name, resp.body)
				}
			})
		})
	}
}

type hopResponse struct {
	Header http.Header
	body   []byte
}

// hopPost POSTs body to base's /mcp on session id and reads the answer
// whole (a JSON body or an event stream).
func hopPost(tb testing.TB, hc *http.Client, base, id, body string) hopResponse {
	req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	if id != "" {
		req.Header.Set("Mcp-Session-Id", id)
	}
	resp, err := hc.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return hopResponse{resp.Header, b}
}
