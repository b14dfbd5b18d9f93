package upstream

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcpmux/mcpmux/configs"
	"github.com/mcpmux/mcpmux/internal/redact"
)

// Health is what an Upstream is doing and has been through, for people
// looking at a status page (SPEC §9). It is a copy: the caller owns it.
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
// secretValues) and its URLs redacted. The values are gathered once per
// Upstream, that is once per configuration.
func (u *Upstream) Redact(s string) string { return u.secrets().Apply(s) }

// MaskSecrets returns s with every secret value of the upstream's
// configuration masked, and nothing else changed: for callers that mask
// several upstreams' values in one text before redacting its URLs once.
func (u *Upstream) MaskSecrets(s string) string { return u.secrets().Mask(s) }

// secrets returns the masker of the upstream's configured secret values.
func (u *Upstream) secrets() *redact.Secrets {
	h := &u.hist
	h.secretsOnce.Do(func() { h.secrets = redact.NewSecrets(secretValues(u.cfg)...) })
	return h.secrets
}

// secretValues lists the values of cfg that may be secret, for masking
// where a child or an error may repeat them: every env value, every header
// value and each of its words after the first (the token of
// "Authorization: Bearer …"), the URL's userinfo, its query values and its
// path segments that look like keys (looksLikeKey), each both as written
// and decoded, and the value of an argument whose flag names a key, token,
// secret or password (--api-key=…, or --token … as two arguments).
// redact.NewSecrets drops the short ones.
func secretValues(cfg *configs.Upstream) []string {
	var vs []string
	for _, k := range slices.Sorted(maps.Keys(cfg.Env)) {
		vs = append(vs, cfg.Env[k])
	}
	for _, k := range slices.Sorted(maps.Keys(cfg.Headers)) {
		v := cfg.Headers[k]
		vs = append(vs, v)
		if f := strings.Fields(v); len(f) > 1 {
			vs = append(vs, f[1:]...)
		}
	}
	for i, a := range cfg.Args {
		flag, val, hasVal := strings.Cut(a, "=")
		if !strings.HasPrefix(flag, "-") || !secretFlag(flag) {
			continue
		}
		if hasVal {
			vs = append(vs, val)
		} else if i+1 < len(cfg.Args) {
			vs = append(vs, cfg.Args[i+1])
		}
	}
	if cfg.URL != "" {
		vs = append(vs, urlSecrets(cfg.URL)...)
	}
	return vs
}

// secretFlag reports whether a command-line flag's name says its value is
// a secret.
func secretFlag(flag string) bool {
	f := strings.ToLower(flag)
	for _, w := range []string{"key", "token", "secret", "password", "passwd", "auth", "credential"} {
		if strings.Contains(f, w) {
			return true
		}
	}
	return false
}

// urlSecrets lists the userinfo, query values and key-like path segments
// of raw, each as written and decoded.
func urlSecrets(raw string) []string {
	var vs []string
	both := func(s string, unescape func(string) (string, error)) {
		vs = append(vs, s)
		if d, err := unescape(s); err == nil && d != s {
			vs = append(vs, d)
		}
	}
	rest := raw
	if _, after, ok := strings.Cut(rest, "://"); ok {
		rest = after
	}
	authority, path := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		user, pass, _ := strings.Cut(authority[:at], ":")
		both(user, url.PathUnescape)
		both(pass, url.PathUnescape)
	}
	path, _, _ = strings.Cut(path, "#")
	path, query, _ := strings.Cut(path, "?")
	for _, seg := range strings.Split(path, "/") {
		if looksLikeKey(seg) {
			both(seg, url.PathUnescape)
		}
	}
	for _, kv := range strings.FieldsFunc(query, func(r rune) bool { return r == '&' || r == ';' }) {
		_, v, _ := strings.Cut(kv, "=")
		both(v, url.QueryUnescape)
	}
	return vs
}

// looksLikeKey reports whether a URL path segment looks like an API key
// (a Zapier or Composio URL carries one in its path): at least 8 bytes
// with a digit or an upper-case letter in it, or at least 20 bytes of
// anything. "mcp", "sse", "v1" or "streamable-http" do not.
func looksLikeKey(seg string) bool {
	if len(seg) >= 20 {
		return true
	}
	if len(seg) < 8 {
		return false
	}
	return strings.ContainsFunc(seg, func(r rune) bool { return '0' <= r && r <= '9' || 'A' <= r && r <= 'Z' })
}
