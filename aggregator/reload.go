package aggregator

import (
	"context"
	"reflect"
	"sync"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/redact"
	"github.com/viewmux/viewmux/upstream"
)

// ReloadResult says what a Reload changed, by upstream name.
type ReloadResult struct {
	Added, Removed, Restarted, Kept []string
}

// Reload applies cfg as a diff against the running upstreams: unchanged
// upstreams keep their connections (and child processes), removed ones are
// closed, added and changed ones are started, each within its
// connect_timeout. A new snapshot is published before Reload returns, and
// again as new upstreams connect. Failures to connect are logged; the
// upstreams keep retrying in the background like at startup.
func (a *Aggregator) Reload(ctx context.Context, cfg *configs.Config) ReloadResult {
	a.mu.Lock()
	// Until the old config's upstreams have stopped, their output may
	// still hold its secrets: mask both configs' until the reload ends.
	nextSecrets := redact.NewSecrets(cfg.SecretValues()...)
	a.secrets.Store(a.secrets.Load().Union(nextSecrets))
	defer a.secrets.Store(nextSecrets)
	cur := a.set.Load()
	next := &upstreamSet{cfg: cfg, namer: namerOf(cfg), byName: make(map[string]*upstream.Upstream)}
	var res ReloadResult
	var start []*upstream.Upstream
	kept := make(map[*upstream.Upstream]bool)
	for _, uc := range cfg.Upstreams {
		old := cur.byName[uc.Name]
		if old != nil && sameUpstream(old.Config(), uc) {
			i := indexOf(cur.ups, old)
			next.add(old, cur.sources[i])
			kept[old] = true
			res.Kept = append(res.Kept, uc.Name)
			continue
		}
		u := a.newUpstream(uc)
		next.add(u, newSource(uc))
		start = append(start, u)
		if old != nil {
			res.Restarted = append(res.Restarted, uc.Name)
		} else {
			res.Added = append(res.Added, uc.Name)
		}
	}
	var stop []*upstream.Upstream
	for _, u := range cur.ups {
		if !kept[u] {
			stop = append(stop, u)
			if next.byName[u.Name()] == nil {
				res.Removed = append(res.Removed, u.Name())
			}
		}
	}
	a.set.Store(next)
	a.mu.Unlock()
	a.rebuild()

	var wg sync.WaitGroup
	for _, u := range stop {
		wg.Go(func() {
			if err := u.Close(); err != nil {
				a.log.Warn("closing removed upstream", "upstream", u.Name(), "error", err)
			}
		})
	}
	for _, u := range start {
		wg.Go(func() {
			if err := u.Start(ctx); err != nil {
				a.log.Warn("reloaded upstream failed to start; retrying in the background", "upstream", u.Name(), "error", err)
			}
		})
	}
	wg.Wait()
	a.rebuild()     // retires the per-user connections of changed upstreams
	a.openListing() // then lists the per-user upstreams that need it (peruser.go)
	if a.loadListings(ctx) {
		a.rebuild() // their last listing, until one lists (first.go)
	}
	return res
}

// sameUpstream reports whether two upstream configs would make the same
// connection. Positions in the file do not count.
func sameUpstream(a, b *configs.Upstream) bool {
	x, y := *a, *b
	x.Line, y.Line = 0, 0
	return reflect.DeepEqual(x, y)
}

func indexOf(ups []*upstream.Upstream, u *upstream.Upstream) int {
	for i, v := range ups {
		if v == u {
			return i
		}
	}
	return -1
}
