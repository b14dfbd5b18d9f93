//go:build unix

package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// TestFleet runs two viewmux replicas (replica_id viewmux-a and viewmux-b)
// over the same upstream behind a real nginx with the shipped
// configs/examples/deploy/nginx.conf, and checks what clients
// of the fleet see: a legacy session's every request reaches the replica
// that minted it, stateless requests spread, a replica's death costs only
// its own sessions one error, and a hot reload of one replica leaves the
// other alone. Replica A's config is mounted the way kubelet mounts a
// ConfigMap, so the reload is the symlink swap Kubernetes makes.
func TestFleet(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	requireNginx(t)
	up := whoamiUpstream(t)
	cmDir := t.TempDir()
	configA := writeConfigMap(t, cmDir, 1, replicaConfig("viewmux-a", up))
	a := itest.StartMuxWith(t, itest.MuxOptions{Args: []string{"--config", configA}})
	b := itest.StartMux(t, replicaConfig("viewmux-b", up))
	replicas := map[string]*itest.Mux{"viewmux-a": a, "viewmux-b": b}
	ng := startNginx(t, func(listen string) string { return nginxConf(t, listen, a.Addr, b.Addr) })
	peer := startFleetPeer(t, ng.URL())

	const n = 20
	opened := peer.open(n)
	on := map[string][]int{} // replica → indices of the sessions it minted
	for _, s := range opened {
		if s.Error != nil || s.SessionID == "" {
			t.Fatalf("session %d did not open through nginx: %v", s.Index, s.Error)
		}
		r := replicaOf(s.SessionID)
		if replicas[r] == nil {
			t.Fatalf("session id %q names no replica of the fleet", s.SessionID)
		}
		on[r] = append(on[r], s.Index)
	}
	t.Logf("%d sessions through nginx: %d on viewmux-a, %d on viewmux-b", n, len(on["viewmux-a"]), len(on["viewmux-b"]))
	if len(on["viewmux-a"]) == 0 || len(on["viewmux-b"]) == 0 {
		t.Fatalf("round robin put every session on one replica: %v", on)
	}

	// checkRound checks that every session of a round succeeded, listed
	// tools tools, and that each call was forwarded by the replica its
	// session id names.
	checkRound := func(t *testing.T, res []fleetRound, tools map[string]int) {
		t.Helper()
		for _, r := range res {
			want := replicaOf(r.SessionID)
			if !r.OK {
				t.Errorf("session %d (%s): %v", r.Index, r.SessionID, r.Error)
				continue
			}
			if r.Tools != tools[want] {
				t.Errorf("session %d on %s lists %d tools, want %d", r.Index, want, r.Tools, tools[want])
			}
			for i, got := range r.Texts {
				if got != want {
					t.Errorf("session %d (%s): call %d was forwarded by %q", r.Index, r.SessionID, i, got)
				}
			}
		}
	}

	t.Run("every request of a legacy session reaches the replica that minted it", func(t *testing.T) {
		before := map[string]float64{}
		for id, m := range replicas {
			before[id] = requestCount(t, m, "tools/list")
		}
		const rounds, calls = 3, 5
		for range rounds {
			res := peer.round(calls, nil)
			if len(res) != n {
				t.Fatalf("round: %d results, want %d", len(res), n)
			}
			checkRound(t, res, map[string]int{"viewmux-a": 1, "viewmux-b": 1})
		}
		// Each replica's own count of tools/list is its own sessions'.
		for id, m := range replicas {
			got := requestCount(t, m, "tools/list") - before[id]
			if want := float64(rounds * len(on[id])); got != want {
				t.Errorf("%s counted %v tools/list, want %v (%d sessions × %d rounds)", id, got, want, len(on[id]), rounds)
			}
		}
	})

	t.Run("stateless 2026-07-28 requests spread over both replicas", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, _ := itest.EraConnect(t, ctx, ng.URL(), client.WithProtocolVersion(mcp.ProtocolVersion20260728))
		seen := map[string]int{}
		for range 20 {
			seen[itest.EraCall(t, ctx, c, "who__whoami", nil, nil)]++
		}
		t.Logf("20 stateless calls through nginx: %v", seen)
		if seen["viewmux-a"] == 0 || seen["viewmux-b"] == 0 || seen["viewmux-a"]+seen["viewmux-b"] != 20 {
			t.Errorf("stateless calls reached %v, want both replicas and nothing else", seen)
		}
	})

	t.Run("legacy SSE and websocket sessions through nginx", func(t *testing.T) {
		steps := []itest.Op{itest.OpList()}
		for range 5 {
			steps = append(steps, itest.OpCall("who__whoami", map[string]any{}))
		}
		for _, door := range []itest.DoorScript{
			// POST /message?sessionId=… is routed by the id's prefix.
			{Transport: "sse", Script: itest.Script{URL: "http://" + ng.Addr + "/sse", Clients: 6, Steps: steps}},
			// A websocket session is its connection, upgraded through nginx.
			{Transport: "ws", Script: itest.Script{URL: "ws://" + ng.Addr + "/ws", Clients: 6, Steps: steps}},
		} {
			seen := map[string]int{}
			for _, c := range itest.DriveDoor(t, door).Clients {
				first := c.Steps[1].Call(t).Text()
				for i, st := range c.Steps[1:] {
					if got := st.Call(t).Text(); got != first {
						t.Errorf("%s client %d: call %d forwarded by %q, call 0 by %q", door.Transport, c.Index, i, got, first)
					}
				}
				seen[first]++
			}
			t.Logf("6 %s sessions through nginx: %v", door.Transport, seen)
			if seen["viewmux-a"] == 0 || seen["viewmux-b"] == 0 {
				t.Errorf("%s sessions reached %v, want both replicas", door.Transport, seen)
			}
		}
	})

	t.Run("an id naming no replica is 404, so its client initializes again", func(t *testing.T) {
		for _, id := range []string{"viewmux-z.mcp-session-ABCDEFGHIJKLMNOPQRSTUVWXYZ", "no-dot-at-all"} {
			req, err := http.NewRequest(http.MethodPost, ng.URL(), strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Mcp-Session-Id", id)
			req.Header.Set("Mcp-Protocol-Version", mcp.ProtocolVersion20251125)
			resp, err := itest.RawClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("session id %q through nginx: HTTP %d, want 404", id, resp.StatusCode)
			}
		}
	})

	t.Run("a ConfigMap update reloads its replica and leaves the other alone", func(t *testing.T) {
		reloadsB := strings.Count(b.Stderr(), "config reloaded")
		writeConfigMap(t, cmDir, 2, replicaConfig("viewmux-a", up)+
			fmt.Sprintf("\n[upstreams.again]\nurl = %q\nheaders = { X-Replica = \"viewmux-a\" }\n", up))
		itest.WaitStderr(t, a, "config reloaded", 15*time.Second)
		if !strings.Contains(a.Stderr(), "added=[again]") {
			t.Errorf("viewmux-a's reload did not add the upstream again:\n%s", a.Stderr())
		}
		checkRound(t, peer.round(2, nil), map[string]int{"viewmux-a": 2, "viewmux-b": 1})
		if got := strings.Count(b.Stderr(), "config reloaded"); got != reloadsB {
			t.Errorf("viewmux-b reloaded too")
		}
	})

	t.Run("a replica's death costs only its own sessions one error", func(t *testing.T) {
		if err := b.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if _, ok := b.Wait(10 * time.Second); !ok {
			t.Fatal("viewmux-b did not die")
		}
		res := peer.round(1, nil)
		slowest := 0
		for _, r := range res {
			switch replicaOf(r.SessionID) {
			case "viewmux-a":
				if !r.OK {
					t.Errorf("session %d of the surviving replica failed: %v", r.Index, r.Error)
				}
			case "viewmux-b":
				// nginx answers for the dead replica as the replica would
				// for a session it does not know: 404, initialize again.
				if r.OK || r.Error == nil || string(r.Error.Code) != "404" || !strings.Contains(r.Error.Message, "initialize a new session") {
					t.Errorf("session %d of the dead replica: ok %v, error %v; want 404 saying to initialize a new session", r.Index, r.OK, r.Error)
				}
				// fleet.mjs gives each request 10s: an error well before
				// that is an answer, not a timeout.
				if r.Ms >= 5000 {
					t.Errorf("session %d of the dead replica waited %d ms for its error: %v", r.Index, r.Ms, r.Error)
				}
				slowest = max(slowest, r.Ms)
			}
		}
		t.Logf("the dead replica's %d sessions got their error within %d ms (first: %v)", len(on["viewmux-b"]), slowest, firstError(res, "viewmux-b"))

		again := peer.reopen(on["viewmux-b"])
		for _, s := range again {
			if s.Error != nil || replicaOf(s.SessionID) != "viewmux-a" {
				t.Errorf("session %d initialized again as %q (%v), want a session of viewmux-a", s.Index, s.SessionID, s.Error)
			}
		}
		checkRound(t, peer.round(2, nil), map[string]int{"viewmux-a": 2})
		for _, s := range peer.open(4) {
			if s.Error != nil || replicaOf(s.SessionID) != "viewmux-a" {
				t.Errorf("new session %d is %q (%v), want a session of the survivor", s.Index, s.SessionID, s.Error)
			}
		}
	})
}

// firstError returns the error of the first failed session of replica.
func firstError(res []fleetRound, replica string) string {
	for _, r := range res {
		if replicaOf(r.SessionID) == replica && r.Error != nil {
			return r.Error.String()
		}
	}
	return "none"
}

// requestCount returns how many messages of method mux counted, whatever
// their outcome (viewmux_requests_total).
func requestCount(t *testing.T, mux *itest.Mux, method string) float64 {
	t.Helper()
	sum := 0.0
	for series, v := range itest.Scrape(t, mux).Values {
		if strings.HasPrefix(series, "viewmux_requests_total{") && strings.Contains(series, fmt.Sprintf("method=%q", method)) {
			sum += v
		}
	}
	return sum
}

// writeConfigMap writes text as the key viewmux.toml of a ConfigMap volume
// mounted at dir, and returns the file's path. It lays the files out as
// kubelet does, and updates them as kubelet does: generation gen's data
// goes to a new directory, the symlink ..data is swapped to it atomically
// (a new symlink renamed over it), and the previous generation is removed.
// viewmux.toml itself is a symlink to ..data/viewmux.toml, so an update
// touches nothing of that name.
func writeConfigMap(t *testing.T, dir string, gen int, text string) string {
	t.Helper()
	stamp := fmt.Sprintf("..2026_01_01_00_00_%02d.%09d", gen, gen)
	if err := os.Mkdir(filepath.Join(dir, stamp), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, stamp, "viewmux.toml"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := os.Symlink(stamp, filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "viewmux.toml")
	if old == "" {
		if err := os.Symlink(filepath.Join("..data", "viewmux.toml"), path); err != nil {
			t.Fatal(err)
		}
	} else if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestFleetHeldCallRetry checks the one piece of state a replica holds
// outside a session: a legacy upstream's call held open for a
// 2026-07-28 client's input_required retry. The retry of a call held by
// viewmux-a that reaches viewmux-b is told which replica holds it; the same
// retry reaching viewmux-a completes the call.
func TestFleetHeldCallRetry(t *testing.T) {
	url, calls := itest.MrtrUpstream(t, mcp.LegacyProtocolVersions()...)
	config := func(id string) string {
		return fmt.Sprintf("[server]\nreplica_id = %q\n[upstreams.m]\nurl = %q\nrequired = true\n", id, url)
	}
	a := itest.StartMux(t, config("viewmux-a"))
	b := itest.StartMux(t, config("viewmux-b"))
	for _, tc := range []struct {
		name, retryTo, want string
	}{
		{"retry on the replica that holds the call", a.Addr, "hello Ada"},
		{"retry on another replica", b.Addr, `requestState belongs to viewmux replica "viewmux-a", not this one ("viewmux-b")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			hc := &http.Client{Transport: retryTo{addr: tc.retryTo, base: http.DefaultTransport}}
			tr, err := transport.NewStreamableHTTP(a.URL(), transport.WithHTTPBasicClient(hc))
			if err != nil {
				t.Fatal(err)
			}
			answer := &itest.ElicitAnswer{}
			c := client.NewClient(tr, client.WithProtocolVersion(mcp.ProtocolVersion20260728), client.WithElicitationHandler(answer))
			t.Cleanup(func() { c.Close() })
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			var init mcp.InitializeRequest
			init.Params.ClientInfo = mcp.Implementation{Name: "fleet-held-call", Version: "1.0.0"}
			if _, err := c.Initialize(ctx, init); err != nil {
				t.Fatal(err)
			}
			before := calls.Load()
			var req mcp.CallToolRequest
			req.Params.Name = "m__greet"
			res, err := c.CallTool(ctx, req)
			got := itest.EraText(res)
			if err != nil {
				got = err.Error()
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("tools/call with its retry sent to %s: %q, want %q", tc.retryTo, got, tc.want)
			}
			if answer.N.Load() != 1 || calls.Load() == before {
				t.Errorf("the client was asked %d times and the upstream ran %d times: the call was not held", answer.N.Load(), calls.Load()-before)
			}
		})
	}
}

// retryTo sends the retry of an input_required call (a request carrying
// inputResponses) to addr, and every other request where it was going.
type retryTo struct {
	addr string
	base http.RoundTripper
}

func (r retryTo) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Method != http.MethodPost {
		return r.base.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(body))
	if bytes.Contains(body, []byte(`"inputResponses"`)) {
		out.URL.Host, out.Host = r.addr, r.addr
	}
	return r.base.RoundTrip(out)
}
