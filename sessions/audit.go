package sessions

import (
	"encoding/json"
	"io"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// auditRecord is one line of the audit log: one tools/call decision.
type auditRecord struct {
	Time      time.Time       `json:"time"`
	Session   string          `json:"session,omitempty"`
	Profile   string          `json:"profile,omitempty"`
	Tool      string          `json:"tool"`
	Upstream  string          `json:"upstream,omitempty"`
	Decision  string          `json:"decision"` // allowed, denied, error
	Reason    string          `json:"reason,omitempty"`
	Duration  float64         `json:"duration_ms"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Audit decisions and reasons.
const (
	decisionAllowed = "allowed"
	decisionDenied  = "denied"
	decisionError   = "error"

	reasonNotFound   = "not_found" // unknown or hidden: deliberately one reason
	reasonArguments  = "arguments"
	reasonAmbiguous  = "ambiguous"
	reasonRestarting = "restarting"
	reasonRate       = "rate_limit"
)

// auditLog writes records as JSON lines. A nil *auditLog writes nothing.
type auditLog struct {
	mu       sync.Mutex
	w        io.Writer
	withArgs bool
	onError  func(error)
}

func (a *auditLog) write(rec auditRecord, args json.RawMessage) {
	if a == nil {
		return
	}
	if a.withArgs && json.Valid(args) {
		rec.Arguments = args
	}
	b, err := json.Marshal(rec)
	if err != nil {
		a.onError(err)
		return
	}
	b = append(b, '\n')
	a.mu.Lock()
	_, err = a.w.Write(b)
	a.mu.Unlock()
	if err != nil {
		a.onError(err)
	}
}

// limiters holds one token bucket per session whose profile sets
// rate.calls_per_minute. It is safe for concurrent use.
type limiters struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

// allow takes one call from the session's bucket; perMinute <= 0 means no
// limit. A bucket holds a minute's worth of calls and refills evenly.
func (l *limiters) allow(session string, perMinute int) bool {
	if perMinute <= 0 || session == "" {
		return true
	}
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[string]*rate.Limiter)
	}
	lim := l.m[session]
	if lim == nil || lim.Burst() != perMinute {
		lim = rate.NewLimiter(rate.Limit(float64(perMinute)/60), perMinute)
		l.m[session] = lim
	}
	l.mu.Unlock()
	return lim.Allow()
}

func (l *limiters) forget(session string) {
	l.mu.Lock()
	delete(l.m, session)
	l.mu.Unlock()
}
