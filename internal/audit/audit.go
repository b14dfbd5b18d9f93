// Package audit writes viewmux's audit log: one JSON line per tools/call
// decision, and one per request refused by a rate, size or busy limit.
// Every line is valid JSON: invalid UTF-8 in recorded
// arguments is escaped, never written raw.
package audit

import (
	"encoding/json"
	"io"
	"sync"
	"time"
	"unicode/utf8"
)

// Record is one line of the audit log: one tools/call decision, or one
// request refused by a limit before its tool could be known (Tool is then
// empty and Method says what was refused, when known).
type Record struct {
	Time    time.Time `json:"time"`
	Session string    `json:"session,omitempty"`
	// Caller is who the session or request belongs to: "token:" and the
	// hex of the token's sha256, "address:" and the client's address
	// without tokens, or "local" for the stdio door.
	Caller   string `json:"caller,omitempty"`
	Profile  string `json:"profile,omitempty"`
	Method   string `json:"method,omitempty"`
	Tool     string `json:"tool"`
	Upstream string `json:"upstream,omitempty"`
	Decision string `json:"decision"` // allowed, denied, error
	Reason   string `json:"reason,omitempty"`
	// Approval is what became of a call that needed a person's approval
	// (one of the Approval constants); empty when it needed none.
	Approval  string          `json:"approval,omitempty"`
	Duration  float64         `json:"duration_ms"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Hash and PreviousHash are set on a change to a pinned tool
	// definition (Method MethodPins): the definition's hash now and the
	// pinned one it replaces.
	Hash         string `json:"hash,omitempty"`
	PreviousHash string `json:"previous_hash,omitempty"`
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
	ReasonSize       = "size_limit" // body or message over server.max_body_bytes
	ReasonBusy       = "busy"       // a queue, session or held-call limit was full
	ReasonToolError  = "tool_error"
	ReasonApproval   = "approval" // not approved: Record.Approval says how
)

// Approval outcomes of a Record. Accepted goes with Allowed; the others
// with Denied and ReasonApproval.
const (
	ApprovalAccepted    = "accepted"    // the user said yes: the call was forwarded
	ApprovalDeclined    = "declined"    // the user declined
	ApprovalCancelled   = "cancelled"   // the user dismissed the question
	ApprovalDenied      = "denied"      // the user accepted the form with allow not true
	ApprovalTimeout     = "timeout"     // no answer within approve_timeout
	ApprovalUnsupported = "unsupported" // the client cannot ask its user (no form elicitation)
	ApprovalFailed      = "failed"      // asking failed, or the answer made no sense
	ApprovalAbandoned   = "abandoned"   // the client cancelled the call, or viewmux stopped, while it waited
)

// MethodPins is the Method of a record about a pinned tool definition
// (server.pin); its Reason is "pin_" and the change: ReasonPinChanged,
// ReasonPinNew, ReasonPinRemoved or ReasonPinApproved.
// A change hidden by quarantine is Denied; the others are Allowed.
const (
	MethodPins        = "pins"
	ReasonPinChanged  = "pin_changed"
	ReasonPinNew      = "pin_new"
	ReasonPinRemoved  = "pin_removed"
	ReasonPinApproved = "pin_approved"
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
		rec.Arguments = validUTF8(args)
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

// validUTF8 returns args with every byte that is not part of valid UTF-8
// replaced by the escape \ufffd. json.Valid accepts such bytes inside
// strings, and encoding/json copies a RawMessage as it is, so without this
// one argument could make its line invalid JSON. Outside strings valid JSON
// is ASCII, so every replaced byte is inside a string, where the escape is
// valid.
func validUTF8(args []byte) []byte {
	if utf8.Valid(args) {
		return args
	}
	out := make([]byte, 0, len(args)+16)
	for len(args) > 0 {
		r, n := utf8.DecodeRune(args)
		if r == utf8.RuneError && n == 1 {
			out = append(out, `\ufffd`...)
		} else {
			out = append(out, args[:n]...)
		}
		args = args[n:]
	}
	return out
}
