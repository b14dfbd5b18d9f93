package aggregator

import (
	"context"
	"slices"
	"strings"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/upstream"
	"github.com/viewmux/viewmux/upstream/oauth"
)

// loginOptions completes o, the options of an OAuth client of one of the
// aggregator's upstreams, with where its logins are kept: the gateway's
// state store (State), sealed with [state]'s encryption key when there is
// one. Every OAuth client the aggregator builds goes through it, so that
// a login stored on one replica is the login of every replica, and a
// login sealed with another key is logged once for the whole gateway.
func (a *Aggregator) loginOptions(o oauth.Options) oauth.Options {
	if st := a.keptState(); o.State == nil && st != nil {
		// A files store of no directory leaves the upstream's own
		// (configs.UpstreamOAuth.StateDir) in use.
		o.State = st
	}
	if o.Sealer == nil && o.SealerFunc == nil {
		o.SealerFunc = a.loginSealer
	}
	if o.Logger == nil {
		o.Logger = a.log
	}
	if o.KeyErrors == nil {
		o.KeyErrors = &a.users.keyErrs
	}
	return o
}

// keptState returns the gateway's state store when it keeps anything
// beyond this process, else nil (a files store of no directory).
func (a *Aggregator) keptState() state.Store {
	if st := a.State(); st.Engine() != "files" || st.Where() != "" {
		return st
	}
	return nil
}

// loginSealer returns the sealer of the current config's [state] table,
// made once for each config (New builds its upstreams before the config
// is in place, so this is asked at each read and write, not at
// construction); nil when there is no encryption key.
func (a *Aggregator) loginSealer() *state.Sealer {
	set := a.set.Load()
	if set == nil {
		return nil
	}
	s := a.users
	s.sealMu.Lock()
	defer s.sealMu.Unlock()
	if s.sealFor != set.cfg {
		sl, err := oauth.NewSealer(set.cfg.State)
		if err != nil {
			// Validated with the config: not reached. Without a sealer a
			// shared store takes no login and opens no sealed one: closed.
			a.log.Error("logins: no sealer", "error", err)
		}
		s.sealer, s.sealFor = sl, set.cfg
	}
	return s.sealer
}

// newLogin returns an OAuth client of the upstream uc, with the options
// o completed by loginOptions.
func (a *Aggregator) newLogin(uc *configs.Upstream, o oauth.Options) *oauth.Client {
	return oauth.New(uc.Name, uc.URL, *uc.OAuth, a.loginOptions(o))
}

// startWatch starts watchLogins, until Close.
func (a *Aggregator) startWatch() {
	ctx, cancel := context.WithCancel(context.Background())
	a.stopWatch, a.watchDone = cancel, make(chan struct{})
	go func() {
		defer close(a.watchDone)
		a.watchLogins(ctx)
	}()
}

// watchLogins opens the listing connection of a per-user upstream that
// has none (no operator login: openListing) when a user's login appears
// in the store, whoever wrote it: a user who connects through another
// replica makes the upstream's tools listed on this one too, as a connect
// through this replica does. A listing kept in the store by another
// replica is read as it lands (loadListings).
func (a *Aggregator) watchLogins(ctx context.Context) {
	for key := range a.opts.State.Watch(ctx) {
		if (key == "" || isListingKey(key)) && a.loadListings(ctx) {
			a.rebuild() // a listing another replica kept (first.go)
		} else if key == "" {
			a.saveListings() // the store may be back: what it missed
		}
		if key != "" && (!oauth.IsLoginKey(key) || !strings.Contains(key, ".user-")) {
			continue
		}
		if a.needsListing() {
			a.openListing()
			a.rebuild()
		}
	}
}

// userListed reports whether the upstream uc is listed from its users'
// stored logins when it has no operator login (openListing): a per-user
// OAuth upstream.
func userListed(uc *configs.Upstream) bool {
	return uc.Credentials == configs.CredentialsPerUser && uc.OAuth != nil
}

// hasPerUser reports whether an upstream is userListed. The config at
// Start decides whether logins are watched: an upstream made per-user by
// a reload is listed at the reload, and after a connect through this
// replica.
func (a *Aggregator) hasPerUser() bool {
	return slices.ContainsFunc(a.set.Load().ups, func(u *upstream.Upstream) bool { return userListed(u.Config()) })
}

// needsListing reports whether a userListed upstream has no catalog:
// only then can a user's new login change what is listed.
func (a *Aggregator) needsListing() bool {
	return slices.ContainsFunc(a.set.Load().ups, func(u *upstream.Upstream) bool {
		return userListed(u.Config()) && u.Catalog() == nil
	})
}
