package configs

import (
	"net"
	"net/url"
	"strings"
	"time"
)

// Bounds of auth.oauth.clock_skew.
const (
	defaultClockSkew = 60 * time.Second
	maxClockSkew     = 5 * time.Minute
)

// oauth validates [auth.oauth]: nil when the table is absent. Its URLs may
// use ${VAR}; an http:// issuer or jwks_url is accepted only on a loopback
// host, for identity providers run beside viewmux and for tests.
func (v *validator) oauth(r *rawOAuth, listen string, profiles map[string]*Profile) *OAuth {
	if r == nil {
		return nil
	}
	p := keyPath{"auth", "oauth"}
	o := &OAuth{Line: v.lines.line(p), ScopesSupported: r.ScopesSupported}
	if r.Issuer == nil {
		v.errorf(p, "needs issuer, the identity provider's issuer URL (its tokens' iss)")
	} else if s, ok := v.expand(p.key("issuer"), *r.Issuer); ok {
		if msg := checkAuthURL(s, "issuer"); msg != "" {
			v.errorf(p.key("issuer"), "%s", msg)
		} else {
			o.Issuer = s
		}
	}
	if r.JWKSURL != nil {
		if s, ok := v.expand(p.key("jwks_url"), *r.JWKSURL); ok {
			if msg := checkAuthURL(s, "jwks_url"); msg != "" {
				v.errorf(p.key("jwks_url"), "%s", msg)
			} else {
				o.JWKSURL = s
			}
		}
	}
	if r.Audience != nil {
		if s, ok := v.expand(p.key("audience"), *r.Audience); ok {
			u, err := url.Parse(s)
			switch {
			case err != nil || !u.IsAbs() || u.Host == "":
				v.errorf(p.key("audience"), "audience %q is not an absolute URL (the URL clients reach viewmux at, e.g. https://mcp.example.com)", s)
			case u.Fragment != "" || strings.Contains(s, "#"):
				v.errorf(p.key("audience"), "audience %q has a fragment; a resource identifier has none (RFC 8707)", s)
			default:
				o.Audience = s
			}
		}
	} else if aud, ok := DefaultAudience(listen); ok {
		o.Audience, o.AudienceFromListen = aud, true
	} else {
		v.errorf(p, "needs audience: server.listen %q names no host clients reach viewmux at; set audience to that URL (e.g. https://mcp.example.com)", listen)
	}
	o.ClockSkew = v.duration(p.key("clock_skew"), r.ClockSkew, defaultClockSkew)
	if o.ClockSkew > maxClockSkew {
		v.errorf(p.key("clock_skew"), "clock_skew %s is over %s: a token would outlive its exp by that much", o.ClockSkew, maxClockSkew)
	}
	for i, s := range r.ScopesSupported {
		if s == "" || strings.ContainsAny(s, " \t\"\\") {
			v.errorf(p.key("scopes_supported").at(i), "scope %q is empty or holds a space, quote or backslash (RFC 6749 §3.3)", s)
		}
	}
	if len(r.Grants) == 0 {
		v.errorf(p, "needs at least one [[auth.oauth.grants]]: without one, no token may use any profile")
	}
	for i, g := range r.Grants {
		gp := p.key("grants").at(i)
		gr := Grant{Claim: g.Claim, Value: g.Value, Profiles: g.Profiles, Admin: g.Admin, Line: v.lines.line(gp)}
		if g.Claim == "" {
			v.errorf(gp, "needs claim, the token claim to match (e.g. \"groups\", \"scope\", \"sub\")")
		}
		if g.Value == "" {
			v.errorf(gp, "needs value, what claim %q must hold", g.Claim)
		}
		if len(g.Profiles) == 0 {
			v.errorf(gp.key("profiles"), "grant needs a non-empty profiles list (the first is its default)")
		}
		for j, name := range g.Profiles {
			if profiles[name] == nil {
				v.errorf(gp.key("profiles").at(j), "unknown profile %q (have: %s)", name, orNone(profileNames(profiles)))
			}
		}
		o.Grants = append(o.Grants, gr)
	}
	return o
}

// DefaultAudience returns the resource identifier [auth.oauth] defaults to
// when viewmux listens on listen: "http://" + listen. The public URL viewmux
// knows is the one it listens on; on a wildcard address (0.0.0.0, ::) or
// behind a proxy it must be told, and ok is false for a wildcard.
func DefaultAudience(listen string) (audience string, ok bool) {
	host, _, err := net.SplitHostPort(listen)
	if err != nil || host == "" || unspecifiedHost(host) {
		return "", false
	}
	return "http://" + listen, true
}

// checkAuthURL returns what is wrong with s as the issuer or JWKS URL of
// [auth.oauth], or "" when nothing is.
func checkAuthURL(s, key string) string {
	u, err := url.Parse(s)
	if err != nil || !u.IsAbs() || u.Host == "" {
		return key + " " + quote(s) + " is not an absolute URL"
	}
	if u.RawQuery != "" || u.Fragment != "" || strings.Contains(s, "#") {
		return key + " " + quote(s) + " has a query or fragment; an issuer has neither (RFC 8414 §2)"
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !loopbackHost(u.Hostname()) {
			return key + " " + quote(s) + " uses http on a host that is not loopback; use https (http is for an identity provider on this machine)"
		}
	default:
		return key + " " + quote(s) + " is not an https URL"
	}
	return ""
}

// loopbackHost reports whether host (no port) is localhost or a loopback IP.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// unspecifiedHost reports whether host is a wildcard address (0.0.0.0, ::).
func unspecifiedHost(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }
