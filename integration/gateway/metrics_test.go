//go:build unix

package gateway

import (
	"testing"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// TestMetrics checks the gauges of GET /metrics against what clients do:
// profiles and requests with equal effective rules share one filter
// instance, sessions are counted, and the catalog size is the
// size of the unfiltered listing.
func TestMetrics(t *testing.T) {
	t.Parallel()
	itest.RequireFilesystemServer(t)
	mux := itest.StartMux(t, itest.ProfilesConfig(t, itest.RealTempDir(t), ""))
	url := mux.URL()

	before := itest.Scrape(t, mux)
	for _, name := range []string{"viewmux_filter_instances", "viewmux_sessions", "viewmux_catalog_tools"} {
		before.Gauge(t, name)
	}
	if got := before.Gauge(t, "viewmux_sessions"); got != 0 {
		t.Errorf("viewmux_sessions = %v before any client, want 0", got)
	}
	for _, up := range []string{"demo", "every", "fs", "memory"} {
		series := `viewmux_upstream_up{upstream="` + up + `"}`
		if v, ok := before.Values[series]; !ok || v != 1 {
			t.Errorf("%s = %v (present %v), want 1 once ready", series, v, ok)
		}
	}

	// open drives one session with a listing and leaves it open (the
	// client disconnects without DELETE); it returns the listing and the
	// metrics scraped afterwards.
	open := func(t *testing.T, url string, headers map[string]string) ([]string, itest.Metrics) {
		t.Helper()
		names := itest.Drive(t, itest.Script{URL: url, Headers: headers, Steps: []itest.Op{itest.OpList()}}).Steps(t)[0].Names
		return names, itest.Scrape(t, mux)
	}

	var sessions float64
	t.Run("catalog_tools is the unfiltered listing", func(t *testing.T) {
		all, m := open(t, url, nil)
		sessions++
		if got := m.Gauge(t, "viewmux_catalog_tools"); got != float64(len(all)) {
			t.Errorf("viewmux_catalog_tools = %v, want %d (the tools/list of the default profile, no [filter] configured)", got, len(all))
		}
		if got := m.Gauge(t, "viewmux_sessions"); got != sessions {
			t.Errorf("viewmux_sessions = %v after %v sessions, want %v", got, sessions, sessions)
		}
	})

	t.Run("equal rules share one filter instance", func(t *testing.T) {
		base := itest.Scrape(t, mux).Gauge(t, "viewmux_filter_instances")
		steps := []struct {
			name    string
			url     string
			headers map[string]string
			delta   float64 // new instances, relative to base
		}{
			{"readonly", url + "?profile=readonly", nil, 1},
			{"readonly2 (same rules as readonly)", url + "?profile=readonly2", nil, 1},
			{"readonly again, by header", url, map[string]string{"Mcp-Profile": "readonly"}, 1},
			{"no profile + Mcp-Read-Only (same rules as readonly)", url, map[string]string{"Mcp-Read-Only": "true"}, 1},
			{"readonly + ?read_only=true (redundant narrowing)", url + "?profile=readonly&read_only=true", nil, 1},
			{"fsread", url + "?profile=fsread", nil, 2},
			{"fsonly + ?read_only=true (same rules as fsread)", url + "?profile=fsonly&read_only=true", nil, 2},
			{"fsonly (new rules)", url + "?profile=fsonly", nil, 3},
		}
		var first []string
		for i, s := range steps {
			names, m := open(t, s.url, s.headers)
			sessions++
			if i == 0 {
				first = names
			}
			if i < 5 {
				itest.CheckNames(t, s.name+" listing", names, first)
			}
			if got := m.Gauge(t, "viewmux_filter_instances"); got != base+s.delta {
				t.Errorf("after a session with %s: viewmux_filter_instances = %v, want %v (%v before the readonly session, +%v)",
					s.name, got, base+s.delta, base, s.delta)
			}
			if got := m.Gauge(t, "viewmux_sessions"); got != sessions {
				t.Errorf("after a session with %s: viewmux_sessions = %v, want %v", s.name, got, sessions)
			}
		}
	})

	t.Run("a terminated session is not counted", func(t *testing.T) {
		itest.Drive(t, itest.Script{URL: url, Terminate: true, Steps: []itest.Op{itest.OpList()}})
		if got := itest.Scrape(t, mux).Gauge(t, "viewmux_sessions"); got != sessions {
			t.Errorf("viewmux_sessions = %v after a session was opened and DELETEd, want %v (unchanged)", got, sessions)
		}
	})
}
