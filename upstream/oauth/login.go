package oauth

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
)

// Authorizer takes the user (or, in tests, an authorization server that
// approves by itself) through authURL and returns the URL the
// authorization server redirected back to: the redirect URI with the
// callback's query.
type Authorizer func(ctx context.Context, authURL string) (*url.URL, error)

// LoginOptions are the inputs of one Login.
type LoginOptions struct {
	// RedirectURI is the redirect URI registered and sent; required.
	RedirectURI string
	// Authorize follows the authorization URL; required.
	Authorize Authorizer
	// Challenge is the upstream's WWW-Authenticate challenge that asked
	// for the login; nil = Login asks the upstream for one (an
	// unauthenticated initialize).
	Challenge *Challenge
	// Scopes are asked for besides those chosen from the challenge or
	// metadata: a step-up's earlier scopes.
	Scopes []string
	// Registrations, when set, keeps the clients Begin registered, by
	// authorization server and redirect URI, and Begin reuses them: the
	// logins of many users of one upstream register one client, not one
	// each. nil = register at every login.
	Registrations *Registrations
}

// Registrations are clients registered (dynamic registration) with
// authorization servers, by issuer and redirect URI. Safe for concurrent
// use; the zero value is empty.
type Registrations struct {
	mu sync.Mutex
	m  map[[2]string]registration
}

type registration struct{ id, secret, method string }

func (r *Registrations) get(issuer, redirect string) (registration, bool) {
	if r == nil {
		return registration{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	reg, ok := r.m[[2]string{issuer, redirect}]
	return reg, ok
}

func (r *Registrations) put(issuer, redirect string, reg registration) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[[2]string]registration)
	}
	r.m[[2]string{issuer, redirect}] = reg
}

// Login runs discovery, registration and the authorization code flow
// with PKCE, and stores the tokens. It returns the stored record (which
// holds the tokens: never show or log it).
func (c *Client) Login(ctx context.Context, o LoginOptions) (*Record, error) {
	if o.Authorize == nil {
		return nil, errors.New("oauth login: no redirect URI or authorizer")
	}
	p, authURL, err := c.Begin(ctx, o)
	if err != nil {
		return nil, err
	}
	cb, err := o.Authorize(ctx, authURL)
	if err != nil {
		return nil, fmt.Errorf("oauth authorization: %w", err)
	}
	return c.Finish(ctx, p, cb)
}

// Pending is a login Begin started and Finish completes: what the
// authorization response is checked against and the code exchanged
// with. It holds the PKCE verifier: never show or log it.
type Pending struct {
	state, verifier, resource string
	conf                      *oauth2.Config
	sm                        *ServerMetadata
	scopes                    []string
	secret, method            string
}

// State returns the login's state parameter, which the authorization
// response carries back.
func (p *Pending) State() string { return p.state }

// String never shows the verifier.
func (p *Pending) String() string { return "pending oauth login at " + p.sm.Issuer }

// GoString never shows it either (%#v).
func (p *Pending) GoString() string { return p.String() }

// pendingJSON is a Pending as MarshalPending writes it.
type pendingJSON struct {
	V        int             `json:"v"`
	State    string          `json:"state"`
	Verifier string          `json:"verifier"`
	Resource string          `json:"resource,omitempty"`
	ClientID string          `json:"client_id"`
	Secret   string          `json:"client_secret,omitempty"`
	Method   string          `json:"auth_method"`
	Redirect string          `json:"redirect_uri"`
	Scopes   []string        `json:"scopes,omitempty"`
	Server   *ServerMetadata `json:"server"`
}

// MarshalPending returns p as bytes that UnmarshalPending reads back, in
// this process or another replica: the login may be begun on one and
// finished on another. They hold the PKCE verifier and any client
// secret: keep them sealed (state.Sealer) wherever they are stored.
func MarshalPending(p *Pending) ([]byte, error) {
	if p == nil || p.sm == nil || p.conf == nil {
		return nil, errors.New("oauth: no pending login to marshal")
	}
	return json.Marshal(pendingJSON{V: 1, State: p.state, Verifier: p.verifier, Resource: p.resource,
		ClientID: p.conf.ClientID, Secret: p.secret, Method: p.method, Redirect: p.conf.RedirectURL,
		Scopes: p.scopes, Server: p.sm})
}

// UnmarshalPending reads a Pending MarshalPending wrote. The error never
// quotes b.
func UnmarshalPending(b []byte) (*Pending, error) {
	var j pendingJSON
	if err := json.Unmarshal(b, &j); err != nil || j.V != 1 {
		return nil, errors.New("oauth: a pending login that cannot be read (damaged, or from another version)")
	}
	if j.State == "" || j.Verifier == "" || j.ClientID == "" || j.Server == nil || j.Server.TokenEndpoint == "" {
		return nil, errors.New("oauth: a pending login without its state, verifier, client or token endpoint")
	}
	p := &Pending{state: j.State, verifier: j.Verifier, resource: j.Resource, sm: j.Server, scopes: j.Scopes, secret: j.Secret, method: j.Method}
	p.conf = clientConfig(j.ClientID, j.Secret, j.Method, j.Server.AuthorizationEndpoint, j.Server.TokenEndpoint, j.Redirect, j.Scopes)
	return p, nil
}

// Begin runs discovery and registration and returns the login to finish
// and the authorization URL to send the user to (o.Authorize is not
// used): for a flow whose callback arrives as a request of its own
// (viewmux's /oauth/callback).
func (c *Client) Begin(ctx context.Context, o LoginOptions) (*Pending, string, error) {
	if o.RedirectURI == "" {
		return nil, "", errors.New("oauth login: no redirect URI or authorizer")
	}
	if c.store.files() && c.store.store().Where() == "" {
		return nil, "", fmt.Errorf("oauth login: %w", errNoStateDir)
	}
	// A login that could not be stored is not begun: the user would
	// authorize for nothing.
	if _, err := c.store.get(ctx, c.key); err != nil {
		return nil, "", fmt.Errorf("oauth login: %w", err)
	}
	ch := o.Challenge
	if ch == nil {
		got, err := c.probe(ctx)
		if err != nil {
			return nil, "", fmt.Errorf("oauth login: asking %s for its challenge: %w", c.serverURL, err)
		}
		ch = &got
	}
	d, err := discover(ctx, c.hc, c.serverURL, *ch)
	if err != nil {
		return nil, "", fmt.Errorf("oauth discovery: %w", err)
	}
	sm := d.Server

	scopes := c.chooseScopes(d, *ch, o.Scopes)
	reg, ok := o.Registrations.get(sm.Issuer, o.RedirectURI)
	if !ok {
		var err error
		if reg.id, reg.secret, reg.method, err = c.register(ctx, sm, o.RedirectURI, scopes); err != nil {
			return nil, "", fmt.Errorf("oauth client registration at %s: %w", sm.Issuer, err)
		}
		if c.cfg.ClientID == "" && sm.RegistrationEndpoint != "" && reg.id != c.cfg.ClientMetadataURL {
			o.Registrations.put(sm.Issuer, o.RedirectURI, reg) // a dynamic registration: worth keeping
		}
	}
	id, secret, method := reg.id, reg.secret, reg.method
	if c.onSecret != nil && secret != "" {
		c.onSecret(secret)
	}

	p := &Pending{state: randomString(), verifier: oauth2.GenerateVerifier(), resource: d.Resource, sm: sm, scopes: scopes, secret: secret, method: method}
	p.conf = c.config(id, secret, method, sm.AuthorizationEndpoint, sm.TokenEndpoint, o.RedirectURI, scopes)
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(p.verifier)}
	if d.Resource != "" {
		opts = append(opts, oauth2.SetAuthURLParam("resource", d.Resource))
	}
	return p, p.conf.AuthCodeURL(p.state, opts...), nil
}

// Finish checks the authorization response at cb against p (state, the
// RFC 9207 iss), exchanges its code with p's PKCE verifier, and stores
// the tokens under c's key. It returns the stored record (which holds
// the tokens: never show or log it).
func (c *Client) Finish(ctx context.Context, p *Pending, cb *url.URL) (*Record, error) {
	sm := p.sm
	code, err := checkCallback(cb, p.state, sm)
	if err != nil {
		return nil, fmt.Errorf("oauth authorization: %w", err)
	}
	xopts := []oauth2.AuthCodeOption{oauth2.VerifierOption(p.verifier)}
	if p.resource != "" {
		xopts = append(xopts, oauth2.SetAuthURLParam("resource", p.resource))
	}
	tok, err := p.conf.Exchange(context.WithValue(ctx, oauth2.HTTPClient, c.hc), code, xopts...)
	if err != nil {
		return nil, fmt.Errorf("oauth: %w", tokenError("exchange", err))
	}
	rec := &Record{
		Upstream: c.name, User: c.user, Resource: p.resource, ServerURL: c.serverURL,
		Issuer: sm.Issuer, TokenEndpoint: sm.TokenEndpoint,
		ClientID: p.conf.ClientID, ClientSecret: p.secret, AuthMethod: p.method,
		Scopes: p.scopes, AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken,
		TokenType: tok.Type(), Expiry: tok.Expiry, LoggedInAt: c.now().UTC(),
	}
	if s, ok := tok.Extra("scope").(string); ok && s != "" {
		rec.Granted = strings.Fields(s)
	}
	c.secret(rec)
	c.mu.Lock()
	defer c.mu.Unlock()
	raw, err := c.store.Save(ctx, rec)
	if err != nil {
		return nil, fmt.Errorf("oauth: storing the tokens: %w", err)
	}
	c.gen++
	c.rec, c.raw, c.rerr, c.rejected, c.unsaved = rec, raw, nil, "", ""
	c.loaded, c.checked = true, time.Now()
	return rec, nil
}

var errNoStateDir = errors.New("no state directory for the token file: set server.state_dir, XDG_STATE_HOME or HOME")

// chooseScopes picks the scopes to ask for: the configured ones, else the
// challenge's, else the PRM's scopes_supported, else none; plus extra,
// plus offline_access when the authorization server lists it (SEP-2207:
// a refresh token lets the gateway stay logged in).
func (c *Client) chooseScopes(d *Discovery, ch Challenge, extra []string) []string {
	var s []string
	switch {
	case len(c.cfg.Scopes) > 0:
		s = slices.Clone(c.cfg.Scopes)
	case len(ch.Scope) > 0:
		s = slices.Clone(ch.Scope)
	case d.PRM != nil && len(d.PRM.ScopesSupported) > 0:
		s = slices.Clone(d.PRM.ScopesSupported)
	}
	s = union(s, extra)
	if slices.Contains(d.Server.ScopesSupported, "offline_access") && !slices.Contains(s, "offline_access") &&
		(len(d.Server.GrantTypesSupported) == 0 || slices.Contains(d.Server.GrantTypesSupported, "refresh_token")) {
		s = append(s, "offline_access")
	}
	return s
}

// probe asks the upstream for its challenge without a token: an
// initialize, and when that is answered without one (a server may let
// anyone initialize and guard only what follows, or refuse an
// initialize of another protocol version before looking at tokens), a
// tools/list, on the session the initialize opened if it did. It
// returns the first challenge (an empty one when the upstream asks for
// none): its scope is what the login asks for, rather than everything
// the resource's metadata lists.
func (c *Client) probe(ctx context.Context) (Challenge, error) {
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"viewmux","version":"login"}}}`
	resp, err := c.probeSend(ctx, http.MethodPost, initialize, nil)
	if err != nil {
		return Challenge{}, err
	}
	if ch, ok := ParseChallenge(resp.Header.Values("WWW-Authenticate")); ok {
		return ch, nil
	}
	session := resp.Header.Get("Mcp-Session-Id")
	hdr := map[string]string{"MCP-Protocol-Version": "2025-11-25"}
	if session != "" {
		hdr["Mcp-Session-Id"] = session
	}
	resp, err = c.probeSend(ctx, http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`, hdr)
	if err != nil {
		return Challenge{}, err
	}
	ch, _ := ParseChallenge(resp.Header.Values("WWW-Authenticate"))
	if session != "" {
		// The session is the probe's: closed. An upstream that cannot
		// close it lets it expire; the probe's answer stands either way.
		c.probeSend(ctx, http.MethodDelete, "", hdr)
	}
	return ch, nil
}

// probeSend sends one request of the probe, with the upstream's
// configured headers but no Authorization, and hdr; it returns the
// response with its body read and closed.
func (c *Client) probeSend(ctx context.Context, method, body string, hdr map[string]string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.serverURL, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range c.headers {
		if !strings.EqualFold(k, "Authorization") { // the login is what gives one
			req.Header.Set(k, v)
		}
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp, nil
}

// register returns the client to use: the configured one, else a Client
// ID Metadata Document's URL where the server supports it, else a
// dynamically registered one. This is the MCP spec's order (a configured
// client is the operator's explicit choice).
func (c *Client) register(ctx context.Context, sm *ServerMetadata, redirect string, scopes []string) (id, secret, method string, err error) {
	supported := sm.TokenEndpointAuthMethodsSupported
	if c.cfg.ClientID != "" {
		if c.cfg.ClientSecret == "" {
			return c.cfg.ClientID, "", "none", nil
		}
		if len(supported) == 0 || slices.Contains(supported, "client_secret_basic") || !slices.Contains(supported, "client_secret_post") {
			return c.cfg.ClientID, c.cfg.ClientSecret, "client_secret_basic", nil
		}
		return c.cfg.ClientID, c.cfg.ClientSecret, "client_secret_post", nil
	}
	if sm.ClientIDMetadataDocumentSupported && c.cfg.ClientMetadataURL != "" {
		return c.cfg.ClientMetadataURL, "", "none", nil
	}
	if sm.RegistrationEndpoint == "" {
		return "", "", "", errors.New("the authorization server offers neither dynamic client registration nor (for viewmux's settings) a Client ID Metadata Document: set client_id (and client_secret) in the upstream's oauth table")
	}
	want := "none"
	if len(supported) > 0 && !slices.Contains(supported, "none") {
		want = "client_secret_basic"
		if !slices.Contains(supported, want) && slices.Contains(supported, "client_secret_post") {
			want = "client_secret_post"
		}
	}
	reqBody := map[string]any{
		"client_name":                c.clientName,
		"redirect_uris":              []string{redirect},
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"token_endpoint_auth_method": want,
		"application_type":           "native",
	}
	if len(scopes) > 0 {
		reqBody["scope"] = strings.Join(scopes, " ")
	}
	b, _ := json.Marshal(reqBody)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sm.RegistrationEndpoint, bytes.NewReader(b))
	if err != nil {
		return "", "", "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return "", "", "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMetadataBytes))
	if err != nil {
		return "", "", "", err
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		json.Unmarshal(body, &e)
		return "", "", "", fmt.Errorf("dynamic registration answered HTTP %d (%s)", resp.StatusCode, e.Error)
	}
	var got struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
		Method       string `json:"token_endpoint_auth_method"`
	}
	if err := json.Unmarshal(body, &got); err != nil || got.ClientID == "" {
		return "", "", "", errors.New("dynamic registration answered without a client_id")
	}
	method = got.Method
	if method == "" {
		method = want
		if got.ClientSecret != "" && want == "none" {
			method = "client_secret_basic"
			if len(supported) > 0 && !slices.Contains(supported, method) && slices.Contains(supported, "client_secret_post") {
				method = "client_secret_post"
			}
		}
	}
	switch method {
	case "none", "client_secret_basic", "client_secret_post":
	default:
		return "", "", "", fmt.Errorf("the registered token_endpoint_auth_method %q is not one viewmux supports (none, client_secret_basic, client_secret_post)", method)
	}
	return got.ClientID, got.ClientSecret, method, nil
}

// checkCallback checks the authorization response at cb: its state, the
// RFC 9207 iss (required when the server advertises it, compared by
// simple string comparison whenever present), and returns its code.
func checkCallback(cb *url.URL, state string, sm *ServerMetadata) (string, error) {
	if cb == nil {
		return "", errors.New("no callback")
	}
	q := cb.Query()
	if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(state)) != 1 {
		return "", errors.New("the callback's state does not match the request's: not the answer to this login")
	}
	iss, hasIss := q["iss"]
	switch {
	case hasIss && (len(iss) != 1 || iss[0] != sm.Issuer):
		return "", fmt.Errorf("the callback's iss is not the issuer %q (RFC 9207): a mix-up attack, or a misconfigured server", sm.Issuer)
	case !hasIss && sm.IssParameterSupported:
		return "", fmt.Errorf("the callback has no iss though %q advertises authorization_response_iss_parameter_supported (RFC 9207)", sm.Issuer)
	}
	if e := q.Get("error"); e != "" {
		return "", fmt.Errorf("the authorization server refused: %s", clip(e+": "+q.Get("error_description"), 200))
	}
	code := q.Get("code")
	if code == "" {
		return "", errors.New("the callback has no code")
	}
	return code, nil
}

// clip cuts s to n bytes.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// randomString is 32 random bytes, base64url.
func randomString() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// AutoApprove is an Authorizer for authorization servers that approve by
// themselves (tests, the conformance suite's): it GETs the authorization
// URL with hc, following no redirect, and returns the redirect's
// Location. hc nil = a client with a 30 s timeout.
func AutoApprove(hc *http.Client) Authorizer {
	return func(ctx context.Context, authURL string) (*url.URL, error) {
		c := http.Client{Timeout: 30 * time.Second}
		if hc != nil {
			c = *hc
		}
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, authURL, nil)
		if err != nil {
			return nil, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return nil, err
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		loc, err := resp.Location()
		if err != nil {
			return nil, fmt.Errorf("the authorization endpoint answered HTTP %d without a redirect", resp.StatusCode)
		}
		return loc, nil
	}
}
