package sessions

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/viewmux/viewmux/upstream"
)

// metrics are one server's Prometheus collectors, on a registry of their own
// (no global state). Label values come from closed sets (known methods,
// configured upstreams, fixed outcomes), so cardinality is bounded.
type metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec   // method, outcome
	latency   *prometheus.HistogramVec // method
	calls     *prometheus.CounterVec   // upstream, outcome
	callTime  *prometheus.HistogramVec // upstream
	upstreams *prometheus.GaugeVec     // upstream
	recent    latencies                // each upstream's last calls, for the status page's p50/p99

	pinChanges *prometheus.CounterVec // upstream, kind: changes to pinned tool definitions (pins.go)
}

// Request outcomes.
const (
	outcomeOK     = "ok"
	outcomeError  = "error"
	outcomeDenied = "denied"
)

// knownMethods bounds the method label; anything else counts as "other".
var knownMethods = map[string]bool{
	"initialize": true, "ping": true, "server/discover": true, "tools/list": true, "tools/call": true,
	"prompts/list": true, "prompts/get": true, "resources/list": true, "resources/read": true,
	"resources/templates/list": true, "resources/subscribe": true, "resources/unsubscribe": true,
	"completion/complete": true, "logging/setLevel": true, "subscriptions/listen": true,
	"notifications/initialized": true, "notifications/cancelled": true,
}

func methodLabel(m string) string {
	if knownMethods[m] {
		return m
	}
	if m == "" {
		return "none"
	}
	return "other"
}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "viewmux_requests_total", Help: "JSON-RPC messages received from clients, by method and outcome.",
	}, []string{"method", "outcome"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "viewmux_request_duration_seconds", Help: "Time to answer a client's HTTP request, by JSON-RPC method.",
		Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"method"})
	m.calls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "viewmux_upstream_calls_total", Help: "tools/call forwarded to upstreams, by upstream and outcome (ok, tool_error, error).",
	}, []string{"upstream", "outcome"})
	m.callTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "viewmux_upstream_call_duration_seconds", Help: "Duration of tools/call at the upstream, by upstream.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 12),
	}, []string{"upstream"})
	m.upstreams = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "viewmux_upstream_up", Help: "1 when the upstream is connected.",
	}, []string{"upstream"})
	m.pinChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "viewmux_pin_changes_total", Help: "Changes to pinned tool definitions (server.pin), by upstream and kind (changed, new, removed).",
	}, []string{"upstream", "kind"})
	m.reg.MustRegister(m.requests, m.latency, m.calls, m.callTime, m.upstreams, m.pinChanges,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "viewmux_filter_instances", Help: "Distinct compiled filters (effective rule sets) held: profiles' and the bounded cache of request narrowings.",
		}, func() float64 { return float64(s.registry.Instances()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "viewmux_open_sessions", Help: "Live sessions and streams on every door, counted against server.max_sessions.",
		}, func() float64 { return float64(s.slots.live()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "viewmux_sessions", Help: "Live client sessions bound to a view.",
		}, func() float64 { return float64(s.Sessions()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "viewmux_state_store_up", Help: "1 when the state store ([state], or the files of server.state_dir) answers, 0 while it does not.",
		}, func() float64 {
			if s.agg.State().Health().Up {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "viewmux_session_connections_reclaimed_total", Help: "Idle scope = \"session\" connections closed to make room for another session of the same caller at server.max_children_per_caller.",
		}, func() float64 { return float64(s.agg.ReclaimedSessionConns()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "viewmux_catalog_tools", Help: "Tools in the merged catalog, before profile filtering.",
		}, func() float64 { return float64(len(s.agg.Snapshot().Tools)) }),
	)
	for _, u := range s.agg.Upstreams() {
		m.upstreams.WithLabelValues(u.Name()).Set(0)
	}
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// count records one answered client request.
func (m *metrics) count(method, outcome string) {
	m.requests.WithLabelValues(methodLabel(method), outcome).Inc()
}

// observeLatency records how long one HTTP request carrying method took.
func (m *metrics) observeLatency(method string, d time.Duration) {
	m.latency.WithLabelValues(methodLabel(method)).Observe(d.Seconds())
}

// observeCall records one tools/call forwarded to an upstream.
func (m *metrics) observeCall(up string, toolError bool, err error, d time.Duration) {
	outcome := outcomeOK
	switch {
	case err != nil:
		outcome = outcomeError
	case toolError:
		outcome = "tool_error"
	}
	m.calls.WithLabelValues(up, outcome).Inc()
	m.callTime.WithLabelValues(up).Observe(d.Seconds())
	m.recent.observe(up, d)
}

// setUpstreams updates the up gauge from the upstreams' states.
func (m *metrics) setUpstreams(ups []*upstream.Upstream) {
	for _, u := range ups {
		v := 0.0
		if u.State() == upstream.StateUp {
			v = 1
		}
		m.upstreams.WithLabelValues(u.Name()).Set(v)
	}
}
