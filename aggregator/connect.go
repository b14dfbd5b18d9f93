package aggregator

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/onetime"
	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/upstream"
	"github.com/viewmux/viewmux/upstream/oauth"
)

// This file is the browser step of per-user upstream credentials: a
// caller follows its connect link (a ticket, ConnectLink), confirms, and
// is sent to the upstream's authorization server; the callback finishes
// the login and stores the tokens under the caller's identity. The front
// door (sessions/connect.go) serves the pages; this keeps the state, in
// the gateway's state store, so that a browser may open the link on one
// replica, confirm on another and come back to a third. Tickets and
// pending logins are single-use, live ten minutes, and are bounded in
// number (per identity, and in all, across the fleet), so that repeating
// the request does not grow the store.

// CallbackPath is the redirect URI's path on the public URL.
const CallbackPath = "/oauth/callback"

// ErrBadConnect is returned for a ticket or callback that is unknown,
// used, expired, or not this browser's.
var ErrBadConnect = errors.New("unknown, used or expired link: start again from the link in the tool error")

// The state store's namespaces of connect tickets (the value: the
// upstream's name) and pending logins (the value: a pendingConnect,
// sealed when [state] has an encryption key). The owner of each is the
// identity it belongs to.
const (
	ticketNS  = "connect-ticket"
	pendingNS = "connect-pending"
)

// connectLimits bound both namespaces, for the whole fleet on a shared
// store: ten minutes, 4 per identity (a new one replaces the oldest),
// 4096 in all.
var connectLimits = state.Limits{TTL: 10 * time.Minute, Max: 4096, PerOwner: 4}

// pendingConnect is a login begun by BeginConnect, as kept in the store
// under its OAuth state: the replica the callback reaches finishes it.
type pendingConnect struct {
	Upstream string          `json:"upstream"`
	Nonce    string          `json:"nonce"`   // the browser's cookie value: the callback must carry it
	Pending  json.RawMessage `json:"pending"` // oauth.MarshalPending
}

// pendingAAD is what a sealed pending login is bound to: its key, so a
// value moved under another state does not open.
func pendingAAD(state string) string { return pendingNS + ":" + state }

// ConnectTicket reads a ticket without using it: the upstream it is for
// and the identity it belongs to, for the confirmation page. An error
// says the store did not answer (state.IsDown); an unknown ticket is
// ok == false.
func (a *Aggregator) ConnectTicket(ticket string) (upstream, who string, ok bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, who, ok, err := a.State().PeekOnce(ctx, ticketNS, ticket)
	if err != nil {
		return "", "", false, fmt.Errorf("connect ticket: %w", err)
	}
	return string(v), who, ok, nil
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
// the browser must bring back to the callback (a cookie). The pending
// login is kept in the state store: the callback may reach any replica.
func (a *Aggregator) BeginConnect(ctx context.Context, name, ticket string) (authURL, nonce string, err error) {
	v, who, ok, err := a.State().TakeOnce(ctx, ticketNS, ticket)
	if err != nil {
		return "", "", fmt.Errorf("upstream %q: connect ticket: %w", name, err)
	}
	if !ok || string(v) != name {
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
	// A user whose call was refused for scope asks for it again with what
	// was granted before (the user's own stored login says both).
	p, authURL, err := c.Begin(ctx, oauth.LoginOptions{RedirectURI: base + CallbackPath, Scopes: c.Scopes(), Registrations: a.registrationsFor(shared)})
	if err != nil {
		return "", "", fmt.Errorf("upstream %q: %w", name, err)
	}
	pb, err := oauth.MarshalPending(p)
	if err != nil {
		return "", "", fmt.Errorf("upstream %q: %w", name, err)
	}
	nonce = onetime.Key()
	val, err := json.Marshal(pendingConnect{Upstream: name, Nonce: nonce, Pending: pb})
	if err != nil {
		return "", "", fmt.Errorf("upstream %q: %w", name, err)
	}
	if sl := a.loginSealer(); sl != nil {
		val = sl.Seal(pendingAAD(p.State()), val)
	}
	if err := a.State().PutOnce(ctx, pendingNS, who, p.State(), val, connectLimits); err != nil {
		return "", "", fmt.Errorf("upstream %q: pending login: %w", name, err)
	}
	return authURL, nonce, nil
}

// takePending takes the pending login under the OAuth state st (once)
// and opens it.
func (a *Aggregator) takePending(ctx context.Context, st string) (*pendingConnect, *oauth.Pending, string, error) {
	val, who, ok, err := a.State().TakeOnce(ctx, pendingNS, st)
	if err != nil {
		return nil, nil, "", fmt.Errorf("pending login: %w", err)
	}
	if !ok {
		return nil, nil, "", ErrBadConnect
	}
	if state.IsSealed(val) {
		sl := a.loginSealer()
		if sl == nil {
			return nil, nil, "", fmt.Errorf("pending login: %w (this replica has no state.encryption_key)", state.ErrOtherKey)
		}
		if val, err = sl.Open(pendingAAD(st), val); err != nil {
			return nil, nil, "", fmt.Errorf("pending login: %w", err)
		}
	}
	var pc pendingConnect
	if err := json.Unmarshal(val, &pc); err != nil {
		return nil, nil, "", errors.New("pending login: damaged, or from another version: start again from the link")
	}
	p, err := oauth.UnmarshalPending(pc.Pending)
	if err != nil {
		return nil, nil, "", fmt.Errorf("upstream %q: %w", pc.Upstream, err)
	}
	return &pc, p, who, nil
}

// FinishConnect completes the login whose authorization response is cb
// (state, code, iss), begun in the browser that holds nonce, on this
// replica or another: the tokens are stored under the identity the
// ticket belonged to, and that identity's connection, if open, is
// replaced at its next use. It returns the upstream and the identity.
func (a *Aggregator) FinishConnect(ctx context.Context, cb *url.URL, nonce string) (name, who string, err error) {
	st := cb.Query().Get("state")
	if st == "" {
		return "", "", ErrBadConnect
	}
	pc, p, who, err := a.takePending(ctx, st)
	if err != nil {
		return "", "", err
	}
	if subtle.ConstantTimeCompare([]byte(pc.Nonce), []byte(nonce)) != 1 {
		return "", "", fmt.Errorf("%w (this browser did not start it)", ErrBadConnect)
	}
	shared := a.perUser(pc.Upstream)
	if shared == nil || shared.Config().Credentials != configs.CredentialsPerUser {
		return "", "", fmt.Errorf("upstream %q is no longer a per-user upstream", pc.Upstream)
	}
	c := a.newLogin(shared.Config(), oauth.Options{User: a.loginIdentity(who), OnSecret: a.secrets.Add})
	if _, err := c.Finish(ctx, p, cb); err != nil {
		return "", "", fmt.Errorf("upstream %q: %w", pc.Upstream, err)
	}
	s := a.users
	s.mu.Lock()
	k := userKey{pc.Upstream, who}
	if uc := s.conns[k]; uc != nil {
		s.closeConn(a, k, uc) // opened again with the new login
	}
	s.mu.Unlock()
	// The user's connection opens now, not at the first call: its
	// catalog lists the upstream while no operator login does.
	if _, err := a.openUserConn(k, oauth.UserKey(a.loginIdentity(who)), nil, shared); err != nil {
		a.log.Warn("per-user connection not opened after connecting", "upstream", pc.Upstream, "error", err)
	}
	a.openListing()
	return pc.Upstream, who, nil
}

// ConfigPublicBase returns the URL users reach viewmux at, by the current
// config (configs.Config.PublicBase).
func (a *Aggregator) ConfigPublicBase() (string, bool) { return a.set.Load().cfg.PublicBase() }

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

// needsMoreScope returns the refusal of who's call on the per-user
// upstream name, refused for scope (err) by who's connection u, when
// who's login lacks scopes a new one may get: an UpstreamError with a
// link to connect again, whose login asks for them (BeginConnect). nil
// when the login lacks none (connecting again would not help: err is
// the answer) or no link can be made.
func (a *Aggregator) needsMoreScope(u *upstream.Upstream, name, method, who string, err error) *UpstreamError {
	c := u.OAuth()
	if c == nil {
		return nil
	}
	more := c.MoreScopes()
	if len(more) == 0 {
		return nil
	}
	link, lerr := a.ConnectLink(name, who)
	if lerr != nil {
		return nil
	}
	return &UpstreamError{Upstream: name, Method: method, Reconnect: link, MoreScope: more, Err: fmt.Errorf("upstream %q: %w", name, err)}
}
