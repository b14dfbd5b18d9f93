package pins

import (
	"bytes"
	"encoding/json"
	"slices"
	"time"
)

// KindPinned is the Event of an upstream's first sight: Count tools were
// pinned as they are.
const KindPinned = "pinned"

// Round checks the tools of one snapshot build against the pins: get a
// Check for each upstream whose catalog the build uses, ask it about each
// tool, then Commit. Hiding is decided against the pins as they were when
// the round began; Commit records what the round saw. A Round belongs to
// one goroutine; a nil *Round (pinning off) checks nothing.
type Round struct {
	s          *Store
	quarantine bool
	base       *pinState                       // nil when the file cannot be read
	err        error                           // why not
	cache      map[string]map[string]canonical // the last round's: by upstream and tool
	checks     []*Check
}

// Round starts a round; quarantine hides changed and new tools, else they
// are only reported. When the state file cannot be read, a quarantine
// round hides every tool (it fails closed) and Commit returns the error.
func (s *Store) Round(quarantine bool) *Round {
	st, err := s.loaded()
	s.mu.Lock()
	cache := s.cache
	s.roundSt, s.roundErr = st, err
	s.mu.Unlock()
	return &Round{s: s, quarantine: quarantine, base: st, err: err, cache: cache}
}

// Check is one upstream's part of a Round. A nil *Check hides nothing.
type Check struct {
	r        *Round
	upstream string
	known    bool // the upstream's tools were pinned before the round
	seen     map[string]seenTool
}

type seenTool struct {
	exposed string
	c       canonical
	bad     bool // the definition is not an object: never pinned
}

// Upstream returns the Check of the upstream named name, whose catalog
// the build uses (the upstream is up): at Commit, a pinned tool the
// upstream did not show the Check is reported removed (once per process).
func (r *Round) Upstream(name string) *Check {
	if r == nil {
		return nil
	}
	c := &Check{r: r, upstream: name, seen: make(map[string]seenTool)}
	if r.base != nil {
		if u := r.base.Upstreams[name]; u != nil && len(u.Tools) > 0 {
			c.known = true
		}
	}
	r.checks = append(r.checks, c)
	return c
}

// Hide records the tool original (exposed as exposed) with its
// definition raw, and reports whether the round hides it: in quarantine,
// when its upstream's tools are pinned and its definition is none of the
// tool's approved ones.
func (c *Check) Hide(original, exposed string, raw json.RawMessage) bool {
	if c == nil {
		return false
	}
	r := c.r
	if r.base == nil {
		return r.quarantine
	}
	canon, ok := c.canonical(original, raw)
	c.seen[original] = seenTool{exposed: exposed, c: canon, bad: !ok}
	if !c.known {
		// First sight. While the store does not answer it cannot be
		// decided for the fleet (another replica may have pinned the
		// upstream already): nothing is verified, nothing recorded.
		return (!ok || r.err != nil) && r.quarantine
	}
	if ok && r.base.Upstreams[c.upstream].approved(original, canon.hash) {
		return false
	}
	return r.quarantine
}

// canonical returns the canonical form of raw, the definition of tool
// original. A definition the last round saw byte for byte is not made
// again: comparing bytes is far cheaper than decoding them.
func (c *Check) canonical(original string, raw json.RawMessage) (canonical, bool) {
	if prev, ok := c.r.cache[c.upstream][original]; ok && bytes.Equal(prev.raw, raw) {
		return prev, true
	}
	def, hash, err := Canonical(original, raw)
	if err != nil {
		return canonical{}, false
	}
	return canonical{raw: raw, def: def, hash: hash}, true
}

// Commit records what the round saw: the pins of upstreams seen for the
// first time and new pending definitions, and reports tools gone
// missing. It returns the changes not reported before, sorted by
// upstream and tool, and the error of reading or writing the state file
// (the events are valid even then: the store remembers them in memory).
func (r *Round) Commit() ([]Event, error) {
	if r == nil {
		return nil, nil
	}
	if r.base == nil {
		return nil, r.err
	}
	r.s.mu.Lock()
	r.s.cache = make(map[string]map[string]canonical, len(r.checks))
	for _, c := range r.checks {
		m := make(map[string]canonical, len(c.seen))
		for tool, s := range c.seen {
			if !s.bad {
				m[tool] = s.c
			}
		}
		r.s.cache[c.upstream] = m
	}
	if r.s.missing == nil {
		r.s.missing = make(map[string]bool)
	}
	now := r.s.now().UTC()
	var events []Event
	var ops []func(st *pinState)
	for _, c := range r.checks {
		evs, op := c.commit(now, r.s.missing)
		events = append(events, evs...)
		if op != nil {
			ops = append(ops, op)
		}
	}
	r.s.mu.Unlock()
	sortEvents(events)
	if len(ops) == 0 {
		return events, nil
	}
	err := r.s.update(func(st *pinState) {
		for _, op := range ops {
			op(st)
		}
	})
	return events, err
}

// commit returns the events of one upstream and the change to make to
// the state file, or nil. The change only adds: it is applied to the file
// as it is when written (another process may have written it since the
// round began), and never removes what another process recorded.
// missing is the store's, under its lock.
func (c *Check) commit(now time.Time, missing map[string]bool) ([]Event, func(*pinState)) {
	name := c.upstream
	if !c.known && c.r.err != nil {
		return nil, nil // first sight during an outage: decided once it is over
	}
	if !c.known {
		pins := make(map[string][]*Version)
		for tool, s := range c.seen {
			if !s.bad {
				pins[tool] = []*Version{{Hash: s.c.hash, Definition: s.c.def, Since: now, Exposed: s.exposed}}
			}
		}
		if len(pins) == 0 {
			return nil, nil
		}
		ev := Event{Kind: KindPinned, Upstream: name, Count: len(pins)}
		return []Event{ev}, func(st *pinState) {
			if u := st.Upstreams[name]; u != nil && len(u.Tools) > 0 {
				return // another process saw it first: its pins stand
			}
			st.upstream(name).Tools = pins
		}
	}
	u := c.r.base.Upstreams[name]
	var events []Event
	var adds []*Version
	var addTools []string
	var changed []string
	for tool, s := range c.seen {
		if len(missing) > 0 {
			delete(missing, name+"\x00"+tool)
		}
		if !s.bad && !u.approved(tool, s.c.hash) && !u.pending(tool, s.c.hash) {
			changed = append(changed, tool)
		}
	}
	slices.Sort(changed)
	for _, tool := range changed {
		s := c.seen[tool]
		ev := Event{Kind: KindNew, Upstream: name, Tool: tool, Exposed: s.exposed, Hash: s.c.hash, Hidden: c.r.quarantine}
		var old json.RawMessage
		if pin := u.latest(tool); pin != nil {
			ev.Kind, ev.Previous, old = KindChanged, pin.Hash, pin.Definition
		}
		ev.Diff = Diff(old, s.c.def)
		events = append(events, ev)
		adds = append(adds, &Version{Hash: s.c.hash, Definition: s.c.def, Since: now, Exposed: s.exposed})
		addTools = append(addTools, tool)
	}
	var gone []string
	for tool := range u.Tools {
		if _, ok := c.seen[tool]; !ok && !missing[name+"\x00"+tool] {
			gone = append(gone, tool)
		}
	}
	slices.Sort(gone)
	for _, tool := range gone {
		missing[name+"\x00"+tool] = true
		events = append(events, Event{Kind: KindRemoved, Upstream: name, Tool: tool, Exposed: u.latest(tool).Exposed, Previous: u.latest(tool).Hash})
	}
	if len(adds) == 0 {
		return events, nil
	}
	return events, func(st *pinState) {
		fu := st.upstream(name)
		for i, v := range adds {
			tool := addTools[i]
			if fu.approved(tool, v.Hash) || fu.pending(tool, v.Hash) {
				continue // approved, or recorded by another process, meanwhile
			}
			if fu.Pending == nil {
				fu.Pending = make(map[string][]*Version)
			}
			vs := append(fu.Pending[tool], v)
			if len(vs) > maxPending {
				vs = vs[len(vs)-maxPending:]
			}
			fu.Pending[tool] = vs
		}
	}
}
