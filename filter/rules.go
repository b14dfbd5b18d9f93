// Package filter owns mcpmux's tool filtering: rule sets compiled from config,
// their canonical keys, interning so that equal effective rules share one
// compiled Filter, and the cached View of a catalog snapshot per (snapshot
// version, key).
//
// One decision function, Filter.Allows, answers both "is this tool listed?"
// and "may it be called?". Nothing else in mcpmux decides visibility.
package filter

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpmux/mcpmux/configs"
	"github.com/mcpmux/mcpmux/internal/glob"
)

// ErrArgumentsNotAllowed is returned by Filter.CheckCall when a call_rule
// refuses the arguments of a visible tool.
var ErrArgumentsNotAllowed = errors.New("arguments not allowed")

// Entry is one tool of a catalog snapshot as the filter sees it. Entries are
// built by the aggregator and never modified afterwards.
type Entry struct {
	Tool     mcp.Tool // as exposed: namespaced name, original name in _meta
	Upstream string   // the upstream's config name
	Original string   // the name the upstream gave the tool
	ReadOnly bool     // readOnlyHint true, or named by read_only_tools
	// Toolsets holds every toolset selector that selects this tool: the
	// upstream ("github"), its prefix when different ("gh"), and each
	// "<upstream>/<set>" and "<prefix>/<set>" it belongs to. Sorted.
	Toolsets []string
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
	callRules map[string][]argRule
}

type argRule struct {
	arg   string
	globs []*glob.Glob
}

// Compile compiles a rule set. Every invalid glob or regex is reported, each
// naming its pattern.
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
	r.allow, errs = compileGlobs(rs.Allow, "allow", errs)
	r.deny, errs = compileGlobs(rs.Deny, "deny", errs)
	r.allowRe, errs = compileRegexes(rs.AllowRegex, "allow_regex", errs)
	r.denyRe, errs = compileRegexes(rs.DenyRegex, "deny_regex", errs)
	for _, cr := range rs.CallRules {
		if cr.Tool == "" {
			errs = append(errs, errors.New("call_rules: tool is empty"))
			continue
		}
		args := slices.Sorted(maps.Keys(cr.Args))
		for _, a := range args {
			var gs []*glob.Glob
			gs, errs = compileGlobs(cr.Args[a], fmt.Sprintf("call_rules %q args.%s", cr.Tool, a), errs)
			if r.callRules == nil {
				r.callRules = make(map[string][]argRule)
			}
			r.callRules[cr.Tool] = append(r.callRules[cr.Tool], argRule{arg: a, globs: gs})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	r.key = canonicalKey(rs)
	return r, nil
}

// MustCompile is Compile for rule sets known to be valid, such as those of a
// validated config or built by mcpmux itself. It panics on error.
func MustCompile(rs configs.RuleSet) *Rules {
	r, err := Compile(rs)
	if err != nil {
		panic(err)
	}
	return r
}

func compileGlobs(pats []string, what string, errs []error) ([]*glob.Glob, []error) {
	var out []*glob.Glob
	for _, p := range pats {
		g, err := glob.Compile(p)
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
	if r.readOnly && !readOnly {
		return false
	}
	for _, g := range r.deny {
		if g.Match(name) {
			return false
		}
	}
	for _, re := range r.denyRe {
		if re.MatchString(name) {
			return false
		}
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

// checkArgs applies the rule set's call_rules for the exposed tool name to
// the raw JSON arguments.
func (r *Rules) checkArgs(name string, args json.RawMessage) bool {
	rules := r.callRules[name]
	if len(rules) == 0 {
		return true
	}
	var m map[string]json.RawMessage
	if len(args) > 0 {
		if err := json.Unmarshal(args, &m); err != nil {
			return false
		}
	}
	for _, ar := range rules {
		raw, ok := m[ar.arg]
		if !ok {
			return false
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return false // only strings can match an argument glob
		}
		if !slices.ContainsFunc(ar.globs, func(g *glob.Glob) bool { return g.Match(s) }) {
			return false
		}
	}
	return true
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
	if rs.ReadOnly {
		b.WriteString("read_only;")
	}
	if len(rs.CallRules) > 0 {
		var crs []string
		for _, cr := range rs.CallRules {
			for _, a := range slices.Sorted(maps.Keys(cr.Args)) {
				gs := slices.Compact(slices.Sorted(slices.Values(cr.Args[a])))
				enc, _ := json.Marshal([]any{cr.Tool, a, gs})
				crs = append(crs, string(enc))
			}
		}
		list("call_rules", crs)
	}
	return b.String()
}
