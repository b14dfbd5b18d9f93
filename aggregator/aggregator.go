// Package aggregator owns the merged catalog: namespacing and name
// sanitizing, the routing table from exposed names to upstreams, versioned
// immutable snapshots, and the handlers that route calls to upstreams.
package aggregator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-multierror"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcpmux/mcpmux/configs"
	"github.com/mcpmux/mcpmux/filter"
	"github.com/mcpmux/mcpmux/internal/glob"
	"github.com/mcpmux/mcpmux/upstream"
)

// ErrToolNotFound is returned when a call names a tool the current snapshot
// does not have.
var ErrToolNotFound = errors.New("tool not found")

// Aggregator merges the catalogs of a config's upstreams into snapshots and
// routes calls to them. Create it with New, then Start; Close stops every
// upstream. Its methods are safe for concurrent use.
type Aggregator struct {
	cfg   *configs.Config
	namer Namer
	log   *slog.Logger

	ups     []*upstream.Upstream // sorted by name, like cfg.Upstreams
	sources []*source            // parallel to ups
	byName  map[string]*upstream.Upstream

	mu      sync.Mutex // serializes rebuilds and subscriber calls
	version uint64
	snap    atomic.Pointer[Snapshot]
	subs    []func(old, new *Snapshot)

	startMu   sync.Mutex
	startErrs map[string]error // upstream → error of its first connection attempt

	closeOnce sync.Once
}

// Options configure an Aggregator. The zero value is usable.
type Options struct {
	Logger *slog.Logger // nil = discard
	// Upstream returns extra options for one upstream (handlers for
	// server→client requests, notification hooks). nil = none.
	Upstream func(cfg *configs.Upstream) upstream.Options
}

// New builds an aggregator for cfg without starting anything.
func New(cfg *configs.Config, opts Options) *Aggregator {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Aggregator{
		cfg:    cfg,
		namer:  Namer{Separator: cfg.Server.Separator, MaxLength: cfg.Server.MaxNameLength},
		log:    log,
		byName: make(map[string]*upstream.Upstream),
	}
	for _, uc := range cfg.Upstreams {
		var uo upstream.Options
		if opts.Upstream != nil {
			uo = opts.Upstream(uc)
		}
		uo.Logger = log
		uo.OnCatalog = func(*upstream.Upstream) { a.rebuild() }
		u := upstream.New(uc, uo)
		a.ups = append(a.ups, u)
		a.byName[uc.Name] = u
		a.sources = append(a.sources, newSource(uc))
	}
	a.snap.Store(build(0, a.namer, nil))
	return a
}

func newSource(uc *configs.Upstream) *source {
	src := &source{cfg: uc, rules: filter.MustCompile(uc.Rules), toolsets: make(map[string][]*glob.Glob)}
	for _, p := range uc.ReadOnlyTools {
		src.readOnly = append(src.readOnly, mustGlob(p))
	}
	for set, pats := range uc.Toolsets {
		for _, p := range pats {
			src.toolsets[set] = append(src.toolsets[set], mustGlob(p))
		}
	}
	return src
}

// mustGlob compiles a pattern that config validation already accepted.
func mustGlob(p string) *glob.Glob {
	g, err := glob.Compile(p)
	if err != nil {
		panic(fmt.Sprintf("glob %q passed validation but does not compile: %v", p, err))
	}
	return g
}

// Start connects every upstream in parallel, each within its
// connect_timeout, and publishes the first snapshot. It returns an error
// naming every required upstream that failed; failures of other upstreams are
// logged and those upstreams keep retrying in the background.
func (a *Aggregator) Start(ctx context.Context) error {
	var g multierror.Group
	for _, u := range a.ups {
		g.Go(func() error {
			err := u.Start(ctx)
			if err == nil {
				return nil
			}
			a.startMu.Lock()
			if a.startErrs == nil {
				a.startErrs = make(map[string]error)
			}
			a.startErrs[u.Name()] = err
			a.startMu.Unlock()
			if u.Config().Required {
				return fmt.Errorf("required upstream %q: %w", u.Name(), err)
			}
			a.log.Warn("upstream failed to start; retrying in the background", "upstream", u.Name(), "error", err)
			return nil
		})
	}
	err := g.Wait().ErrorOrNil()
	a.rebuild()
	return err
}

// StartError returns the error of the named upstream's first connection
// attempt in Start, or nil.
func (a *Aggregator) StartError(name string) error {
	a.startMu.Lock()
	defer a.startMu.Unlock()
	return a.startErrs[name]
}

// Close stops every upstream and waits for them. It is idempotent.
func (a *Aggregator) Close() error {
	var errs *multierror.Error
	a.closeOnce.Do(func() {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, u := range a.ups {
			wg.Go(func() {
				if err := u.Close(); err != nil {
					mu.Lock()
					errs = multierror.Append(errs, fmt.Errorf("upstream %q: close: %w", u.Name(), err))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	})
	return errs.ErrorOrNil()
}

// Snapshot returns the current snapshot. It is never nil.
func (a *Aggregator) Snapshot() *Snapshot { return a.snap.Load() }

// Upstreams returns the upstreams, sorted by name. The slice is shared; do
// not modify it.
func (a *Aggregator) Upstreams() []*upstream.Upstream { return a.ups }

// OnChange registers fn to be called with the previous and the new snapshot
// after every change. Calls are serialized and happen in snapshot order.
func (a *Aggregator) OnChange(fn func(old, new *Snapshot)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.subs = append(a.subs, fn)
}

// rebuild publishes a new snapshot from the upstreams' current catalogs.
func (a *Aggregator) rebuild() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, u := range a.ups {
		a.sources[i].state = u.State()
		a.sources[i].catalog = u.Catalog()
	}
	a.version++
	next := build(a.version, a.namer, a.sources)
	for _, c := range next.Conflicts {
		a.log.Error("tool name collision", "tool", c.Name, "upstream", c.Dropped, "error", c.String())
	}
	prev := a.snap.Swap(next)
	for _, fn := range a.subs {
		fn(prev, next)
	}
}

// CallTool routes a tools/call for the exposed tool e to its upstream, under
// the upstream's original name. Arguments travel as the raw JSON the client
// sent; _meta keys that belong to one hop (io.modelcontextprotocol/*) and the
// client's progress token are not forwarded.
func (a *Aggregator) CallTool(ctx context.Context, e *filter.Entry, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	u := a.byName[e.Upstream]
	if u == nil {
		return nil, fmt.Errorf("tool %q: upstream %q: %w", e.Tool.Name, e.Upstream, ErrToolNotFound)
	}
	out := mcp.CallToolRequest{Request: mcp.Request{Method: string(mcp.MethodToolsCall)}}
	out.Params.Name = e.Original
	if len(req.Params.RawArguments) > 0 {
		out.Params.Arguments = req.Params.RawArguments
	} else {
		out.Params.Arguments = req.Params.Arguments
	}
	out.Params.Meta = forwardMeta(req.Params.Meta)
	return u.CallTool(ctx, out)
}

// forwardMeta copies the _meta fields that may cross a hop.
func forwardMeta(m *mcp.Meta) *mcp.Meta {
	if m == nil || len(m.AdditionalFields) == 0 {
		return nil
	}
	out := &mcp.Meta{AdditionalFields: make(map[string]any, len(m.AdditionalFields))}
	for k, v := range m.AdditionalFields {
		if !strings.HasPrefix(k, "io.modelcontextprotocol/") {
			out.AdditionalFields[k] = v
		}
	}
	if len(out.AdditionalFields) == 0 {
		return nil
	}
	return out
}

// ToolHandler returns the mcp-go handler that routes calls of exposed tools
// through snap's routing table. Access checks happen before it runs.
func (a *Aggregator) ToolHandler() server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		e := a.Snapshot().Tool(req.Params.Name)
		if e == nil {
			return nil, fmt.Errorf("tool %q: %w", req.Params.Name, ErrToolNotFound)
		}
		return a.CallTool(ctx, e, req)
	}
}
