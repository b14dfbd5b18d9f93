package status

import "slices"

// Viewer is who asks for an operational view (/, /status.json, /metrics,
// /readyz): with All, one who sees all of the gateway; else a token that
// sees its profiles and the upstreams they show.
type Viewer struct {
	All       bool
	Profiles  map[string]bool // the token's profiles
	Upstreams map[string]bool // the upstreams any of them shows
}

// SeesProfile reports whether v may see profile p and its sessions.
func (v Viewer) SeesProfile(p string) bool { return v.All || v.Profiles[p] }

// SeesUpstream reports whether v may see the upstream named up.
func (v Viewer) SeesUpstream(up string) bool { return v.All || v.Upstreams[up] }

// restrict narrows st, built for everyone, to what v may see. The session
// counts are v's own already (status counts only the sessions v sees).
func (st *Data) restrict(v Viewer) {
	if v.All {
		return
	}
	st.Config = ""
	st.Open = 0 // every caller's sessions and streams
	st.BySubject = nil
	st.FilterCount, st.OtherFilters = 0, 0
	// Pending pins name tools and upstreams of every profile: admins only.
	st.Pin, st.PendingPins, st.PinsError = "", nil, ""
	st.Store.Where, st.Store.Error = "", ""
	for i := range st.Upstreams {
		st.Upstreams[i].Quarantined = 0
	}
	st.Upstreams = slices.DeleteFunc(st.Upstreams, func(u UpstreamRow) bool { return !v.SeesUpstream(u.Name) })
	st.Profiles = slices.DeleteFunc(st.Profiles, func(p ProfileRow) bool { return !v.SeesProfile(p.Name) })
	var filters []FilterRow
	for _, f := range st.Filters {
		f.Profiles = slices.DeleteFunc(slices.Clone(f.Profiles), func(p string) bool { return !v.SeesProfile(p) })
		// A filter's key spells out its rules, which may name upstreams
		// the viewer does not see (deny_upstreams): only its digest.
		f.Key = ""
		if len(f.Profiles) > 0 {
			filters = append(filters, f)
		}
	}
	st.Filters = filters
}
