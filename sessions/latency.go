package sessions

import (
	"slices"
	"sync"
	"time"
)

// latencyWindow is how many of an upstream's most recent tools/call
// durations the status page's p50 and p99 are computed from: 8 KiB per
// upstream, whatever the traffic.
const latencyWindow = 1024

// latencies keeps the recent tools/call durations of each upstream, for
// the status page (status.go). Its zero value is ready; it is safe for
// concurrent use. Keys are configured upstream names (chain.go records
// only calls routed to a checked entry), and retain drops those a reload
// removed, so it holds at most one ring per configured upstream.
type latencies struct {
	rings sync.Map // upstream name → *latencyRing
}

// latencyRing is one upstream's window, oldest overwritten first.
type latencyRing struct {
	mu   sync.Mutex
	d    [latencyWindow]time.Duration
	n    int // filled slots, up to latencyWindow
	next int // where the next duration goes
}

// observe records one call to up that took d.
func (l *latencies) observe(up string, d time.Duration) {
	v, ok := l.rings.Load(up)
	if !ok {
		v, _ = l.rings.LoadOrStore(up, &latencyRing{})
	}
	r := v.(*latencyRing)
	r.mu.Lock()
	r.d[r.next] = d
	r.next = (r.next + 1) % latencyWindow
	r.n = min(r.n+1, latencyWindow)
	r.mu.Unlock()
}

// quantiles returns the median and 99th percentile of up's recent calls
// and how many calls they are computed from (0: none yet, and the
// durations are zero).
func (l *latencies) quantiles(up string) (p50, p99 time.Duration, n int) {
	v, ok := l.rings.Load(up)
	if !ok {
		return 0, 0, 0
	}
	r := v.(*latencyRing)
	r.mu.Lock()
	ds := slices.Clone(r.d[:r.n])
	r.mu.Unlock()
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	return nearestRank(ds, 50), nearestRank(ds, 99), len(ds)
}

// nearestRank is the p-th percentile of sorted ds by the nearest-rank
// method: the smallest value that at least p% of ds do not exceed.
func nearestRank(ds []time.Duration, p int) time.Duration {
	i := (p*len(ds)+99)/100 - 1
	return ds[max(i, 0)]
}

// retain drops the windows of upstreams not in names.
func (l *latencies) retain(names map[string]bool) {
	l.rings.Range(func(k, _ any) bool {
		if !names[k.(string)] {
			l.rings.Delete(k)
		}
		return true
	})
}
