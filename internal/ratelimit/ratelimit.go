// Package ratelimit holds the per-session token buckets of profiles that
// set rate.calls_per_minute.
package ratelimit

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limiters holds one token bucket per key (a session, or the caller of
// stateless requests). A bucket that has refilled completely is the same
// as a new one, so such buckets are dropped as the map grows: it holds the
// keys that called in about the last minute, not every key ever seen. Its
// zero value is ready to use; it is safe for concurrent use.
type Limiters struct {
	mu    sync.Mutex
	m     map[string]*rate.Limiter
	sweep int // sweep full buckets when len(m) reaches this
}

// minSweep is the map size below which full buckets are left alone.
const minSweep = 64

// Allow takes one call from key's bucket; perMinute <= 0 means no limit.
// A bucket holds a minute's worth of calls and refills evenly.
func (l *Limiters) Allow(key string, perMinute int) bool {
	return l.AllowAt(key, perMinute, time.Now())
}

// AllowAt is Allow at the time now.
func (l *Limiters) AllowAt(key string, perMinute int, now time.Time) bool {
	if perMinute <= 0 || key == "" {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = make(map[string]*rate.Limiter)
	}
	lim := l.m[key]
	if lim == nil || lim.Burst() != perMinute {
		if len(l.m) >= max(l.sweep, minSweep) {
			l.dropFull(now)
		}
		lim = rate.NewLimiter(rate.Limit(float64(perMinute)/60), perMinute)
		l.m[key] = lim
	}
	return lim.AllowN(now, 1)
}

// dropFull forgets every bucket that has refilled completely by now and
// sets the size of the next sweep to twice what is left, so sweeps cost
// O(1) per call amortized. l.mu must be held.
func (l *Limiters) dropFull(now time.Time) {
	for k, lim := range l.m {
		if lim.TokensAt(now) >= float64(lim.Burst()) {
			delete(l.m, k)
		}
	}
	l.sweep = 2 * len(l.m)
}

// Forget drops key's bucket.
func (l *Limiters) Forget(key string) {
	l.mu.Lock()
	delete(l.m, key)
	l.mu.Unlock()
}

// Len returns the number of buckets held.
func (l *Limiters) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}
