package sessions

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/internal/ratelimit"
	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/sessions/grant"
)

// This file holds the rate limit of stateless (2026-07-28) callers, which
// have no session to count in and may reach any replica with each call:
// one bucket per (caller, profile) for the whole fleet, in the state store
// (state.Buckets). The limits of sessions stay in this replica
// (Server.limits): a session lives in one replica.
//
// While the store does not answer, the fleet's bucket cannot be read, and
// each replica falls back to its share: a local bucket of
// calls_per_minute / N, rounded down, where N is the number of replicas
// counted in the store when it last answered (fleetRate.census). N
// replicas each allowing their share allow at most the limit in all, so
// an outage never widens the limit; a share that rounds to 0, or a
// replica that has not counted the fleet yet (it started during the
// outage), allows no rate-limited stateless call until the store is back.

// statelessPrefix starts the key statelessKey gives a stateless request.
const statelessPrefix = "stateless/"

// Census of the replicas sharing a store: each replica writes its
// server.replica_id and the time into one document at most every
// censusEvery, when a rate-limited stateless call has just reached the
// store; a replica not seen for censusForget is dropped from it. Every
// replica written within censusForget counts, so that a replica that
// rarely takes such calls still counts (an overcount only narrows the
// shares).
const (
	censusKey    = "rate-replicas.json"
	censusEvery  = 30 * time.Second
	censusForget = 10 * time.Minute
)

// Leases. A replica on a shared store that sees a caller with a high
// limit takes, in the one script call a call costs anyway, up to
// leaseDiv-th of the caller's minute (the calls of a tenth of a second at
// the full rate) and spends them on the caller's next calls for at most
// leaseFor, without reaching the store. The tokens come out of the
// fleet's one bucket, so the fleet never allows more than the limit; a
// lease that runs out of time unspent is lost, which only narrows the
// limit, by at most a tenth of a second's worth per replica. Below
// leaseMin calls a lease every call reaches the store. At most leaseMax
// callers hold a lease at once; past that, new callers take one call at
// a time.
const (
	leaseDiv = 600
	leaseMin = 2
	leaseFor = time.Second
	leaseMax = 4096
)

// lease is the calls of one caller taken from the fleet's bucket ahead
// of time.
type lease struct {
	left  int
	until time.Time
}

// fleetRate is the rate limit of stateless callers. It is safe for
// concurrent use.
type fleetRate struct {
	store   state.Store
	replica string
	// shared: the store is shared by replicas (not the files engine,
	// whose buckets are this process's memory and whose Take never
	// fails), so the replicas are counted.
	shared bool
	local  ratelimit.Limiters // the shares while the store does not answer
	every  time.Duration      // how often the replicas are counted: censusEvery

	mu       sync.Mutex
	leases   map[string]*lease // by bucket key; guarded by mu
	replicas int               // replicas counted when the store last answered; 0: not yet
	counted  time.Time         // when
	counting bool              // one census at a time
}

func newFleetRate(st state.Store, replica string) *fleetRate {
	return &fleetRate{store: st, replica: replica, shared: st.Engine() != "files", every: censusEvery}
}

// rateVerdict is what fleetRate.allow decided.
type rateVerdict struct {
	ok bool
	// down is the store's error when the verdict is the local share's;
	// share and replicas are that share and the count it divides by
	// (replicas 0: the fleet was never counted, nothing is allowed).
	down            error
	share, replicas int
}

// allow takes one call from the fleet's bucket under key, or, while the
// store does not answer, from this replica's share of it.
func (f *fleetRate) allow(ctx context.Context, key string, perMinute int) rateVerdict {
	if perMinute <= 0 {
		return rateVerdict{ok: true}
	}
	var err error
	if h := f.store.Health(); !h.Up && !h.Since.IsZero() {
		// Known down: the share at once, rather than every call waiting
		// out the store's timeout first. The store's own monitor sees it
		// come back within a second.
		err = &state.DownError{Where: f.store.Where(), Err: fmt.Errorf("down since %s: %s", h.Since.UTC().Format(time.RFC3339), h.Err)}
	} else {
		n := 1 // the calls to take: one, or a lease's
		if l := perMinute / leaseDiv; f.shared && l >= leaseMin {
			if f.spend(key) {
				return rateVerdict{ok: true}
			}
			n = l
		}
		var got int
		if got, err = f.store.TakeUpTo(ctx, key, perMinute, n); err == nil {
			f.keep(key, got-1)
			f.census(ctx)
			return rateVerdict{ok: got > 0}
		}
	}
	f.mu.Lock()
	n := f.replicas
	f.mu.Unlock()
	v := rateVerdict{down: err, replicas: n}
	if n == 0 {
		return v
	}
	v.share = perMinute / n
	v.ok = v.share > 0 && f.local.Allow(key, v.share)
	return v
}

// spend takes one call of key's lease; false when it has none left.
func (f *fleetRate) spend(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.leases[key]
	if l == nil || l.left <= 0 || !time.Now().Before(l.until) {
		return false
	}
	l.left--
	return true
}

// keep adds n calls taken from the fleet's bucket to key's lease, for
// leaseFor.
func (f *fleetRate) keep(key string, n int) {
	if n <= 0 {
		return
	}
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if l := f.leases[key]; l != nil && now.Before(l.until) {
		l.left += n // calls of a concurrent take: spend them too
		return
	}
	if f.leases == nil {
		f.leases = make(map[string]*lease)
	}
	if len(f.leases) >= leaseMax {
		for k, l := range f.leases {
			if !now.Before(l.until) {
				delete(f.leases, k)
			}
		}
		if len(f.leases) >= leaseMax {
			return // the calls are lost: narrower, never wider
		}
	}
	f.leases[key] = &lease{left: n, until: now.Add(leaseFor)}
}

// census counts the replicas in the store, and writes this one's time
// there, unless it did so within f.every. It costs one Update every
// f.every per replica, on a call that has just reached the store.
func (f *fleetRate) census(ctx context.Context) {
	if !f.shared {
		return
	}
	now := time.Now()
	f.mu.Lock()
	if f.counting || (f.replicas > 0 && now.Sub(f.counted) < f.every) {
		f.mu.Unlock()
		return
	}
	f.counting = true
	f.mu.Unlock()
	n := 0
	err := f.store.Update(ctx, censusKey, func(cur []byte) ([]byte, error) {
		seen := map[string]int64{}
		if len(cur) > 0 && json.Unmarshal(cur, &seen) != nil {
			seen = map[string]int64{} // not ours to keep: rewritten whole
		}
		seen[f.replica] = now.UnixMilli()
		n = 0
		for id, ms := range seen {
			if now.Sub(time.UnixMilli(ms)) > censusForget {
				delete(seen, id)
				continue
			}
			n++
		}
		return json.Marshal(seen)
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counting = false
	if err == nil {
		f.replicas, f.counted = n, now
	}
}

// fleetKey is the key of a stateless caller's bucket for profile: a hash
// of the caller (Binding.Who: a token's sum, an OAuth subject, or a client
// address; never a token) and the profile, so that the store holds neither.
func fleetKey(b grant.Binding, session string) string {
	who := b.Who
	if who == "" {
		who = session
	}
	sum := sha256.Sum256([]byte(b.Profile + "\n" + who))
	return "stateless." + hex.EncodeToString(sum[:16])
}

// rateCheck takes one tools/call of session (a stateless request's
// statelessKey, or a session's id) from its rate limit, and returns the
// refusal when the limit is spent; nil when it is allowed.
func (s *Server) rateCheck(session string, b grant.Binding) *jsonrpc.Error {
	if b.Rate <= 0 {
		return nil
	}
	if !strings.HasPrefix(session, statelessPrefix) {
		if s.limits.Allow(session, b.Rate) {
			return nil
		}
		return &jsonrpc.Error{Code: rateLimited,
			Message: fmt.Sprintf("Rate limit exceeded: profile %q allows %d tool calls per minute per session", b.Profile, b.Rate)}
	}
	// The store's own per-command timeout bounds the take. Its address
	// is the operator's to see (the store logs the outage), not the
	// client's.
	v := s.fleet.allow(context.Background(), fleetKey(b, session), b.Rate)
	switch {
	case v.ok:
		return nil
	case v.down == nil:
		return &jsonrpc.Error{Code: rateLimited,
			Message: fmt.Sprintf("Rate limit exceeded: profile %q allows %d tool calls per minute per caller", b.Profile, b.Rate)}
	case v.replicas == 0:
		return &jsonrpc.Error{Code: rateLimited, Message: fmt.Sprintf(
			"Rate limit cannot be kept: profile %q allows %d tool calls per minute per caller across all replicas, the state store is unreachable, "+
				"and this replica has not counted the replicas yet, so it allows none until the store answers; nothing was forwarded",
			b.Profile, b.Rate)}
	}
	return &jsonrpc.Error{Code: rateLimited, Message: fmt.Sprintf(
		"Rate limit exceeded: profile %q allows %d tool calls per minute per caller across all replicas; the state store is unreachable, "+
			"so this replica allows its share, %d per minute (the limit divided by %d replicas, rounded down)",
		b.Profile, b.Rate, v.share, v.replicas)}
}
