package configs

import (
	"encoding/hex"
	"maps"
	"net/url"
	"slices"
	"strings"
)

// This file lists the configured values that are secret: what viewmux
// masks in every output it writes (logs, the status page, check, errors,
// the audit log), whoever's output it is (internal/redact).

// SecretValues lists every value of c that may be secret: each
// [[auth.tokens]] token, every upstream's (Upstream.SecretValues), and
// [state]'s (State.SecretValues). The caller owns the slice; duplicates
// and short values are left for redact.NewSecrets to drop.
func (c *Config) SecretValues() []string {
	var vs []string
	for _, t := range c.Auth.Tokens {
		if t.Token != "" {
			vs = append(vs, t.Token)
		}
	}
	for _, u := range c.Upstreams {
		vs = append(vs, u.SecretValues()...)
	}
	return append(vs, c.State.SecretValues()...)
}

// SecretValues lists the values of s that are secret: the password of
// its URL, as written and decoded, and every encryption key, in hex as lowercase and uppercase (how a config
// or an environment may spell it). The URL's user name is not: it is
// often a word ("viewmux", "default") that logs say for other reasons.
func (s State) SecretValues() []string {
	var vs []string
	if s.URL != "" {
		if u, err := url.Parse(s.URL); err == nil && u.User != nil {
			if p, ok := u.User.Password(); ok && p != "" {
				vs = append(vs, p)
				if raw := rawPassword(s.URL); raw != "" && raw != p {
					vs = append(vs, raw)
				}
			}
		}
	}
	for _, k := range append([][]byte{s.EncryptionKey}, s.OldEncryptionKeys...) {
		if len(k) > 0 {
			h := hex.EncodeToString(k)
			vs = append(vs, h, strings.ToUpper(h))
		}
	}
	return vs
}

// rawPassword returns the password of a URL's userinfo as written, still
// percent-encoded; "" when it has none.
func rawPassword(raw string) string {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return ""
	}
	_, pass, _ := strings.Cut(rest[:at], ":")
	return pass
}

// SecretValues lists the values of cfg that may be secret, for masking
// where a child or an error may repeat them: every env value, every header
// value and each of its words after the first (the token of
// "Authorization: Bearer …"), the URL's userinfo, its query values and its
// path segments that look like keys (looksLikeKey), each both as written
// and decoded, and the value of an argument whose flag names a key, token,
// secret or password (--api-key=…, or --token … as two arguments).
// redact.NewSecrets drops the short ones.
func (cfg *Upstream) SecretValues() []string {
	var vs []string
	for _, k := range slices.Sorted(maps.Keys(cfg.Env)) {
		vs = append(vs, cfg.Env[k])
	}
	if cfg.OAuth != nil && cfg.OAuth.ClientSecret != "" {
		vs = append(vs, cfg.OAuth.ClientSecret)
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
