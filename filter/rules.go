// Package filter owns viewmux's tool filtering: rule sets compiled from config,
// their canonical keys, interning so that equal effective rules share one
// compiled Filter, and the cached View of a catalog snapshot per (snapshot
// version, key).
//
// One decision function, Filter.Allows, answers both "is this tool listed?"
// and "may it be called?". Nothing else in viewmux decides visibility.
package filter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/glob"
	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// ErrArgumentsNotAllowed is returned by Filter.CheckCall when a call_rule
// refuses the arguments of a visible tool.
var ErrArgumentsNotAllowed = errors.New("arguments not allowed")

// Entry is one tool of a catalog snapshot as the filter sees it. Entries are
// built by the aggregator and never modified afterwards.
type Entry struct {
	Tool mcp.Tool // as exposed: namespaced name, original name in _meta
	// Raw is the exposed definition as listed: the upstream's bytes with
	// only the name and viewmux's _meta spliced in. nil = none
	// (viewmux's own tools): the listing encodes Tool.
	Raw      json.RawMessage
	Upstream string // the upstream's config name
	Original string // the name the upstream gave the tool
	ReadOnly bool   // readOnlyHint true, or named by read_only_tools
	// Toolsets holds every toolset selector that selects this tool: the
	// upstream ("github"), its prefix when different ("gh"), and each
	// "<upstream>/<set>" and "<prefix>/<set>" it belongs to. Sorted.
	Toolsets []string
	// Fixed are the arguments an override fixes, sorted by key, each
	// value encoded: injected into every call of the tool, and refused
	// when a client sends one (aggregator.InjectFixed). nil = none.
	Fixed []jsonrpc.Member
	// Placeholder marks viewmux's stand-in for the tools of a per-user
	// upstream that nothing has listed yet (NAME__connect): a call of it
	// is answered by viewmux with the caller's connect link and never
	// sent upstream (aggregator.CallTool). It passes filters like any
	// tool of Upstream.
	Placeholder bool
}

// Rules is one compiled rule set: one stage of the pipeline. It is immutable
// and safe for concurrent use.
type Rules struct {
	key       string
	tools     map[string]struct{}
	allow     []*glob.Glob
	allowRe   []*regexp.Regexp
	deny      []*glob.Glob
	denyRe    []*regexp.Regexp
	toolsets  map[string]struct{}
	readOnly  bool
	callRules map[string]*callRule // exposed tool name → its one rule
	// upstreams, when non-nil, names the only upstreams this stage shows;
	// denyUpstreams names upstreams it hides whatever else names them.
	upstreams     map[string]struct{}
	denyUpstreams map[string]struct{}
	// dynamic, when set, makes this the stage of a dynamic-toolsets
	// session (dynamic.go); such a stage has no other selector.
	dynamic *dynamicStage
	// approve names the tools whose calls need a person's approval, and
	// approveTimeout how long one waits for it (0: not set by this
	// stage); see Filter.Approval.
	approve        []*glob.Glob
	approveTimeout time.Duration
	// search, when set, makes this the stage of a tool-search session
	// (search.go); such a stage has no other selector.
	search *searchStage
}

// callRule is one compiled configs.CallRule.
type callRule struct {
	args      []argRule // sorted by name
	otherArgs bool
}

// argRule is the patterns of one named argument: a value passes when it
// matches any of them.
type argRule struct {
	arg   string
	globs []*glob.Glob     // compiled with glob.Guarded
	res   []*regexp.Regexp // anchored: each matches the whole value
}

// Compile compiles a rule set. Every invalid glob or regex is reported, each
// naming its pattern, and so is a call rule without a tool or an argument, an
// argument without a pattern, and a second call rule for one tool.
func Compile(rs configs.RuleSet) (*Rules, error) {
	r := &Rules{readOnly: rs.ReadOnly}
	var errs []error
	if len(rs.Tools) > 0 {
		r.tools = make(map[string]struct{}, len(rs.Tools))
		for _, t := range rs.Tools {
			r.tools[t] = struct{}{}
		}
	}
	if len(rs.Toolsets) > 0 {
		r.toolsets = make(map[string]struct{}, len(rs.Toolsets))
		for _, t := range rs.Toolsets {
			r.toolsets[t] = struct{}{}
		}
	}
	r.upstreams = nameSet(rs.Upstreams)
	r.denyUpstreams = nameSet(rs.DenyUpstreams)
	r.allow, errs = compileGlobs(rs.Allow, "allow", errs)
	r.deny, errs = compileGlobs(rs.Deny, "deny", errs)
	r.allowRe, errs = compileRegexes(rs.AllowRegex, "allow_regex", errs)
	r.denyRe, errs = compileRegexes(rs.DenyRegex, "deny_regex", errs)
	r.approve, errs = compileGlobs(rs.Approve, "approve", errs)
	if rs.ApproveTimeout < 0 {
		errs = append(errs, fmt.Errorf("approve_timeout %s is negative", rs.ApproveTimeout))
	}
	r.approveTimeout = rs.ApproveTimeout
	for _, cr := range rs.CallRules {
		if cr.Tool == "" {
			errs = append(errs, errors.New("call_rules: tool is empty"))
			continue
		}
		if _, dup := r.callRules[cr.Tool]; dup {
			errs = append(errs, fmt.Errorf("call_rules %q: more than one rule for the tool", cr.Tool))
			continue
		}
		var c *callRule
		c, errs = compileCallRule(cr, errs)
		if r.callRules == nil {
			r.callRules = make(map[string]*callRule)
		}
		r.callRules[cr.Tool] = c
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	r.key = canonicalKey(rs)
	return r, nil
}

// compileCallRule compiles one call rule; its errors are appended to errs.
func compileCallRule(cr configs.CallRule, errs []error) (*callRule, []error) {
	c := &callRule{otherArgs: cr.OtherArgs}
	names := slices.AppendSeq(slices.Collect(maps.Keys(cr.Args)), maps.Keys(cr.ArgsRegex))
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) == 0 {
		errs = append(errs, fmt.Errorf("call_rules %q: names no argument (want args or args_regex)", cr.Tool))
	}
	for _, a := range names {
		ar := argRule{arg: a}
		ar.globs, errs = compileGlobs(cr.Args[a], fmt.Sprintf("call_rules %q args.%s", cr.Tool, a), errs, glob.Guarded())
		ar.res, errs = compileWholeRegexes(cr.ArgsRegex[a], fmt.Sprintf("call_rules %q args_regex.%s", cr.Tool, a), errs)
		if len(cr.Args[a]) == 0 && len(cr.ArgsRegex[a]) == 0 {
			errs = append(errs, fmt.Errorf("call_rules %q: argument %q has no pattern", cr.Tool, a))
		}
		c.args = append(c.args, ar)
	}
	return c, errs
}

// nameSet returns the set of names, or nil when there are none.
func nameSet(names []string) map[string]struct{} {
	if len(names) == 0 {
		return nil
	}
	set := make(map[string]struct{}, len(names))
	for _, n := range names {
		set[n] = struct{}{}
	}
	return set
}

// MustCompile is Compile for rule sets known to be valid, such as those of a
// validated config or built by viewmux itself. It panics on error.
func MustCompile(rs configs.RuleSet) *Rules {
	r, err := Compile(rs)
	if err != nil {
		panic(err)
	}
	return r
}

func compileGlobs(pats []string, what string, errs []error, opts ...glob.Option) ([]*glob.Glob, []error) {
	var out []*glob.Glob
	for _, p := range pats {
		g, err := glob.Compile(p, opts...)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
			continue
		}
		out = append(out, g)
	}
	return out, errs
}

func compileRegexes(pats []string, what string, errs []error) ([]*regexp.Regexp, []error) {
	var out []*regexp.Regexp
	for _, p := range pats {
		re, err := regexp.Compile(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: invalid regex %q: %w", what, p, err))
			continue
		}
		out = append(out, re)
	}
	return out, errs
}

// compileWholeRegexes compiles patterns that must match a whole value. Each is
// first compiled as written, so that one which is only valid once wrapped
// (`a)(b`) is an error rather than a different pattern.
func compileWholeRegexes(pats []string, what string, errs []error) ([]*regexp.Regexp, []error) {
	var out []*regexp.Regexp
	for _, p := range pats {
		if _, err := regexp.Compile(p); err != nil {
			errs = append(errs, fmt.Errorf("%s: invalid regex %q: %w", what, p, err))
			continue
		}
		out = append(out, regexp.MustCompile(`^(?:`+p+`)$`))
	}
	return out, errs
}

// Key returns the rule set's canonical key: equal rule sets, however their
// lists were ordered or repeated, have equal keys.
func (r *Rules) Key() string { return r.key }

// Empty reports whether the rule set passes every tool and refuses no call.
func (r *Rules) Empty() bool { return r.key == "" }

// hasPositive reports whether any positive selector is set.
func (r *Rules) hasPositive() bool {
	return r.tools != nil || len(r.allow) > 0 || len(r.allowRe) > 0 || r.toolsets != nil
}

// Match reports whether a tool named name passes this rule set: (no
// positive selector is set, or one matches) and no negative selector matches,
// and (read_only is off, or the tool is read-only). Deny always wins.
// toolsets are the selectors that select the tool (see Entry.Toolsets).
func (r *Rules) Match(name string, readOnly bool, toolsets []string) bool {
	if r.dynamic != nil {
		return r.dynamic.match(toolsets)
	}
	if r.search != nil {
		return r.search.match(name)
	}
	if r.readOnly && !readOnly || r.denies(name) {
		return false
	}
	if !r.hasPositive() {
		return true
	}
	if _, ok := r.tools[name]; ok {
		return true
	}
	for _, g := range r.allow {
		if g.Match(name) {
			return true
		}
	}
	for _, re := range r.allowRe {
		if re.MatchString(name) {
			return true
		}
	}
	for _, ts := range toolsets {
		if _, ok := r.toolsets[ts]; ok {
			return true
		}
	}
	return false
}

// denies reports whether a negative selector (deny, deny_regex) of this
// stage matches name.
func (r *Rules) denies(name string) bool {
	for _, g := range r.deny {
		if g.Match(name) {
			return true
		}
	}
	for _, re := range r.denyRe {
		if re.MatchString(name) {
			return true
		}
	}
	return false
}

// AdmitsUpstream reports whether this stage lets the named upstream through:
// it is not in deny_upstreams and, when the stage names upstreams, it is
// one of them. It is the upstream half of both the tool decision
// (Filter.Allows) and upstream visibility (Filter.ShowsUpstream), and it
// decides which toolsets a request may name (the Resolver of sessions/grant).
func (r *Rules) AdmitsUpstream(name string) bool {
	if _, denied := r.denyUpstreams[name]; denied {
		return false
	}
	if r.upstreams == nil {
		return true
	}
	_, named := r.upstreams[name]
	return named
}

// ruleFor returns the call rule of the exposed tool name, or nil.
func (r *Rules) ruleFor(name string) *callRule { return r.callRules[name] }

// decodeArguments decodes the arguments of a tools/call. Absent arguments
// (and JSON null) are the empty object.
func decodeArguments(args json.RawMessage) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if len(bytes.TrimSpace(args)) == 0 {
		return m, nil
	}
	if err := json.Unmarshal(args, &m); err != nil {
		return nil, errors.New("arguments are not a JSON object")
	}
	return m, nil
}

// check applies the rule to the decoded arguments of a call: every named
// argument is present, a JSON string, and matches one of its patterns; and,
// unless other_args is set, no other argument is present. The error names
// the argument at fault but never its value.
func (c *callRule) check(args map[string]json.RawMessage) error {
	for i := range c.args {
		ar := &c.args[i]
		raw, ok := args[ar.arg]
		if !ok {
			return fmt.Errorf("argument %q is missing", ar.arg)
		}
		// json.Unmarshal would read null into a string as "", so look at
		// the value's first byte: only a JSON string can match.
		var s string
		if t := bytes.TrimLeft(raw, " \t\r\n"); len(t) == 0 || t[0] != '"' || json.Unmarshal(raw, &s) != nil {
			return fmt.Errorf("argument %q is not a string", ar.arg)
		}
		if !ar.match(s) {
			return fmt.Errorf("argument %q matches none of its patterns", ar.arg)
		}
	}
	if c.otherArgs || len(args) == len(c.args) {
		return nil // every named argument is present, so there is no other
	}
	unnamed := ""
	for k := range args {
		if !c.names(k) && (unnamed == "" || k < unnamed) {
			unnamed = k
		}
	}
	return fmt.Errorf("argument %q is not named by the call rule (other_args is false)", unnamed)
}

// names reports whether the rule names the argument.
func (c *callRule) names(arg string) bool {
	_, ok := slices.BinarySearchFunc(c.args, arg, func(a argRule, name string) int { return strings.Compare(a.arg, name) })
	return ok
}

// match reports whether s matches one of the argument's globs or regexes.
func (ar *argRule) match(s string) bool {
	for _, g := range ar.globs {
		if g.Match(s) {
			return true
		}
	}
	for _, re := range ar.res {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}

// canonicalKey renders a rule set with every list sorted and deduplicated.
// The empty rule set has the empty key.
func canonicalKey(rs configs.RuleSet) string {
	var b strings.Builder
	list := func(tag string, xs []string) {
		if len(xs) == 0 {
			return
		}
		xs = slices.Compact(slices.Sorted(slices.Values(xs)))
		b.WriteString(tag)
		enc, _ := json.Marshal(xs) // []string cannot fail to marshal
		b.Write(enc)
		b.WriteByte(';')
	}
	list("tools", rs.Tools)
	list("allow", rs.Allow)
	list("allow_regex", rs.AllowRegex)
	list("deny", rs.Deny)
	list("deny_regex", rs.DenyRegex)
	list("toolsets", rs.Toolsets)
	list("upstreams", rs.Upstreams)
	list("deny_upstreams", rs.DenyUpstreams)
	if rs.ReadOnly {
		b.WriteString("read_only;")
	}
	list("approve", rs.Approve)
	if rs.ApproveTimeout != 0 {
		fmt.Fprintf(&b, "approve_timeout%d;", rs.ApproveTimeout)
	}
	if len(rs.CallRules) > 0 {
		crs := make([]string, 0, len(rs.CallRules))
		for _, cr := range rs.CallRules {
			enc, _ := json.Marshal(keyRule{ // strings, maps of string slices and a bool cannot fail to marshal
				Tool:      cr.Tool,
				Args:      keyPatterns(cr.Args),
				ArgsRegex: keyPatterns(cr.ArgsRegex),
				OtherArgs: cr.OtherArgs,
			})
			crs = append(crs, string(enc))
		}
		list("call_rules", crs)
	}
	return b.String()
}

// keyRule is a call rule as its canonical key renders it: encoding/json
// sorts map keys, and empty maps are left out so that nil and {} agree.
type keyRule struct {
	Tool      string              `json:"tool"`
	Args      map[string][]string `json:"args,omitempty"`
	ArgsRegex map[string][]string `json:"args_regex,omitempty"`
	OtherArgs bool                `json:"other_args,omitempty"`
}

// keyPatterns returns m with every pattern list sorted and deduplicated, and
// without empty lists (an argument named with no pattern in one map must
// have patterns in the other, so leaving it out changes nothing), or nil.
func keyPatterns(m map[string][]string) map[string][]string {
	var out map[string][]string
	for a, pats := range m {
		if len(pats) == 0 {
			continue
		}
		if out == nil {
			out = make(map[string][]string, len(m))
		}
		out[a] = slices.Compact(slices.Sorted(slices.Values(pats)))
	}
	return out
}
