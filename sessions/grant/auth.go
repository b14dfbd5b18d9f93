package grant

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/oauth"
)

// This file decides who is calling: a static token of [[auth.tokens]] or an
// OAuth access token validated as [auth.oauth] says. Both give the same
// grant (tokenEntry): an identity, the profiles it may use and admin. It
// also serves Protected Resource Metadata (RFC 9728) and writes the
// WWW-Authenticate challenges that point clients to it.

// ErrAuthUnavailable is a token that could not be checked because the
// identity provider's metadata or keys could not be read (503).
var ErrAuthUnavailable = errors.New("the identity provider is unavailable")

// MetadataPath is where Protected Resource Metadata is served; the
// document for a resource with a path is served under it with that path
// appended (RFC 9728 §3.1).
const MetadataPath = "/.well-known/oauth-protected-resource"

// tokenEntry is a grant: what a checked token may do. A static token's
// comes from its [[auth.tokens]] entry; an OAuth token's is built per
// request from its claims and the first [[auth.oauth.grants]] entry they
// match.
type tokenEntry struct {
	// sum is what a session remembers of its owner: the sha256 of a
	// static token, or of the OAuth issuer and subject, so that a client
	// that refreshes its access token keeps its session.
	sum      [sha256.Size]byte
	profiles []string
	admin    bool // sees all of the gateway's operational views
	// subject names the caller in audit lines, logs and traces: the OAuth
	// sub, or "token:" and the first 8 hex digits of a static token's
	// sha256. Never the token.
	subject string
	// claims are an OAuth token's claims, kept with the session so that a
	// reload can match them against its new grants; nil for a static
	// token.
	claims *oauth.Claims
	expiry time.Time // an OAuth token's exp; zero for a static token
}

// StaticSubject is the subject of a static token with sum.
func StaticSubject(sum [sha256.Size]byte) string {
	return "token:" + hex.EncodeToString(sum[:4])
}

// oauthOwner is what a session opened with an OAuth token remembers of
// its owner: the same for every token of that issuer and subject.
func oauthOwner(issuer, subject string) [sha256.Size]byte {
	return sha256.Sum256([]byte("oauth\x00" + issuer + "\x00" + subject))
}

// authError is a refusal of a request's token (wrapping ErrUnauthorized,
// ErrForbidden or ErrAuthUnavailable) with the WWW-Authenticate challenge
// its answer carries.
type authError struct {
	err       error
	challenge string
	// expired is set for a genuine token of owner that expired: the
	// session it belongs to ends.
	expired bool
	owner   [sha256.Size]byte
}

func (e *authError) Error() string { return e.err.Error() }
func (e *authError) Unwrap() error { return e.err }

// ExpiredOwner returns the owner of the session an expired token belongs
// to, when err is the refusal of one.
func ExpiredOwner(err error) ([sha256.Size]byte, bool) {
	var ae *authError
	if errors.As(err, &ae) && ae.expired {
		return ae.owner, true
	}
	return [sha256.Size]byte{}, false
}

// ChallengeOf returns the WWW-Authenticate challenge of a refusal, ""
// when it needs none.
func ChallengeOf(err error) string {
	var ae *authError
	if errors.As(err, &ae) {
		return ae.challenge
	}
	if errors.Is(err, ErrUnauthorized) {
		return `Bearer realm="viewmux"`
	}
	return ""
}

// newOAuth builds the token validator of cfg's [auth.oauth]; nil without
// one.
func newOAuth(cfg *configs.Config) *oauth.Validator {
	o := cfg.Auth.OAuth
	if o == nil {
		return nil
	}
	return oauth.New(oauth.Options{Issuer: o.Issuer, Audience: o.Audience, JWKSURL: o.JWKSURL, Skew: o.ClockSkew})
}

// MetadataURL returns the URL of this resource's Protected Resource
// Metadata (RFC 9728 §3.1: the well-known path, then the audience's
// path), "" without [auth.oauth].
func (r *Resolver) MetadataURL() string {
	o := r.cfg.Auth.OAuth
	if o == nil {
		return ""
	}
	u, err := url.Parse(o.Audience)
	if err != nil {
		return ""
	}
	u.Path = MetadataPath + strings.TrimSuffix(u.Path, "/")
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	return u.String()
}

// Challenge builds a Bearer Challenge: realm, then, with [auth.oauth],
// resource_metadata, then the error, its description and scope when
// given (RFC 6750 §3, RFC 9728 §5.1).
func (r *Resolver) Challenge(code, desc, scope string) string {
	var b strings.Builder
	b.WriteString(`Bearer realm="viewmux"`)
	if u := r.MetadataURL(); u != "" {
		fmt.Fprintf(&b, `, resource_metadata="%s"`, quotable(u))
	}
	if code != "" {
		fmt.Fprintf(&b, `, error="%s"`, code)
	}
	if desc != "" {
		fmt.Fprintf(&b, `, error_description="%s"`, quotable(desc))
	}
	if scope != "" {
		fmt.Fprintf(&b, `, scope="%s"`, quotable(scope))
	}
	return b.String()
}

// quotable makes s safe inside a quoted-string of a challenge: RFC 6750
// allows no quote or backslash in error_description, and nothing outside
// printable ASCII.
func quotable(s string) string {
	return strings.Map(func(c rune) rune {
		if c == '"' || c == '\\' || c < 0x20 || c > 0x7e {
			return '\''
		}
		return c
	}, s)
}

// missingToken is the refusal of a request without a token.
func (r *Resolver) missingToken() error {
	return &authError{err: ErrUnauthorized, challenge: r.Challenge("", "", "")}
}

// invalidToken is the refusal of a token that is not valid.
func (r *Resolver) invalidToken(why string) error {
	return &authError{err: fmt.Errorf("%w: %s", ErrUnauthorized, why), challenge: r.Challenge("invalid_token", why, "")}
}

// forbidden is the refusal of a profile te may not use. To an OAuth
// caller it is insufficient_scope, naming the scopes whose grants would
// allow the profile.
func (r *Resolver) forbidden(te *tokenEntry, format string, args ...any) error {
	err := fmt.Errorf("%w: "+format, append([]any{ErrForbidden}, args...)...)
	if te == nil || te.claims == nil {
		return err
	}
	return &authError{err: err, challenge: r.Challenge("insufficient_scope", strings.TrimPrefix(err.Error(), ErrForbidden.Error()+": "), "")}
}

// forbiddenProfile is forbidden for profile, naming in the challenge's
// scope the scopes of the grants that would allow it.
func (r *Resolver) forbiddenProfile(te *tokenEntry, profile string, format string, args ...any) error {
	err := r.forbidden(te, format, args...)
	var ae *authError
	if errors.As(err, &ae) {
		desc := "this token's grant does not allow profile " + profile
		ae.challenge = r.Challenge("insufficient_scope", desc, strings.Join(r.scopesFor(profile), " "))
	}
	return err
}

// scopesFor returns the values of the scope grants that allow profile.
func (r *Resolver) scopesFor(profile string) []string {
	var out []string
	if o := r.cfg.Auth.OAuth; o != nil {
		for _, g := range o.Grants {
			if (g.Claim == "scope" || g.Claim == "scp") && slices.Contains(g.Profiles, profile) && !slices.Contains(out, g.Value) {
				out = append(out, g.Value)
			}
		}
	}
	return out
}

// caller checks a bearer token: a static token first (in constant time
// against every one), then, with [auth.oauth], as a JWT access token.
func (r *Resolver) caller(tok string) (*tokenEntry, error) {
	if te := r.token(tok); te != nil {
		return te, nil
	}
	if r.oauth == nil {
		return nil, r.invalidToken("the bearer token is not valid")
	}
	if strings.Count(tok, ".") != 2 {
		return nil, r.invalidToken("the bearer token is neither a configured token nor a JWT access token")
	}
	claims, err := r.oauth.Validate(context.Background(), tok)
	switch {
	case errors.Is(err, oauth.ErrExpired):
		e := r.invalidToken("the access token expired").(*authError)
		e.expired, e.owner = true, oauthOwner(r.oauth.Issuer(), claims.Subject)
		return nil, e
	case errors.Is(err, oauth.ErrUnavailable):
		return nil, &authError{err: fmt.Errorf("%w: %v", ErrAuthUnavailable, err), challenge: r.Challenge("", "", "")}
	case err != nil:
		return nil, r.invalidToken(err.Error())
	}
	return r.grantOf(claims)
}

// grantOf returns the grant of an OAuth token's claims: the first
// [[auth.oauth.grants]] entry they match decides.
func (r *Resolver) grantOf(c *oauth.Claims) (*tokenEntry, error) {
	te := &tokenEntry{sum: oauthOwner(r.oauth.Issuer(), c.Subject), subject: c.Subject, claims: c, expiry: c.Expiry}
	for _, g := range r.cfg.Auth.OAuth.Grants {
		if c.Has(g.Claim, g.Value) {
			te.profiles, te.admin = g.Profiles, g.Admin
			return te, nil
		}
	}
	var scopes []string
	for _, g := range r.cfg.Auth.OAuth.Grants {
		if (g.Claim == "scope" || g.Claim == "scp") && !slices.Contains(scopes, g.Value) {
			scopes = append(scopes, g.Value)
		}
	}
	err := fmt.Errorf("%w: no grant of [auth.oauth] matches subject %q", ErrForbidden, c.Subject)
	return nil, &authError{err: err, challenge: r.Challenge("insufficient_scope", "no grant of this server matches the token", strings.Join(scopes, " "))}
}

// regrantOAuth re-derives the grant of a session opened with an OAuth
// token under r's [auth.oauth], from the claims it was opened with.
func (r *Resolver) regrantOAuth(c *oauth.Claims) (*tokenEntry, error) {
	if r.oauth == nil {
		return nil, fmt.Errorf("%w: [auth.oauth] was removed", ErrUnauthorized)
	}
	return r.grantOf(c)
}

// ErrTokenExpired ends a stream session whose OAuth token expired.
var ErrTokenExpired = errors.New("access token expired")

// ClockSkew is how far past its exp a token is still accepted.
func (r *Resolver) ClockSkew() time.Duration {
	if o := r.cfg.Auth.OAuth; o != nil {
		return o.ClockSkew
	}
	return 0
}

// KeepValidator makes r use old's token validator when both check tokens
// the same way, so that a reload keeps the cached keys and the rate limit
// of their reads.
func (r *Resolver) KeepValidator(old *Resolver) {
	if old == nil || old.oauth == nil || r.oauth == nil {
		return
	}
	a, b := old.cfg.Auth.OAuth, r.cfg.Auth.OAuth
	if a.Issuer == b.Issuer && a.Audience == b.Audience && a.JWKSURL == b.JWKSURL && a.ClockSkew == b.ClockSkew {
		r.oauth = old.oauth
	}
}

// Access checks a bearer token as a request would and returns what it
// grants: the profiles it may use, and whether it is an admin's.
func (r *Resolver) Access(tok string) (profiles []string, admin bool, err error) {
	te, err := r.caller(tok)
	if err != nil {
		return nil, false, err
	}
	return te.profiles, te.admin, nil
}

// Validator is r's OAuth access-token validator, nil without
// [auth.oauth]. A reload that checks tokens the same way keeps it, with
// its cached keys (KeepValidator).
func (r *Resolver) Validator() *oauth.Validator { return r.oauth }
