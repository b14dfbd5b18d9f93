package upstream

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
)

// maxRedirects is how many redirects one request to an upstream follows,
// as many as net/http's default policy.
const maxRedirects = 10

// credentialHeaders are the headers that carry credentials whoever set
// them (the URL's user:password@ becomes Authorization) or that give away
// the URL of the request before (Referer, with any key in its query).
var credentialHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie", "Referer"}

// keepToOrigin returns the CheckRedirect policy of an upstream's HTTP
// clients. A redirect to the origin (scheme, host and port) of the first
// request keeps its headers. A redirect to another origin is followed
// without any of configured (the upstream's headers table, which holds
// its API keys and tokens) and without credentialHeaders: net/http would
// otherwise copy every custom header, and Authorization too to a
// subdomain or another port of the same host. Neither the policy nor the
// returned function holds state; it is safe for concurrent use.
func keepToOrigin(configured []string) func(*http.Request, []*http.Request) error {
	drop := append(append([]string(nil), configured...), credentialHeaders...)
	return func(req *http.Request, via []*http.Request) error {
		if len(via) >= maxRedirects {
			return errors.New("stopped after 10 redirects")
		}
		if sameOrigin(req.URL, via[0].URL) {
			return nil
		}
		for _, h := range drop {
			req.Header.Del(h)
		}
		return nil
	}
}

// headerNames returns the keys of a headers table.
func headerNames[V any](h map[string]V) []string {
	out := make([]string, 0, len(h))
	for k := range h {
		out = append(out, k)
	}
	return out
}

// sameOrigin reports whether a and b have the same scheme, host and port,
// a missing port being the scheme's default. ws and wss count as http and
// https, which is what a websocket handshake is.
func sameOrigin(a, b *url.URL) bool {
	sa, sb := originScheme(a.Scheme), originScheme(b.Scheme)
	return sa == sb && strings.EqualFold(a.Hostname(), b.Hostname()) && originPort(a, sa) == originPort(b, sb)
}

func originScheme(s string) string {
	switch s = strings.ToLower(s); s {
	case "ws":
		return "http"
	case "wss":
		return "https"
	}
	return s
}

func originPort(u *url.URL, scheme string) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch scheme {
	case "http":
		return "80"
	case "https":
		return "443"
	}
	return ""
}
