// Package oauth is viewmux's OAuth 2.1 client of its upstreams (the MCP
// authorization spec, 2025-11-25 and 2026-07-28) and its token store:
// discovery from an upstream's 401 through Protected Resource Metadata
// (RFC 9728) to the authorization server's metadata (RFC 8414 / OpenID
// Connect discovery), client registration (a Client ID Metadata Document,
// dynamic registration per RFC 7591, or a configured client), the
// authorization code flow with PKCE S256, RFC 8707 resource indicators and
// the RFC 9207 iss check, refresh, and one token file per upstream in the
// state directory. The token exchange, refresh and PKCE are
// golang.org/x/oauth2's.
package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// maxMetadataBytes bounds a metadata, registration or token response.
const maxMetadataBytes = 1 << 20

// Challenge is what a WWW-Authenticate: Bearer header of a 401 or 403
// says. The zero value says nothing.
type Challenge struct {
	ResourceMetadata string   // resource_metadata: the PRM URL; "" = none
	Scope            []string // scope; nil = none
	Error            string   // error, e.g. "insufficient_scope"
}

// ParseChallenge reads the Bearer challenge of the WWW-Authenticate
// header values hs; ok is false when there is none.
func ParseChallenge(hs []string) (c Challenge, ok bool) {
	for _, h := range hs {
		rest, found := cutScheme(h, "bearer")
		if !found {
			continue
		}
		params := authParams(rest)
		c.ResourceMetadata = params["resource_metadata"]
		c.Scope = strings.Fields(params["scope"])
		c.Error = params["error"]
		return c, true
	}
	return Challenge{}, false
}

// cutScheme returns what follows scheme (case-insensitive) at the start
// of h, or of a later challenge in h.
func cutScheme(h, scheme string) (string, bool) {
	lower := strings.ToLower(h)
	for i := 0; i < len(lower); {
		j := strings.Index(lower[i:], scheme)
		if j < 0 {
			return "", false
		}
		j += i
		end := j + len(scheme)
		before := j == 0 || lower[j-1] == ' ' || lower[j-1] == ','
		after := end == len(lower) || lower[end] == ' '
		if before && after {
			return h[end:], true
		}
		i = end
	}
	return "", false
}

// authParams parses `k=v, k="quoted \"v\""` pairs.
func authParams(s string) map[string]string {
	out := make(map[string]string)
	for s != "" {
		s = strings.TrimLeft(s, " ,\t")
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			break
		}
		key := strings.ToLower(strings.TrimSpace(s[:eq]))
		s = strings.TrimLeft(s[eq+1:], " \t")
		var val string
		if strings.HasPrefix(s, `"`) {
			var b strings.Builder
			i := 1
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				b.WriteByte(s[i])
			}
			val = b.String()
			s = s[min(i+1, len(s)):]
		} else {
			end := strings.IndexAny(s, ", ")
			if end < 0 {
				end = len(s)
			}
			val, s = s[:end], s[end:]
		}
		if _, dup := out[key]; !dup {
			out[key] = val
		}
	}
	return out
}

// ResourceMetadata is the part of an RFC 9728 Protected Resource Metadata
// document viewmux uses.
type ResourceMetadata struct {
	Resource             string   `json:"resource"`
	AuthorizationServers []string `json:"authorization_servers"`
	ScopesSupported      []string `json:"scopes_supported"`
}

// ServerMetadata is the part of an RFC 8414 (or OpenID Connect discovery)
// authorization server metadata document viewmux uses.
type ServerMetadata struct {
	Issuer                            string   `json:"issuer"`
	AuthorizationEndpoint             string   `json:"authorization_endpoint"`
	TokenEndpoint                     string   `json:"token_endpoint"`
	RegistrationEndpoint              string   `json:"registration_endpoint"`
	RevocationEndpoint                string   `json:"revocation_endpoint"`
	ScopesSupported                   []string `json:"scopes_supported"`
	GrantTypesSupported               []string `json:"grant_types_supported"`
	CodeChallengeMethodsSupported     []string `json:"code_challenge_methods_supported"`
	TokenEndpointAuthMethodsSupported []string `json:"token_endpoint_auth_methods_supported"`
	ClientIDMetadataDocumentSupported bool     `json:"client_id_metadata_document_supported"`
	IssParameterSupported             bool     `json:"authorization_response_iss_parameter_supported"`
}

// Discovery is what discover found for one upstream.
type Discovery struct {
	Resource string // the resource indicator sent (RFC 8707)
	PRM      *ResourceMetadata
	Server   *ServerMetadata
}

// ErrResourceMismatch is returned when the Protected Resource Metadata
// names a resource the upstream's URL is not part of.
var ErrResourceMismatch = errors.New("protected resource metadata names another resource")

// discover finds the upstream's authorization server: the PRM at the
// challenge's resource_metadata, else at the well-known URLs of
// serverURL (path-specific first, then the root); then the metadata of
// its first authorization server.
func discover(ctx context.Context, hc *http.Client, serverURL string, ch Challenge) (*Discovery, error) {
	su, err := url.Parse(serverURL)
	if err != nil {
		return nil, fmt.Errorf("server url: %w", err)
	}
	var prmURLs []string
	if ch.ResourceMetadata != "" {
		prmURLs = append(prmURLs, ch.ResourceMetadata)
	}
	base := su.Scheme + "://" + su.Host
	if p := strings.TrimSuffix(su.EscapedPath(), "/"); p != "" {
		prmURLs = append(prmURLs, base+"/.well-known/oauth-protected-resource"+p)
	}
	prmURLs = append(prmURLs, base+"/.well-known/oauth-protected-resource")
	var prm *ResourceMetadata
	var tried []string
	for _, u := range prmURLs {
		var m ResourceMetadata
		err := getJSON(ctx, hc, u, &m)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", u, err))
			continue
		}
		prm = &m
		break
	}
	d := &Discovery{PRM: prm}
	issuer := base // 2025-03-26: no PRM, the server's origin is the authorization server
	if prm != nil {
		if prm.Resource == "" || !resourceCovers(prm.Resource, su) {
			return nil, fmt.Errorf("%w: %q is not %s or a parent of it", ErrResourceMismatch, prm.Resource, serverURL)
		}
		d.Resource = prm.Resource
		if len(prm.AuthorizationServers) == 0 {
			return nil, errors.New("protected resource metadata names no authorization server")
		}
		issuer = prm.AuthorizationServers[0]
	}
	sm, err := serverMetadata(ctx, hc, issuer, prm == nil)
	if err != nil {
		if prm == nil && len(tried) > 0 {
			return nil, fmt.Errorf("no protected resource metadata (%s); %w", strings.Join(tried, "; "), err)
		}
		return nil, err
	}
	d.Server = sm
	return d, nil
}

// resourceCovers reports whether the PRM resource r names the server
// at su: the same origin, and a path that is su's or a parent of it.
func resourceCovers(r string, su *url.URL) bool {
	ru, err := url.Parse(r)
	if err != nil || ru.Fragment != "" {
		return false
	}
	if !strings.EqualFold(ru.Scheme, su.Scheme) || !strings.EqualFold(ru.Host, su.Host) {
		return false
	}
	rp := strings.TrimSuffix(ru.Path, "/")
	sp := strings.TrimSuffix(su.Path, "/")
	return rp == sp || strings.HasPrefix(sp, rp+"/")
}

// serverMetadata fetches the metadata of issuer, trying RFC 8414 and
// OpenID Connect discovery URLs in the order the MCP spec gives (path
// insertion first for an issuer with a path), and checks that it names
// issuer exactly (RFC 8414 §3.3). legacy (no PRM: the 2025-03-26 rules)
// falls back to /authorize, /token and /register at the issuer when no
// metadata is found.
func serverMetadata(ctx context.Context, hc *http.Client, issuer string, legacy bool) (*ServerMetadata, error) {
	iu, err := url.Parse(issuer)
	if err != nil || iu.Host == "" || !secureURL(iu) {
		return nil, fmt.Errorf("authorization server %q is not an https URL (http only on loopback)", issuer)
	}
	base := iu.Scheme + "://" + iu.Host
	var urls []string
	if p := strings.TrimSuffix(iu.EscapedPath(), "/"); p != "" {
		urls = []string{
			base + "/.well-known/oauth-authorization-server" + p,
			base + "/.well-known/openid-configuration" + p,
			base + p + "/.well-known/openid-configuration",
		}
	} else {
		urls = []string{
			base + "/.well-known/oauth-authorization-server",
			base + "/.well-known/openid-configuration",
		}
	}
	var tried []string
	for _, u := range urls {
		var m ServerMetadata
		if err := getJSON(ctx, hc, u, &m); err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", u, err))
			continue
		}
		if m.Issuer != issuer {
			return nil, fmt.Errorf("authorization server metadata at %s names issuer %q, not %q (RFC 8414 §3.3)", u, m.Issuer, issuer)
		}
		if m.AuthorizationEndpoint == "" || m.TokenEndpoint == "" {
			return nil, fmt.Errorf("authorization server metadata at %s lacks authorization_endpoint or token_endpoint", u)
		}
		for _, e := range []string{m.AuthorizationEndpoint, m.TokenEndpoint, m.RegistrationEndpoint, m.RevocationEndpoint} {
			if eu, err := url.Parse(e); e != "" && (err != nil || eu.Host == "" || !secureURL(eu)) {
				return nil, fmt.Errorf("authorization server metadata at %s names an endpoint that is not an https URL (http only on loopback): %q", u, e)
			}
		}
		if !slices.Contains(m.CodeChallengeMethodsSupported, "S256") {
			return nil, fmt.Errorf("authorization server %s does not list S256 in code_challenge_methods_supported: PKCE cannot be used, so viewmux does not proceed", issuer)
		}
		return &m, nil
	}
	if legacy {
		return &ServerMetadata{
			Issuer:                        issuer,
			AuthorizationEndpoint:         base + "/authorize",
			TokenEndpoint:                 base + "/token",
			RegistrationEndpoint:          base + "/register",
			CodeChallengeMethodsSupported: []string{"S256"},
		}, nil
	}
	return nil, fmt.Errorf("no authorization server metadata for %s (%s)", issuer, strings.Join(tried, "; "))
}

// secureURL reports whether u may carry OAuth traffic: https, or http to
// a loopback host (local development and tests).
func secureURL(u *url.URL) bool {
	switch u.Scheme {
	case "https":
		return true
	case "http":
		h := u.Hostname()
		if h == "localhost" {
			return true
		}
		ip := net.ParseIP(h)
		return ip != nil && ip.IsLoopback()
	}
	return false
}

// getJSON GETs u and decodes its JSON body into v.
func getJSON(ctx context.Context, hc *http.Client, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMetadataBytes+1))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	if len(body) > maxMetadataBytes {
		return fmt.Errorf("larger than %d bytes", maxMetadataBytes)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("not JSON metadata: %w", err)
	}
	return nil
}
