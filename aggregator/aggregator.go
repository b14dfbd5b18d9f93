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
	"github.com/mark3labs/mcp-go/client"
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

// ErrPromptNotFound and ErrResourceNotFound are returned for prompts and
// resource URIs no upstream claims.
var (
	ErrPromptNotFound   = errors.New("prompt not found")
	ErrResourceNotFound = errors.New("resource not found")
)

// Aggregator merges the catalogs of a config's upstreams into snapshots and
// routes calls to them. Create it with New, then Start; Close stops every
// upstream. Its methods are safe for concurrent use.
type Aggregator struct {
	log  *slog.Logger
	opts Options
	set  atomic.Pointer[upstreamSet] // replaced whole by Reload

	mu      sync.Mutex // serializes rebuilds, reloads and subscriber calls
	version uint64
	snap    atomic.Pointer[Snapshot]
	subs    []func(old, new *Snapshot)

	relay             *relay
	onResourceUpdated func(uri string)            // set before Start; nil = ignore
	onLog             func(params map[string]any) // set before Start; nil = ignore

	startMu   sync.Mutex
	startErrs map[string]error // upstream → error of its first connection attempt

	closeOnce sync.Once
}

// upstreamSet is the configured upstreams at one moment. It is never
// modified: Reload builds a new one.
type upstreamSet struct {
	cfg     *configs.Config
	namer   Namer
	ups     []*upstream.Upstream // sorted by name, like cfg.Upstreams
	sources []*source            // parallel to ups
	byName  map[string]*upstream.Upstream
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
	a := &Aggregator{log: log, opts: opts, relay: newRelay()}
	set := &upstreamSet{cfg: cfg, namer: namerOf(cfg), byName: make(map[string]*upstream.Upstream)}
	for _, uc := range cfg.Upstreams {
		set.add(a.newUpstream(uc), newSource(uc))
	}
	a.set.Store(set)
	a.snap.Store(build(0, set.namer, nil))
	return a
}

func namerOf(cfg *configs.Config) Namer {
	return Namer{Separator: cfg.Server.Separator, MaxLength: cfg.Server.MaxNameLength}
}

func (s *upstreamSet) add(u *upstream.Upstream, src *source) {
	s.ups = append(s.ups, u)
	s.sources = append(s.sources, src)
	s.byName[u.Name()] = u
}

// newUpstream builds (without starting) the connection for uc.
func (a *Aggregator) newUpstream(uc *configs.Upstream) *upstream.Upstream {
	var uo upstream.Options
	if a.opts.Upstream != nil {
		uo = a.opts.Upstream(uc)
	}
	uo.Logger = a.log
	uo.OnCatalog = func(*upstream.Upstream) { a.rebuild() }
	uo.OnNotification = a.onNotification
	h := clientHandler{a: a, upstream: uc.Name}
	uo.ClientOptions = append(uo.ClientOptions,
		client.WithSamplingHandler(h), client.WithElicitationHandler(h), client.WithRootsHandler(h))
	return upstream.New(uc, uo)
}

// upstream returns the connection named name, or an error naming it.
func (a *Aggregator) upstream(name string) (*upstream.Upstream, error) {
	if u := a.set.Load().byName[name]; u != nil {
		return u, nil
	}
	return nil, fmt.Errorf("upstream %q: %w", name, upstream.ErrDown)
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
	for _, u := range a.set.Load().ups {
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
		for _, u := range a.set.Load().ups {
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
func (a *Aggregator) Upstreams() []*upstream.Upstream { return a.set.Load().ups }

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
	set := a.set.Load()
	for i, u := range set.ups {
		set.sources[i].state = u.State()
		set.sources[i].catalog = u.Catalog()
	}
	a.version++
	next := build(a.version, set.namer, set.sources)
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
// sent. _meta keys that belong to one hop (io.modelcontextprotocol/*) are not
// forwarded, and a progress token is replaced by one unique across upstream
// connections, whose notifications are mapped back to this caller.
func (a *Aggregator) CallTool(ctx context.Context, e *filter.Entry, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	u, err := a.upstream(e.Upstream)
	if err != nil {
		return nil, fmt.Errorf("tool %q: %w", e.Tool.Name, err)
	}
	out := mcp.CallToolRequest{Request: mcp.Request{Method: string(mcp.MethodToolsCall)}}
	out.Params.Name = e.Original
	if len(req.Params.RawArguments) > 0 {
		out.Params.Arguments = req.Params.RawArguments
	} else {
		out.Params.Arguments = req.Params.Arguments
	}
	ctx, st := withCallState(ctx)
	var done func()
	out.Params.Meta, done = a.hopMeta(ctx, req.Params.Meta)
	defer done()
	defer a.relay.begin(e.Upstream, ctx)()
	res, err := u.CallTool(ctx, out)
	settle(ctx, st)
	a.relay.learnLinks(e.Upstream, res)
	if res != nil {
		stripHop(&res.Result)
	}
	return res, err
}

// stripHop removes from an upstream's result what belongs to the upstream
// hop only: io.modelcontextprotocol/* _meta keys (the upstream's serverInfo,
// among others) and a plain "complete" resultType. mcp-go stamps mcpmux's
// own for clients that need them. input_required is kept: it is for the
// client.
func stripHop(r *mcp.Result) {
	if r.ResultType == mcp.ResultTypeComplete {
		r.ResultType = ""
	}
	if r.Meta == nil {
		return
	}
	for k := range r.Meta.AdditionalFields {
		if strings.HasPrefix(k, "io.modelcontextprotocol/") {
			delete(r.Meta.AdditionalFields, k)
		}
	}
	if len(r.Meta.AdditionalFields) == 0 && r.Meta.ProgressToken == nil {
		r.Meta = nil
	}
}

// hopMeta builds the _meta for the upstream hop and returns the function
// that forgets its progress mapping.
func (a *Aggregator) hopMeta(ctx context.Context, m *mcp.Meta) (*mcp.Meta, func()) {
	out := forwardMeta(m)
	if m == nil || m.ProgressToken == nil {
		return out, func() {}
	}
	if out == nil {
		out = &mcp.Meta{}
	}
	var done func()
	out.ProgressToken, done = a.relay.mintProgress(ctx, m.ProgressToken)
	return out, done
}

// GetPrompt routes prompts/get for an exposed prompt name.
func (a *Aggregator) GetPrompt(ctx context.Context, req mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	p := a.Snapshot().Prompt(req.Params.Name)
	if p == nil {
		return nil, fmt.Errorf("prompt %q: %w", req.Params.Name, ErrPromptNotFound)
	}
	out := req
	out.Params.Name = p.Original
	var done func()
	out.Params.Meta, done = a.hopMeta(ctx, req.Params.Meta)
	defer done()
	u, err := a.upstream(p.Upstream)
	if err != nil {
		return nil, fmt.Errorf("prompt %q: %w", req.Params.Name, err)
	}
	defer a.relay.begin(p.Upstream, ctx)()
	res, err := u.GetPrompt(ctx, out)
	if res != nil {
		stripHop(&res.Result)
	}
	return res, err
}

// ReadResource routes resources/read by URI. Contents come back under the
// URI the client asked for.
func (a *Aggregator) ReadResource(ctx context.Context, req mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	up, original, ok := a.Snapshot().RouteURI(req.Params.URI, a.relay.linkTable())
	if !ok {
		return nil, fmt.Errorf("resource %q: %w", req.Params.URI, ErrResourceNotFound)
	}
	out := req
	out.Params.URI = original
	out.Params.Arguments = nil
	var done func()
	out.Params.Meta, done = a.hopMeta(ctx, req.Params.Meta)
	defer done()
	u, err := a.upstream(up)
	if err != nil {
		return nil, fmt.Errorf("resource %q: %w", req.Params.URI, err)
	}
	defer a.relay.begin(up, ctx)()
	res, err := u.ReadResource(ctx, out)
	if res != nil {
		stripHop(&res.Result)
	}
	if err != nil || original == req.Params.URI {
		return res, err
	}
	for i, c := range res.Contents {
		switch v := c.(type) {
		case mcp.TextResourceContents:
			if v.URI == original {
				v.URI = req.Params.URI
			}
			res.Contents[i] = v
		case mcp.BlobResourceContents:
			if v.URI == original {
				v.URI = req.Params.URI
			}
			res.Contents[i] = v
		}
	}
	return res, nil
}

// Complete routes completion/complete for a prompt (by exposed name) or a
// resource template (by exposed template). An upstream without the
// completions capability answers with no values.
func (a *Aggregator) Complete(ctx context.Context, ref any, arg mcp.CompleteArgument, cctx mcp.CompleteContext) (*mcp.Completion, error) {
	snap := a.Snapshot()
	var up string
	switch r := ref.(type) {
	case mcp.PromptReference:
		p := snap.Prompt(r.Name)
		if p == nil {
			return nil, fmt.Errorf("prompt %q: %w", r.Name, ErrPromptNotFound)
		}
		up, r.Name = p.Upstream, p.Original
		ref = r
	case mcp.ResourceReference:
		t := snap.Template(r.URI)
		switch {
		case t != nil:
			up, r.URI = t.Upstream, t.OriginalTemplate
		default:
			var ok bool
			if up, r.URI, ok = snap.RouteURI(r.URI, nil); !ok {
				return nil, fmt.Errorf("resource %q: %w", r.URI, ErrResourceNotFound)
			}
		}
		ref = r
	default:
		return nil, fmt.Errorf("completion/complete: unsupported ref %T", ref)
	}
	u, err := a.upstream(up)
	if err != nil {
		return nil, err
	}
	cat, c := u.Catalog(), u.Client()
	if cat == nil || c == nil {
		return nil, fmt.Errorf("upstream %q: completion/complete: %w", up, upstream.ErrDown)
	}
	if cat.Capabilities.Completions == nil {
		return &mcp.Completion{Values: []string{}}, nil
	}
	defer a.relay.begin(up, ctx)()
	res, err := c.Complete(ctx, mcp.CompleteRequest{Params: mcp.CompleteParams{Ref: ref, Argument: arg, Context: cctx}})
	if err != nil {
		return nil, fmt.Errorf("upstream %q: completion/complete: %w", up, err)
	}
	return &res.Completion, nil
}

// Subscribe forwards resources/subscribe to the owning upstream the first
// time any client subscribes to uri.
func (a *Aggregator) Subscribe(ctx context.Context, uri string) error {
	up, original, ok := a.Snapshot().RouteURI(uri, a.relay.linkTable())
	if !ok {
		return fmt.Errorf("resource %q: %w", uri, ErrResourceNotFound)
	}
	key := up + "\x00" + original
	a.relay.mu.Lock()
	a.relay.subs[key]++
	first := a.relay.subs[key] == 1
	a.relay.mu.Unlock()
	if !first {
		return nil
	}
	u, err := a.upstream(up)
	if err != nil {
		return err
	}
	c := u.Client()
	if c == nil {
		return fmt.Errorf("upstream %q: resources/subscribe: %w", up, upstream.ErrDown)
	}
	if err := c.Subscribe(ctx, mcp.SubscribeRequest{Params: mcp.SubscribeParams{URI: original}}); err != nil {
		return fmt.Errorf("upstream %q: resources/subscribe %q: %w", up, original, err)
	}
	return nil
}

// Unsubscribe forwards resources/unsubscribe when the last subscriber of
// uri leaves.
func (a *Aggregator) Unsubscribe(ctx context.Context, uri string) error {
	up, original, ok := a.Snapshot().RouteURI(uri, a.relay.linkTable())
	if !ok {
		return nil
	}
	key := up + "\x00" + original
	a.relay.mu.Lock()
	if a.relay.subs[key] > 0 {
		a.relay.subs[key]--
	}
	last := a.relay.subs[key] == 0
	a.relay.mu.Unlock()
	u, err := a.upstream(up)
	if !last || err != nil || u.Client() == nil {
		return nil
	}
	c := u.Client()
	if err := c.Unsubscribe(ctx, mcp.UnsubscribeRequest{Params: mcp.UnsubscribeParams{URI: original}}); err != nil {
		return fmt.Errorf("upstream %q: resources/unsubscribe %q: %w", up, original, err)
	}
	return nil
}

// OnResourceUpdated registers fn to receive the exposed URI of every
// notifications/resources/updated an upstream sends. Call it before Start.
func (a *Aggregator) OnResourceUpdated(fn func(uri string)) { a.onResourceUpdated = fn }

// OnLog registers fn to receive upstream log messages that no client call
// caused (params as the upstream sent them). Call it before Start.
func (a *Aggregator) OnLog(fn func(params map[string]any)) { a.onLog = fn }

// SetLevel forwards a client's logging/setLevel to every connected upstream
// that supports logging. Log messages are then filtered per session by the
// front door.
func (a *Aggregator) SetLevel(ctx context.Context, level mcp.LoggingLevel) error {
	var errs []error
	for _, u := range a.set.Load().ups {
		cat, c := u.Catalog(), u.Client()
		if cat == nil || c == nil || cat.Capabilities.Logging == nil {
			continue
		}
		if err := c.SetLevel(ctx, mcp.SetLevelRequest{Params: mcp.SetLevelParams{Level: level}}); err != nil {
			errs = append(errs, fmt.Errorf("upstream %q: logging/setLevel: %w", u.Name(), err))
		}
	}
	return errors.Join(errs...)
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

// PromptHandler returns the mcp-go handler that routes prompts/get.
func (a *Aggregator) PromptHandler() server.PromptHandlerFunc { return a.GetPrompt }

// ResourceHandler returns the mcp-go handler that routes resources/read for
// listed resources and templates.
func (a *Aggregator) ResourceHandler() server.ResourceHandlerFunc {
	return func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		res, err := a.ReadResource(ctx, req)
		if err != nil {
			return nil, err
		}
		return res.Contents, nil
	}
}
