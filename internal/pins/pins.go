// Package pins owns pinned tool definitions (server.pin): the canonical form
// and hash of a tool's definition, the state file in server.state_dir
// that records them per upstream, the detection of changed and new tools
// after an upstream's first sight, and their approval.
//
// The state file (pins.json) is shared by every viewmux process using the
// same state directory: the servers record first sights and pending
// changes, `viewmux pins approve` turns pending changes into pins. Each
// writes it under an advisory lock (pins.lock), re-reading it first, and
// replaces it atomically; a server re-reads it when it changes.
//
// A tool an upstream stops listing keeps its pins: if it comes back
// unchanged, that is no change; if it comes back different, that is a
// change like any other. A tool may have several approved definitions
// (each approval adds one): any of them is not a change.
package pins

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/viewmux/viewmux/internal/state"
)

// FileName is the document the pins are kept in: a file of the state
// directory, or a key of a shared store.
const FileName = "pins.json"

// storeTimeout bounds one read or write of the pins in the store.
const storeTimeout = 5 * time.Second

// Kinds of Event and Pending.
const (
	KindChanged  = "changed"  // a pinned tool's definition is none of its approved ones
	KindNew      = "new"      // a tool appeared on an upstream whose tools are pinned
	KindRemoved  = "removed"  // a pinned tool is no longer listed (its pins are kept)
	KindApproved = "approved" // a pending definition was approved
)

// maxPending bounds the pending definitions kept per tool (the oldest
// go), against an upstream that changes a definition on every listing.
const maxPending = 16

// Version is one definition of a tool: approved (a pin) or pending.
type Version struct {
	Hash       string          `json:"hash"`
	Definition json.RawMessage `json:"definition"` // canonical (Canonical)
	// Since is when it was pinned (first sight or approval) or first
	// seen (pending).
	Since time.Time `json:"since"`
	// Exposed is the tool's exposed name when it was first seen.
	Exposed string `json:"exposed,omitempty"`
}

// upstreamState is one upstream's approved and pending definitions, by
// the upstream's own tool name, oldest first. A tool may have several of
// each: the file only ever gains definitions (approval moves them from
// pending to approved), so processes sharing it that see different
// versions of a tool never undo each other's writes.
type upstreamState struct {
	Tools   map[string][]*Version `json:"tools"`
	Pending map[string][]*Version `json:"pending,omitempty"`
}

// approved reports whether hash is an approved definition of tool.
func (u *upstreamState) approved(tool, hash string) bool {
	return u != nil && slices.ContainsFunc(u.Tools[tool], func(v *Version) bool { return v.Hash == hash })
}

// pending reports whether hash is a pending definition of tool.
func (u *upstreamState) pending(tool, hash string) bool {
	return u != nil && slices.ContainsFunc(u.Pending[tool], func(v *Version) bool { return v.Hash == hash })
}

// latest returns the last approved definition of tool, or nil.
func (u *upstreamState) latest(tool string) *Version {
	if u == nil || len(u.Tools[tool]) == 0 {
		return nil
	}
	vs := u.Tools[tool]
	return vs[len(vs)-1]
}

// pinState is the content of pins.json. A published state is never
// modified: a change makes a new one (clone).
type pinState struct {
	Version   int                       `json:"version"`
	Upstreams map[string]*upstreamState `json:"upstreams"`
}

const stateVersion = 1

func cloneVersions(m map[string][]*Version) map[string][]*Version {
	out := make(map[string][]*Version, len(m))
	for t, vs := range m {
		c := make([]*Version, len(vs))
		for i, v := range vs {
			cp := *v
			c[i] = &cp
		}
		out[t] = c
	}
	return out
}

func (st *pinState) clone() *pinState {
	out := &pinState{Version: stateVersion, Upstreams: make(map[string]*upstreamState, len(st.Upstreams))}
	for name, u := range st.Upstreams {
		c := &upstreamState{Tools: cloneVersions(u.Tools)}
		if len(u.Pending) > 0 {
			c.Pending = cloneVersions(u.Pending)
		}
		out.Upstreams[name] = c
	}
	return out
}

func (st *pinState) upstream(name string) *upstreamState {
	u := st.Upstreams[name]
	if u == nil {
		u = &upstreamState{Tools: make(map[string][]*Version)}
		st.Upstreams[name] = u
	}
	return u
}

func emptyState() *pinState {
	return &pinState{Version: stateVersion, Upstreams: make(map[string]*upstreamState)}
}

// parse decodes pins.json; no bytes is an empty state.
func parse(path string, b []byte) (*pinState, error) {
	st := emptyState()
	if len(bytes.TrimSpace(b)) == 0 {
		return st, nil
	}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("pins: %s: %w", path, err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("pins: %s: version %d, want %d", path, st.Version, stateVersion)
	}
	if st.Upstreams == nil {
		st.Upstreams = make(map[string]*upstreamState)
	}
	for name, u := range st.Upstreams {
		if u == nil {
			return nil, fmt.Errorf("pins: %s: upstream %q: null", path, name)
		}
		if u.Tools == nil {
			u.Tools = make(map[string][]*Version)
		}
		for _, m := range []map[string][]*Version{u.Tools, u.Pending} {
			for t, vs := range m {
				if slices.Contains(vs, nil) {
					return nil, fmt.Errorf("pins: %s: upstream %q: tool %q: null", path, name, t)
				}
			}
		}
	}
	return st, nil
}

func (st *pinState) encode() ([]byte, error) {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Store is the pins of one state directory, as this process last read or
// wrote them. New does no I/O; the file is read on first use. Its methods
// are safe for concurrent use.
type Store struct {
	docs     state.Docs
	where    string // for messages: the file, or the store's address
	now      func() time.Time
	readOnly bool // NewReadOnly: nothing is written

	mu     sync.Mutex
	st     *pinState // nil until loaded; never modified once set (clone)
	digest [32]byte  // of the file bytes st was read from or written as
	// err is why the file could not be read last. st is then nil, unless
	// the store did not answer (state.IsDown): st is then the state last
	// read, which verifies what it verified, while nothing new is decided
	// (Round).
	err error
	// roundSt and roundErr are what the last Round was built on: a
	// Refresh that finds anything else reports a change, so that the
	// catalog is built again (a state first read by Pending, or the end
	// of an outage, changes what a round hides).
	roundSt  *pinState
	roundErr error

	cache map[string]map[string]canonical // by upstream and tool, with the raw bytes each was made from: see Round
	// missing holds "upstream NUL tool" of pinned tools this process saw
	// gone (reported once): in memory only, since processes may see an
	// upstream differently.
	missing map[string]bool
}

type canonical struct {
	raw  json.RawMessage // what def was made from
	def  json.RawMessage
	hash string
}

// New returns the store of the state directory dir ("" = none known:
// every operation then fails with statedir.ErrNoDir).
func New(dir string) *Store { return NewOn(state.OpenFiles(dir)) }

// NewOn returns the pins kept in st: on the Redis engine, one set of pins
// for every replica using the store.
func NewOn(st state.Store) *Store {
	where := FileName + " in the " + st.Engine() + " state store at " + st.Where()
	if f, ok := st.(*state.Files); ok {
		where = f.Dir().File(FileName)
	}
	return &Store{docs: st, where: where, now: time.Now}
}

// NewReadOnlyOn is NewReadOnly of the pins kept in st.
func NewReadOnlyOn(st state.Store) *Store {
	s := NewOn(st)
	s.readOnly = true
	return s
}

// NewReadOnly returns a store of dir that reads the state file and never
// writes it (nor creates the directory): a round hides what a server's
// would, and what it would record stays in memory. For one-shot commands
// that show what a client would get.
func NewReadOnly(dir string) *Store {
	s := New(dir)
	s.readOnly = true
	return s
}

// Path says where the pins are kept: the state file's path, or the
// document and the store holding it.
func (s *Store) Path() string { return s.where }

// read reads and parses the document, and its digest.
func (s *Store) read() (*pinState, [32]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	b, err := s.docs.Get(ctx, FileName)
	if err != nil {
		return nil, [32]byte{}, fmt.Errorf("pins: %w", err)
	}
	st, err := parse(s.Path(), b)
	return st, sha256.Sum256(b), err
}

// loaded returns the state, reading the file if it was never read, or
// the error that stops it from being read.
func (s *Store) loaded() (*pinState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st == nil {
		s.reloadLocked()
	}
	return s.st, s.err
}

func (s *Store) reloadLocked() (changed bool) {
	st, d, err := s.read()
	if err != nil {
		changed = s.err == nil || s.err.Error() != err.Error()
		if !state.IsDown(err) {
			s.st = nil // unreadable: nothing is verified (fail closed)
		}
		s.err = err
		return changed
	}
	changed = s.st == nil || d != s.digest || s.err != nil
	if s.st == nil || d != s.digest {
		s.st, s.digest = st, d
	}
	s.err = nil
	return changed
}

// Refresh reads the file again. It returns the approvals it finds (pending
// changes now pinned with the same hash) and whether anything changed
// since the last read or write; err is why the file cannot be read.
func (s *Store) Refresh() (approved []Event, changed bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.st
	changed = s.reloadLocked()
	if s.st != s.roundSt || (s.err == nil) != (s.roundErr == nil) {
		changed = true // the last round was built on something else
	}
	if s.err != nil {
		return nil, changed, s.err
	}
	if prev == nil || !changed {
		return nil, changed, nil
	}
	for name, u := range prev.Upstreams {
		nu := s.st.Upstreams[name]
		for tool, vs := range u.Pending {
			for _, v := range vs {
				if nu.approved(tool, v.Hash) {
					approved = append(approved, Event{Kind: KindApproved, Upstream: name, Tool: tool, Exposed: v.Exposed, Hash: v.Hash})
				}
			}
		}
	}
	sortEvents(approved)
	return approved, true, nil
}

// update applies fn to the state as the store holds it now, atomically
// with respect to every other writer (another process on the state
// directory, another replica on a shared store), and writes the result.
// The store then holds it, written or not: a failed write is returned,
// and what was decided stays decided in this process.
func (s *Store) update(fn func(st *pinState)) error {
	if s.readOnly {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.st != nil {
			next := s.st.clone()
			fn(next)
			s.st = next
		}
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	var next *pinState
	var written []byte
	err := s.docs.Update(ctx, FileName, func(cur []byte) ([]byte, error) {
		st, err := parse(s.Path(), cur)
		if err != nil {
			return nil, err
		}
		next = st.clone()
		fn(next)
		b, err := next.encode()
		if err != nil {
			return nil, fmt.Errorf("pins: %w", err)
		}
		written = b
		return b, nil
	})
	if err != nil {
		if s.st == nil {
			return fmt.Errorf("pins: %w", err)
		}
		// A document this process cannot read or write is not
		// overwritten; what this process decided is kept in memory only.
		n := s.st.clone()
		fn(n)
		s.st = n
		return fmt.Errorf("pins: %w", err)
	}
	s.st, s.err = next, nil
	s.digest = sha256.Sum256(written)
	return nil
}

// Pending is one definition waiting for approval.
type Pending struct {
	Upstream string `json:"upstream"`
	Tool     string `json:"tool"`    // the upstream's name for it
	Exposed  string `json:"exposed"` // the exposed name when it was seen
	Kind     string `json:"kind"`    // KindChanged or KindNew
	Hash     string `json:"hash"`
	Previous string `json:"previous,omitempty"` // the last approved hash; "" for a new tool
	Seen     string `json:"seen"`               // RFC 3339, UTC
	Diff     string `json:"diff"`               // Diff(last approved, pending)
}

// Pending returns every definition waiting for approval, sorted by
// upstream, tool and when it was seen, reading the file if it was never
// read. The slice is new.
func (s *Store) Pending() ([]Pending, error) {
	st, err := s.loaded()
	if err != nil {
		return nil, err
	}
	return pendingOf(st), nil
}

func pendingOf(st *pinState) []Pending {
	var out []Pending
	for _, name := range slices.Sorted(maps.Keys(st.Upstreams)) {
		u := st.Upstreams[name]
		for _, tool := range slices.Sorted(maps.Keys(u.Pending)) {
			for _, v := range u.Pending[tool] {
				p := Pending{Upstream: name, Tool: tool, Exposed: v.Exposed, Kind: KindNew, Hash: v.Hash, Seen: v.Since.UTC().Format(time.RFC3339)}
				var old json.RawMessage
				if pin := u.latest(tool); pin != nil {
					p.Kind, p.Previous, old = KindChanged, pin.Hash, pin.Definition
				}
				p.Diff = Diff(old, v.Definition)
				out = append(out, p)
			}
		}
	}
	return out
}

// Selector chooses pending definitions to approve: every one (All), those
// of one upstream, or those of one tool by its exposed name or as
// "UPSTREAM/TOOL" (the upstream's own name for it).
type Selector struct {
	All      bool
	Upstream string
	Tool     string
}

func (sel Selector) matches(upstream, tool string, vs []*Version) bool {
	switch {
	case sel.All:
		return true
	case sel.Upstream != "":
		return sel.Upstream == upstream
	case sel.Tool == upstream+"/"+tool:
		return true
	}
	return slices.ContainsFunc(vs, func(v *Version) bool { return v.Exposed == sel.Tool })
}

// Approve approves the pending definitions sel chooses, as they are in
// the file now (every pending definition of a chosen tool), and returns
// them as approval events (none when nothing matched).
func (s *Store) Approve(sel Selector) ([]Event, error) {
	var out []Event
	err := s.update(func(st *pinState) {
		now := s.now().UTC()
		for name, u := range st.Upstreams {
			for tool, vs := range u.Pending {
				if !sel.matches(name, tool, vs) {
					continue
				}
				for _, v := range vs {
					ev := Event{Kind: KindApproved, Upstream: name, Tool: tool, Exposed: v.Exposed, Hash: v.Hash}
					if p := u.latest(tool); p != nil {
						ev.Previous = p.Hash
					}
					if !u.approved(tool, v.Hash) {
						u.Tools[tool] = append(u.Tools[tool], &Version{Hash: v.Hash, Definition: v.Definition, Since: now, Exposed: v.Exposed})
					}
					out = append(out, ev)
				}
				delete(u.Pending, tool)
			}
		}
	})
	sortEvents(out)
	return out, err
}

// Event is one change to what is pinned.
type Event struct {
	Kind     string // KindChanged, KindNew, KindRemoved, KindApproved, KindPinned
	Upstream string
	Tool     string // the upstream's name for it
	Exposed  string // the exposed name
	Hash     string // the definition's hash now ("" for KindRemoved)
	Previous string // the last approved hash ("" for KindNew)
	Diff     string // from the last approved definition to the new one (KindChanged, KindNew)
	Hidden   bool   // the tool is quarantined
	Count    int    // tools pinned (KindPinned)
}

func sortEvents(evs []Event) {
	slices.SortStableFunc(evs, func(a, b Event) int {
		return strings.Compare(a.Upstream+"\x00"+a.Tool, b.Upstream+"\x00"+b.Tool)
	})
}

// Changes returns a channel that receives each time the pins' document
// may have changed, in this process or another (another replica, on a
// shared store), until ctx is done, when it is closed. A receiver calls
// Refresh; several changes may come as one.
func (s *Store) Changes(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	keys := s.docs.Watch(ctx)
	go func() {
		defer close(out)
		for k := range keys {
			if k != "" && k != FileName {
				continue
			}
			select {
			case out <- struct{}{}:
			default: // one is waiting already
			}
		}
	}()
	return out
}
