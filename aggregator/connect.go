package aggregator

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/url"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/onetime"
	"github.com/viewmux/viewmux/upstream"
	"github.com/viewmux/viewmux/upstream/oauth"
)

// This file is the browser step of per-user upstream credentials: a
// caller follows its connect link (a ticket, ConnectLink), confirms, and
// is sent to the upstream's authorization server; the callback finishes
// the login and stores the tokens under the caller's identity. The front
// door (sessions/connect.go) serves the pages; this holds the state.
// Tickets and pending logins are single-use, live ten minutes, and are
// bounded in number (per identity, and in all), so that repeating the
// request does not grow memory.

// CallbackPath is the redirect URI's path on the public URL.
const CallbackPath = "/oauth/callback"

// ErrBadConnect is returned for a ticket or callback that is unknown,
// used, expired, or not this browser's.
var ErrBadConnect = errors.New("unknown, used or expired link: start again from the link in the tool error")

// connectTicket is what a connect link's ticket stands for; its owner in
// the store is the identity.
type connectTicket struct {
	upstream string
}

// pendingConnect is a login begun by BeginConnect; its owner in the
// store is the identity, its key the OAuth state.
type pendingConnect struct {
	upstream string
	nonce    string // the browser's cookie value: the callback must carry it
	p        *oauth.Pending
	c        *oauth.Client
}

// ConnectTicket reads a ticket without using it: the upstream it is for
// and the identity it belongs to, for the confirmation page.
func (a *Aggregator) ConnectTicket(ticket string) (upstream, who string, ok bool) {
	t, who, ok := a.users.tickets.Peek(ticket)
	return t.upstream, who, ok
}

// ConnectTicketFor mints a ticket for who to connect to the per-user
// upstream name (a caller that proved its identity with its bearer
// token, and wants a link to open in a browser).
func (a *Aggregator) ConnectTicketFor(name, who string) (string, error) {
	if u := a.perUser(name); u == nil || u.Config().Credentials != configs.CredentialsPerUser {
		return "", fmt.Errorf("upstream %q is not a per-user upstream", name)
	}
	if !identified(who) {
		return "", ErrNoIdentity
	}
	return a.ConnectLink(name, who)
}

// BeginConnect uses ticket (once) for the per-user upstream name and
// starts its login: discovery and registration with the upstream's
// authorization server, with the redirect URI on the public URL. It
// returns the authorization URL to send the browser to, and the nonce
// the browser must bring back to the callback (a cookie).
func (a *Aggregator) BeginConnect(ctx context.Context, name, ticket string) (authURL, nonce string, err error) {
	t, who, ok := a.users.tickets.Take(ticket)
	if !ok || t.upstream != name {
		return "", "", ErrBadConnect
	}
	shared := a.perUser(name)
	if shared == nil || shared.Config().Credentials != configs.CredentialsPerUser {
		return "", "", fmt.Errorf("upstream %q is not a per-user upstream", name)
	}
	base, ok := a.set.Load().cfg.PublicBase()
	if !ok {
		return "", "", errors.New("no public URL: set server.public_url")
	}
	cfg := shared.Config()
	c := a.newLogin(cfg, oauth.Options{User: a.loginIdentity(who), OnSecret: a.secrets.Add})
	p, authURL, err := c.Begin(ctx, oauth.LoginOptions{RedirectURI: base + CallbackPath, Registrations: a.registrationsFor(shared)})
	if err != nil {
		return "", "", fmt.Errorf("upstream %q: %w", name, err)
	}
	nonce = onetime.Key()
	if err := a.users.pending.PutAs(who, p.State(), &pendingConnect{upstream: name, nonce: nonce, p: p, c: c}); err != nil {
		return "", "", err
	}
	return authURL, nonce, nil
}

// FinishConnect completes the login whose authorization response is cb
// (state, code, iss), begun in the browser that holds nonce: the tokens
// are stored under the identity the ticket belonged to, and that
// identity's connection, if open, is replaced at its next use. It
// returns the upstream and the identity.
func (a *Aggregator) FinishConnect(ctx context.Context, cb *url.URL, nonce string) (name, who string, err error) {
	pc, who, ok := a.users.pending.Take(cb.Query().Get("state"))
	if !ok {
		return "", "", ErrBadConnect
	}
	if subtle.ConstantTimeCompare([]byte(pc.nonce), []byte(nonce)) != 1 {
		return "", "", fmt.Errorf("%w (this browser did not start it)", ErrBadConnect)
	}
	if _, err := pc.c.Finish(ctx, pc.p, cb); err != nil {
		return "", "", fmt.Errorf("upstream %q: %w", pc.upstream, err)
	}
	s := a.users
	s.mu.Lock()
	k := userKey{pc.upstream, who}
	if uc := s.conns[k]; uc != nil {
		s.closeConn(a, k, uc) // opened again with the new login
	}
	s.mu.Unlock()
	// The user's connection opens now, not at the first call: its
	// catalog lists the upstream while no operator login does.
	if shared := a.perUser(pc.upstream); shared != nil {
		if _, err := a.openUserConn(k, oauth.UserKey(a.loginIdentity(who)), nil, shared); err != nil {
			a.log.Warn("per-user connection not opened after connecting", "upstream", pc.upstream, "error", err)
		}
		a.openListing()
	}
	return pc.upstream, who, nil
}

// ConfigPublicBase returns the URL users reach viewmux at, by the current
// config (configs.Config.PublicBase).
func (a *Aggregator) ConfigPublicBase() (string, bool) { return a.set.Load().cfg.PublicBase() }

// ConnectPending returns how many connect tickets and pending logins are
// held (expired ones until the next sweep).
func (a *Aggregator) ConnectPending() (tickets, logins int) {
	return a.users.tickets.Len(), a.users.pending.Len()
}

// registrationsFor returns the clients registered for the per-user
// upstream shared's logins: one dynamic registration serves every user
// (and repeating the connect step does not register a client each time).
func (a *Aggregator) registrationsFor(shared *upstream.Upstream) *oauth.Registrations {
	s := a.users
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.regs == nil {
		s.regs = make(map[*upstream.Upstream]*oauth.Registrations)
	}
	for u := range s.regs { // of upstreams a reload replaced
		if a.set.Load().byName[u.Name()] != u {
			delete(s.regs, u)
		}
	}
	r := s.regs[shared]
	if r == nil {
		r = &oauth.Registrations{}
		s.regs[shared] = r
	}
	return r
}
