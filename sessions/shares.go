package sessions

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"

	"github.com/viewmux/viewmux/sessions/grant"
)

// This file holds the per-caller shares of viewmux's pools:
// server.max_sessions_per_caller bounds what one caller holds of every
// pool a client decides how much to take of, so that one token (or one
// client address, without tokens) cannot starve the others. The pools are
// the sessions and streams of every door (sessionSlots), the held
// 2026-07-28 calls (heldCalls), the calls in flight (flights), and the
// scope = "session" connections (the aggregator's, under their own
// server.max_children_per_caller; aggregator.ErrCallerShare).

// errCallerShare is why a session, stream or call was refused: its caller
// holds its whole share of the pool.
var errCallerShare = errors.New("over this caller's share")

// callerOf names who a request from r with binding b is, for its shares:
// an OAuth token's subject ("oauth:" and its sub, the same for every token
// of that subject), a static bearer token (as the hex of its sum) when one
// was checked, else its client address, without the port. The stdio
// door's binding, which no request resolves, is nobody's: "" counts
// against no share.
func callerOf(r *http.Request, b grant.Binding) string {
	if b.Claims != nil {
		return "oauth:" + b.Subject
	}
	if b.Authed {
		return "token:" + hex.EncodeToString(b.Caller[:])
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "address:" + host
}

// shares counts what each caller holds of one pool against a share of
// max each. Its zero value has no limit; it is safe for concurrent use.
type shares struct {
	max int // 0 = no limit

	mu   sync.Mutex
	held map[string]int // caller → how much of the pool it holds; no zero entries
}

// take claims one unit for who; it reports false, claiming nothing, when
// who holds its whole share. "" is nobody's and always gets one.
func (sh *shares) take(who string) bool {
	if who == "" || sh.max <= 0 {
		return true
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.held[who] >= sh.max {
		return false
	}
	if sh.held == nil {
		sh.held = make(map[string]int)
	}
	sh.held[who]++
	return true
}

// give returns a unit take claimed for who.
func (sh *shares) give(who string) {
	if who == "" || sh.max <= 0 {
		return
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if n := sh.held[who] - 1; n > 0 {
		sh.held[who] = n
	} else {
		delete(sh.held, who)
	}
}

// full reports whether take(who) would fail now.
func (sh *shares) full(who string) bool {
	if who == "" || sh.max <= 0 {
		return false
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.held[who] >= sh.max
}

// overShare is the refusal of a session or stream over its caller's
// share, naming the limit.
func (s *Server) overShare() error {
	return fmt.Errorf("%w: %w: server.max_sessions_per_caller (%d) sessions and streams of this caller are open; close one or retry later",
		errTooManySessions, errCallerShare, s.cfg.Server.MaxSessionsPerCaller)
}
