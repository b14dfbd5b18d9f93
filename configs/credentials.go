package configs

import (
	"net/url"
	"strings"
)

// credentials checks upstreams.NAME.credentials: whose OAuth login
// reaches the upstream. Anything but "shared" needs oauth on an http or
// sse upstream, and is its own per-user connection, so it does not
// combine with scope = "session".
func (v *validator) credentials(p keyPath, r *rawUpstream, u *Upstream) string {
	if r.Credentials == nil {
		return CredentialsShared
	}
	c := *r.Credentials
	k := p.key("credentials")
	switch c {
	case CredentialsShared:
		return c
	case CredentialsPerUser, CredentialsExchange:
	default:
		v.errorf(k, "credentials %q: want %q (one login for the gateway), %q (each caller logs in to the upstream through viewmux) or %q (the caller's OAuth token exchanged for the upstream's, RFC 8693)",
			c, CredentialsShared, CredentialsPerUser, CredentialsExchange)
		return CredentialsShared
	}
	switch {
	case r.Command != nil || r.URL == nil:
		v.errorf(k, "credentials %q applies only to url upstreams (http, sse) with oauth = true; a command takes credentials through env", c)
		return CredentialsShared
	case u.OAuth == nil:
		v.errorf(k, "credentials %q needs oauth = true on this upstream: the per-user logins are OAuth logins", c)
		return CredentialsShared
	case strings.HasPrefix(u.URL, "ws://") || strings.HasPrefix(u.URL, "wss://") || r.Transport == TransportWebsocket:
		v.errorf(k, "credentials %q applies only to http and sse upstreams, not websocket", c)
		return CredentialsShared
	case r.Scope != nil && *r.Scope == ScopeSession:
		v.errorf(k, "credentials %q gives each caller a connection of their own already; it does not combine with scope = \"session\"", c)
		return CredentialsShared
	case r.Required:
		v.errorf(k, "credentials %q gives each caller a connection of their own, which no start can wait for: it does not combine with required = true", c)
		return CredentialsShared
	}
	return c
}

// credentialsNeeds checks what u's credentials need of the rest of cfg:
// "exchange" an [auth.oauth] whose tokens it exchanges, "per-user" a URL
// users reach viewmux at (PublicBase) for its connect links and callback.
func (v *validator) credentialsNeeds(u *Upstream, cfg *Config) {
	k := keyPath{"upstreams", u.Name, "credentials"}
	switch u.Credentials {
	case CredentialsExchange:
		if cfg.Auth.OAuth == nil {
			v.errorf(k, "credentials \"exchange\" trades the caller's OAuth access token for the upstream's: it needs [auth.oauth], whose tokens callers bring")
		}
		if u.OAuth != nil && u.OAuth.ClientID == "" {
			v.errorf(k, "credentials \"exchange\" needs the client viewmux is at [auth.oauth]'s identity provider, which exchanges tokens only for a known client: set client_id (and client_secret) in [upstreams.%s.oauth]", u.Name)
		}
	case CredentialsPerUser:
		if _, ok := cfg.PublicBase(); !ok {
			v.errorf(k, "credentials \"per-user\" sends users to viewmux's /oauth/connect and the authorization server back to /oauth/callback: set server.public_url to the URL users reach viewmux at (server.listen %q names no host)", cfg.Server.Listen)
		}
	}
}

// PublicBase returns the URL users reach viewmux at, without a trailing
// slash: server.public_url, else the origin of [auth.oauth]'s audience,
// else "http://" and server.listen when that names a host. ok is false
// when none does.
func (c *Config) PublicBase() (base string, ok bool) {
	if c.Server.PublicURL != "" {
		return c.Server.PublicURL, true
	}
	if o := c.Auth.OAuth; o != nil && o.Audience != "" && !o.AudienceFromListen {
		if u, err := url.Parse(o.Audience); err == nil && u.Host != "" {
			return u.Scheme + "://" + u.Host, true
		}
	}
	return DefaultAudience(c.Server.Listen)
}

// checkPublicURL returns what is wrong with s as server.public_url, or
// "" when nothing is: an absolute http(s) URL with no path, query or
// fragment; http only on a loopback host (the OAuth callback's redirect
// URI must not travel in clear).
func checkPublicURL(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil || !u.IsAbs() || u.Host == "":
		return "public_url " + quote(s) + " is not an absolute URL (e.g. https://mcp.example.com)"
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "", strings.Contains(s, "#"), u.User != nil:
		return "public_url " + quote(s) + " must be only a scheme, host and port: viewmux's paths (/oauth/connect, /oauth/callback) are added to it"
	case u.Scheme == "https":
	case u.Scheme == "http" && loopbackHost(u.Hostname()):
	case u.Scheme == "http":
		return "public_url " + quote(s) + " uses http on a host that is not loopback; use https (OAuth redirects carry codes)"
	default:
		return "public_url " + quote(s) + " is not an http or https URL"
	}
	return ""
}
