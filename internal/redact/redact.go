// Package redact removes secrets from text that leaves mcpmux: the query
// values and userinfo of URLs in log lines and error messages (SPEC §10).
// Upstream URLs carry API keys in queries often enough (`?api_key=…`) that
// every URL is treated as secret-bearing.
package redact

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
)

// Mask replaces each redacted value.
const Mask = "REDACTED"

// URLs returns s with the query values and the userinfo password of every
// URL in it replaced by Mask. A URL is a run of characters that begins with
// a scheme and "://" and ends at white space, a quote, or one of <>`.
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
		b.WriteString(s[:start])
		b.WriteString(one(s[start:end]))
		s = s[end:]
	}
}

// one redacts a single URL; text that does not parse as one is masked
// from its query on.
func one(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		if q := strings.IndexAny(raw, "?@"); q >= 0 {
			return raw[:q] + "?" + Mask
		}
		return raw
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

func isSchemeChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'
}

func isURLEnd(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '"', '\'', '<', '>', '`':
		return true
	}
	return false
}

// Handler wraps a slog.Handler so that the message and every string or
// error attribute of each record pass through URLs first.
type Handler struct{ next slog.Handler }

// NewHandler returns next wrapped.
func NewHandler(next slog.Handler) *Handler { return &Handler{next: next} }

var _ slog.Handler = (*Handler)(nil)

func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, URLs(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(as))
	for i, a := range as {
		clean[i] = attr(a)
	}
	return &Handler{next: h.next.WithAttrs(clean)}
}

func (h *Handler) WithGroup(name string) slog.Handler { return &Handler{next: h.next.WithGroup(name)} }

// attr redacts one attribute: strings, errors, stringers and groups.
func attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, URLs(v.String()))
	case slog.KindGroup:
		g := v.Group()
		clean := make([]any, len(g))
		for i, x := range g {
			clean[i] = attr(x)
		}
		return slog.Group(a.Key, clean...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, URLs(x.Error()))
		case interface{ String() string }:
			return slog.String(a.Key, URLs(x.String()))
		case []any, map[string]any: // decoded JSON, such as an upstream's JSON stderr line
			return slog.Any(a.Key, decoded(x))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// decoded returns a copy of the decoded JSON value v with every string
// passed through URLs.
func decoded(v any) any {
	switch x := v.(type) {
	case string:
		return URLs(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = decoded(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = decoded(e)
		}
		return out
	}
	return v
}
