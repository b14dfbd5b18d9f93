package pins

import (
	"encoding/json"
	"fmt"
	"testing"
)

// BenchmarkRound is one snapshot build's pin check of 10,000 tools, all
// approved and unchanged (the steady state): what pinning adds to every
// rebuild.
func BenchmarkRound(b *testing.B) {
	const n = 10000
	raws := make([]json.RawMessage, n)
	names := make([]string, n)
	for i := range raws {
		names[i] = fmt.Sprintf("tool_%05d", i)
		raws[i] = json.RawMessage(fmt.Sprintf(`{"name":"up__tool_%05d","description":"Tool number %d: does a small, well-described thing to its input.","inputSchema":{"type":"object","properties":{"query":{"type":"string","description":"what to look for"},"limit":{"type":"number"}},"required":["query"]},"annotations":{"readOnlyHint":true}}`, i, i))
	}
	s := New(b.TempDir())
	check := func() {
		r := s.Round(true)
		c := r.Upstream("up")
		for i, raw := range raws {
			if c.Hide(names[i], "", raw) {
				b.Fatal("hidden")
			}
		}
		if _, err := r.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	check() // first sight
	b.ResetTimer()
	for b.Loop() {
		check()
	}
}
