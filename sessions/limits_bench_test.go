package sessions

import (
	"context"
	"runtime"
	"testing"

	"github.com/viewmux/viewmux/sessions/grant"
)

// idleSessions is how many sessions the idle benchmarks open; the
// caller's share is raised to match, as every session is the same
// caller's.
const idleSessions = 5000

// idleConfig lets one caller open idleSessions sessions.
const idleConfig = "[server]\nmax_sessions_per_caller = 5000\n"

// BenchmarkIdleSession reports the heap one idle /mcp session holds (after
// a GC), over 5,000 sessions that initialized and then sent nothing more:
// the per-session cost the README states next to max_sessions. For where it
// goes: -memprofile with -memprofilerate=512, then pprof -sample_index=inuse_space.
func BenchmarkIdleSession(b *testing.B) {
	up := newUpstreamServer(b, 10)
	for range b.N {
		s := newBenchServer(b, up.http.URL, idleConfig)
		h := s.Handler()
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		for range idleSessions {
			openSession(b, h, "")
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		if got := s.slots.live(); got != idleSessions {
			b.Fatalf("%d live sessions, want %d", got, idleSessions)
		}
		b.ReportMetric(float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/idleSessions, "heap-B/session")
	}
}

// BenchmarkIdleStreamSession is BenchmarkIdleSession for the stream
// doors (/ws, /sse, stdio): sessions that initialized through the
// stream session every such door runs, over a writer that discards, and
// then sent nothing more. The goroutine of each session's writer is
// counted in its stack, not here.
func BenchmarkIdleStreamSession(b *testing.B) {
	up := newUpstreamServer(b, 10)
	for range b.N {
		s := newBenchServer(b, up.http.URL, idleConfig)
		bind, err := s.Resolver().ResolveLocal(grant.Selection{})
		if err != nil {
			b.Fatal(err)
		}
		discard := frameWriterFunc(func([]byte) error { return nil })
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		open := make([]*session, 0, idleSessions)
		for range idleSessions {
			ss := s.newStreamSession(context.Background(), doorSSE, bind, discard)
			if err := s.admit(ss); err != nil {
				b.Fatal(err)
			}
			ss.Receive([]byte(initializeBody))
			ss.Receive([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
			open = append(open, ss)
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		if got := s.Sessions(); got != idleSessions {
			b.Fatalf("%d bound sessions, want %d", got, idleSessions)
		}
		b.ReportMetric(float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)-int64(cap(open))*8)/idleSessions, "heap-B/session")
		for _, ss := range open {
			ss.Close(nil)
		}
	}
}
