// Package audit writes mcpmux's audit log: one JSON line per tools/call
// decision (SPEC §9).
package audit

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// Record is one line of the audit log: one tools/call decision.
type Record struct {
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

// Decisions and reasons of a Record.
const (
	Allowed = "allowed"
	Denied  = "denied"
	Error   = "error"

	ReasonNotFound   = "not_found" // unknown or hidden: deliberately one reason
	ReasonArguments  = "arguments"
	ReasonAmbiguous  = "ambiguous"
	ReasonRestarting = "restarting"
	ReasonRate       = "rate_limit"
	ReasonToolError  = "tool_error"
)

// Log writes records as JSON lines to one writer. A nil *Log writes
// nothing. It is safe for concurrent use: lines never interleave.
type Log struct {
	mu       sync.Mutex
	w        io.Writer
	withArgs bool
	onError  func(error)
}

// New returns a Log writing to w; withArgs records each call's arguments
// (audit.include_arguments). onError is told of failed writes; nil ignores
// them.
func New(w io.Writer, withArgs bool, onError func(error)) *Log {
	if onError == nil {
		onError = func(error) {}
	}
	return &Log{w: w, withArgs: withArgs, onError: onError}
}

// Write appends rec, with args when the log records arguments and they
// are valid JSON.
func (a *Log) Write(rec Record, args json.RawMessage) {
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
