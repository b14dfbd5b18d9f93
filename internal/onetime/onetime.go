// Package onetime keeps short-lived, single-use values under random keys
// (the connect tickets and pending logins of per-user upstream
// credentials), bounded so that a client repeating its request cannot
// grow memory: each owner holds at most PerOwner values (a new one
// replaces its oldest), the store at most Max (past it, new values are
// refused until some expire or are taken), and a value lives TTL.
package onetime

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"sync"
	"time"
)

// ErrFull is returned by Put when the store holds Max values that have
// not expired.
var ErrFull = errors.New("too many pending at once; retry in a few minutes")

// Store holds values of type T. Set its fields before first use; it is
// safe for concurrent use afterwards.
type Store[T any] struct {
	TTL      time.Duration    // how long a value may be taken; 0 = 10 minutes
	Max      int              // values held at most; 0 = 4096
	PerOwner int              // values one owner holds at most; 0 = 4
	Now      func() time.Time // the clock; nil = time.Now

	mu      sync.Mutex
	byKey   map[string]*entry[T]
	order   []*entry[T] // oldest first; taken or replaced entries are skipped
	byOwner map[string][]*entry[T]
}

type entry[T any] struct {
	key, owner string
	v          T
	expires    time.Time
	gone       bool
}

func (s *Store[T]) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Store[T]) limits() (ttl time.Duration, max, per int) {
	ttl, max, per = s.TTL, s.Max, s.PerOwner
	if ttl <= 0 {
		ttl = 10 * time.Minute
	}
	if max <= 0 {
		max = 4096
	}
	if per <= 0 {
		per = 4
	}
	return ttl, max, per
}

// Key returns a new random key: 32 bytes, base64url.
func Key() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Put stores v for owner under a new random key and returns the key. When
// owner holds PerOwner values already, its oldest is dropped; when the
// store holds Max, ErrFull.
func (s *Store[T]) Put(owner string, v T) (string, error) {
	key := Key()
	return key, s.PutAs(owner, key, v)
}

// PutAs is Put under a key of the caller's, which must be as random as
// Key's (an OAuth state parameter); a key in use is refused.
func (s *Store[T]) PutAs(owner, key string, v T) error {
	ttl, max, per := s.limits()
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byKey == nil {
		s.byKey, s.byOwner = make(map[string]*entry[T]), make(map[string][]*entry[T])
	}
	s.expire(now)
	if mine := s.byOwner[owner]; len(mine) >= per {
		s.drop(mine[0])
	}
	if len(s.byKey) >= max {
		return ErrFull
	}
	if _, dup := s.byKey[key]; dup || key == "" {
		return errors.New("onetime: key in use")
	}
	e := &entry[T]{key: key, owner: owner, v: v, expires: now.Add(ttl)}
	s.byKey[e.key] = e
	s.order = append(s.order, e)
	s.byOwner[owner] = append(s.byOwner[owner], e)
	return nil
}

// Take returns the value under key and forgets it: a key is good once.
// ok is false for an unknown, taken or expired key.
func (s *Store[T]) Take(key string) (v T, owner string, ok bool) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.byKey[key]
	if e == nil {
		return v, "", false
	}
	v, owner, expires := e.v, e.owner, e.expires
	s.drop(e)
	if !now.Before(expires) {
		var zero T
		return zero, "", false
	}
	return v, owner, true
}

// Peek returns the value under key without taking it.
func (s *Store[T]) Peek(key string) (v T, owner string, ok bool) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.byKey[key]
	if e == nil || !now.Before(e.expires) {
		return v, "", false
	}
	return e.v, e.owner, true
}

// Len returns how many values are held (expired ones included until the
// next Put sweeps them).
func (s *Store[T]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byKey)
}

// expire drops the entries past their expiry, oldest first, and compacts
// order. s.mu is held.
func (s *Store[T]) expire(now time.Time) {
	i := 0
	for ; i < len(s.order); i++ {
		e := s.order[i]
		if e.gone {
			continue
		}
		if now.Before(e.expires) {
			break
		}
		s.drop(e)
	}
	s.order = s.order[i:]
	if len(s.order) > 2*len(s.byKey)+64 { // many taken out of order: compact
		kept := make([]*entry[T], 0, len(s.byKey))
		for _, e := range s.order {
			if !e.gone {
				kept = append(kept, e)
			}
		}
		s.order = kept
	}
}

// drop forgets e. s.mu is held.
func (s *Store[T]) drop(e *entry[T]) {
	if e.gone {
		return
	}
	e.gone = true
	delete(s.byKey, e.key)
	mine := s.byOwner[e.owner]
	for i, x := range mine {
		if x == e {
			mine = append(mine[:i:i], mine[i+1:]...)
			break
		}
	}
	if len(mine) == 0 {
		delete(s.byOwner, e.owner)
	} else {
		s.byOwner[e.owner] = mine
	}
	var zero T
	e.v = zero
}
