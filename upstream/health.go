package upstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/viewmux/viewmux/internal/redact"
)

// Health is what an Upstream is doing and has been through, for people
// looking at a status page. It is a copy: the caller owns it.
type Health struct {
	State State
	// Transport is the transport of the current connection, or of the last
	// one that came up ("http" may have fallen back to "sse"); "" before
	// any connection came up.
	Transport string
	// Protocol is the protocol version negotiated on the current
	// connection; "" while not up.
	Protocol string
	// Connects counts the connections that came up; Restarts the
	// connection attempts after the first (for stdio, each one is a new
	// child).
	Connects, Restarts int
	// LastError is the error of the newest failed attempt or lost
	// connection, naming the upstream; nil = none so far. It may carry
	// URLs and configured secrets: pass its text through Upstream.Redact
	// before showing it to anyone.
	LastError   error
	LastErrorAt time.Time
	// Stderr holds the last stderr lines (at most ten, each cut to 512
	// bytes, oldest first) of the child behind LastError; nil for other
	// transports or when it wrote none. The upstream's configured secrets
	// are masked already (see Upstream.Redact); URLs are not redacted.
	Stderr []string
}

// history keeps an Upstream's counters and newest error. Its zero value
// is ready; it is safe for concurrent use.
type history struct {
	mu        sync.Mutex
	transport string
	connects  int
	attempts  int
	err       error
	errAt     time.Time
	stderr    []string

	secretsOnce sync.Once
	secrets     *redact.Secrets // of the Upstream's config; see Upstream.secrets
}

// attempted records the start of one connection attempt.
func (h *history) attempted() {
	h.mu.Lock()
	h.attempts++
	h.mu.Unlock()
}

// up records a connection that came up over transport.
func (h *history) up(transport string) {
	h.mu.Lock()
	h.connects++
	h.transport = transport
	h.mu.Unlock()
}

// failed records err, a failed attempt's or a lost connection's, and the
// child's last stderr lines (taken from err itself when it carries them).
func (h *history) failed(err error, stderr []string) {
	var se *StderrError
	if errors.As(err, &se) {
		err, stderr = se.Err, se.Stderr
	}
	h.mu.Lock()
	h.err, h.errAt, h.stderr = err, time.Now(), slices.Clone(stderr)
	h.mu.Unlock()
}

// Health returns the upstream's current state and history. It is cheap
// (no I/O) and safe for concurrent use.
func (u *Upstream) Health() Health {
	hs := Health{State: u.State()}
	if cat := u.Catalog(); cat != nil {
		hs.Protocol = cat.ProtocolVersion
	}
	h := &u.hist
	h.mu.Lock()
	defer h.mu.Unlock()
	hs.Transport = h.transport
	hs.Connects = h.connects
	hs.Restarts = max(h.attempts-1, 0)
	hs.LastError, hs.LastErrorAt = h.err, h.errAt
	hs.Stderr = slices.Clone(h.stderr)
	return hs
}

// lossCause is why the published connection c was lost, naming the
// upstream; for a stdio child that exited by itself (within exitGrace),
// with its exit status, which the first cause (often its stdout's EOF)
// does not tell.
func (u *Upstream) lossCause(c *conn) error {
	cause := context.Cause(c.ctx)
	if p := c.proc; p != nil && !strings.Contains(cause.Error(), "child exited") && waitClosed(p.exited, exitGrace) && p.cmd.ProcessState != nil {
		cause = fmt.Errorf("%w (child exited: %s)", cause, p.cmd.ProcessState)
	}
	return fmt.Errorf("upstream %q: connection lost: %w", u.cfg.Name, cause)
}

// recordLoss records lost, why the published connection c was lost, with
// its child's last stderr lines. c has been torn down.
func (u *Upstream) recordLoss(c *conn, lost error) {
	var stderr []string
	if c.proc != nil {
		stderr = c.proc.tail.snapshot()
	}
	u.hist.failed(lost, stderr)
}

// Redact returns s, text about this upstream (its Health's LastError or
// stderr lines), with every secret value of its configuration masked (see
// configs.Upstream.SecretValues) and its URLs redacted. The values are gathered once per
// Upstream, that is once per configuration.
func (u *Upstream) Redact(s string) string { return u.secrets().Apply(s) }

// secrets returns the masker of the upstream's configured secret values.
func (u *Upstream) secrets() *redact.Secrets {
	h := &u.hist
	h.secretsOnce.Do(func() { h.secrets = redact.NewSecrets(u.cfg.SecretValues()...) })
	return h.secrets
}
