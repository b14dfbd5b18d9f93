// Package status is viewmux's status page for people, GET /, and the same
// data as JSON, GET /status.json (see docs/operations.md): the upstreams and
// their health, the profiles with their tool counts and token estimates, the
// distinct filters they resolve to, and the live sessions. What it shows
// depends on who asks (Viewer), and never includes a secret.
//
// The page reads the server it shows through Source; it knows nothing of
// doors or wires.
package status

import (
	"log/slog"
	"time"

	"github.com/viewmux/viewmux/aggregator"
	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/sessions/grant"
)

// Source is what the page reads of the server it shows. Its methods are
// called on every request for the page and must be safe for concurrent
// use.
type Source interface {
	Aggregator() *aggregator.Aggregator
	Resolver() *grant.Resolver
	Registry() *filter.Registry
	Config() *configs.Config
	Version() string
	Log() *slog.Logger
	// OpenSessions is every live session and stream counted against
	// server.max_sessions.
	OpenSessions() int
	// Sessions calls visit with each live session bound to a view.
	Sessions(visit func(Session))
	// InitialFilter returns the filter a new session bound with b starts
	// with when its profile has dynamic_toolsets (dynamic is true) or
	// tool_search, and nil otherwise.
	InitialFilter(res *grant.Resolver, b grant.Binding) (f *filter.Filter, dynamic bool)
	// Latency returns the quantiles of an upstream's recent tools/call
	// latencies and how many calls they are of.
	Latency(upstream string) (p50, p99 time.Duration, n int)
	// RetainLatency forgets the latencies of every upstream not in names.
	RetainLatency(names map[string]bool)
}

// Session is what the page shows of one live session.
type Session struct {
	Door    string // "mcp", "ws", "sse" or "stdio"
	Profile string
	Subject string // who opened it (grant.Binding.Subject)
	Filter  *filter.Filter
	// Idle is how long the session has gone without a request; 0 while
	// one is in progress.
	Idle time.Duration
}

// New returns the page of src, started now.
func New(src Source) *Page {
	return &Page{src: src, start: time.Now()}
}
