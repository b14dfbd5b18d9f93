//go:build unix

package h1

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// envBenchServer, set in a child's environment, makes the test binary an
// upstream for the benchmark instead of running tests: its CPU is then not
// counted in the client's.
const envBenchServer = "H1_BENCH_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(envBenchServer) != "" {
		serveBench()
		return
	}
	os.Exit(m.Run())
}

// serveBench answers every POST with a small tools/call result, as an MCP
// upstream answering with JSON does; it prints its address, then serves
// until its stdin closes.
func serveBench() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr())
	answer := []byte(`{"jsonrpc":"2.0","id":"viewmux-1","result":{"content":[{"type":"text","text":"hi"}]}}`)
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write(answer)
	}))
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// benchUpstream starts serveBench in a child process and returns its URL.
func benchUpstream(b *testing.B) string {
	b.Helper()
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), envBenchServer+"=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("the upstream child: %v", err)
	}
	addr := strings.TrimSpace(line)
	if _, _, err := net.SplitHostPort(addr); err != nil {
		b.Fatalf("the upstream child: %q", addr)
	}
	return "http://" + addr + "/mcp"
}

// tunedNetHTTP is net/http's Transport set up as an MCP upstream's
// client would be: a pool as large as h1's, no compression, HTTP/1.1.
func tunedNetHTTP() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = DefaultMaxIdle
	t.MaxIdleConnsPerHost = DefaultMaxIdle
	t.DisableCompression = true
	t.ForceAttemptHTTP2 = false
	return t
}

// cpuTime is this process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTransport is one small tools/call POST and its JSON answer,
// through h1 and through a tuned net/http Transport, to an upstream in a
// child process: cpu-ns/op is the client's CPU alone. The two run
// interleaved (-count), one call at a time and 16 at once.
//
//	go test -run '^$' -bench Transport -count 5 ./upstream/h1
func BenchmarkTransport(b *testing.B) {
	url := benchUpstream(b)
	body := []byte(`{"jsonrpc":"2.0","id":"viewmux-1","method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`)
	call := func(b *testing.B, rt http.RoundTripper) {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header["Content-Type"] = []string{"application/json"}
		req.Header["Accept"] = []string{"application/json, text/event-stream"}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for _, mode := range []string{"seq", "c16"} {
		for _, c := range []struct {
			name string
			rt   func() http.RoundTripper
		}{
			{"h1", func() http.RoundTripper { return New(url, nil) }},
			{"net-http", func() http.RoundTripper { return tunedNetHTTP() }},
		} {
			b.Run(mode+"/"+c.name, func(b *testing.B) {
				rt := c.rt()
				defer rt.(interface{ CloseIdleConnections() }).CloseIdleConnections()
				call(b, rt) // the first connection is not timed
				b.ReportAllocs()
				b.ResetTimer()
				before := cpuTime(b)
				if mode == "seq" {
					for range b.N {
						call(b, rt)
					}
				} else {
					b.SetParallelism(8) // 16 on 2 cores
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							call(b, rt)
						}
					})
				}
				b.ReportMetric(float64(cpuTime(b)-before)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
