package oauth

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/state"
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
	// PollInterval is how often WaitLogin looks at the stored login, and,
	// on a shared store, how long a login read from it is used before it
	// is read again (in the background, off the call path); 0 = 1s.
	PollInterval time.Duration
	// State is the store logins are kept in; nil = the files of the
	// upstream's state directory (configs.UpstreamOAuth.StateDir).
	State state.Store
	// Sealer seals the logins written and opens those read; nil =
	// SealerFunc's, or else plain records, which only the files engine
	// takes.
	Sealer *state.Sealer
	// SealerFunc, when Sealer is nil, returns the sealer at each read and
	// write (nil = none): for a Client made before its gateway's config
	// is in place.
	SealerFunc func() *state.Sealer
	// Logger receives what the Client logs on its own: a stored login
	// sealed with another key. nil = discarded.
	Logger *slog.Logger
	// KeyErrors, when set, is shared by the Clients of one gateway, so
	// that logins sealed with another key are logged once in all, not
	// once per Client; nil = once per Client.
	KeyErrors *KeyErrors
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
// and logs in. The stored login is re-read when it changes, so a login
// made by another process or replica (`viewmux auth login`) is used: at
// the next request on the files engine, within PollInterval on a shared
// store, whose reads are made in the background while a login is held.
// A Client is safe for concurrent use.
type Client struct {
	name, serverURL string
	user            string // UserKey of Options.User; "" = the gateway's login
	key             string // the store key: storeKey(name, user)
	cfg             configs.UpstreamOAuth
	store           Store
	log             *slog.Logger
	keyErrs         *KeyErrors
	hc              *http.Client
	clientName      string
	now             func() time.Time
	poll            time.Duration
	onSecret        func(values ...string)
	headers         map[string]string

	source func(ctx context.Context) (string, time.Time, error) // Options.Source
	srcTok string                                               // Source's last token; "" = none or refused
	srcExp time.Time

	mu       sync.Mutex // guards the fields below, srcTok and srcExp; held across a refresh
	rec      *Record    // the login in use; nil = none
	raw      []byte     // the stored document rec was read from (or the one that did not open)
	rerr     error      // why the last read gave no login (a document that does not open, a store down)
	loaded   bool       // the store was read at least once
	checked  time.Time  // when it was last read
	gen      int        // counts what this Client wrote or read, so a background read never undoes it
	reading  bool       // a background read is under way
	unsaved  string     // a refresh token spent on a refresh the store could not save; "" = none
	rejected string     // an access token the upstream refused and refresh could not replace
	stepUps  int        // step-up logins made (stepUp)
}

// KeyErrors logs each distinct failure to open stored logins once:
// logins sealed with another encryption key fail alike for every user,
// and one line says so. Safe for concurrent use; the zero value is ready.
type KeyErrors struct {
	mu   sync.Mutex
	seen map[string]bool
}

// first reports whether msg is new.
func (k *KeyErrors) first(msg string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.seen[msg] {
		return false
	}
	if k.seen == nil {
		k.seen = make(map[string]bool)
	}
	k.seen[msg] = true
	return true
}

// New returns the Client of upstream name at serverURL. It has no side
// effects.
func New(name, serverURL string, cfg configs.UpstreamOAuth, opts Options) *Client {
	c := &Client{name: name, serverURL: serverURL, cfg: cfg, store: Store{State: opts.State, Sealer: opts.Sealer, sealerFn: opts.SealerFunc, Dir: statedir.Dir{Path: cfg.StateDir}},
		log: opts.Logger, keyErrs: opts.KeyErrors, hc: opts.HTTP, clientName: opts.ClientName, now: opts.Now, poll: opts.PollInterval, onSecret: opts.OnSecret, source: opts.Source, headers: opts.Headers}
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
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.keyErrs == nil {
		c.keyErrs = &KeyErrors{}
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

// Path returns where c's login is kept, for messages.
func (c *Client) Path() string { return c.store.Path(c.key) }

// load returns the login in use, reading the store as needed. On the
// files engine the file is read at each call (a read of a small local
// file). On a shared store a login read less than PollInterval ago is
// used as it is, and an older one too while a background read refreshes
// it: the store stays off the call path. A store that does not answer
// leaves the login in memory in use. c.mu is held.
func (c *Client) load(ctx context.Context) (*Record, error) {
	if !c.store.files() && c.loaded {
		if time.Since(c.checked) < c.poll {
			return c.rec, c.rerr
		}
		if c.rec != nil {
			c.readBehind()
			return c.rec, nil
		}
	}
	c.gen++
	b, err := c.store.get(ctx, c.key)
	c.checked, c.loaded = time.Now(), true
	if err != nil {
		if c.rec != nil && state.IsDown(err) {
			return c.rec, nil // a login in memory keeps working
		}
		c.rec, c.raw, c.rerr = nil, nil, err
		return nil, err
	}
	c.apply(b)
	return c.rec, c.rerr
}

// readBehind reads the stored login in the background, once at a time,
// and takes it unless this Client wrote or read meanwhile. Its goroutine
// owns nothing and ends within the store's command timeout (10 s at
// most), so a Client needs no Close. c.mu is held.
func (c *Client) readBehind() {
	if c.reading {
		return
	}
	c.reading = true
	gen := c.gen
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b, err := c.store.get(ctx, c.key)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.reading = false
		c.checked = time.Now()
		if err != nil || gen != c.gen {
			return // down: keep the login in memory; or superseded
		}
		c.gen++
		c.apply(b)
	}()
}

// apply takes the stored document b (nil = none) as c's login, decoding
// it when it changed. A document that does not open is no login, and
// one sealed with another key is logged once. c.mu is held.
func (c *Client) apply(b []byte) {
	if c.unsaved != "" && c.rec != nil {
		c.saveUnsaved(b)
		return
	}
	if b == nil {
		c.rec, c.raw, c.rerr = nil, nil, nil
		return
	}
	if bytes.Equal(b, c.raw) && (c.rec != nil || c.rerr != nil) {
		return
	}
	rec, err := c.store.decode(c.key, b)
	c.raw = b
	if err != nil {
		c.rec, c.rerr = nil, err
		if errors.Is(err, state.ErrOtherKey) && c.keyErrs.first(keyErrorText(err)) {
			c.log.Error("stored logins are sealed with an encryption key this replica does not have: their users are treated as not connected until they log in again, or state.old_encryption_keys names that key",
				"upstream", c.name, "error", keyErrorText(err))
		}
		return
	}
	c.rec, c.rerr = rec, nil
	c.secret(rec)
}

// keyErrorText is what err says of the keys, without the document it
// concerns: the same for every user's login.
func keyErrorText(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, state.ErrOtherKey.Error()); i >= 0 {
		return msg[i:]
	}
	return msg
}

// saveUnsaved writes the login in memory, refreshed while the store did
// not answer, unless the stored one (b) is no longer the one refreshed:
// another replica refreshed, or a new login landed, and that one is
// taken. c.mu is held.
func (c *Client) saveUnsaved(b []byte) {
	spent := c.unsaved
	cur, err := c.store.decode(c.key, b)
	if b == nil || err != nil || cur.RefreshToken != spent {
		c.unsaved = ""
		c.raw = nil
		c.apply(b)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if raw, err := c.store.Save(ctx, c.rec); err == nil {
		c.unsaved, c.raw = "", raw
	}
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
	rec, err := c.load(ctx)
	if err != nil {
		return "", fmt.Errorf("%w (%w)", c.needsLogin("the stored login cannot be read"), err)
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
	rec, err := c.load(ctx)
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
// holds the store's refresh lock of the login throughout, so that one
// process or replica refreshes at a time, and first re-reads the login:
// when another one refreshed meanwhile, its tokens are taken instead of
// spending a refresh token that may have been rotated. A store that does
// not answer fails the refresh (nothing is spent); one that stops
// answering after the tokens were obtained leaves them in use in memory,
// saved when it answers again. c.mu is held.
func (c *Client) refresh(ctx context.Context, rec *Record) error {
	// A holder that died leaves the lock to lapse: wait no longer.
	lctx, cancel := context.WithTimeout(ctx, refreshLockTTL)
	unlock, err := c.store.lockRefresh(lctx, c.key)
	cancel()
	if err != nil {
		return err
	}
	defer unlock()
	c.gen++
	cur, raw, err := c.store.Load(ctx, c.key)
	if err != nil {
		return err
	}
	if cur != nil && cur.AccessToken != rec.AccessToken && cur.ServerURL == rec.ServerURL {
		c.rec, c.raw, c.rerr, c.checked = cur, raw, nil, time.Now()
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
	c.rec, c.rerr, c.checked = &next, nil, time.Now()
	raw, err = c.store.Save(ctx, &next)
	if err != nil {
		c.unsaved = rec.RefreshToken
		c.log.Warn("a refreshed login could not be saved: it is used from memory and saved when the store answers", "upstream", c.name, "error", err)
		return nil
	}
	c.raw, c.unsaved = raw, ""
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
	return clientConfig(id, secret, method, authURL, tokenURL, redirect, scopes)
}

// clientConfig is Client.config, for a login read back from the store.
func clientConfig(id, secret, method, authURL, tokenURL, redirect string, scopes []string) *oauth2.Config {
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

// Bounds on what a 403 insufficient_scope may add to a login: a hostile
// upstream cannot grow the stored login, or the next authorization
// request, without limit.
const (
	maxWantScopes = 32  // scopes wanted beyond those granted, in all
	maxScopeLen   = 256 // bytes of one scope
)

// checkScopes reports the first of scopes that is not an RFC 6749 §3.3
// scope-token (printable ASCII but space, '"' and '\\'), or is longer
// than maxScopeLen, and too many scopes.
func checkScopes(scopes []string) error {
	if len(scopes) > maxWantScopes {
		return fmt.Errorf("%d scopes (at most %d are taken)", len(scopes), maxWantScopes)
	}
	for _, s := range scopes {
		if s == "" || len(s) > maxScopeLen {
			return fmt.Errorf("a scope of %d bytes (1 to %d are taken)", len(s), maxScopeLen)
		}
		for i := 0; i < len(s); i++ {
			if b := s[i]; b < 0x21 || b > 0x7e || b == '"' || b == '\\' {
				return fmt.Errorf("scope %q, which is not an RFC 6749 scope-token", clip(s, 64))
			}
		}
	}
	return nil
}

// granted returns the scopes rec's token has: those the token response
// named, else those asked for.
func granted(rec *Record) []string {
	if rec.Granted != nil {
		return rec.Granted
	}
	return rec.Scopes
}

// WantScopes records scopes a request was refused for (a 403
// insufficient_scope): those the login was not granted are kept, and the
// next login asks for them too (Scopes). An error names what was wrong
// with scopes: not scope tokens, or more than the login may be asked to
// add; nothing is recorded then.
func (c *Client) WantScopes(scopes []string) error {
	if err := checkScopes(scopes); err != nil {
		return fmt.Errorf("upstream %q answered 403 insufficient_scope with %w", c.name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, err := c.load(ctx)
	if err != nil || rec == nil {
		return nil // no login to widen: the next one starts from its challenge
	}
	has := granted(rec)
	want := slices.Clone(rec.WantScopes)
	for _, s := range scopes {
		if !slices.Contains(has, s) && !slices.Contains(want, s) {
			want = append(want, s)
		}
	}
	if slices.Equal(want, rec.WantScopes) {
		return nil
	}
	if len(want) > maxWantScopes {
		return fmt.Errorf("upstream %q answered 403 insufficient_scope asking for more than %d scopes beyond those granted: not recorded", c.name, maxWantScopes)
	}
	next := *rec
	next.WantScopes = want
	c.gen++
	raw, err := c.store.Save(ctx, &next)
	if err != nil {
		return fmt.Errorf("upstream %q: recording the scope wanted: %w", c.name, err)
	}
	c.rec, c.raw = &next, raw
	return nil
}

// Scopes returns what the next login asks for besides its own choice:
// the scopes the stored login was granted (else asked for) and those
// refused requests wanted since (SEP-2350's union). nil = no login.
func (c *Client) Scopes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, err := c.load(ctx)
	if err != nil || rec == nil {
		return nil
	}
	return union(granted(rec), rec.WantScopes)
}

// MoreScopes returns the scopes refused requests wanted that the stored
// login was not granted: what a new login must add. nil = none. The
// slice is the caller's.
func (c *Client) MoreScopes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, err := c.load(ctx)
	if err != nil || rec == nil || rec.ServerURL != c.serverURL {
		return nil
	}
	return slices.Clone(rec.WantScopes)
}

// maxStepUps bounds the step-up logins (Transport.Login) one Client
// makes: an upstream naming a new scope at every refusal stops getting
// them.
const maxStepUps = 8

// stepUp reports whether a step-up login may be made for the challenged
// scopes, and counts it: whether one of them was never asked for (a
// login asking again for what the authorization server was already
// asked for would end in the same refusal), and fewer than maxStepUps
// were made.
func (c *Client) stepUp(challenged []string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, err := c.load(ctx)
	if err != nil || rec == nil || c.source != nil || c.stepUps >= maxStepUps {
		return false
	}
	for _, s := range challenged {
		if !slices.Contains(rec.Scopes, s) && !slices.Contains(rec.Granted, s) {
			c.stepUps++
			return true
		}
	}
	return false
}

// Status is what `viewmux auth status` shows of one login: never a token.
type Status struct {
	LoggedIn bool
	Issuer   string
	Expiry   time.Time // zero = not said
	Refresh  bool      // a refresh token is stored
	Scopes   []string  // granted, else asked for
	// MoreScopes are the scopes refused requests wanted that the login
	// was not granted: the next login asks for them (nil = none).
	MoreScopes []string
	LoggedInAt time.Time
}

// Status reads the stored login. A login that does not open (sealed with
// another key) is not logged in, and the error says why.
func (c *Client) Status() (Status, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, err := c.load(ctx)
	if err != nil || rec == nil {
		return Status{}, err
	}
	s := Status{LoggedIn: rec.AccessToken != "" && rec.ServerURL == c.serverURL, Issuer: rec.Issuer, Expiry: rec.Expiry,
		Refresh: rec.RefreshToken != "", Scopes: rec.Granted, MoreScopes: slices.Clone(rec.WantScopes), LoggedInAt: rec.LoggedInAt}
	if s.Scopes == nil {
		s.Scopes = rec.Scopes
	}
	return s, nil
}

// Logout removes the stored login; removed says whether there was one.
func (c *Client) Logout() (removed bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.rec, c.raw, c.rerr, c.loaded, c.unsaved = nil, nil, nil, false, ""
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.store.Delete(ctx, c.key)
}

// WaitLogin waits until the stored login changes (a login landed), d
// passes, or ctx ends; false only when ctx ended.
func (c *Client) WaitLogin(ctx context.Context, d time.Duration) bool {
	start, _ := c.store.get(ctx, c.key)
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
			if b, err := c.store.get(ctx, c.key); err == nil && !bytes.Equal(b, start) {
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
