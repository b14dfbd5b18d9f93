package sessions

import (
	"bytes"
	"context"
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

// This file holds tool search (progressive disclosure). A session of a
// profile with tool_search starts with two tools of viewmux's own,
// viewmux__search_tools and viewmux__call_tool, plus the tools its
// tool_search_pinned globs match, in place of the whole view. Its binding
// keeps the profile's filter (the ceiling); effective adds the tool-search
// stage (filter.SearchStage), so the listing and the call decision come
// from one filter. A search ranks the ceiling's view (filter.View.Search,
// one index per view) and adds what it found to the session's filter,
// telling that session, and only it, list_changed. call_tool runs the one
// decision (decide) and route for the tool it names, against the
// ceiling's view: whatever decide and route apply to a tools/call (call
// rules, rate limits, audit, and what is added to them) applies to it.

// Names of the tool-search tools, after ReservedPrefix and the separator.
const (
	toolSearchTools = "search_tools"
	toolCallTool    = "call_tool"
)

// Bounds of a search.
const (
	searchDefaultLimit = 5
	searchMaxLimit     = 20
	// searchMaxQuery bounds the query's length in bytes.
	searchMaxQuery = 1024
)

// searchSetup is what one resolver's config says about tool search: the
// starting stage of each tool_search profile. It is immutable.
type searchSetup struct {
	res           *grant.Resolver
	search, relay *filter.Entry
	initial       map[string]*filter.Rules // by profile; absent: the profile has no tool_search
}

// searching returns the tool-search setup of the current resolver, built
// once per resolver.
func (s *Server) searching() *searchSetup {
	res := s.Resolver()
	if d := s.srch.Load(); d != nil && d.res == res {
		return d
	}
	d := newSearchSetup(res)
	s.srch.Store(d)
	return d
}

func newSearchSetup(res *grant.Resolver) *searchSetup {
	search, relay := searchTools(res.Config().Server.Separator)
	d := &searchSetup{res: res, search: search, relay: relay, initial: make(map[string]*filter.Rules)}
	for name, p := range res.Config().Profiles {
		if !p.ToolSearch {
			continue
		}
		stage, err := filter.SearchStage(p.ToolSearchPinned, nil, search, relay)
		if err != nil {
			// configs validated the globs; a stage that fails now lists
			// only the two own tools rather than everything.
			stage, _ = filter.SearchStage(nil, nil, search, relay)
		}
		d.initial[name] = stage
	}
	return d
}

// searchTools returns the entries of the two tool-search tools for
// separator sep. Their Upstream is empty: route answers them itself.
// call_tool's annotations here are placeholders: each view sets those of
// the weakest tool it reaches (filter.SearchStage).
func searchTools(sep string) (search, relay *filter.Entry) {
	yes := true
	search = &filter.Entry{Original: toolSearchTools, ReadOnly: true, Tool: mcp.Tool{
		Name:  configs.ReservedPrefix + sep + toolSearchTools,
		Title: "Search tools",
		Description: "Find the tools for a task among all the tools this session may use (most are not listed until found). " +
			"Describe the task in words; the best matches come back with their full definitions and are added to this session's tool list. " +
			"Call them directly, or through " + configs.ReservedPrefix + sep + toolCallTool + ".",
		RawInputSchema:  json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{"query":{"type":"string","description":"What you want to do, in words: for example \"read a file\" or \"create an issue\"."},"limit":{"type":"integer","minimum":1,"maximum":%d,"default":%d,"description":"How many tools to return at most."}},"required":["query"],"additionalProperties":false}`, searchMaxLimit, searchDefaultLimit)),
		RawOutputSchema: json.RawMessage(`{"type":"object","properties":{"tools":{"type":"array","items":{"type":"object","properties":{"name":{"type":"string"},"title":{"type":"string"},"description":{"type":"string"},"inputSchema":{"type":"object"},"annotations":{"type":"object"}},"required":["name","inputSchema"]}}},"required":["tools"]}`),
		Annotations:     mcp.ToolAnnotation{ReadOnlyHint: &yes, IdempotentHint: &yes, OpenWorldHint: new(bool)},
	}}
	relay = &filter.Entry{Original: toolCallTool, Tool: mcp.Tool{
		Name:  configs.ReservedPrefix + sep + toolCallTool,
		Title: "Call a tool",
		Description: "Call any tool this session may use by its name, whether or not it is in the tool list yet (find tools with " +
			configs.ReservedPrefix + sep + toolSearchTools + "). The call is checked and answered exactly as a direct call of that tool.",
		RawInputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string","description":"The tool's name, as ` + configs.ReservedPrefix + sep + toolSearchTools + ` returned it."},"arguments":{"type":"object","description":"The tool's arguments, as its inputSchema describes them."}},"required":["name"],"additionalProperties":false}`),
	}}
	return search, relay
}

// withSearch returns the filter a tool-search session of b starts with,
// or nil when b is not one (its profile has no tool_search, or its
// request chose tools itself).
func (d *searchSetup) withSearch(registry *filter.Registry, b grant.Binding) *filter.Filter {
	stage := d.initial[b.Profile]
	if b.Filter == nil || !b.Search || stage == nil {
		return nil
	}
	return registry.Narrowed(append(b.Filter.Ceiling(), stage)...)
}

// SearchFilter returns the filter a new session of b starts with when b's
// profile has tool_search and b's request chose no toolsets or tools
// itself: viewmux's two search tools and the pinned tools. Otherwise it
// returns nil. It is for commands that hold a resolver but no Server;
// registry is theirs.
func SearchFilter(r *grant.Resolver, registry *filter.Registry, b grant.Binding) *filter.Filter {
	return newSearchSetup(r).withSearch(registry, b)
}

// refind returns b with the tools the filter old had found listed again,
// for a session whose rules a reload resolved anew (they show only where
// the new ceiling does); nothing when b's profile no longer has
// tool_search.
func (s *Server) refind(b grant.Binding, old *filter.Filter) grant.Binding {
	found := old.Found()
	if len(found) == 0 {
		return b
	}
	f := s.effective(b)
	if !f.Searching() {
		return b
	}
	b.Filter = s.registry.WithFound(f, found)
	return b
}

// isRelay reports whether e is viewmux__call_tool, whose call decide
// checks again, and counts, as the call of the tool it names.
func isRelay(e *filter.Entry) bool {
	return e != nil && e.Upstream == "" && e.Original == toolCallTool
}

// searchArgs reads the arguments of a search_tools call: the query and
// limit, or the text of the tool error to answer, naming the argument at
// fault.
func searchArgs(args json.RawMessage) (query string, limit int, bad string) {
	var in map[string]json.RawMessage
	if len(bytes.TrimSpace(args)) > 0 && string(args) != "null" {
		if err := json.Unmarshal(args, &in); err != nil {
			return "", 0, "the arguments must be an object with query (a string) and optionally limit (an integer from 1 to 20)"
		}
	}
	for _, k := range slices.Sorted(maps.Keys(in)) {
		if k != "query" && k != "limit" {
			return "", 0, fmt.Sprintf("unknown argument %q: search_tools takes query and limit", jsonrpc.Printable(k))
		}
	}
	raw, ok := in["query"]
	if !ok || json.Unmarshal(raw, &query) != nil || strings.TrimSpace(query) == "" {
		return "", 0, "the argument query (a non-empty string) is required"
	}
	if len(query) > searchMaxQuery {
		return "", 0, fmt.Sprintf("the argument query is %d bytes long; at most %d", len(query), searchMaxQuery)
	}
	limit = searchDefaultLimit
	if raw, ok := in["limit"]; ok && string(raw) != "null" {
		var f float64
		if json.Unmarshal(raw, &f) != nil || f != float64(int(f)) || f < 1 || f > searchMaxLimit {
			return "", 0, fmt.Sprintf("the argument limit must be an integer from 1 to %d, got %s", searchMaxLimit, jsonrpc.Printable(string(raw)))
		}
		limit = int(f)
	}
	return query, limit, ""
}

// searchResult is a search_tools result: the found tools' definitions as
// structured content, each with only name, title, description,
// inputSchema and annotations (the listed bytes of each), and a readable
// text of them.
func searchResult(query string, found []*filter.Entry, added bool, sep string) *mcp.CallToolResult {
	items := make([]json.RawMessage, len(found))
	var text strings.Builder
	switch {
	case len(found) == 0:
		fmt.Fprintf(&text, "No tool matches %q. Try other words for the task.", query)
	case added:
		fmt.Fprintf(&text, "%d %s for %q, now in this session's tool list (or call them with %s):\n", len(found), plural(len(found), "tool", "tools"), query, configs.ReservedPrefix+sep+toolCallTool)
	default:
		fmt.Fprintf(&text, "%d %s for %q; call them with %s:\n", len(found), plural(len(found), "tool", "tools"), query, configs.ReservedPrefix+sep+toolCallTool)
	}
	keys := []string{"name", "title", "description", "inputSchema", "annotations"}
	for i, e := range found {
		def := e.Definition()
		vals := jsonrpc.Fields(def, keys...)
		var b bytes.Buffer
		b.WriteByte('{')
		for k, v := range vals {
			if len(v) == 0 {
				continue
			}
			if b.Len() > 1 {
				b.WriteByte(',')
			}
			b.WriteString(`"` + keys[k] + `":`)
			b.Write(v)
		}
		b.WriteByte('}')
		items[i] = b.Bytes()
		fmt.Fprintf(&text, "\n- %s", e.Tool.Name)
		if e.Tool.Title != "" {
			fmt.Fprintf(&text, " (%s)", e.Tool.Title)
		}
		if e.Tool.Description != "" {
			fmt.Fprintf(&text, ": %s", e.Tool.Description)
		}
		if schema := vals[3]; len(schema) > 0 {
			var compact bytes.Buffer
			if json.Compact(&compact, schema) == nil {
				fmt.Fprintf(&text, "\n  arguments: %s", compact.String())
			}
		}
	}
	structured := map[string]any{"tools": items}
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(text.String())}, StructuredContent: structured}
}

// searchCall answers a search_tools call: it ranks the ceiling's view of
// b's filter and, for a session, adds what it found to the session's
// view. A stateless (2026-07-28) request has no session: the found tools
// are returned, and remembered nowhere.
func (s *Server) searchCall(session string, b grant.Binding, m *jsonrpc.Message, cl *caller) *mcp.CallToolResult {
	f := s.effective(b)
	if !f.Searching() {
		return toolError("this session's profile no longer has tool_search")
	}
	query, limit, bad := searchArgs(m.Arguments)
	if bad != "" {
		return toolError(bad)
	}
	found := s.ceilingView(f).Search(query, limit)
	added := false
	if !cl.modern && len(found) > 0 {
		names := make([]string, len(found))
		for i, e := range found {
			names[i] = e.Tool.Name
		}
		if err := s.addFound(session, names, cl); err != nil {
			return toolError(err.Error())
		}
		added = true
	}
	return searchResult(query, found, added, s.Resolver().Config().Server.Separator)
}

// addFound adds the tools named names to session's tool-search filter
// and, when the session's listings changed, tells the session through cl,
// the writer of the call's own request.
func (s *Server) addFound(session string, names []string, cl *caller) error {
	snap := s.agg.Snapshot()
	s.mu.Lock()
	sess := s.boundLocked(session)
	if sess == nil {
		s.mu.Unlock()
		return fmt.Errorf("session %q is not initialized", jsonrpc.Printable(session))
	}
	cur := s.effective(sess.binding)
	next := s.registry.WithFound(cur, names)
	if next == cur {
		s.mu.Unlock()
		return nil
	}
	sess.binding.Filter = next
	notify := s.relistLocked(sess, s.registry.View(snap.Version, snap.Tools, next), snap.Catalog)
	profile := sess.binding.Profile
	s.mu.Unlock()
	s.log.Info("tools found", "session", session, "profile", profile, "tools", len(names))
	for _, method := range notify {
		cl.Notify(method, nil)
	}
	return nil
}

// relistLocked records what sess lists through v (of a snapshot whose
// catalog is c) and returns the list_changed notifications it is owed.
// s.mu must be held.
func (s *Server) relistLocked(sess *session, v *filter.View, c *filter.Catalog) []string {
	var notify []string
	if fp := v.Fingerprint(); fp != sess.listed {
		sess.listed = fp
		notify = append(notify, string(mcp.MethodNotificationToolsListChanged))
	}
	p, r := v.Listing(c).Fingerprints()
	if p != sess.listedPrompts {
		sess.listedPrompts = p
		notify = append(notify, string(mcp.MethodNotificationPromptsListChanged))
	}
	if r != sess.listedResources {
		sess.listedResources = r
		notify = append(notify, string(mcp.MethodNotificationResourcesListChanged))
	}
	return notify
}

// relayed returns the tools/call message a call_tool call m asks for:
// the named tool with its arguments, m's id and m's _meta (its progress
// token included), parsed as a request of its own so that decide checks
// it as any tools/call; or the text of the tool error to answer, naming
// the argument at fault.
func relayed(m *jsonrpc.Message) (*jsonrpc.Message, string) {
	var in map[string]json.RawMessage
	if len(bytes.TrimSpace(m.Arguments)) > 0 && string(m.Arguments) != "null" {
		if err := json.Unmarshal(m.Arguments, &in); err != nil {
			return nil, "the arguments must be an object with name (a string) and arguments (an object)"
		}
	}
	for _, k := range slices.Sorted(maps.Keys(in)) {
		if k != "name" && k != "arguments" {
			return nil, fmt.Sprintf("unknown argument %q: call_tool takes name and arguments", jsonrpc.Printable(k))
		}
	}
	var name string
	if raw, ok := in["name"]; !ok || json.Unmarshal(raw, &name) != nil || name == "" {
		return nil, "the argument name (a non-empty string: the tool to call) is required"
	}
	args := bytes.TrimSpace(in["arguments"])
	switch {
	case len(args) == 0 || string(args) == "null":
		args = []byte("{}")
	case args[0] != '{':
		return nil, "the argument arguments must be an object (the tool's arguments)"
	}
	var raw bytes.Buffer
	raw.WriteString(`{"jsonrpc":"2.0","id":`)
	raw.Write(m.ID)
	raw.WriteString(`,"method":"tools/call","params":{"name":`)
	raw.Write(in["name"])
	raw.WriteString(`,"arguments":`)
	raw.Write(args)
	if meta := jsonrpc.Lookup(m.Params, "_meta"); len(meta) > 0 {
		raw.WriteString(`,"_meta":`)
		raw.Write(meta)
	}
	raw.WriteString(`}}`)
	inner, err := jsonrpc.Parse(raw.Bytes())
	if err != nil || inner.Name != name {
		return nil, "the arguments could not be read as a tool call"
	}
	return inner, ""
}

// relayAudit records a call_tool call answered with a tool error before
// it named a tool to check.
func (s *Server) relayAudit(session string, b grant.Binding, e *filter.Entry, m *jsonrpc.Message, start time.Time) {
	s.audit.Write(audit.Record{Time: start.UTC(), Session: session, Profile: b.Profile, Tool: e.Tool.Name, Upstream: configs.ReservedPrefix,
		Decision: audit.Allowed, Reason: audit.ReasonToolError, Duration: float64(time.Since(start).Microseconds()) / 1000}, m.Arguments)
}

// relay answers a call_tool call (e, which decide allowed): the tools/call
// it names goes through decide, against the view of the session's whole
// ceiling (listed or not, never beyond), and then route, exactly as a
// direct tools/call of that tool would; its refusal or answer is the
// call's. A hidden tool answers as an unknown one, whatever its spelling.
func (s *Server) relay(ctx context.Context, session string, b grant.Binding, e *filter.Entry, m *jsonrpc.Message, cl *caller) (json.RawMessage, error) {
	start := time.Now()
	inner, bad := relayed(m)
	if bad != "" {
		s.relayAudit(session, b, e, m, start)
		return json.Marshal(toolError(bad))
	}
	target, refusal := s.decide(session, b, s.ceilingView(s.effective(b)), inner)
	switch {
	case refusal != nil:
		return nil, refusal
	case target.Upstream == "":
		// The ceiling lists none of viewmux's own tools; should one ever
		// be there, it is not relayed.
		return nil, &jsonrpc.Error{Code: mcp.METHOD_NOT_FOUND, Message: "Tool not found: " + jsonrpc.Printable(inner.Name)}
	}
	return s.route(ctx, session, b, target, inner, cl)
}
