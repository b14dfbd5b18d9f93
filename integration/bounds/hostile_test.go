//go:build linux

package bounds

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// The hostile upstream of issue 17 (findings 5 and 6): ./hostile, a server
// that lists huge catalogs, pages without end, floods list_changed and log
// messages, and sends resources/updated for another upstream's URI. Each
// test runs it as a real stdio child of the real viewmux binary, or serving
// streamable HTTP on a loopback port.

// hostileBinary builds ./hostile once per test run.
func hostileBinary(t testing.TB) string {
	t.Helper()
	return itest.Fixture(t, "./hostile")
}

// hostileUpstream is the config table of one hostile upstream named name,
// started with args, plus the extra keys.
func hostileUpstream(t testing.TB, name string, args []string, extra string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = itest.TomlString(a)
	}
	return fmt.Sprintf("[upstreams.%s]\ncommand = %s\nargs = [%s]\n%s\n", name, itest.TomlString(hostileBinary(t)), strings.Join(quoted, ", "), extra)
}

// hostileHTTP serves ./hostile with args over streamable HTTP on a
// loopback port and returns the config table of upstream name for it.
func hostileHTTP(t *testing.T, name string, args []string, extra string) string {
	t.Helper()
	bin := hostileBinary(t)
	addr := itest.StartLoopbackServer(t, "hostile "+name, func(addr string) *exec.Cmd {
		return exec.Command(bin, append([]string{"-http", addr}, args...)...)
	}, func(addr string, exited <-chan struct{}) error {
		for deadline := time.Now().Add(10 * time.Second); ; {
			resp, err := http.Post("http://"+addr+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
			if err == nil {
				resp.Body.Close()
				return nil
			}
			select {
			case <-exited:
				return fmt.Errorf("exited: %w", err)
			default:
			}
			if time.Now().After(deadline) {
				return err
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	return fmt.Sprintf("[upstreams.%s]\nurl = %s\n%s\n", name, itest.TomlString("http://"+addr+"/mcp"), extra)
}

// hostileOn returns the config table of upstream name: ./hostile with
// args as a stdio child, or over streamable HTTP.
func hostileOn(t *testing.T, transport, name string, args []string, extra string) string {
	if transport == "http" {
		return hostileHTTP(t, name, args, extra)
	}
	return hostileUpstream(t, name, args, extra)
}

// hostileClient opens an mcp-go session on mux's /mcp that keeps a GET
// stream open, and collects the notifications it gets.
type hostileClient struct {
	c *client.Client

	mu    sync.Mutex
	notes []mcp.JSONRPCNotification
}

func openHostileClient(t *testing.T, mux *itest.Mux) *hostileClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := transport.NewStreamableHTTP(mux.URL(), transport.WithContinuousListening())
	if err != nil {
		t.Fatal(err)
	}
	hc := &hostileClient{c: client.NewClient(tr)}
	t.Cleanup(func() { hc.c.Close() })
	hc.c.OnNotification(func(n mcp.JSONRPCNotification) {
		hc.mu.Lock()
		hc.notes = append(hc.notes, n)
		hc.mu.Unlock()
	})
	if err := hc.c.Start(context.Background()); err != nil { // its ctx bounds the GET stream
		t.Fatal(err)
	}
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "hostile-test", Version: "1.0.0"}
	if _, err := hc.c.Initialize(ctx, init); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	return hc
}

// call calls tool with args and returns its text; a failure fails t.
func (hc *hostileClient) call(t *testing.T, tool string, args map[string]any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var req mcp.CallToolRequest
	req.Params.Name = tool
	req.Params.Arguments = args
	res, err := hc.c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("tools/call %s: %v", tool, err)
	}
	if res.IsError {
		t.Fatalf("tools/call %s: error result %q", tool, itest.EraText(res))
	}
	return itest.EraText(res)
}

// received returns the notifications of method received so far.
func (hc *hostileClient) received(method string) []mcp.JSONRPCNotification {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	var out []mcp.JSONRPCNotification
	for _, n := range hc.notes {
		if n.Method == method {
			out = append(out, n)
		}
	}
	return out
}

// statusRow is one upstream's row of /status.json, with its error.
type statusRow struct {
	State     string `json:"state"`
	Restarts  int    `json:"restarts"`
	LastError string `json:"last_error"`
}

// waitStatus polls mux's /status.json until upstream name's row satisfies
// ok, and returns it; after timeout it fails t with the last row.
func waitStatus(t *testing.T, mux *itest.Mux, name string, timeout time.Duration, ok func(statusRow) bool) statusRow {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last statusRow
	for {
		var st struct {
			Upstreams []struct {
				Name string `json:"name"`
				statusRow
			} `json:"upstreams"`
		}
		err := getJSON("http://"+mux.Addr+"/status.json", &st)
		for _, u := range st.Upstreams {
			if u.Name == name {
				last = u.statusRow
			}
		}
		if err == nil && ok(last) {
			return last
		}
		if time.Now().After(deadline) {
			t.Fatalf("upstream %q: status %+v (err %v) after %s\n--- viewmux stderr ---\n%s", name, last, err, timeout, mux.Stderr())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startsIn counts the lines ./hostile -starts wrote to path: its starts.
func startsIn(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// maxStartsWithBackoff is the most starts an upstream retried with
// backoff (1s doubling, ±20% jitter) can have made in elapsed since its
// first: start n+1 comes at least 0.8·(2ⁿ−1) s after the first. A retry
// loop makes far more. Slowness only lowers the count.
func maxStartsWithBackoff(elapsed time.Duration) int {
	return 1 + int(math.Floor(math.Log2(elapsed.Seconds()/0.8+1)))
}

// TestHostileCatalogBounds: a catalog past max_catalog_items or
// max_catalog_bytes, in one page, over endless or repeated cursors, or
// after a list_changed, marks the upstream down with an error naming the
// upstream and the bound; it is retried with backoff, not in a loop, and
// viewmux's memory stays bounded while it reads the catalog.
func TestHostileCatalogBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		args  []string
		extra string
		grow  int    // after the upstream is up, grow its catalog to this many tools
		http  bool   // serve it over streamable HTTP (one process: no restarts to count)
		want  string // in the upstream's last_error
	}{
		{name: "100k tools in one 12MB page", args: []string{"-tools", "100000", "-desc", "60"},
			want: "max_catalog_items = 10000"},
		{name: "bytes in one page", args: []string{"-tools", "600", "-desc", "2000"}, extra: `max_catalog_bytes = "1MiB"`,
			want: "max_catalog_bytes = 1048576"},
		{name: "endless cursors with items", args: []string{"-endless", "-tools", "100000000", "-page", "500", "-desc", "60"},
			want: "max_catalog_items = 10000"},
		{name: "endless empty pages", args: []string{"-endless"}, extra: "max_catalog_items = 300",
			want: "max_catalog_items = 300"},
		{name: "repeated cursor", args: []string{"-repeat", "-tools", "20", "-page", "5"},
			want: "list cursor did not advance"},
		{name: "past the bound after list_changed", grow: 2000, extra: "max_catalog_items = 1000",
			want: "max_catalog_items = 1000"},
		{name: "100k tools in one page over HTTP", http: true, args: []string{"-tools", "100000", "-desc", "60"},
			want: "max_catalog_items = 10000"},
		{name: "endless cursors over HTTP", http: true, args: []string{"-endless", "-tools", "100000000", "-page", "500"},
			extra: "max_catalog_items = 3000", want: "max_catalog_items = 3000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			starts := filepath.Join(t.TempDir(), "starts")
			args := append([]string{"-starts", starts}, tc.args...)
			began := time.Now() // before the first start
			entry := hostileUpstream(t, "hostile", args, tc.extra)
			if tc.http {
				entry = hostileHTTP(t, "hostile", tc.args, tc.extra)
			}
			mux := itest.StartMux(t, `[server]
shutdown_grace = "5s"
`+entry)
			resetPeak(t, mux.PID())
			before := itest.ProcBytes(t, mux.PID(), "VmRSS")
			if tc.grow > 0 {
				waitStatus(t, mux, "hostile", 20*time.Second, func(r statusRow) bool { return r.State == "up" })
				hc := openHostileClient(t, mux)
				hc.call(t, "hostile__grow", map[string]any{"count": tc.grow})
			}
			row := waitStatus(t, mux, "hostile", 30*time.Second, func(r statusRow) bool {
				return r.LastError != "" && (r.Restarts >= 2 || tc.grow > 0) // a grown one reconnects small
			})
			if !strings.Contains(row.LastError, `upstream "hostile"`) || !strings.Contains(row.LastError, tc.want) {
				t.Errorf("last_error = %q, want it to name the upstream and %q", row.LastError, tc.want)
			}
			if row.State == "up" && tc.grow == 0 {
				t.Errorf("state = up with a catalog past its bound")
			}
			if tc.http {
				return
			}
			// Backoff: count the starts over a few seconds more.
			time.Sleep(4 * time.Second)
			n := startsIn(t, starts)
			elapsed := time.Since(began)
			if limit := maxStartsWithBackoff(elapsed); n > limit {
				t.Errorf("%d starts in about %s: a retry loop, not backoff (at most %d)", n, elapsed.Round(time.Second), limit)
			}
			if peak := itest.ProcBytes(t, mux.PID(), "VmHWM"); peak-before > 200<<20 {
				t.Errorf("viewmux's peak RSS grew by %d MiB reading the catalog, want under 200 MiB", (peak-before)>>20)
			}
		})
	}
}

// TestHostileListChangedFlood: a continuous tools/list_changed flood costs
// a refetch per doubling wait, not one per notification, and another
// upstream keeps answering.
func TestHostileListChangedFlood(t *testing.T) {
	t.Parallel()
	mux := itest.StartMux(t, `[server]
shutdown_grace = "5s"
`+hostileUpstream(t, "flood", nil, "required = true")+hostileUpstream(t, "bystander", nil, "required = true"))
	hc := openHostileClient(t, mux)
	if got := hc.call(t, "flood__stats", nil); got != "lists=1" {
		t.Fatalf("before the flood: %s, want lists=1", got)
	}
	began := time.Now()
	hc.call(t, "flood__flood", map[string]any{"count": 0})
	// viewmux says so once its wait has doubled past a second.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(mux.Stderr(), "list_changed keeps coming from upstream"); {
		if time.Now().After(deadline) {
			t.Fatalf("no log line about the flood after 30s\n--- viewmux stderr ---\n%s", mux.Stderr())
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	for i := range 5 {
		if got := hc.call(t, "bystander__echo", map[string]any{"text": "still here"}); got != "still here" {
			t.Fatalf("bystander call %d during the flood: %q", i, got)
		}
	}
	stats := hc.call(t, "flood__stats", nil)
	elapsed := time.Since(began)
	hc.call(t, "flood__stop", nil)
	var lists int
	if _, err := fmt.Sscanf(stats, "lists=%d", &lists); err != nil {
		t.Fatalf("stats %q: %v", stats, err)
	}
	// Refetch k+1 waits at least 50ms·2ᵏ after refetch k: in elapsed there
	// is room for log2(elapsed/50ms + 1) of them, plus the first listing.
	limit := 1 + int(math.Ceil(math.Log2(elapsed.Seconds()/0.05+1)))
	if lists-1 > limit {
		t.Errorf("%d tools/list refetches in %s of list_changed flood, want at most %d", lists-1, elapsed.Round(time.Millisecond), limit)
	}
	if lists < 2 {
		t.Errorf("no refetch at all during the flood (%s): list_changed is ignored", stats)
	}
	t.Logf("%d tools/list refetches in %s of list_changed flood", lists-1, elapsed.Round(time.Millisecond))
}

// TestHostileNotificationBudget: log messages past an upstream's budget
// are dropped, with a log line naming the upstream, not silently.
func TestHostileNotificationBudget(t *testing.T) {
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) { testHostileNotificationBudget(t, transport) })
	}
}

func testHostileNotificationBudget(t *testing.T, transport string) {
	mux := itest.StartMux(t, `[server]
shutdown_grace = "5s"
`+hostileOn(t, transport, "chatty", nil, "required = true"))
	hc := openHostileClient(t, mux)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var lvl mcp.SetLevelRequest
	lvl.Params.Level = mcp.LoggingLevelDebug
	if err := hc.c.SetLevel(ctx, lvl); err != nil {
		t.Fatalf("logging/setLevel: %v", err)
	}
	const sent = 12000 // past the budget's burst of 5000 and 500/s
	hc.call(t, "chatty__chatter", map[string]any{"count": sent})
	hc.call(t, "chatty__echo", map[string]any{"text": "barrier"})
	time.Sleep(500 * time.Millisecond)
	got := len(hc.received("notifications/message"))
	if got >= sent {
		t.Errorf("the client got all %d log messages of a flood, want the upstream's budget", got)
	}
	logs := mux.Stderr()
	if !strings.Contains(logs, "dropping notifications from upstream") || !strings.Contains(logs, "chatty") {
		t.Errorf("no log line naming the upstream whose notifications were dropped\n--- viewmux stderr ---\n%s", logs)
	}
	t.Logf("the client got %d of %d log messages", got, sent)
}

// TestHostileProgressIsNotDropped: progress an upstream sends for a
// client's call is not a flood: 8000 of them for one call, past the
// budget's burst of 5000 and 500 a second, all reach the client (on both
// transports; what is read is still paced by the intake).
func TestHostileProgressIsNotDropped(t *testing.T) {
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			mux := itest.StartMux(t, `[server]
shutdown_grace = "5s"
`+hostileOn(t, transport, "busy", nil, "required = true"))
			hc := openHostileClient(t, mux)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			const sent = 8000
			var req mcp.CallToolRequest
			req.Params.Name = "busy__progress"
			req.Params.Arguments = map[string]any{"count": sent}
			req.Params.Meta = &mcp.Meta{ProgressToken: "p1"}
			if _, err := hc.c.CallTool(ctx, req); err != nil {
				t.Fatalf("tools/call: %v", err)
			}
			if got := len(hc.received("notifications/progress")); got != sent {
				t.Errorf("the client got %d of %d progress notifications of its call", got, sent)
			}
			if strings.Contains(mux.Stderr(), "dropping notifications from upstream") {
				t.Errorf("progress was dropped as a flood\n%s", mux.Stderr())
			}
		})
	}
}

// TestHostileSpoofedResourceUpdated: an upstream's resources/updated for
// a URI another upstream serves is dropped and logged naming it; the
// owner's own reaches the subscriber.
func TestHostileSpoofedResourceUpdated(t *testing.T) {
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) { testHostileSpoofedResourceUpdated(t, transport) })
	}
}

func testHostileSpoofedResourceUpdated(t *testing.T, transport string) {
	const uri = "file:///owned/data.txt"
	mux := itest.StartMux(t, `[server]
shutdown_grace = "5s"
`+hostileOn(t, transport, "owner", []string{"-resource", uri}, "required = true")+
		hostileOn(t, transport, "spoofer", nil, "required = true"))
	hc := openHostileClient(t, mux)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var sub mcp.SubscribeRequest
	sub.Params.URI = uri
	if err := hc.c.Subscribe(ctx, sub); err != nil {
		t.Fatalf("resources/subscribe: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // the GET stream opens
	hc.call(t, "spoofer__spoof", map[string]any{"uri": uri})
	hc.call(t, "owner__spoof", map[string]any{"uri": uri}) // the owner's own: genuine
	deadline := time.Now().Add(10 * time.Second)
	for len(hc.received("notifications/resources/updated")) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // anything else that was coming
	got := hc.received("notifications/resources/updated")
	if len(got) != 1 {
		t.Errorf("the subscriber got %d resources/updated, want 1 (the owner's): %+v; all: %+v", len(got), got, hc.notes)
	}
	logs := mux.Stderr()
	if !strings.Contains(logs, "dropping resources/updated from upstream") || !strings.Contains(logs, "spoofer") {
		t.Errorf("no log line naming the spoofing upstream\n--- viewmux stderr ---\n%s", logs)
	}
}

// getJSON decodes the JSON body of a GET of url into v.
func getJSON(url string, v any) error {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
