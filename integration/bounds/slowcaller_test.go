//go:build linux

package bounds

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
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
	// door, its calls sent all at once.
	slowCalls = 100
	// slowHead is what A reads of each answer: a refusal whole, an answer
	// not (it is larger).
	slowHead = 4096
)

// heldAtMost is the regression bound on viewmux's peak RSS growth while
// A's answers go unread: three quarters of what A left unread (800 MB).
// It is not the bound the per-caller share sets on what viewmux holds for
// A, which sessions' TestCallsSentAtOnceAreBounded checks exactly: the
// answers still on their way from the upstream, and the garbage of those
// let go, are not counted in any share. Measured on 2 cores with calls
// sent all at once: +159 MB on /ws and +296 MB on /mcp alone, +183 and
// +349 MB under the whole suite (before answers were let go, +0.6 and
// +1.5 GB).
const heldAtMost = slowCalls * slowAnswer * 3 / 4

// slack is the small constant the peak RSS grows by beyond the share
// when A sends its calls one after another, on an idle machine: the call admitted just under
// the share holds its answer, and the next its upstream's read (8 MB
// each); A's 100 open connections cost up to 128 KiB each (TCP,
// websocket and session buffers); 16 MiB more is the runtime's own
// headroom.
const slack = 2*slowAnswer + slowCalls*128<<10 + 16<<20

// TestSlowCallerIsBounded: a caller sends 100 calls answering 8 MB each,
// and reads none of the answers, over 100 stateless POSTs on /mcp and
// over 100 websockets: first one after another, then all at once. One
// after another, the calls past the share are refused before they reach
// the upstream, and viewmux's RSS grows by about
// server.max_pending_bytes_per_caller plus slack on an idle machine (it is
// logged when more); either way by less than heldAtMost. Each call is
// answered, refused before it reaches the upstream, or, when its answer
// comes with the caller's share full, answered with the busy error that
// says it ran. Once the write deadline lets the unread answers go, RSS
// comes back down and the caller is served again. A second caller's calls
// are served all along.
func TestSlowCallerIsBounded(t *testing.T) {
	t.Parallel()
	doors := []struct {
		name string
		// send sends caller A's call i and returns the connection its
		// answer comes on.
		send func(t *testing.T, addr string, i int) io.Reader
	}{
		{"mcp", sendModernPost},
		{"ws", sendWSCall},
	}
	for _, door := range doors {
		t.Run(door.name, func(t *testing.T) {
			t.Parallel() // a viewmux of its own: its RSS is its door's
			mux := startBigMux(t)
			// One after another first, then all at once: each comes back
			// down before the next begins.
			for _, atOnce := range []bool{false, true} {
				flood(t, mux, door.name, door.send, atOnce)
			}
		})
	}
}

// flood sends caller A's slowCalls calls on one door (send) of mux, one
// after another (each once its answer began or it was refused) or all at
// once (none waiting for another), reads none of the answers, and checks
// what TestSlowCallerIsBounded says.
func flood(t *testing.T, mux *itest.Mux, door string, send func(*testing.T, string, int) io.Reader, atOnce bool) {
	t.Helper()
	mode := "one after another"
	if atOnce {
		mode = "all at once"
	}
	small := func(who string) error { return smallModernPost(mux.URL(), who) }
	var quiet []time.Duration
	for range 10 {
		start := time.Now()
		if err := small(tokenB); err != nil {
			t.Fatal(err)
		}
		quiet = append(quiet, time.Since(start))
	}
	before := itest.ProcBytes(t, mux.PID(), "VmRSS")
	resetPeak(t, mux.PID())
	bigs0 := bigsRead(t, mux, tokenB)

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
			case <-time.After(20 * time.Millisecond):
			}
			start := time.Now()
			if bErr = small(tokenB); bErr != nil {
				return
			}
			busy = append(busy, time.Since(start))
		}
	})
	var answered, refused, letGo int
	classify := func(i int, r io.Reader) {
		head := make([]byte, slowHead)
		n, err := io.ReadFull(r, head)
		switch {
		case err == nil:
			answered++ // an answer, left unread
		case err == io.ErrUnexpectedEOF || err == io.EOF:
			got := string(head[:n])
			if !strings.Contains(got, `"code":-32000`) || !strings.Contains(got, "server.max_pending_bytes_per_caller") {
				t.Fatalf("%s: call %d of the caller that does not read: %s; want an answer, or a -32000 busy error naming server.max_pending_bytes_per_caller", mode, i, got)
			}
			if strings.Contains(got, "the call ran") {
				letGo++
			} else {
				refused++
			}
		default:
			t.Fatalf("%s: call %d: %v", mode, i, err)
		}
	}
	answers := make([]io.Reader, slowCalls)
	for i := range slowCalls {
		if answers[i] = send(t, mux.Addr, 100+i); !atOnce {
			classify(i, answers[i])
		}
	}
	for i, r := range answers {
		if atOnce {
			classify(i, r)
		}
	}
	close(stop)
	wg.Wait()
	peak := itest.ProcBytes(t, mux.PID(), "VmHWM") - before
	ran := bigsRead(t, mux, tokenB) - bigs0
	t.Logf("/%s: %d unread calls of %d bytes sent %s: %d answered, %d let go, %d refused; %d reached the upstream; RSS before %.1f MB, peak %.1f MB (+%.1f MB; the caller's share %.1f MB)",
		door, slowCalls, slowAnswer, mode, answered, letGo, refused, ran, mb(before), mb(before+peak), mb(peak), mb(perCaller))
	t.Logf("/%s: caller B's calls: quiet p50 %v max %v (%d calls); during the flood p50 %v max %v (%d calls)",
		door, p50(quiet), slices.Max(quiet), len(quiet), p50(busy), slices.Max(append(busy, 0)), len(busy))
	if bErr != nil {
		t.Fatalf("caller B's call while A held its share: %v", bErr)
	}
	if answered == 0 || answered+letGo != ran || ran+refused != slowCalls {
		t.Fatalf("%s: %d calls answered, %d let go and %d refused, and %d reached the upstream, of %d; want some answered, and each that ran answered or let go",
			mode, answered, letGo, refused, ran, slowCalls)
	}
	switch {
	case atOnce && letGo == 0:
		t.Fatalf("%s: no answer was let go, of %d that reached the upstream before any was held", mode, ran)
	case !atOnce && refused == 0:
		t.Fatalf("%s: no call was refused before it reached the upstream", mode)
	case peak > heldAtMost:
		t.Fatalf("%s: peak RSS grew %.1f MB, over %.1f MB", mode, mb(peak), mb(heldAtMost))
	case !atOnce && peak > perCaller+slack:
		// Not a failure: on a loaded machine the write deadline lets
		// answers go while the calls are still being sent, and the
		// collector falls behind (+196 MB under the whole suite).
		t.Logf("%s: peak RSS grew %.1f MB, over the share of %.1f MB plus %.1f MB", mode, mb(peak), mb(perCaller), mb(slack))
	}

	// The write deadline lets A's answers go: A is served again,
	// and RSS comes back down.
	down := time.Now()
	waitServed(t, func() error { return small(tokenA) })
	var now int64
	for deadline := down.Add(slowWriteTimeout + 30*time.Second); ; {
		if now = itest.ProcBytes(t, mux.PID(), "VmRSS"); now <= before+32<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: RSS is %.1f MB, %.1f MB over what it was before the unread answers, %v after the flood", mode, mb(now), mb(now-before), time.Since(down))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("/%s, %s: RSS back to %.1f MB %v after the flood", door, mode, mb(now), time.Since(down).Round(10*time.Millisecond))
}

// startBigMux starts viewmux with tokens A and B and two hostile upstreams
// over stdio: up, whose big tool answers as many bytes as asked, for A,
// and other for B, so that B's calls measure viewmux, not up's pipe,
// which A's answers fill.
func startBigMux(t *testing.T) *itest.Mux {
	t.Helper()
	return itest.StartMux(t, fmt.Sprintf(`[server]
write_timeout = %q
[profiles.all]
[[auth.tokens]]
token = %q
profiles = ["all"]
[[auth.tokens]]
token = %q
profiles = ["all"]
%s
%s`, slowWriteTimeout, tokenA, tokenB, hostileUpstream(t, "up", nil, "required = true"), hostileUpstream(t, "other", nil, "required = true")))
}

// bigsRead returns how many big calls the upstream has read, asked as
// who.
func bigsRead(t *testing.T, mux *itest.Mux, who string) int {
	t.Helper()
	text, err := modernCall(mux.URL(), who, "up__bigs", "{}")
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if _, err := fmt.Sscan(text, &n); err != nil {
		t.Fatalf("up__bigs answered %q", text)
	}
	return n
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
func modernBody(id int, tool, args string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s,`+
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`, id, tool, args)
}

// bigArgs asks big for one slowAnswer.
var bigArgs = fmt.Sprintf(`{"count":%d}`, slowAnswer)

// sendModernPost sends a stateless tools/call of up__big as A on a
// connection of its own, and returns the body of its answer, of which
// nothing is read until the caller reads it.
func sendModernPost(t *testing.T, addr string, id int) io.Reader {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetReadBuffer(slowHead)
	}
	body := modernBody(id, "up__big", bigArgs)
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
		"Authorization: Bearer %s\r\nMcp-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: up__big\r\nContent-Length: %d\r\n\r\n%s",
		addr, tokenA, len(body), body)
	return readerFunc(func(p []byte) (int, error) {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReaderSize(c, slowHead), nil)
		if err != nil {
			return 0, err
		}
		return io.ReadFull(resp.Body, p)
	})
}

// readerFunc reads an answer's head, opening the answer on its first
// call, so that sending does not wait for it. Like io.ReadFull, it fills
// p or fails (io.ErrUnexpectedEOF: the answer is shorter than p).
type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// modernCall is a stateless tools/call of tool as token, read in full; it
// returns the text of the result.
func modernCall(url, token, tool, args string) (string, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(modernBody(1, tool, args)))
	if err != nil {
		return "", err
	}
	for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"Authorization": "Bearer " + token, "Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	_, text, ok := strings.Cut(string(b), `"text":"`)
	if !ok {
		return "", fmt.Errorf("%s: %s", resp.Status, b)
	}
	text, _, _ = strings.Cut(text, `"`)
	return text, nil
}

// smallModernPost is a stateless call of other__echo as token, read in
// full.
func smallModernPost(url, token string) error {
	text, err := modernCall(url, token, "other__echo", `{"text":"small"}`)
	if err == nil && text != "small" {
		err = fmt.Errorf("other__echo answered %q", text)
	}
	return err
}

// smallReadBuffer is an HTTP client whose connections keep their
// receive buffers small, so that what a client does not read stays with
// viewmux rather than in the kernel.
var smallReadBuffer = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetReadBuffer(slowHead)
	}
	return c, err
}}}

// sendWSCall opens an initialized websocket session as A, sends one
// tools/call of up__big, and returns its first message's reader, of which
// nothing is read until the caller reads it.
func sendWSCall(t *testing.T, addr string, id int) io.Reader {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/ws", &websocket.DialOptions{Subprotocols: []string{"mcp"},
		HTTPClient: smallReadBuffer, HTTPHeader: http.Header{"Authorization": {"Bearer " + tokenA}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	c.SetReadLimit(-1)
	send := func(s string) {
		if err := c.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"slow","version":"1"}}}`)
	if _, _, err := c.Read(ctx); err != nil {
		t.Fatal(err)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"up__big","arguments":%s}}`, id, bigArgs))
	var r io.Reader
	return readerFunc(func(p []byte) (int, error) {
		if r == nil {
			var err error
			if _, r, err = c.Reader(ctx); err != nil {
				return 0, err
			}
		}
		return io.ReadFull(r, p)
	})
}
