package sessions

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/audit"
	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/sessions/grant"
)

// This file holds dynamic toolsets (see docs/profiles-and-filters.md). A
// session of a profile with dynamic_toolsets starts with its toolsets off
// and three tools of viewmux's own: list_toolsets, get_toolset_tools and
// enable_toolset. Its binding keeps the profile's filter (the ceiling) until
// it enables a toolset; effective adds the dynamic stage
// (filter.DynamicStage), so the view, the call decision and list_changed all
// come from one filter, shared by every session with the same toolsets on.
// Enabling replaces the session's filter and tells that session, and only
// it, list_changed.

// Names of viewmux's own tools, after ReservedPrefix and the separator.
const (
	toolListToolsets = "list_toolsets"
	toolGetTools     = "get_toolset_tools"
	toolEnable       = "enable_toolset"
)

// toolset is one toolset a dynamic session may enable.
type toolset struct {
	name     string // as clients see it: "<prefix or name>/<set>", or "<prefix or name>" for an upstream without toolsets
	selector string // by upstream name, as filter.Entry.Toolsets holds it
	upstream string
}

// dynamicSetup is what one resolver's config says about dynamic toolsets.
// It is immutable.
type dynamicSetup struct {
	res  *grant.Resolver
	sets []*toolset          // sorted by name
	refs map[string]*toolset // every name a client may give a toolset by: its name and its selectors by name and by prefix
	// outside names the upstreams that declare toolsets: their tools in
	// none of them stay visible.
	outside []string
	own     []*filter.Entry
	initial *filter.Rules // the dynamic stage with nothing enabled
	sep     string
}

// dynamic returns the dynamic-toolsets setup of the current resolver,
// built once per resolver.
func (s *Server) dynamic() *dynamicSetup {
	res := s.Resolver()
	if d := s.dyn.Load(); d != nil && d.res == res {
		return d
	}
	d := newDynamicSetup(res)
	s.dyn.Store(d)
	return d
}

func newDynamicSetup(res *grant.Resolver) *dynamicSetup {
	cfg := res.Config()
	d := &dynamicSetup{res: res, refs: make(map[string]*toolset), sep: cfg.Server.Separator}
	for _, u := range cfg.Upstreams {
		shown := u.Name
		if u.Prefix != "" {
			shown = u.Prefix
		}
		add := func(ts *toolset, refs ...string) {
			d.sets = append(d.sets, ts)
			for _, r := range append(refs, ts.name, ts.selector) {
				if _, taken := d.refs[r]; !taken {
					d.refs[r] = ts
				}
			}
		}
		if len(u.Toolsets) == 0 {
			add(&toolset{name: shown, selector: u.Name, upstream: u.Name}, u.Prefix)
			continue
		}
		d.outside = append(d.outside, u.Name)
		for _, set := range slices.Sorted(maps.Keys(u.Toolsets)) {
			refs := []string{}
			if u.Prefix != "" {
				refs = append(refs, u.Prefix+"/"+set)
			}
			add(&toolset{name: shown + "/" + set, selector: u.Name + "/" + set, upstream: u.Name}, refs...)
		}
	}
	delete(d.refs, "")
	slices.SortFunc(d.sets, func(a, b *toolset) int { return strings.Compare(a.name, b.name) })
	d.own = ownTools(d.sep)
	d.initial = filter.DynamicStage(nil, d.outside, d.own)
	return d
}

// effective returns the filter b's view is computed with: b.Filter, with
// the dynamic stage added when b is Dynamic and the stage is not there yet
// (nothing enabled). b.Dynamic was decided when b was resolved: its
// profile had dynamic_toolsets, and the request did not choose toolsets or
// tool names itself (Mcp-Toolsets, Mcp-Tools, their query parameters,
// X-MCP-Toolsets, X-MCP-Tools, /x/{toolsets}).
//
// Likewise for tool search (search.go): when b is Search and the
// tool-search stage is not there yet, effective adds the profile's
// starting stage.
func (s *Server) effective(b grant.Binding) *filter.Filter {
	if b.Filter == nil || b.Filter.Dynamic() || b.Filter.Searching() {
		return b.Filter
	}
	if b.Search {
		if f := s.searching().withSearch(s.registry, b); f != nil {
			return f
		}
	}
	if !b.Dynamic {
		return b.Filter
	}
	return s.registry.Narrowed(append(b.Filter.Ceiling(), s.dynamic().initial)...)
}

// reenable returns b with the toolsets the filter old had on enabled again,
// for a session whose rules a reload resolved anew: those that no longer
// exist are dropped, and so is everything when b's profile is no longer
// dynamic.
func (s *Server) reenable(b grant.Binding, old *filter.Filter) grant.Binding {
	on := old.Enabled()
	if len(on) == 0 {
		return b
	}
	f := s.effective(b)
	if !f.Dynamic() {
		return b
	}
	d := s.dynamic()
	on = slices.DeleteFunc(on, func(sel string) bool { ts := d.refs[sel]; return ts == nil || ts.selector != sel })
	b.Filter = s.registry.EnableToolsets(f, on)
	return b
}

// ownTools returns the entries of viewmux's own three tools, for separator
// sep. Their Upstream is empty: route answers them itself.
func ownTools(sep string) []*filter.Entry {
	yes := true
	toolsetArg := json.RawMessage(`{"type":"object","properties":{"toolset":{"type":"string","description":"The toolset's name, as viewmux` + sep + `list_toolsets lists it."}},"required":["toolset"],"additionalProperties":false}`)
	mk := func(name, title, desc string, in, out json.RawMessage, idempotent bool) *filter.Entry {
		t := mcp.Tool{Name: configs.ReservedPrefix + sep + name, Title: title, Description: desc, RawInputSchema: in, RawOutputSchema: out}
		t.Annotations = mcp.ToolAnnotation{ReadOnlyHint: &yes, OpenWorldHint: new(bool)}
		if idempotent {
			t.Annotations.IdempotentHint = &yes
		}
		return &filter.Entry{Tool: t, Original: name, ReadOnly: true}
	}
	return []*filter.Entry{
		mk(toolListToolsets, "List toolsets",
			"List the toolsets this session can enable: name, description, how many tools each holds, and whether it is enabled. Most tools stay hidden until their toolset is enabled with viewmux"+sep+toolEnable+".",
			json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`),
			json.RawMessage(`{"type":"object","properties":{"toolsets":{"type":"array","items":{"type":"object","properties":{"name":{"type":"string"},"description":{"type":"string"},"toolCount":{"type":"integer"},"enabled":{"type":"boolean"}},"required":["name","description","toolCount","enabled"]}}},"required":["toolsets"]}`),
			true),
		mk(toolGetTools, "Get a toolset's tools",
			"List the tools of one toolset, with their descriptions, without enabling it.",
			toolsetArg,
			json.RawMessage(`{"type":"object","properties":{"toolset":{"type":"string"},"enabled":{"type":"boolean"},"tools":{"type":"array","items":{"type":"object","properties":{"name":{"type":"string"},"description":{"type":"string"},"readOnly":{"type":"boolean"}},"required":["name","description","readOnly"]}}},"required":["toolset","enabled","tools"]}`),
			true),
		mk(toolEnable, "Enable a toolset",
			"Enable one toolset: its tools are added to this session's tool list, and the client is told the list changed. It changes nothing outside this session.",
			toolsetArg, nil, true),
	}
}

// toolsetInfo is one toolset as list_toolsets shows it.
type toolsetInfo struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	ToolCount   int    `json:"toolCount"`
	Enabled     bool   `json:"enabled"`
}

// toolInfo is one tool as get_toolset_tools shows it.
type toolInfo struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	ReadOnly    bool   `json:"readOnly"`
}

// inCeiling returns the tools of ts that f's ceiling shows, in the view
// of the current snapshot.
func (s *Server) inCeiling(ceiling *filter.View, ts *toolset) []*filter.Entry {
	var out []*filter.Entry
	for _, t := range ceiling.Tools {
		if e := ceiling.Lookup(t.Name); e != nil && e.Upstream != "" && slices.Contains(e.Toolsets, ts.selector) {
			out = append(out, e)
		}
	}
	return out
}

// ceilingView returns the view of the current snapshot through f's
// ceiling.
func (s *Server) ceilingView(f *filter.Filter) *filter.View {
	snap := s.agg.Snapshot()
	return s.registry.View(snap.Version, snap.Tools, s.registry.Narrowed(f.Ceiling()...))
}

// maxDescribed bounds the tool names a toolset's description lists.
const maxDescribed = 5

// listToolsets is what list_toolsets shows through f: every toolset with
// at least one tool inside f's ceiling.
func (s *Server) listToolsets(f *filter.Filter) []toolsetInfo {
	d := s.dynamic()
	ceiling := s.ceilingView(f)
	on := f.Enabled()
	out := []toolsetInfo{}
	for _, ts := range d.sets {
		tools := s.inCeiling(ceiling, ts)
		if len(tools) == 0 {
			continue
		}
		names := make([]string, 0, maxDescribed)
		for _, e := range tools[:min(len(tools), maxDescribed)] {
			names = append(names, e.Tool.Name)
		}
		desc := fmt.Sprintf("%d %s of upstream %s: %s", len(tools), plural(len(tools), "tool", "tools"), ts.upstream, strings.Join(names, ", "))
		if len(tools) > maxDescribed {
			desc += ", …"
		}
		out = append(out, toolsetInfo{Name: ts.name, Description: desc, ToolCount: len(tools), Enabled: slices.Contains(on, ts.selector)})
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// findToolset returns the toolset the arguments of a get_toolset_tools or
// enable_toolset call name, with its tools inside f's ceiling; or the text
// of the tool error to answer.
func (s *Server) findToolset(f *filter.Filter, args json.RawMessage) (*toolset, []*filter.Entry, string) {
	var p struct {
		Toolset *string `json:"toolset"`
	}
	valid := func() string {
		var names []string
		for _, ts := range s.listToolsets(f) {
			names = append(names, ts.Name)
		}
		if len(names) == 0 {
			return "this session can enable no toolset"
		}
		return "valid toolsets: " + strings.Join(names, ", ")
	}
	if len(bytes.TrimSpace(args)) == 0 || json.Unmarshal(args, &p) != nil || p.Toolset == nil {
		return nil, nil, "the argument toolset (a string) is required; " + valid()
	}
	// A toolset with no tool inside the ceiling answers exactly like one
	// that does not exist, in the caller's own spelling: naming it, or its
	// upstream's prefix, would tell a hidden upstream from a missing one.
	unknown := fmt.Sprintf("unknown toolset %q; %s", jsonrpc.Printable(*p.Toolset), valid())
	ts := s.dynamic().refs[*p.Toolset]
	if ts == nil {
		return nil, nil, unknown
	}
	tools := s.inCeiling(s.ceilingView(f), ts)
	if len(tools) == 0 {
		return nil, nil, unknown
	}
	return ts, tools, ""
}

// ownCall answers a call of one of viewmux's own tools (e, from decide) and
// audits it like any call. It never reaches an upstream.
func (s *Server) ownCall(session string, b grant.Binding, e *filter.Entry, m *jsonrpc.Message, cl *caller) (json.RawMessage, error) {
	start := time.Now()
	res := s.answerOwn(session, b, e, m, cl)
	rec := audit.Record{Time: start.UTC(), Session: session, Caller: callerName(b), Profile: b.Profile, Tool: e.Tool.Name, Upstream: configs.ReservedPrefix,
		Decision: audit.Allowed, Duration: float64(time.Since(start).Microseconds()) / 1000}
	if res.IsError {
		rec.Reason = audit.ReasonToolError
	}
	s.audit.Write(rec, m.Arguments)
	out, err := json.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("tool %q: %w", e.Tool.Name, err)
	}
	return out, nil
}

// answerOwn is ownCall's result.
func (s *Server) answerOwn(session string, b grant.Binding, e *filter.Entry, m *jsonrpc.Message, cl *caller) *mcp.CallToolResult {
	if e.Original == toolSearchTools {
		return s.searchCall(session, b, m, cl)
	}
	f := s.effective(b)
	if !f.Dynamic() {
		return toolError("this session's profile no longer has dynamic_toolsets")
	}
	switch e.Original {
	case toolListToolsets:
		return structured(map[string]any{"toolsets": s.listToolsets(f)})
	case toolGetTools:
		ts, tools, bad := s.findToolset(f, m.Arguments)
		if ts == nil {
			return toolError(bad)
		}
		infos := make([]toolInfo, len(tools))
		for i, t := range tools {
			infos[i] = toolInfo{Name: t.Tool.Name, Description: t.Tool.Description, ReadOnly: t.ReadOnly}
		}
		return structured(map[string]any{"toolset": ts.name, "enabled": slices.Contains(f.Enabled(), ts.selector), "tools": infos})
	case toolEnable:
		ts, tools, bad := s.findToolset(f, m.Arguments)
		if ts == nil {
			return toolError(bad)
		}
		if cl.modern {
			return toolError(fmt.Sprintf("a stateless (2026-07-28) request has no session to enable toolset %q in: select toolsets with the Mcp-Toolsets header or the ?toolsets= query parameter (for example Mcp-Toolsets: %s) on each request instead", ts.name, ts.name))
		}
		names := make([]string, len(tools))
		for i, t := range tools {
			names[i] = t.Tool.Name
		}
		enabled, err := s.enable(session, ts, cl)
		switch {
		case err != nil:
			return toolError(err.Error())
		case !enabled:
			return textResult(fmt.Sprintf("toolset %s was already enabled: %s", ts.name, strings.Join(names, ", ")))
		}
		return textResult(fmt.Sprintf("toolset %s enabled; %d %s added to this session's tool list: %s", ts.name, len(tools), plural(len(tools), "tool", "tools"), strings.Join(names, ", ")))
	}
	return toolError("unknown tool " + e.Tool.Name)
}

// enable turns ts on in session's filter and, when the session's listings
// changed, tells the session (through cl, the writer of the call's own
// request, so that it reaches this session whatever its door). It reports
// false when ts was already on.
func (s *Server) enable(session string, ts *toolset, cl *caller) (bool, error) {
	snap := s.agg.Snapshot()
	s.mu.Lock()
	sess := s.boundLocked(session)
	if sess == nil {
		s.mu.Unlock()
		return false, fmt.Errorf("session %q is not initialized", jsonrpc.Printable(session))
	}
	cur := s.effective(sess.binding)
	on := cur.Enabled()
	if !cur.Dynamic() || slices.Contains(on, ts.selector) {
		s.mu.Unlock()
		return false, nil
	}
	next := s.registry.EnableToolsets(cur, append(on, ts.selector))
	sess.binding.Filter = next
	profile := sess.binding.Profile
	notify := s.relistLocked(sess, s.registry.View(snap.Version, snap.Tools, next), snap.Catalog)
	s.mu.Unlock()
	s.log.Info("toolset enabled", "session", session, "profile", profile, "toolset", ts.name)
	for _, method := range notify {
		cl.Notify(method, nil)
	}
	return true, nil
}

func textResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(text)}}
}

func toolError(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(text)}, IsError: true}
}

// structured is a result whose text is v as JSON, and whose structured
// content is v.
func structured(v any) *mcp.CallToolResult {
	b, err := json.Marshal(v)
	if err != nil {
		return toolError("result not encodable: " + err.Error())
	}
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(string(b))}, StructuredContent: v}
}

// DynamicFilter returns the filter a new session of b starts with when b's
// profile has dynamic_toolsets and b's request chose no toolsets or tools
// itself: its toolsets off and viewmux's own tools listed. Otherwise it
// returns nil. It is for commands that hold a resolver but no Server
// (check, tools); registry is theirs.
func DynamicFilter(r *grant.Resolver, registry *filter.Registry, b grant.Binding) *filter.Filter {
	if b.Filter == nil || !b.Dynamic {
		return nil
	}
	d := newDynamicSetup(r)
	return registry.Narrowed(append(b.Filter.Ceiling(), d.initial)...)
}
