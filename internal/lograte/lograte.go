// Package lograte keeps a repeated log line to one every interval, counting
// the occurrences it held back, so that a hostile peer's flood shows in
// the log without becoming one.
package lograte

import (
	"sync"
	"time"
)

// Every lets one occurrence through per interval. Its zero value lets
// every occurrence through; it is safe for concurrent use.
type Every struct {
	Interval time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// Allow reports whether this occurrence should be logged, and how many
// were held back since the last one that was.
func (e *Every) Allow() (ok bool, suppressed int) { return e.AllowAt(time.Now()) }

// AllowAt is Allow at the time now.
func (e *Every) AllowAt(now time.Time) (ok bool, suppressed int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.last.IsZero() && now.Sub(e.last) < e.Interval {
		e.suppressed++
		return false, 0
	}
	e.last = now
	n := e.suppressed
	e.suppressed = 0
	return true, n
}
