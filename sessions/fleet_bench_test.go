package sessions

import (
	"testing"
	"time"

	"github.com/viewmux/viewmux/aggregator"
	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/internal/state/statetest"
)

// BenchmarkStatelessCallOnRedis measures a stateless tools/call through a
// replica on a real redis-server against the same call through a replica
// on the files engine, interleaved in one run: without a rate limit (the
// store is off the call path: the ratio should be about 1) and with one
// that is never reached (one Take in the store per call). It reports
// ns/call of each and the ratios redis/files.
func BenchmarkStatelessCallOnRedis(b *testing.B) {
	const cfg = "[profiles.free]\n[profiles.limited.rate]\ncalls_per_minute = 1000000000\n"
	up := newUpstreamServer(b, 4)
	rs := statetest.StartRedis(b, statetest.Options{})
	onRedis := newServerWith(b, up.http.URL, cfg, Options{Aggregator: aggregator.Options{State: rs.Open(b, state.RedisOptions{})}})
	onFiles := newServerWith(b, up.http.URL, cfg, Options{Aggregator: aggregator.Options{State: state.OpenFiles(b.TempDir())}})
	var spent [2][2]time.Duration // [profile][engine]
	b.ResetTimer()
	for i := range b.N {
		for p, profile := range []string{"free", "limited"} {
			for k := range 2 {
				e := (i + k) % 2 // alternate which engine goes first
				s := []*Server{onFiles, onRedis}[e]
				start := time.Now()
				if m := modernCall(b, s, profile, `{"query":"q"}`, ""); m.Error != nil {
					b.Fatalf("%s call: %+v", profile, m.Error)
				}
				spent[p][e] += time.Since(start)
			}
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(spent[0][0].Nanoseconds())/n, "files-ns/call")
	b.ReportMetric(float64(spent[0][1].Nanoseconds())/n, "redis-ns/call")
	b.ReportMetric(float64(spent[1][0].Nanoseconds())/n, "files-limited-ns/call")
	b.ReportMetric(float64(spent[1][1].Nanoseconds())/n, "redis-limited-ns/call")
	b.ReportMetric(float64(spent[0][1])/float64(spent[0][0]), "redis/files")
	b.ReportMetric(float64(spent[1][1])/float64(spent[1][0]), "redis/files-limited")
}
