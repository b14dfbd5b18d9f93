//go:build unix

package integration

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// metrics is one scrape of GET /metrics (Prometheus text format).
type metrics struct {
	values map[string]float64 // series ("name" or "name{labels}") → value
	types  map[string]string  // metric name → TYPE
	text   string
}

// scrape GETs /metrics and parses it, failing the test on anything but a
// 200 with parsable text.
func scrape(t testing.TB, mux *Mux) metrics {
	t.Helper()
	resp, err := rawClient.Get("http://" + mux.Addr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: HTTP %d: %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("GET /metrics: Content-Type %q, want Prometheus text (text/plain; version=0.0.4)", ct)
	}
	m := metrics{values: map[string]float64{}, types: map[string]string{}, text: string(body)}
	sc := bufio.NewScanner(strings.NewReader(m.text))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			if name, typ, ok := strings.Cut(rest, " "); ok {
				m.types[name] = typ
			}
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		// series value [timestamp]; label values may contain spaces.
		series, rest := line, ""
		if i := strings.LastIndex(line, "}"); i >= 0 {
			series, rest = line[:i+1], strings.TrimSpace(line[i+1:])
		} else if f := strings.Fields(line); len(f) >= 2 {
			series, rest = f[0], strings.Join(f[1:], " ")
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			t.Fatalf("GET /metrics: cannot parse line %q", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			t.Fatalf("GET /metrics: line %q: %v", line, err)
		}
		m.values[series] = v
	}
	return m
}

// gauge returns the value of an unlabelled gauge, failing the test when it
// is missing or not a gauge.
func (m metrics) gauge(t testing.TB, name string) float64 {
	t.Helper()
	v, ok := m.values[name]
	if !ok {
		t.Fatalf("/metrics has no %s:\n%s", name, m.viewmuxLines())
	}
	if typ := m.types[name]; typ != "gauge" {
		t.Errorf("/metrics: %s has TYPE %q, want gauge", name, typ)
	}
	return v
}

// viewmuxLines returns the lines about viewmux_* metrics, for messages.
func (m metrics) viewmuxLines() string {
	var out []string
	for _, l := range strings.Split(m.text, "\n") {
		if strings.Contains(l, "viewmux_") && !strings.Contains(l, "_bucket{") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestMetrics checks the gauges of GET /metrics against what clients do:
// profiles and requests with equal effective rules share one filter
// instance, sessions are counted, and the catalog size is the
// size of the unfiltered listing.
func TestMetrics(t *testing.T) {
	requireFilesystemServer(t)
	mux := startMux(t, profilesConfig(t, realTempDir(t), ""))
	url := mux.URL()

	before := scrape(t, mux)
	for _, name := range []string{"viewmux_filter_instances", "viewmux_sessions", "viewmux_catalog_tools"} {
		before.gauge(t, name)
	}
	if got := before.gauge(t, "viewmux_sessions"); got != 0 {
		t.Errorf("viewmux_sessions = %v before any client, want 0", got)
	}
	for _, up := range []string{"demo", "every", "fs", "memory"} {
		series := `viewmux_upstream_up{upstream="` + up + `"}`
		if v, ok := before.values[series]; !ok || v != 1 {
			t.Errorf("%s = %v (present %v), want 1 once ready", series, v, ok)
		}
	}

	// open drives one session with a listing and leaves it open (the
	// client disconnects without DELETE); it returns the listing and the
	// metrics scraped afterwards.
	open := func(t *testing.T, url string, headers map[string]string) ([]string, metrics) {
		t.Helper()
		names := drive(t, Script{URL: url, Headers: headers, Steps: []Op{opList()}}).Steps(t)[0].Names
		return names, scrape(t, mux)
	}

	var sessions float64
	t.Run("catalog_tools is the unfiltered listing", func(t *testing.T) {
		all, m := open(t, url, nil)
		sessions++
		if got := m.gauge(t, "viewmux_catalog_tools"); got != float64(len(all)) {
			t.Errorf("viewmux_catalog_tools = %v, want %d (the tools/list of the default profile, no [filter] configured)", got, len(all))
		}
		if got := m.gauge(t, "viewmux_sessions"); got != sessions {
			t.Errorf("viewmux_sessions = %v after %v sessions, want %v", got, sessions, sessions)
		}
	})

	t.Run("equal rules share one filter instance", func(t *testing.T) {
		base := scrape(t, mux).gauge(t, "viewmux_filter_instances")
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
				checkNames(t, s.name+" listing", names, first)
			}
			if got := m.gauge(t, "viewmux_filter_instances"); got != base+s.delta {
				t.Errorf("after a session with %s: viewmux_filter_instances = %v, want %v (%v before the readonly session, +%v)",
					s.name, got, base+s.delta, base, s.delta)
			}
			if got := m.gauge(t, "viewmux_sessions"); got != sessions {
				t.Errorf("after a session with %s: viewmux_sessions = %v, want %v", s.name, got, sessions)
			}
		}
	})

	t.Run("a terminated session is not counted", func(t *testing.T) {
		drive(t, Script{URL: url, Terminate: true, Steps: []Op{opList()}})
		if got := scrape(t, mux).gauge(t, "viewmux_sessions"); got != sessions {
			t.Errorf("viewmux_sessions = %v after a session was opened and DELETEd, want %v (unchanged)", got, sessions)
		}
	})
}
