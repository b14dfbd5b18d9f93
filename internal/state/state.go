// Package state is where viewmux keeps what outlives one request: pinned
// tool definitions and their approvals, OAuth logins, connect tickets and
// pending logins, and the rate buckets of stateless callers.
//
// A Store has two engines. Files (OpenFiles) keeps documents as files in
// server.state_dir and everything short-lived in this process's memory:
// one machine needs no server, and several processes sharing the
// directory see each other's documents. Redis (OpenRedis, for Redis or
// Valkey) keeps all of it in one server, so that a fleet of replicas
// behaves as one gateway: a pin decided on one replica holds on every
// replica, a ticket minted on one is taken on another, a rate bucket is
// one bucket for the fleet.
//
// The Store interface is small on purpose. What each kind of state means
// (the pins file's format, what a login record holds) belongs to its own
// package; the store moves bytes, atomically.
package state

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/viewmux/viewmux/internal/onetime"
)

// Store is the state of one gateway. Its methods are safe for concurrent
// use. Every method that reaches a server takes ctx and is bounded by the
// engine's own per-command timeout as well.
type Store interface {
	Docs
	Once
	Buckets

	// Lock takes the lock name for ttl, waiting while another process
	// or replica holds it, until ctx is done. The lock lapses after ttl
	// if its holder dies; unlock releases it early and is safe to call
	// after the lock lapsed.
	Lock(ctx context.Context, name string, ttl time.Duration) (unlock func(), err error)

	// Engine names the engine: "files" or "redis".
	Engine() string
	// Where says where the state lives, for logs and the status page: a
	// directory, or a server's address (never a password).
	Where() string
	// Health reports whether the store answered its last command, and
	// since when it has been in that condition. It does no I/O.
	Health() Health
	// Close releases the store's connections and watchers.
	Close() error
}

// Docs are named documents, each replaced whole and atomically.
type Docs interface {
	// Get returns the document under key; nil and no error when there is
	// none.
	Get(ctx context.Context, key string) ([]byte, error)
	// Update replaces the document under key with what fn returns for
	// its current content (nil when there is none), atomically with
	// respect to every other Update of key in any process or replica:
	// fn may be called more than once, with what another writer wrote
	// in between, and must not have side effects. fn returns ErrUnchanged
	// to write nothing; any other error of fn is returned as it is.
	Update(ctx context.Context, key string, fn func(cur []byte) ([]byte, error)) error
	// Delete removes the document under key; removed says whether there
	// was one.
	Delete(ctx context.Context, key string) (removed bool, err error)
	// List returns the documents whose key starts with prefix, the most
	// recently written first.
	List(ctx context.Context, prefix string) ([]Entry, error)
	// Watch returns the keys of documents that change, in this process
	// or any other, until ctx is done, when the channel is closed. An
	// empty key means anything may have changed (the engine lost track
	// for a while: after a reconnect, say), and a watcher should read
	// again what it holds. A slow reader misses keys, not the "": keys
	// that do not fit in the channel's buffer are folded into one "".
	Watch(ctx context.Context) <-chan string
}

// Entry is one document of a List.
type Entry struct {
	Key      string
	Modified time.Time
}

// ErrUnchanged is what an Update's fn returns to write nothing.
var ErrUnchanged = errors.New("state: unchanged")

// Once holds short-lived, single-use values under keys as random as
// NewKey's, bounded so that a client repeating its request cannot grow
// the store: each owner holds at most Limits.PerOwner values in a
// namespace (a new one replaces its oldest), the namespace at most
// Limits.Max (past it, new values are refused with ErrFull), and a value
// lives Limits.TTL.
type Once interface {
	PutOnce(ctx context.Context, ns, owner, key string, val []byte, lim Limits) error
	// TakeOnce returns the value under key and forgets it: of any number
	// of takers of one key, in any process or replica, one gets ok. An
	// unknown, taken or expired key is ok == false and no error.
	TakeOnce(ctx context.Context, ns, key string) (val []byte, owner string, ok bool, err error)
	// PeekOnce returns the value under key without taking it.
	PeekOnce(ctx context.Context, ns, key string) (val []byte, owner string, ok bool, err error)
}

// Limits bound a namespace of Once values. Zero fields take the defaults:
// 10 minutes, 4096 values, 4 per owner.
type Limits struct {
	TTL      time.Duration
	Max      int
	PerOwner int
}

func (l Limits) withDefaults() Limits {
	if l.TTL <= 0 {
		l.TTL = 10 * time.Minute
	}
	if l.Max <= 0 {
		l.Max = 4096
	}
	if l.PerOwner <= 0 {
		l.PerOwner = 4
	}
	return l
}

// ErrFull is returned by PutOnce when a namespace holds Limits.Max values
// that have not expired.
var ErrFull = errors.New("too many pending at once; retry in a few minutes")

// ErrKeyInUse is returned by PutOnce for a key that holds a value.
var ErrKeyInUse = errors.New("state: key in use")

// Buckets are token buckets: perMinute calls a minute, refilled evenly,
// holding at most a minute's worth.
type Buckets interface {
	// Take takes one call from the bucket under key. perMinute <= 0 is
	// no limit. With several replicas on one store there is one bucket
	// for all of them.
	Take(ctx context.Context, key string, perMinute int) (ok bool, err error)
	// TakeUpTo takes as many calls as the bucket holds, at most n (n >=
	// 1), in one atomic step: for a caller that keeps a short lease of
	// the fleet's calls so that not every call reaches the store.
	// perMinute <= 0 is no limit: n are taken.
	TakeUpTo(ctx context.Context, key string, perMinute, n int) (got int, err error)
}

// Health is a store's condition.
type Health struct {
	Up    bool
	Since time.Time // when it went up or down; zero before the first command
	Err   string    // why it is down
}

// DownError is what a command fails with while its store does not answer:
// errors.As finds it, and its text says so in words an operator can act
// on.
type DownError struct {
	Where string // the store's address
	Err   error
}

func (e *DownError) Error() string {
	return fmt.Sprintf("state store %s is unreachable: %v", e.Where, e.Err)
}

func (e *DownError) Unwrap() error { return e.Err }

// IsDown reports whether err says the store did not answer.
func IsDown(err error) bool {
	var d *DownError
	return errors.As(err, &d)
}

// checkKey refuses keys an engine could not store as they are, or that
// could name a file outside the state directory.
func checkKey(kind, key string) error {
	if key == "" || len(key) > 512 {
		return fmt.Errorf("state: %s key %q: want 1 to 512 characters", kind, key)
	}
	if key[0] == '.' {
		return fmt.Errorf("state: %s key %q: starts with a dot", kind, key)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '-', c == '_':
		default:
			return fmt.Errorf("state: %s key %q: byte %d is not one of A-Z a-z 0-9 . - _", kind, key, i)
		}
	}
	return nil
}

// NewKey returns a new random key for a Once value: 32 bytes, base64url.
func NewKey() string { return onetime.Key() }
