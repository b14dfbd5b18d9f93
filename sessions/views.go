package sessions

import (
	"net/http"
	"slices"
	"strings"

	"github.com/mcpmux/mcpmux/sessions/grant"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// This file decides what the operational views (/, /status.json,
// /metrics, /readyz) show whom. With no tokens configured (loopback, or
// allow_unauthenticated behind something that authenticates) and to a
// token marked admin = true they show all of the gateway. To another token
// they show what its profiles see: the upstreams those profiles show, the
// profiles themselves and their sessions, and nothing of the rest of the
// config (its path, other profiles, other callers' sessions).

// viewer is who asks for an operational view.
type viewer struct {
	all       bool
	profiles  map[string]bool // the token's profiles
	upstreams map[string]bool // the upstreams any of them shows
}

// viewerOf returns the viewer of r; ok is false when tokens are configured
// and r carries none of them.
func (s *Server) viewerOf(r *http.Request) (v viewer, ok bool) {
	res := s.Resolver()
	if !res.AuthRequired() {
		return viewer{all: true}, true
	}
	sel, _ := grant.SelectionFromRequest(r)
	if !sel.HasToken {
		return viewer{}, false
	}
	profiles, admin, err := res.Access(sel.Token)
	if err != nil {
		return viewer{}, false
	}
	if admin {
		return viewer{all: true}, true
	}
	v = viewer{profiles: make(map[string]bool, len(profiles)), upstreams: make(map[string]bool)}
	ups := s.agg.Upstreams()
	for _, p := range profiles {
		v.profiles[p] = true
		b, err := res.ResolveLocal(grant.Selection{Profile: p})
		if err != nil {
			continue
		}
		listing := s.listing(b)
		for _, u := range ups {
			if listing.Shows(u.Name()) {
				v.upstreams[u.Name()] = true
			}
		}
	}
	return v, true
}

// seesProfile reports whether v may see profile p and its sessions.
func (v viewer) seesProfile(p string) bool { return v.all || v.profiles[p] }

// seesUpstream reports whether v may see the upstream named up.
func (v viewer) seesUpstream(up string) bool { return v.all || v.upstreams[up] }

// restrict narrows st, built for everyone, to what v may see. The session
// counts are v's own already (status counts only the sessions v sees).
func (st *statusData) restrict(v viewer) {
	if v.all {
		return
	}
	st.Config = ""
	st.Open = 0 // every caller's sessions and streams
	st.BySubject = nil
	st.FilterCount, st.OtherFilters = 0, 0
	// Pending pins name tools and upstreams of every profile: admins only.
	st.Pin, st.PendingPins, st.PinsError = "", nil, ""
	for i := range st.Upstreams {
		st.Upstreams[i].Quarantined = 0
	}
	st.Upstreams = slices.DeleteFunc(st.Upstreams, func(u upstreamRow) bool { return !v.seesUpstream(u.Name) })
	st.Profiles = slices.DeleteFunc(st.Profiles, func(p profileRow) bool { return !v.seesProfile(p.Name) })
	var filters []filterRow
	for _, f := range st.Filters {
		f.Profiles = slices.DeleteFunc(slices.Clone(f.Profiles), func(p string) bool { return !v.seesProfile(p) })
		// A filter's key spells out its rules, which may name upstreams
		// the viewer does not see (deny_upstreams): only its digest.
		f.Key = ""
		if len(f.Profiles) > 0 {
			filters = append(filters, f)
		}
	}
	st.Filters = filters
}

// withViewer serves an operational view to the viewer of r, or answers 401
// when tokens are configured and r carries none of them.
func (s *Server) withViewer(serve func(w http.ResponseWriter, r *http.Request, v viewer)) http.Handler {
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
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request, v viewer) {
	if v.all {
		s.metrics.handler().ServeHTTP(w, r)
		return
	}
	g := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := s.metrics.reg.Gather()
		var out []*dto.MetricFamily
		for _, mf := range mfs {
			name := mf.GetName()
			if !strings.HasPrefix(name, "mcpmux_") {
				out = append(out, mf) // go_* and process_*: the process's own
				continue
			}
			if strings.HasPrefix(name, "mcpmux_pin_") {
				continue // quarantined tools do not exist but to admins
			}
			var kept []*dto.Metric
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "upstream" && v.seesUpstream(l.GetValue()) {
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
