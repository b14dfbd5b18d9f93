package oauth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Transport is an http.RoundTripper that sends the Client's access token
// with every request to the upstream, refreshes it on a 401 and sends the
// request again once.
//
// Without Login (viewmux serve, a gateway with nobody at the keyboard):
// no token means no request at all (an error wrapping ErrNeedsLogin,
// naming the command to run); a 401 that refreshing cannot cure is the
// same error; a 403 insufficient_scope records the scopes wanted that
// the login was not granted (the next `viewmux auth login`, or connect
// link, asks for them with those granted) and fails the request with an
// error wrapping ErrInsufficientScope that says so. The rest of the
// upstream keeps working with the scopes it has.
//
// With Login, a request without a usable token is sent without one and
// its 401 starts a login; a 403 insufficient_scope starts one login with
// the wider scope (the union of the scopes granted before and the
// challenge's), at most once per request, and only when the challenge
// names a scope no login asked for yet, and for at most 8 such scopes
// in the Client's life: an upstream that refuses whatever it is granted,
// or names a new scope at every refusal, does not make it loop.
// A challenge whose scopes are not scope tokens, or too many, is an
// error naming the upstream. Safe for concurrent use.
type Transport struct {
	// Base sends the requests; nil = http.DefaultTransport.
	Base   http.RoundTripper
	Client *Client
	// Login logs in without a person, given the challenge and the scopes
	// to ask for besides; nil = never (see above).
	Login func(ctx context.Context, ch Challenge, scopes []string) error
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

// RoundTrip implements http.RoundTripper. A request to another origin
// than the upstream's URL (a redirect followed) goes out as it is: the
// token is only ever sent to the upstream's own origin.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.Client.sameOrigin(req.URL) {
		return t.base().RoundTrip(req)
	}
	ctx := req.Context()
	tok, err := t.Client.Token(ctx)
	if err != nil {
		if t.Login == nil || !errors.Is(err, ErrNeedsLogin) {
			return nil, err
		}
		tok = ""
	}
	resp, err := t.send(req, tok)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusUnauthorized && canRetry(req) {
		ch, _ := ParseChallenge(resp.Header.Values("WWW-Authenticate"))
		discard(resp)
		if tok != "" {
			err = t.Client.Unauthorized(ctx, tok)
		} else {
			err = t.Client.needsLogin("not logged in")
		}
		if err != nil && t.Login != nil {
			err = t.Login(ctx, ch, t.Client.Scopes())
		}
		if err != nil {
			return nil, err
		}
		if tok, err = t.Client.Token(ctx); err != nil {
			return nil, err
		}
		if resp, err = t.send(req, tok); err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusUnauthorized {
			discard(resp)
			t.Client.reject(tok) // not sent again until a new login lands
			return nil, t.Client.needsLogin("the upstream refused a fresh token")
		}
	}
	if resp.StatusCode == http.StatusForbidden {
		ch, _ := ParseChallenge(resp.Header.Values("WWW-Authenticate"))
		if ch.Error != "insufficient_scope" {
			return resp, nil
		}
		discard(resp)
		if err := checkScopes(ch.Scope); err != nil {
			return nil, fmt.Errorf("%w: upstream %q answered 403 insufficient_scope with %w", ErrInsufficientScope, t.Client.name, err)
		}
		if t.Login != nil && canRetry(req) && t.Client.stepUp(ch.Scope) {
			if err := t.Login(ctx, ch, t.Client.Scopes()); err != nil {
				return nil, err
			}
			if tok, err = t.Client.Token(ctx); err != nil {
				return nil, err
			}
			return t.send(req, tok) // once: a second 403 is the answer
		}
		if err := t.Client.WantScopes(ch.Scope); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInsufficientScope, err)
		}
		return nil, t.Client.insufficientScope(ch.Scope)
	}
	return resp, nil
}

// insufficientScope is the error of a request refused for scope, wrapping
// ErrInsufficientScope: what to do when a new login can add the scope,
// and that it cannot when the login was granted it already.
func (c *Client) insufficientScope(scope []string) error {
	want := strings.Join(scope, " ")
	more := c.MoreScopes()
	switch {
	case len(scope) == 0:
		return fmt.Errorf("%w: upstream %s refused this request for lack of scope without naming the scope it wants", ErrInsufficientScope, c.name)
	case c.source != nil:
		return fmt.Errorf("%w: the upstream wants scope %q for this request, which the token exchanged for the caller lacks (upstream %s)", ErrInsufficientScope, want, c.name)
	case len(more) == 0:
		return fmt.Errorf("%w: the upstream wants scope %q for this request, which the login of upstream %s was granted: logging in again would not help",
			ErrInsufficientScope, want, c.name)
	case c.PerUser():
		return fmt.Errorf("%w: the upstream wants scope %q for this request; connect your account to upstream %s through viewmux again to grant it",
			ErrInsufficientScope, want, c.name)
	}
	return fmt.Errorf("%w: the upstream wants scope %q for this request; run `viewmux auth login %s` to log in again with it",
		ErrInsufficientScope, want, c.name)
}

// CloseIdleConnections closes the idle connections of Base.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base().(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// send sends a copy of req with token (none when "").
func (t *Transport) send(req *http.Request, token string) (*http.Response, error) {
	r := req.Clone(req.Context())
	if req.GetBody != nil && req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		r.Body = body
	}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	} else {
		r.Header.Del("Authorization")
	}
	return t.base().RoundTrip(r)
}

// sameOrigin reports whether u has the scheme, host and port of the
// upstream's URL (a missing port being the scheme's default).
func (c *Client) sameOrigin(u *url.URL) bool {
	s, err := url.Parse(c.serverURL)
	if err != nil {
		return false
	}
	return strings.EqualFold(u.Scheme, s.Scheme) && strings.EqualFold(u.Hostname(), s.Hostname()) && port(u) == port(s)
}

func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "https") {
		return "443"
	}
	return "80"
}

// canRetry reports whether req can be sent again.
func canRetry(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// discard reads a little of resp's body, so its connection can be
// reused, and closes it.
func discard(resp *http.Response) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}
