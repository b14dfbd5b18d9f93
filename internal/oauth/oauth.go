// Package oauth validates OAuth 2.1 access tokens for viewmux as a resource
// server (MCP authorization): JWTs signed by one issuer, checked locally
// against the issuer's JSON Web Key Set. It owns the discovery of the
// issuer's metadata (RFC 8414, else OpenID Connect Discovery) and the key
// cache, which is read again, rate-limited, when a token names a key it
// does not hold.
//
// Tokens are parsed and checked with github.com/lestrrat-go/jwx/v3. Only
// asymmetric algorithms are accepted, and each only with a key of its
// own type, so that neither "none" nor an HMAC keyed with a public key
// can pass.
package oauth

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"
)

// Sentinel errors of Validate. Each error Validate returns wraps exactly
// one of them.
var (
	// ErrInvalidToken: the token is malformed, its signature or algorithm
	// is wrong, or a claim other than exp does not hold.
	ErrInvalidToken = errors.New("invalid access token")
	// ErrExpired: the token is genuine and for this resource, but expired.
	ErrExpired = errors.New("access token expired")
	// ErrUnavailable: the issuer's metadata or keys could not be read, so
	// the token could not be checked.
	ErrUnavailable = errors.New("identity provider unavailable")
)

// Defaults of Options.
const (
	DefaultSkew       = 60 * time.Second
	DefaultMinRefetch = 10 * time.Second
	// DefaultMaxKeyAge is how long a read key set is used before it is
	// read again, so that a key the issuer withdrew stops being accepted.
	DefaultMaxKeyAge = time.Hour
	// maxCached bounds the tokens whose validation is remembered.
	maxCached = 4096
	// maxDocumentBytes bounds a metadata document or key set.
	maxDocumentBytes = 1 << 20
)

// allowedAlgorithms are the JWS algorithms a token may use, each with the
// key type it must be verified with: asymmetric ones only.
var allowedAlgorithms = map[string]string{
	"RS256": "RSA", "RS384": "RSA", "RS512": "RSA",
	"PS256": "RSA", "PS384": "RSA", "PS512": "RSA",
	"ES256": "EC", "ES384": "EC", "ES512": "EC",
	"EdDSA": "OKP",
}

// Options configure a Validator.
type Options struct {
	// Issuer is the issuer identifier tokens' iss must equal.
	Issuer string
	// Audience is this resource's identifier; tokens' aud must hold it.
	Audience string
	// JWKSURL is where keys are read; "" discovers it from the issuer's
	// metadata.
	JWKSURL string
	// Skew is the clock skew allowed on exp, nbf and iat (0: none;
	// configs' auth.oauth.clock_skew defaults to DefaultSkew).
	Skew time.Duration
	// MinRefetch is the least time between two reads of the issuer's
	// metadata or keys; 0 means DefaultMinRefetch.
	MinRefetch time.Duration
	// MaxKeyAge is how long a key set is used before it is read again;
	// 0 means DefaultMaxKeyAge.
	MaxKeyAge time.Duration
	// Client reads the metadata and keys; nil means a client with a 10 s
	// timeout.
	Client *http.Client
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log receives a line for each read of the keys; nil discards.
	Log *slog.Logger
}

// Validator checks access tokens. It is safe for concurrent use. New has
// no side effects: the issuer is first contacted by the first Validate.
type Validator struct {
	o Options

	fetchMu sync.Mutex // held while reading the metadata or keys, so one read runs at a time

	mu      sync.Mutex
	keys    jwk.Set   // nil until read
	read    time.Time // when keys were read
	jwksURL string    // Options.JWKSURL, or discovered
	last    time.Time // start of the last read, successful or not
	reads   int       // reads of the key set so far
	// valid remembers the claims of tokens that passed, by the token's
	// sha256, so that a session's next request with the same token pays
	// a hash instead of a signature check. Emptied whenever the keys are
	// read; at most maxCached entries.
	valid map[[sha256.Size]byte]*Claims
}

// New returns a Validator for o. Issuer and Audience must be set.
func New(o Options) *Validator {
	if o.MinRefetch == 0 {
		o.MinRefetch = DefaultMinRefetch
	}
	if o.MaxKeyAge == 0 {
		o.MaxKeyAge = DefaultMaxKeyAge
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Validator{o: o, jwksURL: o.JWKSURL, valid: make(map[[sha256.Size]byte]*Claims)}
}

// Issuer returns the issuer the Validator accepts tokens of.
func (v *Validator) Issuer() string { return v.o.Issuer }

// Audience returns the resource identifier tokens must be for.
func (v *Validator) Audience() string { return v.o.Audience }

// KeyReads returns how many times the key set has been read.
func (v *Validator) KeyReads() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.reads
}

// Claims are a validated token's claims. They are immutable.
type Claims struct {
	Subject string
	Expiry  time.Time
	all     map[string]any
}

// Has reports whether claim holds value: equal to it as a string, as one
// element of a list, or, for "scope" and "scp", as one of its
// space-separated scopes.
func (c *Claims) Has(claim, value string) bool {
	switch x := c.all[claim].(type) {
	case string:
		if claim == "scope" || claim == "scp" {
			return slices.Contains(strings.Fields(x), value)
		}
		return x == value
	case []any:
		for _, e := range x {
			if s, ok := e.(string); ok && s == value {
				return true
			}
		}
	case bool:
		return fmt.Sprint(x) == value
	case float64:
		return fmt.Sprint(x) == value
	}
	return false
}

// Validate checks raw, a compact JWS, and returns its claims. When the
// token is genuine and for this resource but expired, it returns the
// claims with an error wrapping ErrExpired, so that the caller can tell
// whose token it was.
func (v *Validator) Validate(ctx context.Context, raw string) (*Claims, error) {
	sum := sha256.Sum256([]byte(raw))
	v.mu.Lock()
	c, stale := v.valid[sum], v.o.Now().Sub(v.read) >= v.o.MaxKeyAge
	v.mu.Unlock()
	if c != nil && !stale {
		// It passed every check before; only time can have changed.
		if v.o.Now().After(c.Expiry.Add(v.o.Skew)) {
			return c, fmt.Errorf("%w at %s", ErrExpired, c.Expiry.UTC().Format(time.RFC3339))
		}
		return c, nil
	}
	c, err := v.validate(ctx, raw)
	if err == nil {
		v.remember(sum, c)
	}
	return c, err
}

// remember records that the token with sum passed, with its claims.
func (v *Validator) remember(sum [sha256.Size]byte, c *Claims) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.valid) >= maxCached {
		now := v.o.Now()
		for k, old := range v.valid {
			if now.After(old.Expiry.Add(v.o.Skew)) {
				delete(v.valid, k)
			}
		}
		for k := range v.valid {
			if len(v.valid) < maxCached {
				break
			}
			delete(v.valid, k)
		}
	}
	v.valid[sum] = c
}

// validate is Validate without the memory of tokens that passed.
func (v *Validator) validate(ctx context.Context, raw string) (*Claims, error) {
	tok, err := jwt.Parse([]byte(raw),
		jwt.WithKeyProvider(keyProvider{v}),
		jwt.WithContext(ctx),
		jwt.WithValidate(false))
	if err != nil {
		if errors.Is(err, ErrUnavailable) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	c := &Claims{all: make(map[string]any)}
	for _, k := range tok.Keys() {
		var x any
		if tok.Get(k, &x) == nil {
			c.all[k] = x
		}
	}
	// jwx keeps the registered claims typed; the grants match their JSON
	// form (a lone aud is a string, times are numbers).
	c.Subject, _ = tok.Subject()
	c.Expiry, _ = tok.Expiration()
	if c.Subject == "" {
		return nil, fmt.Errorf("%w: it has no sub claim", ErrInvalidToken)
	}
	if _, ok := tok.Expiration(); !ok {
		return nil, fmt.Errorf("%w: it has no exp claim", ErrInvalidToken)
	}
	if aud, _ := tok.Audience(); len(aud) > 0 {
		c.all["aud"] = toAny(aud)
	}
	err = jwt.Validate(tok,
		jwt.WithIssuer(v.o.Issuer),
		jwt.WithAudience(v.o.Audience),
		jwt.WithAcceptableSkew(v.o.Skew),
		jwt.WithClock(jwt.ClockFunc(v.o.Now)))
	switch {
	case err == nil:
		return c, nil
	case errors.Is(err, jwt.TokenExpiredError()):
		return c, fmt.Errorf("%w at %s", ErrExpired, c.Expiry.UTC().Format(time.RFC3339))
	case errors.Is(err, jwt.InvalidAudienceError()):
		return nil, fmt.Errorf("%w: its aud does not hold this resource, %s", ErrInvalidToken, v.o.Audience)
	case errors.Is(err, jwt.InvalidIssuerError()):
		return nil, fmt.Errorf("%w: its iss is not %s", ErrInvalidToken, v.o.Issuer)
	default:
		return nil, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// keyProvider gives jwx the one key a signature may be checked with.
type keyProvider struct{ v *Validator }

func (kp keyProvider) FetchKeys(ctx context.Context, sink jws.KeySink, sig *jws.Signature, _ *jws.Message) error {
	h := sig.ProtectedHeaders()
	alg, ok := h.Algorithm()
	if !ok {
		return errors.New("the token names no algorithm")
	}
	kty, ok := allowedAlgorithms[alg.String()]
	if !ok {
		return fmt.Errorf("algorithm %q is not allowed (asymmetric only)", alg.String())
	}
	kid, _ := h.KeyID()
	key, err := kp.v.key(ctx, kid, kty)
	if err != nil {
		return err
	}
	if ka, ok := key.Algorithm(); ok && ka.String() != alg.String() {
		return fmt.Errorf("key %q is for %s, not %s", kid, ka.String(), alg.String())
	}
	sink.Key(alg, key)
	return nil
}

// key returns the signing key kid of type kty, reading the key set again
// when it is not held and the last read is at least MinRefetch ago. A
// token with no kid is checked with the set's only key of its type.
func (v *Validator) key(ctx context.Context, kid, kty string) (jwk.Key, error) {
	v.mu.Lock()
	stale := v.keys != nil && v.o.Now().Sub(v.read) >= v.o.MaxKeyAge && v.o.Now().Sub(v.last) >= v.o.MinRefetch
	v.mu.Unlock()
	if stale {
		// Read again so that a withdrawn key stops passing; on failure
		// the keys held are used until the next try.
		v.fetchMu.Lock()
		if err := v.refresh(ctx); err != nil {
			v.o.Log.Warn("oauth: reading the issuer's keys again failed; using the ones held", "issuer", v.o.Issuer, "error", err)
		}
		v.fetchMu.Unlock()
	}
	if k, err := v.lookup(kid, kty); k != nil || err != nil {
		return k, err
	}
	v.fetchMu.Lock()
	defer v.fetchMu.Unlock()
	// Another request may have read the set while this one waited.
	if k, err := v.lookup(kid, kty); k != nil || err != nil {
		return k, err
	}
	v.mu.Lock()
	held, since := v.keys != nil, v.o.Now().Sub(v.last)
	v.mu.Unlock()
	if since < v.o.MinRefetch {
		if !held {
			return nil, fmt.Errorf("%w: the keys of %s could not be read; trying again at most every %s", ErrUnavailable, v.o.Issuer, v.o.MinRefetch)
		}
		return nil, fmt.Errorf("no key %q among the issuer's keys (read again at most every %s)", kid, v.o.MinRefetch)
	}
	if err := v.refresh(ctx); err != nil {
		return nil, err
	}
	if k, err := v.lookup(kid, kty); k != nil || err != nil {
		return k, err
	}
	return nil, fmt.Errorf("no key %q among the issuer's keys", kid)
}

// lookup finds kid in the held set: the key, nil when it is not there,
// or an error when it is there but cannot check this token.
func (v *Validator) lookup(kid, kty string) (jwk.Key, error) {
	v.mu.Lock()
	set := v.keys
	v.mu.Unlock()
	if set == nil {
		return nil, nil
	}
	var found jwk.Key
	if kid != "" {
		k, ok := set.LookupKeyID(kid)
		if !ok {
			return nil, nil
		}
		found = k
	} else {
		n := 0
		for i := range set.Len() {
			k, _ := set.Key(i)
			if k.KeyType().String() == kty && usableForSignatures(k) {
				found, n = k, n+1
			}
		}
		if n != 1 {
			return nil, fmt.Errorf("the token names no kid and the issuer has %d %s signing keys", n, kty)
		}
	}
	if found.KeyType().String() != kty {
		return nil, fmt.Errorf("key %q is of type %s; the token's algorithm needs %s", kid, found.KeyType().String(), kty)
	}
	if !usableForSignatures(found) {
		return nil, fmt.Errorf("key %q is not a signing key", kid)
	}
	return found, nil
}

func usableForSignatures(k jwk.Key) bool {
	use, ok := k.KeyUsage()
	return !ok || use == "sig"
}

// refresh reads the key set, discovering its URL first when needed. The
// caller holds fetchMu.
func (v *Validator) refresh(ctx context.Context) error {
	v.mu.Lock()
	v.last = v.o.Now()
	u := v.jwksURL
	v.mu.Unlock()
	if u == "" {
		var err error
		if u, err = v.discover(ctx); err != nil {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		v.mu.Lock()
		v.jwksURL = u
		v.mu.Unlock()
	}
	body, err := v.get(ctx, u)
	if err != nil {
		return fmt.Errorf("%w: reading the keys: %v", ErrUnavailable, err)
	}
	set, err := jwk.Parse(body)
	if err != nil {
		return fmt.Errorf("%w: the keys at %s: %v", ErrUnavailable, u, err)
	}
	v.mu.Lock()
	v.keys, v.read = set, v.o.Now()
	v.reads++
	clear(v.valid) // a withdrawn key's tokens must be checked again
	v.mu.Unlock()
	v.o.Log.Info("oauth: read the issuer's keys", "issuer", v.o.Issuer, "url", u, "keys", set.Len())
	return nil
}

// discover reads the issuer's metadata, RFC 8414's well-known document
// first and OpenID Connect's second, and returns its jwks_uri. The
// document's issuer must be the configured one.
func (v *Validator) discover(ctx context.Context) (string, error) {
	var errs []error
	for _, u := range MetadataURLs(v.o.Issuer) {
		body, err := v.get(ctx, u)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var md struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		}
		if err := json.Unmarshal(body, &md); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", u, err))
			continue
		}
		if md.Issuer != v.o.Issuer {
			return "", fmt.Errorf("%s names issuer %q, not %q", u, md.Issuer, v.o.Issuer)
		}
		if md.JWKSURI == "" {
			return "", fmt.Errorf("%s has no jwks_uri; set auth.oauth.jwks_url", u)
		}
		if !secureURL(md.JWKSURI) {
			return "", fmt.Errorf("%s names jwks_uri %q, which is neither https nor on a loopback host", u, md.JWKSURI)
		}
		return md.JWKSURI, nil
	}
	return "", fmt.Errorf("discovering %s: %w", v.o.Issuer, errors.Join(errs...))
}

// secureURL reports whether keys may be read from u: https, or http on a
// loopback host (an identity provider on this machine), as configs
// requires of the issuer.
func secureURL(u string) bool {
	p, err := url.Parse(u)
	if err != nil {
		return false
	}
	switch p.Scheme {
	case "https":
		return p.Host != ""
	case "http":
		h := p.Hostname()
		if h == "localhost" {
			return true
		}
		ip := net.ParseIP(h)
		return ip != nil && ip.IsLoopback()
	}
	return false
}

// MetadataURLs returns where the metadata of issuer is looked for, in
// order: RFC 8414 §3's (the well-known segment before the issuer's path)
// and OpenID Connect Discovery's (after it).
func MetadataURLs(issuer string) []string {
	u, err := url.Parse(issuer)
	if err != nil {
		return nil
	}
	path := strings.TrimSuffix(u.Path, "/")
	rfc := *u
	rfc.Path = "/.well-known/oauth-authorization-server" + path
	oidc := *u
	oidc.Path = path + "/.well-known/openid-configuration"
	return []string{rfc.String(), oidc.String()}
}

func (v *Validator) get(ctx context.Context, u string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := v.o.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", u, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", u, err)
	}
	if len(body) > maxDocumentBytes {
		return nil, fmt.Errorf("%s: over %d bytes", u, maxDocumentBytes)
	}
	return body, nil
}
