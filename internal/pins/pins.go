// Package pins owns pinned tool definitions (server.pin): the canonical form
// and hash of a tool's definition, the state file in server.state_dir
// that records them per upstream, the detection of changed and new tools
// after an upstream's first sight, and their approval.
//
// The state file (pins.json) is shared by every mcpmux process using the
// same state directory: the servers record first sights and pending
// changes, `mcpmux pins approve` turns pending changes into pins. Each
// writes it under an advisory lock (pins.lock), re-reading it first, and
// replaces it atomically; a server re-reads it when it changes.
//
// A tool an upstream stops listing keeps its pin (marked missing): if it
// comes back unchanged, that is no change; if it comes back different,
// that is a change like any other.
package pins

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcpmux/mcpmux/internal/statedir"
)

// Names of the files in the state directory.
const (
	FileName = "pins.json"
	lockName = "pins.lock"
)

// Kinds of Event and Pending.
const (
	KindChanged  = "changed"  // a pinned tool's definition differs from its pin
	KindNew      = "new"      // a tool appeared on an upstream whose tools are pinned
	KindRemoved  = "removed"  // a pinned tool is no longer listed (its pin is kept)
	KindReverted = "reverted" // a pending tool is back to its pinned definition
	KindApproved = "approved" // a pending change was approved
)

// Pin is one approved definition of a tool.
type Pin struct {
	Hash       string          `json:"hash"`
	Definition json.RawMessage `json:"definition"` // canonical (Canonical)
	Since      time.Time       `json:"since"`      // first sight or approval
	// Missing is set while the upstream, up, does not list the tool.
	Missing bool `json:"missing,omitempty"`
}

// change is one definition waiting for approval.
type change struct {
	Exposed    string          `json:"exposed"` // the exposed name when it was seen
	Hash       string          `json:"hash"`
	Definition json.RawMessage `json:"definition"`
	Seen       time.Time       `json:"seen"`
}

// upstreamState is one upstream's pins and pending changes, by the
// upstream's own tool name.
type upstreamState struct {
	Tools   map[string]*Pin    `json:"tools"`
	Pending map[string]*change `json:"pending,omitempty"`
}

// state is the content of pins.json. A published state is never
// modified: a change makes a new one (clone).
type state struct {
	Version   int                       `json:"version"`
	Upstreams map[string]*upstreamState `json:"upstreams"`
}

const stateVersion = 1

func (st *state) clone() *state {
	out := &state{Version: stateVersion, Upstreams: make(map[string]*upstreamState, len(st.Upstreams))}
	for name, u := range st.Upstreams {
		c := &upstreamState{Tools: make(map[string]*Pin, len(u.Tools))}
		for t, p := range u.Tools {
			cp := *p
			c.Tools[t] = &cp
		}
		if len(u.Pending) > 0 {
			c.Pending = make(map[string]*change, len(u.Pending))
			for t, p := range u.Pending {
				cp := *p
				c.Pending[t] = &cp
			}
		}
		out.Upstreams[name] = c
	}
	return out
}

func (st *state) upstream(name string) *upstreamState {
	u := st.Upstreams[name]
	if u == nil {
		u = &upstreamState{Tools: make(map[string]*Pin)}
		st.Upstreams[name] = u
	}
	return u
}

func emptyState() *state {
	return &state{Version: stateVersion, Upstreams: make(map[string]*upstreamState)}
}

// parse decodes pins.json; no bytes is an empty state.
func parse(path string, b []byte) (*state, error) {
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
			u.Tools = make(map[string]*Pin)
		}
		for t, p := range u.Tools {
			if p == nil {
				return nil, fmt.Errorf("pins: %s: upstream %q: tool %q: null", path, name, t)
			}
		}
		for t, p := range u.Pending {
			if p == nil {
				return nil, fmt.Errorf("pins: %s: upstream %q: pending tool %q: null", path, name, t)
			}
		}
	}
	return st, nil
}

func (st *state) encode() ([]byte, error) {
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
	dir      statedir.Dir
	now      func() time.Time
	readOnly bool // NewReadOnly: nothing is written

	mu     sync.Mutex
	st     *state   // nil until loaded; never modified once set (clone)
	digest [32]byte // of the file bytes st was read from or written as
	err    error    // why the file could not be read; st is then nil

	cache map[[32]byte]canonical // canonical forms by sha256(original, NUL, raw): see Round
}

type canonical struct {
	def  json.RawMessage
	hash string
}

// New returns the store of the state directory dir ("" = none known:
// every operation then fails with statedir.ErrNoDir).
func New(dir string) *Store {
	return &Store{dir: statedir.Dir{Path: dir}, now: time.Now}
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

// Path returns the state file's path.
func (s *Store) Path() string { return s.dir.File(FileName) }

// read reads and parses the file, and its digest.
func (s *Store) read() (*state, [32]byte, error) {
	b, err := s.dir.ReadFile(FileName)
	if err != nil {
		return nil, [32]byte{}, fmt.Errorf("pins: %w", err)
	}
	st, err := parse(s.Path(), b)
	return st, sha256.Sum256(b), err
}

// loaded returns the state, reading the file if it was never read, or
// the error that stops it from being read.
func (s *Store) loaded() (*state, error) {
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
		s.st, s.err = nil, err
		return changed
	}
	changed = s.st == nil || d != s.digest
	if changed {
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
	if s.err != nil {
		return nil, changed, s.err
	}
	if prev == nil || !changed {
		return nil, changed, nil
	}
	for name, u := range prev.Upstreams {
		for tool, c := range u.Pending {
			nu := s.st.Upstreams[name]
			if nu == nil {
				continue
			}
			if p := nu.Tools[tool]; p != nil && p.Hash == c.Hash && nu.Pending[tool] == nil {
				approved = append(approved, Event{Kind: KindApproved, Upstream: name, Tool: tool, Exposed: c.Exposed, Hash: c.Hash})
			}
		}
	}
	sortEvents(approved)
	return approved, true, nil
}

// update applies fn to the state as the file holds it now, under the
// lock every writer takes, and writes the result. The store then holds
// it, written or not: a failed write is returned, and what was decided
// stays decided in this process.
func (s *Store) update(fn func(st *state)) error {
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
	unlock, lockErr := s.dir.Lock(lockName)
	if lockErr == nil {
		defer unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, _, err := s.read()
	if err != nil {
		if s.st == nil {
			return err
		}
		// A file this process cannot read is not overwritten; what this
		// process decided is kept in memory only.
		next := s.st.clone()
		fn(next)
		s.st = next
		return err
	}
	next := st.clone()
	fn(next)
	b, err := next.encode()
	if err != nil {
		return fmt.Errorf("pins: %w", err)
	}
	s.st, s.err = next, nil
	if lockErr != nil {
		return fmt.Errorf("pins: %w", lockErr)
	}
	if err := s.dir.WriteFile(FileName, b); err != nil {
		return fmt.Errorf("pins: %w", err)
	}
	s.digest = sha256.Sum256(b)
	return nil
}

// Pending is one change waiting for approval.
type Pending struct {
	Upstream string `json:"upstream"`
	Tool     string `json:"tool"`    // the upstream's name for it
	Exposed  string `json:"exposed"` // the exposed name when it was seen
	Kind     string `json:"kind"`    // KindChanged or KindNew
	Hash     string `json:"hash"`
	Previous string `json:"previous,omitempty"` // the pinned hash; "" for a new tool
	Seen     string `json:"seen"`               // RFC 3339, UTC
	Diff     string `json:"diff"`               // Diff(pinned, pending)
}

// Pending returns every change waiting for approval, sorted by upstream
// and tool, reading the file if it was never read. The slice is new.
func (s *Store) Pending() ([]Pending, error) {
	st, err := s.loaded()
	if err != nil {
		return nil, err
	}
	return pendingOf(st), nil
}

func pendingOf(st *state) []Pending {
	var out []Pending
	for _, name := range slices.Sorted(maps.Keys(st.Upstreams)) {
		u := st.Upstreams[name]
		for _, tool := range slices.Sorted(maps.Keys(u.Pending)) {
			c := u.Pending[tool]
			p := Pending{Upstream: name, Tool: tool, Exposed: c.Exposed, Kind: KindNew, Hash: c.Hash, Seen: c.Seen.UTC().Format(time.RFC3339)}
			var old json.RawMessage
			if pin := u.Tools[tool]; pin != nil {
				p.Kind, p.Previous, old = KindChanged, pin.Hash, pin.Definition
			}
			p.Diff = Diff(old, c.Definition)
			out = append(out, p)
		}
	}
	return out
}

// Selector chooses pending changes to approve: every one (All), those of
// one upstream, or one tool by its exposed name or as "UPSTREAM/TOOL"
// (the upstream's own name for it).
type Selector struct {
	All      bool
	Upstream string
	Tool     string
}

func (sel Selector) matches(upstream, tool string, c *change) bool {
	switch {
	case sel.All:
		return true
	case sel.Upstream != "":
		return sel.Upstream == upstream
	}
	return sel.Tool == c.Exposed || sel.Tool == upstream+"/"+tool
}

// Approve pins the pending changes sel chooses, as they are in the file
// now, and returns them as approval events (none when nothing matched).
func (s *Store) Approve(sel Selector) ([]Event, error) {
	var out []Event
	err := s.update(func(st *state) {
		now := s.now().UTC()
		for name, u := range st.Upstreams {
			for tool, c := range u.Pending {
				if !sel.matches(name, tool, c) {
					continue
				}
				ev := Event{Kind: KindApproved, Upstream: name, Tool: tool, Exposed: c.Exposed, Hash: c.Hash}
				if p := u.Tools[tool]; p != nil {
					ev.Previous = p.Hash
				}
				u.Tools[tool] = &Pin{Hash: c.Hash, Definition: c.Definition, Since: now}
				delete(u.Pending, tool)
				out = append(out, ev)
			}
		}
	})
	sortEvents(out)
	return out, err
}

// Event is one change to what is pinned.
type Event struct {
	Kind     string // KindChanged, KindNew, KindRemoved, KindReverted, KindApproved
	Upstream string
	Tool     string // the upstream's name for it
	Exposed  string // the exposed name
	Hash     string // the definition's hash now ("" for KindRemoved)
	Previous string // the pinned hash ("" for KindNew)
	Diff     string // from the pin to the new definition (KindChanged, KindNew)
	Hidden   bool   // the tool is quarantined
	Count    int    // tools pinned (KindPinned)
}

func sortEvents(evs []Event) {
	slices.SortFunc(evs, func(a, b Event) int {
		return strings.Compare(a.Upstream+"\x00"+a.Tool, b.Upstream+"\x00"+b.Tool)
	})
}
