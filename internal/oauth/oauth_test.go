package oauth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
	"github.com/lestrrat-go/jwx/v3/jwt"

	"github.com/viewmux/viewmux/internal/oauth"
	"github.com/viewmux/viewmux/internal/oauth/hydratest"
)

const resource = "http://127.0.0.1:8931"

// TestHydra checks tokens minted by a real OpenID provider, Ory Hydra.
func TestHydra(t *testing.T) {
	h := hydratest.Start(t, 0)
	id, secret := h.Client(t, "mcp:tools mcp:admin", resource, "http://elsewhere.example")
	v := oauth.New(oauth.Options{Issuer: h.Issuer, Audience: resource, Skew: time.Second, MinRefetch: time.Nanosecond})
	ctx := context.Background()

	t.Run("valid", func(t *testing.T) {
		c, err := v.Validate(ctx, h.Token(t, id, secret, "mcp:tools", resource))
		if err != nil {
			t.Fatal(err)
		}
		if c.Subject != id {
			t.Errorf("subject %q, want the client id %q", c.Subject, id)
		}
		if !c.Has("scope", "mcp:tools") || c.Has("scope", "mcp:admin") || !c.Has("scp", "mcp:tools") {
			t.Errorf("scope claims do not match as they should")
		}
		if !c.Has("client_id", id) || c.Has("client_id", "other") {
			t.Errorf("client_id claim does not match as it should")
		}
		if time.Until(c.Expiry) < 30*time.Minute {
			t.Errorf("expiry %s, want about an hour from now", c.Expiry)
		}
	})
	t.Run("wrong audience", func(t *testing.T) {
		_, err := v.Validate(ctx, h.Token(t, id, secret, "mcp:tools", "http://elsewhere.example"))
		if !errors.Is(err, oauth.ErrInvalidToken) || !strings.Contains(err.Error(), "aud") {
			t.Fatalf("err = %v, want an invalid aud", err)
		}
	})
	t.Run("no audience", func(t *testing.T) {
		_, err := v.Validate(ctx, h.Token(t, id, secret, "mcp:tools", ""))
		if !errors.Is(err, oauth.ErrInvalidToken) {
			t.Fatalf("err = %v, want invalid", err)
		}
	})
	t.Run("wrong issuer", func(t *testing.T) {
		// The same keys and audience, configured for another issuer.
		other := oauth.New(oauth.Options{Issuer: h.Issuer + "/other", Audience: resource, JWKSURL: h.Issuer + "/.well-known/jwks.json", Skew: time.Second})
		_, err := other.Validate(ctx, h.Token(t, id, secret, "mcp:tools", resource))
		if !errors.Is(err, oauth.ErrInvalidToken) || !strings.Contains(err.Error(), "iss") {
			t.Fatalf("err = %v, want an invalid iss", err)
		}
	})
	t.Run("foreign issuer", func(t *testing.T) {
		// A second, real provider's token: its keys are not the issuer's.
		h2 := hydratest.Start(t, 0)
		id2, secret2 := h2.Client(t, "mcp:tools", resource)
		_, err := v.Validate(ctx, h2.Token(t, id2, secret2, "mcp:tools", resource))
		if !errors.Is(err, oauth.ErrInvalidToken) {
			t.Fatalf("err = %v, want invalid", err)
		}
	})
	t.Run("expired", func(t *testing.T) {
		late := oauth.New(oauth.Options{Issuer: h.Issuer, Audience: resource, Skew: time.Second,
			Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
		c, err := late.Validate(ctx, h.Token(t, id, secret, "mcp:tools", resource))
		if !errors.Is(err, oauth.ErrExpired) {
			t.Fatalf("err = %v, want expired", err)
		}
		if c == nil || c.Subject != id {
			t.Errorf("an expired token's claims %+v do not name its subject", c)
		}
	})
	t.Run("not yet valid", func(t *testing.T) {
		early := oauth.New(oauth.Options{Issuer: h.Issuer, Audience: resource, Skew: time.Second,
			Now: func() time.Time { return time.Now().Add(-time.Hour) }})
		_, err := early.Validate(ctx, h.Token(t, id, secret, "mcp:tools", resource))
		if !errors.Is(err, oauth.ErrInvalidToken) {
			t.Fatalf("err = %v, want invalid (iat/nbf in the future)", err)
		}
	})
	t.Run("alg none", func(t *testing.T) {
		tok := h.Token(t, id, secret, "mcp:tools", resource)
		parts := strings.Split(tok, ".")
		none := b64(`{"alg":"none","typ":"JWT"}`) + "." + parts[1] + "."
		if _, err := v.Validate(ctx, none); !errors.Is(err, oauth.ErrInvalidToken) {
			t.Fatalf("alg none: err = %v, want invalid", err)
		}
	})
	t.Run("HS256 keyed with the public key", func(t *testing.T) {
		tok := h.Token(t, id, secret, "mcp:tools", resource)
		hdr, payload := decodeHeader(t, tok), strings.Split(tok, ".")[1]
		pub := publicKey(t, h.Issuer+"/.well-known/jwks.json", hdr["kid"].(string))
		for _, form := range [][]byte{pub.pem, pub.der, pub.jwk} {
			head := b64(fmt.Sprintf(`{"alg":"HS256","typ":"JWT","kid":%q}`, hdr["kid"]))
			mac := hmac.New(sha256.New, form)
			mac.Write([]byte(head + "." + payload))
			forged := head + "." + payload + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
			if _, err := v.Validate(ctx, forged); !errors.Is(err, oauth.ErrInvalidToken) || !strings.Contains(err.Error(), "not allowed") {
				t.Fatalf("HS256 forgery: err = %v, want the algorithm refused", err)
			}
		}
	})
	t.Run("tampered payload", func(t *testing.T) {
		tok := h.Token(t, id, secret, "mcp:tools", resource)
		parts := strings.Split(tok, ".")
		var claims map[string]any
		raw, _ := base64.RawURLEncoding.DecodeString(parts[1])
		json.Unmarshal(raw, &claims)
		claims["sub"] = "admin"
		data, _ := json.Marshal(claims)
		forged := parts[0] + "." + base64.RawURLEncoding.EncodeToString(data) + "." + parts[2]
		if _, err := v.Validate(ctx, forged); !errors.Is(err, oauth.ErrInvalidToken) {
			t.Fatalf("err = %v, want invalid", err)
		}
	})
	t.Run("rotation", func(t *testing.T) {
		before := h.Token(t, id, secret, "mcp:tools", resource)
		if _, err := v.Validate(ctx, before); err != nil {
			t.Fatal(err)
		}
		reads := v.KeyReads()
		h.RotateKeys(t, "rotated-1")
		after := h.Token(t, id, secret, "mcp:tools", resource)
		if kid := decodeHeader(t, after)["kid"]; kid != "rotated-1" {
			t.Fatalf("hydra signed with %v after the rotation, want rotated-1", kid)
		}
		if _, err := v.Validate(ctx, after); err != nil {
			t.Fatalf("a token of the new key: %v", err)
		}
		if got := v.KeyReads(); got != reads+1 {
			t.Errorf("key reads %d → %d, want one more for the new kid", reads, got)
		}
		// The old key is still published, and still held.
		if _, err := v.Validate(ctx, before); err != nil {
			t.Errorf("a token of the old key after the rotation: %v", err)
		}
	})
}

// TestUnknownKidFlood sends tokens with kids the issuer never had: the key
// set is read again at most once per MinRefetch, however many come.
func TestUnknownKidFlood(t *testing.T) {
	idp := newTestIssuer(t)
	v := oauth.New(oauth.Options{Issuer: idp.url, Audience: resource, Skew: time.Second, MinRefetch: time.Hour})
	ctx := context.Background()
	if _, err := v.Validate(ctx, idp.sign(t, "k1", nil)); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := v.Validate(ctx, idp.sign(t, fmt.Sprintf("attacker-%d", i), nil)); !errors.Is(err, oauth.ErrInvalidToken) {
			t.Fatalf("unknown kid: err = %v, want invalid", err)
		}
	}
	if got := idp.jwksHits.Load(); got != 1 {
		t.Errorf("the key set was read %d times, want 1 (rate-limited)", got)
	}
	if got := idp.metadataHits.Load(); got != 1 {
		t.Errorf("the metadata was read %d times, want 1", got)
	}
}

// TestAlgorithmKeyMismatch: a token whose header names an algorithm the
// key is not for is refused, as is a key of the wrong type.
func TestAlgorithmKeyMismatch(t *testing.T) {
	idp := newTestIssuer(t)
	v := oauth.New(oauth.Options{Issuer: idp.url, Audience: resource, Skew: time.Second, MinRefetch: time.Hour})
	ctx := context.Background()
	// k1 is an RSA key published with alg RS256: an ES256 header naming
	// it must fail before any signature check.
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tok, err := jwt.NewBuilder().Issuer(idp.url).Audience([]string{resource}).Subject("s").
		IssuedAt(time.Now()).Expiration(time.Now().Add(time.Minute)).Build()
	if err != nil {
		t.Fatal(err)
	}
	hdr := jws.NewHeaders()
	hdr.Set(jws.KeyIDKey, "k1")
	signed, err := jwt.Sign(tok, jwt.WithKey(jwa.ES256(), ec, jws.WithProtectedHeaders(hdr)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Validate(ctx, string(signed)); !errors.Is(err, oauth.ErrInvalidToken) {
		t.Fatalf("ES256 naming an RSA key: err = %v, want invalid", err)
	}
	// And a genuine token passes, so the refusal above is the mismatch.
	if _, err := v.Validate(ctx, idp.sign(t, "k1", nil)); err != nil {
		t.Fatal(err)
	}
}

// TestMetadataIssuerMismatch: discovery refuses metadata naming another
// issuer (RFC 8414 §3.3).
func TestMetadataIssuerMismatch(t *testing.T) {
	idp := newTestIssuer(t)
	idp.claimIssuer = "https://evil.example"
	v := oauth.New(oauth.Options{Issuer: idp.url, Audience: resource, Skew: time.Second})
	_, err := v.Validate(context.Background(), idp.sign(t, "k1", nil))
	if !errors.Is(err, oauth.ErrUnavailable) || !strings.Contains(err.Error(), "evil.example") {
		t.Fatalf("err = %v, want discovery refused", err)
	}
}

// TestRemembered: a token that passed is not checked again while the keys
// are fresh, but its expiry still counts, and once the keys are read
// again a token of a withdrawn key is refused.
func TestRemembered(t *testing.T) {
	idp := newTestIssuer(t)
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	v := oauth.New(oauth.Options{Issuer: idp.url, Audience: resource, Skew: time.Second, MinRefetch: time.Second, MaxKeyAge: 30 * time.Second, Now: now})
	ctx := context.Background()
	tok := idp.sign(t, "k1", nil) // expires in a minute
	for range 3 {
		if _, err := v.Validate(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	if got := idp.jwksHits.Load(); got != 1 {
		t.Fatalf("keys read %d times", got)
	}
	idp.withdrawn.Store(true)
	if _, err := v.Validate(ctx, tok); err != nil {
		t.Fatalf("before the keys are stale: %v", err)
	}
	offset.Store(int64(40 * time.Second)) // the keys are stale; the token still valid
	if _, err := v.Validate(ctx, tok); !errors.Is(err, oauth.ErrInvalidToken) {
		t.Fatalf("a token of a withdrawn key after the keys were read again: err = %v, want invalid", err)
	}
	if got := idp.jwksHits.Load(); got != 2 {
		t.Errorf("keys read %d times, want 2", got)
	}

	// A fresh validator: a remembered token's exp still counts.
	idp.withdrawn.Store(false)
	offset.Store(0)
	v = oauth.New(oauth.Options{Issuer: idp.url, Audience: resource, Skew: time.Second, MaxKeyAge: time.Hour, Now: now})
	if _, err := v.Validate(ctx, tok); err != nil {
		t.Fatal(err)
	}
	offset.Store(int64(2 * time.Minute))
	if c, err := v.Validate(ctx, tok); !errors.Is(err, oauth.ErrExpired) || c == nil {
		t.Fatalf("a remembered token past its exp: %v, want expired", err)
	}
}

// TestInsecureJWKSURI: keys named at a plain-http URL off this machine are
// not read.
func TestInsecureJWKSURI(t *testing.T) {
	idp := newTestIssuer(t)
	idp.jwksURI = "http://keys.example.com/jwks"
	v := oauth.New(oauth.Options{Issuer: idp.url, Audience: resource, Skew: time.Second})
	_, err := v.Validate(context.Background(), idp.sign(t, "k1", nil))
	if !errors.Is(err, oauth.ErrUnavailable) || !strings.Contains(err.Error(), "neither https nor on a loopback host") {
		t.Fatalf("err = %v, want the jwks_uri refused", err)
	}
}

func TestMetadataURLs(t *testing.T) {
	got := oauth.MetadataURLs("https://idp.example.com/realms/eng")
	want := []string{"https://idp.example.com/.well-known/oauth-authorization-server/realms/eng", "https://idp.example.com/realms/eng/.well-known/openid-configuration"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got %v, want %v", got, want)
	}
}

// testIssuer is a loopback server publishing RFC 8414 metadata and a key
// set of one RSA key, k1, for the tests that count reads or need a token
// hydra would not sign.
type testIssuer struct {
	url                    string
	claimIssuer            string
	key                    *rsa.PrivateKey
	jwksHits, metadataHits atomic.Int32
	withdrawn              atomic.Bool // publish an empty key set
	jwksURI                string      // what the metadata names; "" = its own /jwks
}

func newTestIssuer(t testing.TB) *testIssuer {
	idp := &testIssuer{}
	idp.key, _ = rsa.GenerateKey(rand.Reader, 2048)
	pub, err := jwk.Import(idp.key.Public())
	if err != nil {
		t.Fatal(err)
	}
	pub.Set(jwk.KeyIDKey, "k1")
	pub.Set(jwk.AlgorithmKey, jwa.RS256())
	pub.Set(jwk.KeyUsageKey, "sig")
	set := jwk.NewSet()
	set.AddKey(pub)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/oauth-authorization-server":
			idp.metadataHits.Add(1)
			iss := idp.claimIssuer
			if iss == "" {
				iss = idp.url
			}
			jwks := idp.jwksURI
			if jwks == "" {
				jwks = idp.url + "/jwks"
			}
			json.NewEncoder(w).Encode(map[string]string{"issuer": iss, "jwks_uri": jwks})
		case "/jwks":
			idp.jwksHits.Add(1)
			if idp.withdrawn.Load() {
				json.NewEncoder(w).Encode(jwk.NewSet())
				return
			}
			json.NewEncoder(w).Encode(set)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	idp.url = srv.URL
	return idp
}

func (idp *testIssuer) sign(t testing.TB, kid string, edit func(jwt.Token)) string {
	t.Helper()
	tok, err := jwt.NewBuilder().Issuer(idp.url).Audience([]string{resource}).Subject("user-1").
		IssuedAt(time.Now()).Expiration(time.Now().Add(time.Minute)).Build()
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(tok)
	}
	hdr := jws.NewHeaders()
	hdr.Set(jws.KeyIDKey, kid)
	signed, err := jwt.Sign(tok, jwt.WithKey(jwa.RS256(), idp.key, jws.WithProtectedHeaders(hdr)))
	if err != nil {
		t.Fatal(err)
	}
	return string(signed)
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func decodeHeader(t *testing.T, tok string) map[string]any {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(strings.Split(tok, ".")[0])
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]any
	if err := json.Unmarshal(raw, &h); err != nil {
		t.Fatal(err)
	}
	return h
}

type publicForms struct{ pem, der, jwk []byte }

// publicKey reads key kid of a JWKS in the forms an attacker would try as
// an HMAC secret.
func publicKey(t *testing.T, url, kid string) publicForms {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	set, err := jwk.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	k, ok := set.LookupKeyID(kid)
	if !ok {
		t.Fatalf("no key %q in %s", kid, data)
	}
	var raw any
	if err := jwk.Export(k, &raw); err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	j, _ := json.Marshal(k)
	return publicForms{pem: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), der: der, jwk: j}
}

// BenchmarkValidate is the cost a request pays for its token, keys held.
func BenchmarkValidate(b *testing.B) {
	idp := newTestIssuer(b)
	v := oauth.New(oauth.Options{Issuer: idp.url, Audience: resource, Skew: time.Second})
	tok := idp.sign(b, "k1", nil)
	if _, err := v.Validate(context.Background(), tok); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Validate(context.Background(), tok); err != nil {
			b.Fatal(err)
		}
	}
}
