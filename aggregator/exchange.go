package aggregator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/upstream"
	"github.com/viewmux/viewmux/upstream/oauth"
)

// This file holds credentials = "exchange" (issue 19 §3): each caller
// with an OAuth access token of [auth.oauth] gets a connection of its own
// to the upstream, whose token is the caller's token exchanged at the
// identity provider (RFC 8693) for one whose audience is the upstream. No
// user step, nothing stored: the exchanged token lives in memory until a
// minute before it expires. The caller's own token goes only to the
// identity provider's token endpoint, never to the upstream.

type subjectTokenKey struct{}

// WithSubjectToken returns ctx carrying the bearer token of the request
// it belongs to, for credentials = "exchange" upstreams. The front door
// sets it on every request with a bearer token; the token is never sent
// to an upstream, only to the identity provider.
func WithSubjectToken(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, subjectTokenKey{}, token)
}

func subjectToken(ctx context.Context) string {
	t, _ := ctx.Value(subjectTokenKey{}).(string)
	return t
}

// exchangeSource gives one caller's connection its exchanged token: the
// caller's token of the request at hand when the connection's request
// carries it, else the latest the caller called with (the handshake and
// probes run outside any call).
type exchangeSource struct {
	ex *oauth.Exchanger

	mu     sync.Mutex
	latest string
}

func (s *exchangeSource) set(tok string) {
	s.mu.Lock()
	s.latest = tok
	s.mu.Unlock()
}

func (s *exchangeSource) token(ctx context.Context) (string, time.Time, error) {
	tok := subjectToken(ctx)
	if tok == "" {
		s.mu.Lock()
		tok = s.latest
		s.mu.Unlock()
	}
	return s.ex.Exchange(ctx, tok)
}

// exchangerFor returns the Exchanger of the exchange upstream shared,
// made once per config of it.
func (a *Aggregator) exchangerFor(shared *upstream.Upstream) *oauth.Exchanger {
	s := a.users
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exchangers == nil {
		s.exchangers = make(map[*upstream.Upstream]*oauth.Exchanger)
	}
	if ex := s.exchangers[shared]; ex != nil {
		return ex
	}
	for u := range s.exchangers { // of upstreams a reload replaced
		if a.set.Load().byName[u.Name()] != u {
			delete(s.exchangers, u)
		}
	}
	cfg := shared.Config()
	ex := &oauth.Exchanger{ClientID: cfg.OAuth.ClientID, ClientSecret: cfg.OAuth.ClientSecret,
		Resource: cfg.URL, Audience: cfg.OAuth.Audience, Scopes: cfg.OAuth.Scopes, OnSecret: a.secrets.Add}
	if o := a.set.Load().cfg.Auth.OAuth; o != nil {
		ex.Issuer = o.Issuer
	}
	s.exchangers[shared] = ex
	return ex
}

// exchangeConn returns the connection of the caller who (with the OAuth
// token the request's ctx carries) to the exchange upstream shared.
func (a *Aggregator) exchangeConn(ctx context.Context, who string, shared *upstream.Upstream) (*upstream.Upstream, error) {
	name := shared.Name()
	tok := subjectToken(ctx)
	if !strings.HasPrefix(who, "oauth:") || tok == "" {
		return nil, &UpstreamError{Upstream: name, NoOAuth: true, Err: fmt.Errorf("upstream %q: credentials = \"exchange\": the call carries no OAuth access token to exchange", name)}
	}
	if shared.Config().Credentials != configs.CredentialsExchange {
		return nil, fmt.Errorf("upstream %q is not an exchange upstream", name)
	}
	k := userKey{name, who}
	s := a.users
	s.mu.Lock()
	uc := s.conns[k]
	s.mu.Unlock()
	if uc == nil || uc.shared != shared || uc.src == nil {
		src := &exchangeSource{ex: a.exchangerFor(shared)}
		src.set(tok)
		var err error
		if uc, err = a.openUserConn(k, oauth.UserKey(a.loginIdentity(who)), src, shared); err != nil {
			return nil, err
		}
	}
	uc.src.set(tok)
	s.mu.Lock()
	uc.last = time.Now()
	s.mu.Unlock()
	return a.awaitExchange(ctx, uc)
}

// awaitExchange waits (within ctx) for uc's first connection attempt. A
// connection that failed for want of a token (the exchange was refused)
// is closed: the next call tries again.
func (a *Aggregator) awaitExchange(ctx context.Context, uc *userConn) (*upstream.Upstream, error) {
	select {
	case <-uc.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if h := uc.u.Health(); h.State != upstream.StateUp && h.LastError != nil {
		a.dropUserConn(uc)
		return nil, &UpstreamError{Upstream: uc.u.Name(), Err: fmt.Errorf("upstream %q: the connection with this caller's exchanged token failed: %w", uc.u.Name(), h.LastError)}
	}
	return uc.u, nil
}

// Exchanges reports whether any upstream has credentials = "exchange":
// only then does the front door hand requests' bearer tokens down
// (WithSubjectToken).
func (a *Aggregator) Exchanges() bool {
	for _, uc := range a.set.Load().cfg.Upstreams {
		if uc.Credentials == configs.CredentialsExchange {
			return true
		}
	}
	return false
}
