//go:build linux

package bounds

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// Caller A never reads; caller B reads everything. Tokens tell them apart
// (without tokens every loopback client is one caller, its address).
const (
	tokenA = "slow-caller-a"
	tokenB = "slow-caller-b"
	// perCaller is server.max_pending_bytes_per_caller's default.
	perCaller = 64 << 20
	// slowWriteTimeout is the test's server.write_timeout.
	slowWriteTimeout = 2 * time.Second
	// slowCalls is how many 8 MB answers caller A leaves unread on each
	// door.
	slowCalls = 100
)

// slack is the small constant the peak RSS may grow by beyond the bound,
// whatever the number of calls: the call admitted just under the bound
// holds its answer (8 MB), and the next one on its way its upstream's
// read chunks (8 MB); the caller's 100 open connections cost up to
// 128 KiB each (TCP, websocket and session buffers); 16 MiB more is the
// runtime's own headroom.
const slack = 2*slowAnswer + slowCalls*128<<10 + 16<<20

// TestSlowCallerIsBounded: a caller that sends 100 calls answering 8 MB
// each, one after another, and reads none of the answers, over 100
// stateless POSTs on /mcp and over 100 websockets, makes viewmux's RSS
// grow by at most server.max_pending_bytes_per_caller plus slack: past
// the bound its calls are refused as busy, naming it, before they reach
// the upstream. Its RSS comes back down once the write deadline lets the
// unread answers go, and then the caller's calls are served again. A
// second caller's calls are served all along.
func TestSlowCallerIsBounded(t *testing.T) {
	t.Parallel()
	doors := []struct {
		name string
		// call sends caller A's call i and waits until its answer has
		// begun (it is then left unread) or it was refused (the refusal
		// returned).
		call func(t *testing.T, addr string, i int) (refusal string)
		// small returns a call of caller who's, read in full.
		small func(t *testing.T, mux *itest.Mux) func(who string) error
	}{
		{"mcp", func(t *testing.T, addr string, i int) string { return unreadModernPost(t, addr, tokenA, "up__big", i) },
			func(_ *testing.T, mux *itest.Mux) func(string) error {
				return func(who string) error { return smallModernPost(mux.URL(), who) }
			}},
		{"ws", func(t *testing.T, addr string, i int) string { return unreadWSCall(t, addr, tokenA, "up__big", i) },
			func(t *testing.T, mux *itest.Mux) func(string) error { return wsSmallCaller(t, mux.Addr) }},
	}
	for _, door := range doors {
		t.Run(door.name, func(t *testing.T) {
			t.Parallel() // a viewmux of its own: its RSS is its door's
			var served atomic.Int64
			mux := startBigMux(t, &served)
			small := door.small(t, mux)
			for range 3 { // warm up: the pools an answer passes through
				if err := small(tokenB); err != nil {
					t.Fatal(err)
				}
			}
			var quiet []time.Duration
			for range 20 {
				start := time.Now()
				if err := small(tokenB); err != nil {
					t.Fatal(err)
				}
				quiet = append(quiet, time.Since(start))
			}
			before := itest.ProcBytes(t, mux.PID(), "VmRSS")
			resetPeak(t, mux.PID())
			served0 := served.Load()

			// Caller B goes on calling while A floods.
			stop := make(chan struct{})
			var busy []time.Duration
			var bErr error
			var wg sync.WaitGroup
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					start := time.Now()
					if bErr = small(tokenB); bErr != nil {
						return
					}
					busy = append(busy, time.Since(start))
				}
			})
			var refused int
			for i := range slowCalls {
				if r := door.call(t, mux.Addr, 100+i); r != "" {
					refused++
					if !strings.Contains(r, `"code":-32000`) || !strings.Contains(r, "server.max_pending_bytes_per_caller") {
						t.Fatalf("call %d of the caller that does not read: %s; want a -32000 busy error naming server.max_pending_bytes_per_caller", i, r)
					}
				}
			}
			close(stop)
			wg.Wait()
			peak := itest.ProcBytes(t, mux.PID(), "VmHWM") - before
			answered := served.Load() - served0
			t.Logf("/%s: %d unread calls of %d bytes: %d reached the upstream, %d refused; RSS before %.1f MB, peak %.1f MB (+%.1f MB; bound %.1f MB + slack %.1f MB)",
				door.name, slowCalls, slowAnswer, answered, refused, mb(before), mb(before+peak), mb(peak), mb(perCaller), mb(slack))
			t.Logf("/%s: caller B's calls: quiet p50 %v max %v (%d calls); during the flood p50 %v max %v (%d calls)",
				door.name, p50(quiet), slices.Max(quiet), len(quiet), p50(busy), slices.Max(append(busy, 0)), len(busy))
			if bErr != nil {
				t.Fatalf("caller B's call while A held its share: %v", bErr)
			}
			if answered+int64(refused) != slowCalls {
				t.Fatalf("%d calls reached the upstream and %d were refused, of %d", answered, refused, slowCalls)
			}
			if peak > perCaller+slack {
				t.Fatalf("peak RSS grew %.1f MB, over the bound of %.1f MB plus %.1f MB", mb(peak), mb(perCaller), mb(slack))
			}
			if max := slices.Max(append(busy, 0)); max > 10*time.Second {
				t.Fatalf("a call of caller B's took %v while A held its share", max)
			}

			// The write deadline lets A's answers go: RSS comes back down,
			// and A is served again.
			down := time.Now()
			var now int64
			for deadline := down.Add(slowWriteTimeout + 30*time.Second); ; {
				if now = itest.ProcBytes(t, mux.PID(), "VmRSS"); now <= before+16<<20 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("RSS is %.1f MB, %.1f MB over what it was before the unread answers, %v after the flood", mb(now), mb(now-before), time.Since(down))
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("/%s: RSS back to %.1f MB %v after the flood", door.name, mb(now), time.Since(down).Round(10*time.Millisecond))
			waitServed(t, func() error { return small(tokenA) })
		})
	}
}

// startBigMux starts viewmux with tokens A and B and one upstream, whose
// tool big answers slowAnswer bytes (counted in served) and small a word.
func startBigMux(t *testing.T, served *atomic.Int64) *itest.Mux {
	t.Helper()
	answer := strings.Repeat("x", slowAnswer)
	srv := server.NewMCPServer("big", "1", server.WithToolCapabilities(false))
	srv.AddTool(mcp.NewTool("big", mcp.WithReadOnlyHintAnnotation(true)), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		served.Add(1)
		return mcp.NewToolResultText(answer), nil
	})
	srv.AddTool(mcp.NewTool("small", mcp.WithReadOnlyHintAnnotation(true)), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("small"), nil
	})
	up := httptest.NewServer(server.NewStreamableHTTPServer(srv))
	t.Cleanup(up.Close)
	return itest.StartMux(t, fmt.Sprintf(`[server]
write_timeout = %q
[profiles.all]
[[auth.tokens]]
token = %q
profiles = ["all"]
[[auth.tokens]]
token = %q
profiles = ["all"]
[upstreams.up]
url = %q
required = true
`, slowWriteTimeout, tokenA, tokenB, up.URL+"/mcp"))
}

// waitServed waits until call succeeds: the caller's unread answers are
// let go at the write deadline, a little after its stalled writes began.
func waitServed(t *testing.T, call func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(slowWriteTimeout + 30*time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = call(); err == nil {
			return
		}
	}
	t.Fatalf("the caller that did not read is still refused: %v", err)
}

func p50(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// modernBody is a stateless (2026-07-28) tools/call of tool.
func modernBody(id int, tool string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{},`+
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`, id, tool)
}

// unreadModernPost sends a stateless tools/call of tool as token on a
// connection of its own and reads the answer's head only: a refusal is
// read whole and returned; an answer is left unread, the connection open
// until the test ends.
func unreadModernPost(t *testing.T, addr, token, tool string, id int) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetReadBuffer(4096)
	}
	body := modernBody(id, tool)
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
		"Authorization: Bearer %s\r\nMcp-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: %s\r\nContent-Length: %d\r\n\r\n%s",
		addr, token, tool, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 4096), nil)
	if err != nil {
		t.Fatalf("call %d: %v", id, err)
	}
	if resp.ContentLength >= 0 && resp.ContentLength < 4096 {
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	return "" // an answer, left unread
}

// smallModernPost is a stateless tools/call of up__small as token, read
// in full.
func smallModernPost(url, token string) error {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(modernBody(1, "up__small")))
	if err != nil {
		return err
	}
	for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"Authorization": "Bearer " + token, "Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "up__small"} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), `"text":"small"`) {
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	return nil
}

// smallReadBuffer is an HTTP client whose connections keep their
// receive buffers small, so that what a client does not read stays with
// viewmux rather than in the kernel.
var smallReadBuffer = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetReadBuffer(4096)
	}
	return c, err
}}}

// dialWSAs opens an initialized websocket session as token, through hc
// (nil: the default client).
func dialWSAs(t *testing.T, ctx context.Context, addr, token string, hc *http.Client) (*websocket.Conn, error) {
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/ws", &websocket.DialOptions{Subprotocols: []string{"mcp"},
		HTTPClient: hc, HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(-1)
	err = c.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"slow","version":"1"}}}`))
	if err == nil {
		_, _, err = c.Read(ctx)
	}
	if err == nil {
		err = c.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	}
	if err != nil {
		c.CloseNow()
		return nil, err
	}
	return c, nil
}

func wsCall(id int, tool string) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{}}}`, id, tool)
}

// unreadWSCall opens a websocket session as token, sends one tools/call
// of tool and reads the start of the first message only: a refusal is
// read whole and returned; an answer is left unread, the connection open
// until the test ends.
func unreadWSCall(t *testing.T, addr, token, tool string, id int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := dialWSAs(t, ctx, addr, token, smallReadBuffer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	if err := c.Write(ctx, websocket.MessageText, wsCall(id, tool)); err != nil {
		t.Fatal(err)
	}
	_, r, err := c.Reader(ctx)
	if err != nil {
		t.Fatalf("call %d: %v", id, err)
	}
	head := make([]byte, 4096)
	n, err := io.ReadFull(r, head)
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		return string(head[:n]) // all of it: a refusal
	}
	if err != nil {
		t.Fatalf("call %d: %v", id, err)
	}
	return "" // an answer, left unread
}

// wsSmallCaller returns a small call on one websocket session per caller,
// opened on first use and read in full.
func wsSmallCaller(t *testing.T, addr string) func(string) error {
	var mu sync.Mutex
	conns := map[string]*websocket.Conn{}
	id := 10
	return func(token string) error {
		mu.Lock()
		defer mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := conns[token]
		if c == nil {
			var err error
			if c, err = dialWSAs(t, ctx, addr, token, nil); err != nil {
				return err
			}
			conns[token] = c
			t.Cleanup(func() { c.CloseNow() })
		}
		id++
		if err := c.Write(ctx, websocket.MessageText, wsCall(id, "up__small")); err != nil {
			return err
		}
		_, b, err := c.Read(ctx)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), `"text":"small"`) {
			return fmt.Errorf("%s", b)
		}
		return nil
	}
}
