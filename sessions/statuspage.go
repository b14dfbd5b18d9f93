package sessions

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/sessions/grant"
	"github.com/viewmux/viewmux/sessions/status"
)

// handleStatus registers the status page for people, GET / (exact root),
// and the same data as JSON, GET /status.json (package status).
// Both are protected like /metrics: Host and Origin by guard, and a bearer
// token when tokens are configured. What they show never includes a
// secret: a URL upstream shows as scheme://host[:port], and its error and
// stderr lines pass through Aggregator.Redact, which masks every
// configured secret value, whoever's (auth tokens, every upstream's env
// and header values and URL keys), and redacts URLs.
func (s *Server) handleStatus(mux *http.ServeMux) {
	p := status.New(statusSource{s})
	mux.Handle("GET /{$}", s.withViewer(p.ServeHTML))
	mux.Handle("GET /status.json", s.withViewer(p.ServeJSON))
}

// statusSource is what the status page reads of a Server.
type statusSource struct{ *Server }

func (s statusSource) Config() *configs.Config { return s.cfg }
func (s statusSource) Version() string         { return s.version }
func (s statusSource) Log() *slog.Logger       { return s.log }
func (s statusSource) OpenSessions() int       { return s.slots.live() }

func (s statusSource) Sessions(visit func(status.Session)) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sess := range s.sessions {
		if !sess.bound {
			continue
		}
		st := status.Session{Door: sess.kind.String(), Profile: sess.binding.Profile, Subject: sess.binding.Subject, Filter: sess.binding.Filter}
		if l := sess.life; l != nil && l.busy.Load() == 0 {
			st.Idle = now.Sub(time.Unix(0, l.seen.Load()))
		}
		visit(st)
	}
}

func (s statusSource) InitialFilter(res *grant.Resolver, b grant.Binding) (*filter.Filter, bool) {
	if f := DynamicFilter(res, s.registry, b); f != nil {
		return f, true
	}
	return SearchFilter(res, s.registry, b), false
}

func (s statusSource) Latency(upstream string) (p50, p99 time.Duration, n int) {
	return s.metrics.recent.quantiles(upstream)
}

func (s statusSource) RetainLatency(names map[string]bool) { s.metrics.recent.retain(names) }
