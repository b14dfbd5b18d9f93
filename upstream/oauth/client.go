package oauth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/statedir"
)

// ErrNeedsLogin is returned, wrapped with the command to run, while an
// upstream has no usable token: none stored, or one the upstream refused
// that could not be refreshed.
var ErrNeedsLogin = errors.New("needs login")

// ErrInsufficientScope is returned, wrapped, for a request the upstream
// refused with 403 insufficient_scope when no new login could be made.
var ErrInsufficientScope = errors.New("insufficient scope")

// refreshEarly is how long before its expiry a token is refreshed.
const refreshEarly = time.Minute

// Options are the knobs of a Client. The zero value is usable.
type Options struct {
	// HTTP makes the discovery, registration and token requests; nil = a
	// client with a 30 s timeout.
	HTTP *http.Client
	// ClientName is the client_name registered; "" = "viewmux".
	ClientName string
	// Now is the clock; nil = time.Now.
	Now func() time.Time
	// PollInterval is how often WaitLogin looks at the token file; 0 = 1s.
	PollInterval time.Duration
	// User, when set, makes the Client the login of one calling identity
	// of a per-user upstream (credentials = "per-user"): its token file
	// is keyed by UserKey(User), and its messages point the user to
	// viewmux's connect link instead of `viewmux auth login`.
	User string
	// UserKey, when User is "", is the UserKey of the identity whose
	// login the Client uses (a login found in the state directory, whose
	// identity is not known).
	UserKey string
	// Headers are the upstream's configured headers, sent with the
	// login's probe (an unauthenticated initialize asking for the
	// upstream's challenge), as every request to the upstream carries
	// them.
	Headers map[string]string
	// Source, when set, gives the access token instead of a stored login:
	// a token exchanged for the caller (credentials = "exchange",
	// Exchanger). The Client keeps its answer until a minute before its
	// expiry or until the upstream refuses it, and stores nothing.
	Source func(ctx context.Context) (token string, expiry time.Time, err error)
	// OnSecret receives the secret values of each login the Client reads
	// or obtains (access and refresh tokens, a registered client secret),
	// for every output to mask them (redact.Live.Add). nil = ignored.
	OnSecret func(values ...string)
}

// Client is the OAuth client of one upstream: it hands out its access
// token (refreshing it before expiry and when the upstream refuses it),
// and logs in. The token file is re-read when it changes, so a login made
// by another process (`viewmux auth login`) is used at the next request.
// A Client is safe for concurrent use.
type Client struct {
	name, serverURL string
	user            string // UserKey of Options.User; "" = the gateway's login
	key             string // the store key: storeKey(name, user)
	cfg             configs.UpstreamOAuth
	store           Store
	hc              *http.Client
	clientName      string
	now             func() time.Time
	poll            time.Duration
	onSecret        func(values ...string)
	headers         map[string]string

	source func(ctx context.Context) (string, time.Time, error) // Options.Source
	srcTok string                                               // Source's last token; "" = none or refused
	srcExp time.Time

	mu       sync.Mutex // guards rec, mod, rejected, srcTok, srcExp; held across a refresh
	rec      *Record
	mod      time.Time
	rejected string // an access token the upstream refused and refresh could not replace
}

// New returns the Client of upstream name at serverURL. It has no side
// effects.
func New(name, serverURL string, cfg configs.UpstreamOAuth, opts Options) *Client {
	c := &Client{name: name, serverURL: serverURL, cfg: cfg, store: Store{Dir: statedir.Dir{Path: cfg.StateDir}},
		hc: opts.HTTP, clientName: opts.ClientName, now: opts.Now, poll: opts.PollInterval, onSecret: opts.OnSecret, source: opts.Source, headers: opts.Headers}
	c.user = opts.UserKey
	if opts.User != "" {
		c.user = UserKey(opts.User)
	}
	c.key = storeKey(name, c.user)
	if c.hc == nil {
		c.hc = &http.Client{Timeout: 30 * time.Second}
	}
	if c.clientName == "" {
		c.clientName = "viewmux"
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.poll <= 0 {
		c.poll = time.Second
	}
	return c
}

// Name returns the upstream's name.
func (c *Client) Name() string { return c.name }

// Store returns the token store.
func (c *Client) Store() Store { return c.store }

// needsLogin wraps ErrNeedsLogin with the command to run and why.
func (c *Client) needsLogin(why string) error {
	if c.source != nil {
		return fmt.Errorf("%w: no exchanged token for this caller (%s)", ErrNeedsLogin, why)
	}
	if c.user != "" {
		return fmt.Errorf("%w: connect your account to upstream %s through viewmux (%s)", ErrNeedsLogin, c.name, why)
	}
	return fmt.Errorf("%w: run `viewmux auth login %s` (%s)", ErrNeedsLogin, c.name, why)
}

// PerUser reports whether c is one user's login (Options.User).
func (c *Client) PerUser() bool { return c.user != "" }

// Path returns c's token file.
func (c *Client) Path() string { return c.store.Path(c.key) }

// load re-reads the token file when it changed (a stat per call, a read
// only after a change). c.mu is held.
func (c *Client) load() (*Record, error) {
	if c.rec != nil {
		if fi, err := os.Stat(c.store.Path(c.key)); err == nil && fi.ModTime().Equal(c.mod) {
			return c.rec, nil
		}
	}
	rec, mod, err := c.store.Load(c.key)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		c.rec, c.mod = nil, time.Time{}
		return nil, nil
	}
	if c.rec == nil || !mod.Equal(c.mod) {
		c.rec, c.mod = rec, mod
		c.secret(rec)
	}
	return c.rec, nil
}

// secret hands rec's secret values to OnSecret.
func (c *Client) secret(rec *Record) {
	if c.onSecret != nil && rec != nil {
		c.onSecret(rec.AccessToken, rec.RefreshToken, rec.ClientSecret)
	}
}

// Token returns the access token to send, refreshing it first when it
// expires within a minute. The error wraps ErrNeedsLogin when there is
// no usable token.
func (c *Client) Token(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.source != nil {
		return c.sourceToken(ctx)
	}
	rec, err := c.load()
	if err != nil {
		return "", fmt.Errorf("%w (%w)", c.needsLogin("the token file cannot be read"), err)
	}
	switch {
	case rec == nil:
		return "", c.needsLogin("not logged in")
	case rec.ServerURL != c.serverURL:
		return "", c.needsLogin("the stored login is for another url")
	case rec.AccessToken == c.rejected:
		return "", c.needsLogin("the upstream refused the stored token")
	}
	if !rec.Expiry.IsZero() && c.now().Add(refreshEarly).After(rec.Expiry) {
		if rec.RefreshToken == "" {
			if c.now().After(rec.Expiry) {
				return "", c.needsLogin("the token expired and there is no refresh token")
			}
			return rec.AccessToken, nil
		}
		if err := c.refresh(ctx, rec); err != nil {
			switch {
			case !c.now().After(rec.Expiry):
				return rec.AccessToken, nil // still valid for a little while
			case errors.Is(err, errRefused):
				return "", fmt.Errorf("%w (%w)", c.needsLogin("the token expired and the authorization server refused to refresh it"), err)
			}
			return "", fmt.Errorf("upstream %q: the token expired and refreshing it failed (retried): %w", c.name, err)
		}
	}
	return c.rec.AccessToken, nil
}

// Unauthorized handles a 401 to a request sent with token: unless the
// token was replaced meanwhile, it is refreshed. nil means: send again
// with Token's answer.
func (c *Client) Unauthorized(ctx context.Context, token string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.source != nil {
		if c.srcTok == token {
			c.srcTok = "" // exchanged again for the retry
		}
		return nil
	}
	rec, err := c.load()
	if err != nil || rec == nil {
		return c.needsLogin("not logged in")
	}
	if rec.AccessToken != token && rec.AccessToken != c.rejected {
		return nil // another request refreshed it, or a new login landed
	}
	if rec.RefreshToken == "" {
		c.rejected = rec.AccessToken
		return c.needsLogin("the upstream refused the token and there is no refresh token")
	}
	if err := c.refresh(ctx, rec); err != nil {
		if !errors.Is(err, errRefused) {
			// The authorization server could not be asked: try again later.
			return fmt.Errorf("upstream %q: the upstream refused the token and refreshing it failed (retried): %w", c.name, err)
		}
		c.rejected = rec.AccessToken
		return fmt.Errorf("%w (%w)", c.needsLogin("the upstream refused the token and the authorization server refused to refresh it"), err)
	}
	return nil
}

// errRefused marks a token request the authorization server refused
// (a 4xx: invalid_grant, invalid_client, …), as opposed to one that could
// not be made or met a server error, which may succeed later.
var errRefused = errors.New("refused by the authorization server")

// reject marks token as refused by the upstream: Token answers needs
// login until the token file changes.
func (c *Client) reject(token string) {
	c.mu.Lock()
	c.rejected = token
	if c.srcTok == token {
		c.srcTok = ""
	}
	c.mu.Unlock()
}

// sourceToken returns Source's token, asking it again a minute before
// the last one expires or once the upstream refused it. c.mu is held.
func (c *Client) sourceToken(ctx context.Context) (string, error) {
	if c.srcTok != "" && (c.srcExp.IsZero() || c.now().Add(refreshEarly).Before(c.srcExp)) {
		return c.srcTok, nil
	}
	tok, exp, err := c.source(ctx)
	if err != nil {
		return "", fmt.Errorf("upstream %q: %w", c.name, err)
	}
	if c.onSecret != nil {
		c.onSecret(tok)
	}
	c.srcTok, c.srcExp = tok, exp
	return tok, nil
}

// refresh trades rec's refresh token for new tokens and saves them. It
// holds the state directory's lock throughout, and first re-reads the
// file: when another process (a second server on the same state_dir)
// refreshed meanwhile, its tokens are taken instead of spending a
// refresh token that may have been rotated. c.mu is held.
func (c *Client) refresh(ctx context.Context, rec *Record) error {
	unlock, err := c.store.Dir.Lock(lockName)
	if err != nil {
		return err
	}
	defer unlock()
	if cur, mod, err := c.store.Load(c.key); err == nil && cur != nil && cur.AccessToken != rec.AccessToken && cur.ServerURL == rec.ServerURL {
		c.rec, c.mod = cur, mod
		c.secret(cur)
		return nil
	}
	conf := c.config(rec.ClientID, rec.ClientSecret, rec.AuthMethod, "", rec.TokenEndpoint, "", nil)
	ctx = context.WithValue(ctx, oauth2.HTTPClient, c.tokenHTTP(rec.TokenEndpoint, rec.Resource))
	tok, err := conf.TokenSource(ctx, &oauth2.Token{RefreshToken: rec.RefreshToken}).Token()
	if err != nil {
		return tokenError("refresh", err)
	}
	next := *rec
	next.AccessToken, next.TokenType, next.Expiry = tok.AccessToken, tok.Type(), tok.Expiry
	if tok.RefreshToken != "" {
		next.RefreshToken = tok.RefreshToken
	}
	c.secret(&next) // before anything can log it
	if s, ok := tok.Extra("scope").(string); ok && s != "" {
		next.Granted = strings.Fields(s)
	}
	if err := c.store.write(&next); err != nil {
		return err
	}
	c.rec = &next
	if _, mod, err := c.store.Load(c.key); err == nil {
		c.mod = mod
	}
	return nil
}

// tokenError says what the token endpoint answered without quoting its
// body (which may echo what was sent).
func tokenError(what string, err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		code := re.ErrorCode
		if code == "" {
			code = "no error code"
		}
		status := 0
		if re.Response != nil {
			status = re.Response.StatusCode
		}
		if status >= 400 && status < 500 {
			return fmt.Errorf("token %s: %w: HTTP %d (%s)", what, errRefused, status, code)
		}
		return fmt.Errorf("token %s: the authorization server answered HTTP %d (%s)", what, status, code)
	}
	return fmt.Errorf("token %s: %w", what, err)
}

// config is the x/oauth2 configuration of one client.
func (c *Client) config(id, secret, method, authURL, tokenURL, redirect string, scopes []string) *oauth2.Config {
	style := oauth2.AuthStyleInParams
	if method == "client_secret_basic" {
		style = oauth2.AuthStyleInHeader
	}
	if method == "none" {
		secret = ""
	}
	return &oauth2.Config{ClientID: id, ClientSecret: secret, RedirectURL: redirect, Scopes: scopes,
		Endpoint: oauth2.Endpoint{AuthURL: authURL, TokenURL: tokenURL, AuthStyle: style}}
}

// tokenHTTP is the HTTP client of token requests: c.hc, adding the
// resource indicator to refresh requests (RFC 8707 §2.2), which
// x/oauth2 sends with only the refresh token.
func (c *Client) tokenHTTP(tokenURL, resource string) *http.Client {
	if resource == "" {
		return c.hc
	}
	hc := *c.hc
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	hc.Transport = resourceTransport{base: base, tokenURL: tokenURL, resource: resource}
	return &hc
}

// resourceTransport adds resource to the refresh_token grants it carries.
type resourceTransport struct {
	base               http.RoundTripper
	tokenURL, resource string
}

func (t resourceTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || req.URL.String() != t.tokenURL || req.Body == nil {
		return t.base.RoundTrip(req)
	}
	b, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	form, err := url.ParseQuery(string(b))
	if err == nil && form.Get("grant_type") == "refresh_token" && form.Get("resource") == "" {
		form.Set("resource", t.resource)
		b = []byte(form.Encode())
	}
	r2 := req.Clone(req.Context())
	r2.Body = io.NopCloser(strings.NewReader(string(b)))
	r2.ContentLength = int64(len(b))
	r2.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(string(b))), nil }
	return t.base.RoundTrip(r2)
}

// WantScopes records scopes a request was refused for: the next login
// asks for them too.
func (c *Client) WantScopes(scopes []string) {
	if len(scopes) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	rec, err := c.load()
	if err != nil || rec == nil {
		return
	}
	want := union(rec.WantScopes, scopes)
	if slices.Equal(want, rec.WantScopes) {
		return
	}
	next := *rec
	next.WantScopes = want
	if c.store.Save(&next) == nil {
		c.rec = &next
		if _, mod, err := c.store.Load(c.key); err == nil {
			c.mod = mod
		}
	}
}

// Scopes returns the scopes of the stored login (asked for, and those a
// refused request wanted), for a step-up login to ask for them again.
func (c *Client) Scopes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec, err := c.load()
	if err != nil || rec == nil {
		return nil
	}
	return union(rec.Scopes, rec.WantScopes)
}

// Status is what `viewmux auth status` shows of one login: never a token.
type Status struct {
	LoggedIn   bool
	Issuer     string
	Expiry     time.Time // zero = not said
	Refresh    bool      // a refresh token is stored
	Scopes     []string  // granted, else asked for
	LoggedInAt time.Time
}

// Status reads the stored login.
func (c *Client) Status() (Status, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec, err := c.load()
	if err != nil || rec == nil {
		return Status{}, err
	}
	s := Status{LoggedIn: rec.AccessToken != "" && rec.ServerURL == c.serverURL, Issuer: rec.Issuer, Expiry: rec.Expiry,
		Refresh: rec.RefreshToken != "", Scopes: rec.Granted, LoggedInAt: rec.LoggedInAt}
	if s.Scopes == nil {
		s.Scopes = rec.Scopes
	}
	return s, nil
}

// Logout removes the stored login; removed says whether there was one.
func (c *Client) Logout() (removed bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rec, c.mod = nil, time.Time{}
	return c.store.Delete(c.key)
}

// WaitLogin waits until the token file changes (a login landed), d
// passes, or ctx ends; false only when ctx ended.
func (c *Client) WaitLogin(ctx context.Context, d time.Duration) bool {
	_, start, _ := c.store.Load(c.key)
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(c.poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return true
		case <-tick.C:
			if _, mod, err := c.store.Load(c.key); err == nil && !mod.Equal(start) {
				return true
			}
		}
	}
}

// union returns a followed by the elements of b not in a.
func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
