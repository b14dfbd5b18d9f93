package sessions

import (
	"runtime"
	"testing"
)

// BenchmarkIdleSession reports the heap one idle /mcp session holds (after
// a GC), over 5,000 sessions that initialized and then sent nothing more:
// the per-session cost the README states next to max_sessions. For where it
// goes: -memprofile with -memprofilerate=512, then pprof -sample_index=inuse_space.
func BenchmarkIdleSession(b *testing.B) {
	const n = 5000
	up := newUpstreamServer(b, 10)
	for range b.N {
		s := newBenchServer(b, up.http.URL, "")
		h := s.Handler()
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		for range n {
			openSession(b, h, "")
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		if got := s.slots.live(); got != n {
			b.Fatalf("%d live sessions, want %d", got, n)
		}
		b.ReportMetric(float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/n, "heap-B/session")
	}
}
