package sessions

import (
	"strings"

	"github.com/viewmux/viewmux/sessions/grant"
)

// instructions returns what viewmux's initialize and server/discover
// results carry as instructions for the request's session: the
// instructions of every upstream its view shows (the decision that lists
// that upstream's prompts and resources, filter.Filter.ShowsUpstream),
// each under a heading with its prefix (its name when it has none), in
// config order; "" when none of them has any. Without a filter it is ""
// (fail closed).
func (s *Server) instructions(b grant.Binding) string {
	if b.Filter == nil {
		return ""
	}
	listing := s.listing(b)
	var out strings.Builder
	for _, u := range s.agg.Upstreams() {
		cat := u.Catalog()
		if cat == nil || strings.TrimSpace(cat.Instructions) == "" {
			continue
		}
		cfg := u.Config()
		if !listing.Shows(cfg.Name) {
			continue
		}
		heading := cfg.Prefix
		if heading == "" {
			heading = cfg.Name
		}
		if out.Len() > 0 {
			out.WriteString("\n\n")
		}
		out.WriteString("## " + heading + "\n\n" + cat.Instructions) // the upstream's text as it is
	}
	return out.String()
}
