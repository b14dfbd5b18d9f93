package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// RFC 8693 identifiers.
const (
	GrantTokenExchange   = "urn:ietf:params:oauth:grant-type:token-exchange"
	TokenTypeAccessToken = "urn:ietf:params:oauth:token-type:access_token"
)

// ErrExchange is returned, wrapped, by every failed token exchange.
var ErrExchange = errors.New("token exchange")

// ErrExchangeRefused is returned, wrapped, when the identity provider
// refuses a token exchange (a 4xx answer).
var ErrExchangeRefused = errors.New("the identity provider refused the token exchange")

// ErrNoExchange is returned, wrapped, when the identity provider's
// metadata lists its grant types without token exchange.
var ErrNoExchange = errors.New("the identity provider does not offer token exchange (RFC 8693)")

// Exchanger trades a caller's access token, issued by Issuer, for one
// whose audience is an upstream (OAuth 2.0 Token Exchange, RFC 8693), at
// Issuer's token endpoint, authenticating as the client ClientID. The
// caller's token goes only to that endpoint. An Exchanger is safe for
// concurrent use.
type Exchanger struct {
	Issuer                 string
	ClientID, ClientSecret string
	// Resource is the upstream's URL, sent as resource (RFC 8707).
	// Audience is sent as audience; "" = Resource (providers differ in
	// which of the two names the target: zitadel reads audience only,
	// Keycloak wants a client id there).
	Resource, Audience string
	Scopes             []string
	HTTP               *http.Client // nil = a client with a 30 s timeout
	// OnSecret receives every token obtained, for masking.
	OnSecret func(values ...string)

	mu       sync.Mutex
	endpoint string // discovered token endpoint; "" until found
	method   string // client_secret_basic or client_secret_post
}

func (e *Exchanger) hc() *http.Client {
	if e.HTTP != nil {
		return e.HTTP
	}
	return &http.Client{Timeout: 30 * time.Second}
}

// tokenEndpoint discovers (once it succeeds) the issuer's token endpoint,
// and checks it offers token exchange when it lists its grant types.
func (e *Exchanger) tokenEndpoint(ctx context.Context) (endpoint, method string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.endpoint != "" {
		return e.endpoint, e.method, nil
	}
	sm, err := serverMetadata(ctx, e.hc(), e.Issuer, false)
	if err != nil {
		return "", "", fmt.Errorf("%w: %w", ErrExchange, err)
	}
	if len(sm.GrantTypesSupported) > 0 && !containsString(sm.GrantTypesSupported, GrantTokenExchange) {
		return "", "", fmt.Errorf("%w: %w: %s does not list %s in grant_types_supported", ErrExchange, ErrNoExchange, e.Issuer, GrantTokenExchange)
	}
	e.method = "client_secret_basic"
	if m := sm.TokenEndpointAuthMethodsSupported; len(m) > 0 && !containsString(m, "client_secret_basic") && containsString(m, "client_secret_post") {
		e.method = "client_secret_post"
	}
	if e.ClientSecret == "" {
		e.method = "none"
	}
	e.endpoint = sm.TokenEndpoint
	return e.endpoint, e.method, nil
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Exchange trades subjectToken for an access token for the upstream and
// returns it with its expiry (zero when the provider named none). Errors
// never quote what the provider answered beyond its error code.
func (e *Exchanger) Exchange(ctx context.Context, subjectToken string) (string, time.Time, error) {
	if subjectToken == "" {
		return "", time.Time{}, fmt.Errorf("%w: no subject token", ErrExchange)
	}
	endpoint, method, err := e.tokenEndpoint(ctx)
	if err != nil {
		return "", time.Time{}, err
	}
	form := url.Values{
		"grant_type":           {GrantTokenExchange},
		"subject_token":        {subjectToken},
		"subject_token_type":   {TokenTypeAccessToken},
		"requested_token_type": {TokenTypeAccessToken},
	}
	if e.Resource != "" {
		form.Set("resource", e.Resource)
	}
	if aud := e.Audience; aud != "" {
		form.Set("audience", aud)
	} else if e.Resource != "" {
		form.Set("audience", e.Resource)
	}
	if len(e.Scopes) > 0 {
		form.Set("scope", strings.Join(e.Scopes, " "))
	}
	if method != "client_secret_basic" {
		form.Set("client_id", e.ClientID)
		if method == "client_secret_post" {
			form.Set("client_secret", e.ClientSecret)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return "", time.Time{}, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if method == "client_secret_basic" {
		req.SetBasicAuth(url.QueryEscape(e.ClientID), url.QueryEscape(e.ClientSecret))
	}
	start := time.Now()
	resp, err := e.hc().Do(req)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("%w: %w", ErrExchange, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMetadataBytes))
	if err != nil {
		return "", time.Time{}, fmt.Errorf("%w: %w", ErrExchange, err)
	}
	var r struct {
		AccessToken     string `json:"access_token"`
		IssuedTokenType string `json:"issued_token_type"`
		TokenType       string `json:"token_type"`
		ExpiresIn       int64  `json:"expires_in"`
		Error           string `json:"error"`
	}
	json.Unmarshal(body, &r)
	if r.AccessToken != "" && e.OnSecret != nil {
		e.OnSecret(r.AccessToken)
	}
	switch {
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		code := r.Error
		if code == "" {
			code = "no error code"
		}
		return "", time.Time{}, fmt.Errorf("%w: %w: HTTP %d (%s)", ErrExchange, ErrExchangeRefused, resp.StatusCode, clip(code, 64))
	case resp.StatusCode != http.StatusOK:
		return "", time.Time{}, fmt.Errorf("%w: the identity provider answered HTTP %d", ErrExchange, resp.StatusCode)
	case r.AccessToken == "":
		return "", time.Time{}, fmt.Errorf("%w: the answer has no access_token", ErrExchange)
	case r.IssuedTokenType != "" && r.IssuedTokenType != TokenTypeAccessToken:
		return "", time.Time{}, fmt.Errorf("%w: the identity provider issued a %q, not an access token", ErrExchange, clip(r.IssuedTokenType, 80))
	case !strings.EqualFold(r.TokenType, "bearer"):
		return "", time.Time{}, fmt.Errorf("%w: the issued token's token_type is %q, not Bearer", ErrExchange, clip(r.TokenType, 40))
	}
	var exp time.Time
	if r.ExpiresIn > 0 {
		exp = start.Add(time.Duration(r.ExpiresIn) * time.Second)
	}
	return r.AccessToken, exp, nil
}
