//go:build unix

package gateway

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// TestFleetMeasure is a load program, not a check of speed: it reports
// what nginx (the shipped nginx.conf) adds to a tools/call compared with
// the same replica called directly, both measured in this run, interleaved
// in batches so that drift on a shared machine hits both alike; and how
// evenly round robin spreads new sessions over two replicas. It runs only
// with VIEWMUX_FLEET_MEASURE=1:
//
//	VIEWMUX_FLEET_MEASURE=1 go test ./integration -run TestFleetMeasure -v
func TestFleetMeasure(t *testing.T) {
	if os.Getenv("VIEWMUX_FLEET_MEASURE") != "1" {
		t.Skip("a measurement: set VIEWMUX_FLEET_MEASURE=1")
	}
	requireNginx(t)
	up := whoamiUpstream(t)
	a := itest.StartMux(t, replicaConfig("viewmux-a", up))
	b := itest.StartMux(t, replicaConfig("viewmux-b", up))
	ng := startNginx(t, func(listen string) string { return nginxConf(t, listen, a.Addr, b.Addr) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Added latency, c=1: a session opened through nginx, and one opened
	// on the replica it landed on, directly.
	legacy := client.WithProtocolVersion(mcp.ProtocolVersion20251125) // a session, so every call goes to one replica
	via, _ := itest.EraConnect(t, ctx, ng.URL(), legacy)
	who := itest.EraCall(t, ctx, via, "who__whoami", nil, nil)
	replica := map[string]*itest.Mux{"viewmux-a": a, "viewmux-b": b}[who]
	if replica == nil {
		t.Fatalf("the call through nginx was forwarded by %q", who)
	}
	direct, _ := itest.EraConnect(t, ctx, replica.URL(), legacy)
	const batches, batch = 20, 100
	var tDirect, tVia []time.Duration
	call := func(c *client.Client, into *[]time.Duration) {
		for range batch {
			start := time.Now()
			if got := itest.EraCall(t, ctx, c, "who__whoami", nil, nil); got != who {
				t.Fatalf("call forwarded by %q, want %q", got, who)
			}
			*into = append(*into, time.Since(start))
		}
	}
	call(direct, new([]time.Duration)) // warm both paths
	call(via, new([]time.Duration))
	for range batches {
		call(direct, &tDirect)
		call(via, &tVia)
	}
	pd, pv := percentiles(tDirect), percentiles(tVia)
	t.Logf("tools/call c=1, %d calls each, replica %s: direct p50 %v p90 %v p99 %v; through nginx p50 %v p90 %v p99 %v; nginx adds %v at p50 (%.0f%%)",
		len(tDirect), who, pd[0], pd[1], pd[2], pv[0], pv[1], pv[2], pv[0]-pd[0], 100*float64(pv[0]-pd[0])/float64(pd[0]))

	// The mix: sessions opened through nginx one after the other, then
	// 8 at a time, counted by the replica their ids name.
	for _, conc := range []int{1, 8} {
		count := map[string]int{}
		ids := make(chan string, 200)
		sem := make(chan struct{}, conc)
		for range 200 {
			sem <- struct{}{}
			go func() {
				defer func() { <-sem }()
				ids <- openRaw(t, ng.URL())
			}()
		}
		for range 200 {
			id := <-ids
			count[replicaOf(id)]++
			deleteRaw(t, ng.URL(), id)
		}
		t.Logf("200 sessions opened through nginx, %d at a time: %v", conc, count)
	}
}

// percentiles returns the 50th, 90th and 99th percentiles of d.
func percentiles(d []time.Duration) [3]time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return [3]time.Duration{at(0.50), at(0.90), at(0.99)}
}

// openRaw initializes a session at url with one POST and returns its id
// ("" on failure, reported with t.Errorf).
func openRaw(t *testing.T, url string) string {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"mix","version":"1"}}}`, mcp.ProtocolVersion20251125)
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return ""
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := itest.RawClient.Do(req)
	if err != nil {
		t.Error(err)
		return ""
	}
	resp.Body.Close()
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Errorf("initialize through nginx: HTTP %d, session %q", resp.StatusCode, id)
	}
	return id
}

// deleteRaw ends the session id at url.
func deleteRaw(t *testing.T, url, id string) {
	req, err := http.NewRequest(http.MethodDelete, url, nil)
	if err != nil {
		t.Error(err)
		return
	}
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("Mcp-Protocol-Version", mcp.ProtocolVersion20251125)
	resp, err := itest.RawClient.Do(req)
	if err != nil {
		t.Error(err)
		return
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusAccepted {
		t.Errorf("DELETE %s through nginx: HTTP %d", id, resp.StatusCode)
	}
}
