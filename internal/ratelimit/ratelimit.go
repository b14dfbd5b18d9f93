// Package ratelimit holds the per-session token buckets of profiles that
// set rate.calls_per_minute.
package ratelimit

import (
	"sync"

	"golang.org/x/time/rate"
)

// Limiters holds one token bucket per key (a session). Its zero value is
// ready to use; it is safe for concurrent use.
type Limiters struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

// Allow takes one call from key's bucket; perMinute <= 0 means no limit.
// A bucket holds a minute's worth of calls and refills evenly.
func (l *Limiters) Allow(key string, perMinute int) bool {
	if perMinute <= 0 || key == "" {
		return true
	}
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[string]*rate.Limiter)
	}
	lim := l.m[key]
	if lim == nil || lim.Burst() != perMinute {
		lim = rate.NewLimiter(rate.Limit(float64(perMinute)/60), perMinute)
		l.m[key] = lim
	}
	l.mu.Unlock()
	return lim.Allow()
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
