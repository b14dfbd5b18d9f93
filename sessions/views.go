package sessions

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/viewmux/viewmux/sessions/grant"
	"github.com/viewmux/viewmux/sessions/status"
)

// This file decides what the operational views (/, /status.json,
// /metrics, /readyz) show whom. With no tokens configured (loopback, or
// allow_unauthenticated behind something that authenticates) and to a
// token marked admin = true they show all of the gateway. To another token
// they show what its profiles see: the upstreams those profiles show, the
// profiles themselves and their sessions, and nothing of the rest of the
// config (its path, other profiles, other callers' sessions).

// viewerOf returns the viewer of r; ok is false when tokens are configured
// and r carries none of them.
func (s *Server) viewerOf(r *http.Request) (v status.Viewer, ok bool) {
	res := s.Resolver()
	if !res.AuthRequired() {
		return status.Viewer{All: true}, true
	}
	sel, _ := grant.SelectionFromRequest(r)
	if !sel.HasToken {
		return status.Viewer{}, false
	}
	profiles, admin, err := res.Access(sel.Token)
	if err != nil {
		return status.Viewer{}, false
	}
	if admin {
		return status.Viewer{All: true}, true
	}
	v = status.Viewer{Profiles: make(map[string]bool, len(profiles)), Upstreams: make(map[string]bool)}
	ups := s.agg.Upstreams()
	for _, p := range profiles {
		v.Profiles[p] = true
		b, err := res.ResolveLocal(grant.Selection{Profile: p})
		if err != nil {
			continue
		}
		listing := s.listing(b)
		for _, u := range ups {
			if listing.Shows(u.Name()) {
				v.Upstreams[u.Name()] = true
			}
		}
	}
	return v, true
}

// withViewer serves an operational view to the viewer of r, or answers 401
// when tokens are configured and r carries none of them.
func (s *Server) withViewer(serve func(w http.ResponseWriter, r *http.Request, v status.Viewer)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, ok := s.viewerOf(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", s.Resolver().Challenge("", "", ""))
			http.Error(w, "a bearer token is required", http.StatusUnauthorized)
			return
		}
		serve(w, r, v)
	})
}

// serveMetrics serves /metrics: everything to a viewer that sees all; to
// another, the process's own metrics and the series of the upstreams it
// sees, without the gateway-wide counts of sessions, requests and
// filters.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request, v status.Viewer) {
	if v.All {
		s.metrics.handler().ServeHTTP(w, r)
		return
	}
	g := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := s.metrics.reg.Gather()
		var out []*dto.MetricFamily
		for _, mf := range mfs {
			name := mf.GetName()
			if !strings.HasPrefix(name, "viewmux_") {
				out = append(out, mf) // go_* and process_*: the process's own
				continue
			}
			if strings.HasPrefix(name, "viewmux_pin_") {
				continue // quarantined tools do not exist but to admins
			}
			var kept []*dto.Metric
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "upstream" && v.SeesUpstream(l.GetValue()) {
						kept = append(kept, m)
						break
					}
				}
			}
			if len(kept) > 0 {
				mf.Metric = kept
				out = append(out, mf)
			}
		}
		return out, err
	})
	promhttp.HandlerFor(g, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}
