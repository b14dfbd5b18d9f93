//go:build unix

package itest

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// Metrics is one scrape of GET /metrics (Prometheus text format).
type Metrics struct {
	Values map[string]float64 // series ("name" or "name{labels}") → value
	types  map[string]string  // metric name → TYPE
	text   string
}

// Scrape GETs /metrics and parses it, failing the test on anything but a
// 200 with parsable text.
func Scrape(t testing.TB, mux *Mux) Metrics {
	t.Helper()
	resp, err := RawClient.Get("http://" + mux.Addr + "/metrics")
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
	m := Metrics{Values: map[string]float64{}, types: map[string]string{}, text: string(body)}
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
		m.Values[series] = v
	}
	return m
}

// Gauge returns the value of an unlabelled gauge, failing the test when it
// is missing or not a gauge.
func (m Metrics) Gauge(t testing.TB, name string) float64 {
	t.Helper()
	v, ok := m.Values[name]
	if !ok {
		t.Fatalf("/metrics has no %s:\n%s", name, m.viewmuxLines())
	}
	if typ := m.types[name]; typ != "gauge" {
		t.Errorf("/metrics: %s has TYPE %q, want gauge", name, typ)
	}
	return v
}

// viewmuxLines returns the lines about viewmux_* metrics, for messages.
func (m Metrics) viewmuxLines() string {
	var out []string
	for _, l := range strings.Split(m.text, "\n") {
		if strings.Contains(l, "viewmux_") && !strings.Contains(l, "_bucket{") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
