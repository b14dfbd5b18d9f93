// Package redact removes secrets from text that leaves viewmux: the query
// values and userinfo of URLs in log lines and error messages.
// Upstream URLs carry API keys in queries often enough (`?api_key=…`) that
// every URL is treated as secret-bearing. Secrets masks the exact values
// one upstream's configuration holds (env and header values, URL keys),
// which a child may echo on its stderr.
package redact

import (
	"cmp"
	"context"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Mask replaces each redacted value.
const Mask = "REDACTED"

// URLs returns s with the query values and the userinfo password of every
// URL in it replaced by Mask. A URL is a run of characters that begins with
// a scheme and "://" and ends at white space, a double quote, or one of
// <>`. A single quote does not end it (a password or a query value may
// hold one), but trailing single quotes are left out ('http://h/x' quoted).
func URLs(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "://")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		start := i
		for start > 0 && isSchemeChar(s[start-1]) {
			start--
		}
		end := i + 3
		for end < len(s) && !isURLEnd(s[end]) {
			end++
		}
		for end > i+3 && s[end-1] == '\'' {
			end--
		}
		b.WriteString(s[:start])
		b.WriteString(one(s[start:end]))
		s = s[end:]
	}
}

// one redacts a single URL; text that does not parse as one is masked by
// unparsed.
func one(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return unparsed(raw)
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), Mask)
		} else {
			u.User = url.User(Mask)
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{Mask}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// unparsed masks what may be secret in raw, a URL that does not parse:
// its userinfo password (from the first ':' after "://" to the last '@';
// the whole userinfo when no ':' comes before that '@') and everything from
// its first '?' on. Where the two overlap, one Mask covers both.
func unparsed(raw string) string {
	i := strings.Index(raw, "://") + 3
	var from, to []int // masked byte ranges [from[k], to[k])
	if at := strings.LastIndexByte(raw[i:], '@'); at >= 0 {
		at += i
		start := i
		if c := strings.IndexByte(raw[i:at], ':'); c >= 0 {
			start = i + c + 1
		}
		if start < at {
			from, to = append(from, start), append(to, at)
		}
	}
	if q := strings.IndexByte(raw[i:], '?'); q >= 0 && i+q+1 < len(raw) {
		from, to = append(from, i+q+1), append(to, len(raw))
	}
	switch {
	case len(from) == 0:
		return raw
	case len(from) == 2 && from[1] <= to[0]: // overlapping: one Mask
		return raw[:from[0]] + Mask + raw[max(to[0], to[1]):]
	}
	var b strings.Builder
	last := 0
	for k := range from {
		b.WriteString(raw[last:from[k]])
		b.WriteString(Mask)
		last = to[k]
	}
	b.WriteString(raw[last:])
	return b.String()
}

func isSchemeChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'
}

func isURLEnd(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '"', '<', '>', '`':
		return true
	}
	return false
}

// Handler wraps a slog.Handler so that the message and every string or
// error attribute of each record pass through URLs first (or through
// Secrets.Apply, for a Handler from Secrets.Handler).
type Handler struct {
	next  slog.Handler
	clean func(string) string
}

// NewHandler returns next wrapped.
func NewHandler(next slog.Handler) *Handler { return &Handler{next: next, clean: URLs} }

// NewHandlerFunc wraps next like NewHandler, with clean in place of URLs:
// clean gets every message, string attribute and error text.
func NewHandlerFunc(next slog.Handler, clean func(string) string) *Handler {
	return &Handler{next: next, clean: clean}
}

var _ slog.Handler = (*Handler)(nil)

func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.clean(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(attr(a, h.clean))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(as))
	for i, a := range as {
		clean[i] = attr(a, h.clean)
	}
	return &Handler{next: h.next.WithAttrs(clean), clean: h.clean}
}

func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), clean: h.clean}
}

// attr redacts one attribute: strings, errors, stringers and groups.
func attr(a slog.Attr, clean func(string) string) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, clean(v.String()))
	case slog.KindGroup:
		g := v.Group()
		out := make([]any, len(g))
		for i, x := range g {
			out[i] = attr(x, clean)
		}
		return slog.Group(a.Key, out...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, clean(x.Error()))
		case interface{ String() string }:
			return slog.String(a.Key, clean(x.String()))
		case []any, map[string]any: // decoded JSON, such as an upstream's JSON stderr line
			return slog.Any(a.Key, decoded(x, clean))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// decoded returns a copy of the decoded JSON value v with every string
// passed through clean.
func decoded(v any, clean func(string) string) any {
	switch x := v.(type) {
	case string:
		return clean(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = decoded(e, clean)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = decoded(e, clean)
		}
		return out
	}
	return v
}

// MinSecret is the shortest value Secrets masks: shorter ones ("1",
// "true", "prod") are too common in text to mask without hiding what a
// line says, and too short to be a key.
const MinSecret = 6

// Secrets masks exact occurrences of known secret values, such as the env
// and header values of one upstream's configuration, which its child may
// echo on stderr or its errors may quote. Build it once per configuration;
// it is immutable and safe for concurrent use. A nil *Secrets masks
// nothing (Apply still redacts URLs).
type Secrets struct {
	values []string // distinct, at least MinSecret bytes, longest first
}

// NewSecrets returns the Secrets for values, ignoring those shorter than
// MinSecret; nil when none is left.
func NewSecrets(values ...string) *Secrets {
	var vs []string
	for _, v := range values {
		if len(v) >= MinSecret && !slices.Contains(vs, v) {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return nil
	}
	slices.SortFunc(vs, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return &Secrets{values: vs}
}

// Len is how many values s masks.
func (s *Secrets) Len() int {
	if s == nil {
		return 0
	}
	return len(s.values)
}

// Mask returns text with every occurrence of each value replaced by Mask.
// Occurrences that overlap or touch are masked as one, so no byte of any
// value is left in the result.
func (s *Secrets) Mask(text string) string {
	if s == nil || len(text) < MinSecret {
		return text
	}
	var spans [][2]int // masked [start, end) byte ranges
	for _, v := range s.values {
		for off := 0; ; {
			i := strings.Index(text[off:], v)
			if i < 0 {
				break
			}
			spans = append(spans, [2]int{off + i, off + i + len(v)})
			off += i + 1 // overlapping occurrences of v count too
		}
	}
	if len(spans) == 0 {
		return text
	}
	slices.SortFunc(spans, func(a, b [2]int) int { return cmp.Compare(a[0], b[0]) })
	var b strings.Builder
	last, end := 0, -1 // end of the current span; -1 = none open
	for _, sp := range spans {
		if end >= 0 && sp[0] <= end {
			end = max(end, sp[1])
			continue
		}
		if end >= 0 {
			b.WriteString(Mask)
			last = end
		}
		b.WriteString(text[last:sp[0]])
		end = sp[1]
	}
	b.WriteString(Mask)
	b.WriteString(text[end:])
	return b.String()
}

// Apply masks the values, then redacts URLs: what text leaving viewmux
// about this configuration's upstream goes through.
func (s *Secrets) Apply(text string) string { return URLs(s.Mask(text)) }

// Handler wraps next like NewHandler, with Apply in place of URLs.
func (s *Secrets) Handler(next slog.Handler) *Handler {
	return &Handler{next: next, clean: s.Apply}
}

// Live holds the Secrets of the configuration viewmux runs now: one set of
// every configured secret value (configs.Config.SecretValues), which every
// output masks whoever's secret it is. A reload stores the new set. Values
// learnt at run time (OAuth tokens an upstream login obtained) are added
// with Add and outlive reloads. Its zero value masks nothing (Apply still
// redacts URLs); it is safe for concurrent use. A nil *Live is usable
// too, and masks nothing.
type Live struct {
	mu   sync.Mutex // serializes Store and Add
	conf *Secrets   // the configuration's set; guarded by mu
	dyn  []string   // added values, oldest first; guarded by mu
	p    atomic.Pointer[Secrets]
}

// maxAdded bounds the values Add keeps: the oldest go first (a token
// refreshed hourly for weeks would otherwise grow the set without end).
const maxAdded = 1024

// NewLive returns a Live holding s.
func NewLive(s *Secrets) *Live {
	l := &Live{}
	l.Store(s)
	return l
}

// Store makes s the configuration's set l masks, besides what Add added.
func (l *Live) Store(s *Secrets) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.conf = s
	l.p.Store(s.Union(NewSecrets(l.dyn...)))
}

// Add makes l mask values too (those shorter than MinSecret are
// ignored), whatever configuration is stored later. A nil *Live ignores
// it.
func (l *Live) Add(values ...string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.dyn)
	for _, v := range values {
		if len(v) >= MinSecret && !slices.Contains(l.dyn, v) {
			l.dyn = append(l.dyn, v)
		}
	}
	if len(l.dyn) == n {
		return
	}
	if len(l.dyn) > maxAdded {
		l.dyn = slices.Clone(l.dyn[len(l.dyn)-maxAdded:])
	}
	l.p.Store(l.conf.Union(NewSecrets(l.dyn...)))
}

// Load returns the set l masks now (nil: none).
func (l *Live) Load() *Secrets {
	if l == nil {
		return nil
	}
	return l.p.Load()
}

// Mask returns text with every value of the current set masked.
func (l *Live) Mask(text string) string { return l.Load().Mask(text) }

// Apply masks the current set's values, then redacts URLs.
func (l *Live) Apply(text string) string { return l.Load().Apply(text) }

// Union returns a set masking every value of s and of o (nil when both
// are empty): what a reload masks while the old configuration's
// upstreams are still stopping.
func (s *Secrets) Union(o *Secrets) *Secrets {
	var vs []string
	if s != nil {
		vs = append(vs, s.values...)
	}
	if o != nil {
		vs = append(vs, o.values...)
	}
	return NewSecrets(vs...)
}
