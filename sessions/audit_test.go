package sessions

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/viewmux/viewmux/internal/audit"
)

// syncBuf is a bytes.Buffer safe for the audit writer and the test.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuf) records(t *testing.T) []audit.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []audit.Record
	for _, line := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		if line == "" {
			continue
		}
		var r audit.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

func TestRateLimitAndAudit(t *testing.T) {
	up := newUpstreamServer(t, 4)
	var auditBuf syncBuf
	s := newServerWith(t, up.http.URL, `
[audit]
include_arguments = true
[profiles.limited]
[profiles.limited.rate]
calls_per_minute = 3
[profiles.child]
extends = "limited"
[profiles.child.rate]
calls_per_minute = 10
`, Options{Audit: &auditBuf})
	h := s.Handler()
	call := func(sid, tool string) string {
		return post(h, "", sid, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"`+tool+`","arguments":{"query":"q"}}}`).Body.String()
	}

	sid := openSession(t, h, "?profile=limited")
	for i := range 3 {
		if body := call(sid, "up__tool_0001"); !strings.Contains(body, `"result"`) {
			t.Fatalf("call %d within the limit: %s", i, body)
		}
	}
	before := up.requests.Load()
	if body := call(sid, "up__tool_0001"); !strings.Contains(body, `"code":-32029`) || !strings.Contains(body, "3 tool calls per minute") {
		t.Fatalf("4th call: %s", body)
	}
	if n := up.requests.Load() - before; n != 0 {
		t.Fatalf("a rate-limited call reached the upstream (%d requests)", n)
	}
	// Another session has its own bucket.
	if body := call(openSession(t, h, "?profile=limited"), "up__tool_0001"); !strings.Contains(body, `"result"`) {
		t.Fatalf("second session: %s", body)
	}
	// A child profile cannot raise its parent's limit.
	if got := s.Resolver().RateFor("child"); got != 3 {
		t.Fatalf("RateFor(child) = %d, want 3", got)
	}
	call(sid, "up__nope")

	recs := auditBuf.records(t)
	count := map[string]int{}
	for _, r := range recs {
		count[r.Decision+"/"+r.Reason]++
		if r.Decision == audit.Allowed && (r.Upstream != "up" || r.Profile != "limited" || r.Session == "" || string(r.Arguments) != `{"query":"q"}`) {
			t.Fatalf("allowed record incomplete: %+v", r)
		}
	}
	want := map[string]int{"allowed/": 4, "denied/rate_limit": 1, "denied/not_found": 1}
	for k, n := range want {
		if count[k] != n {
			t.Fatalf("audit decisions = %v, want %v", count, want)
		}
	}
}

// TestStatelessRateLimit checks that stateless (2026-07-28) calls are
// limited per caller and profile, whatever Mcp-Session-Id they carry: a
// new value per call neither escapes the limit nor adds limiter state.
func TestStatelessRateLimit(t *testing.T) {
	up := newUpstreamServer(t, 4)
	s := newBenchServer(t, up.http.URL, "[profiles.limited]\n[profiles.limited.rate]\ncalls_per_minute = 3\n")
	h := s.Handler()
	call := func(i int) string {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"up__tool_0001","arguments":{"query":"q"},`+
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`, i)
		req := newRequest("?profile=limited", "", body)
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", "up__tool_0001")
		req.Header.Set("Mcp-Session-Id", fmt.Sprintf("made-up-%d", i))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Body.String()
	}
	for i := range 3 {
		if body := call(i); !strings.Contains(body, `"result"`) {
			t.Fatalf("stateless call %d within the limit: %s", i, body)
		}
	}
	for i := 3; i < 10; i++ {
		if body := call(i); !strings.Contains(body, `"code":-32029`) {
			t.Fatalf("stateless call %d over the limit of 3 per minute: %s", i, body)
		}
	}
	// The one bucket is the state store's, under the caller and profile
	// alone (fleetKey): nothing of the session ids reaches it, and no
	// bucket is kept beside it.
	if n, m := s.limits.Len(), s.fleet.local.Len(); n != 0 || m != 0 {
		t.Fatalf("%d session and %d fallback buckets after 10 stateless calls, want none", n, m)
	}
}

// TestAuditLimitRefusals checks that requests refused by the size limit,
// before any tool could be decided, still leave an audit line: on /mcp and
// on a stream door (stdio).
func TestAuditLimitRefusals(t *testing.T) {
	up := newUpstreamServer(t, 4)
	var auditBuf syncBuf
	s := newServerWith(t, up.http.URL, "[server]\nmax_body_bytes = 2048\n[audit]\n", Options{Audit: &auditBuf})
	h := s.Handler()
	sid := openSession(t, h, "")
	big := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"up__tool_0001","arguments":{"query":"` + strings.Repeat("x", 4096) + `"}}}`
	if rec := post(h, "", sid, big); rec.Code != 413 {
		t.Fatalf("oversize POST on /mcp: %d %s", rec.Code, rec.Body)
	}
	p := startStdio(t, s, t.Context(), "")
	p.send(t, big)
	if m := p.recv(t); m.Error == nil {
		t.Fatalf("oversize stdio line answered %+v", m)
	}
	var size []audit.Record
	for _, r := range auditBuf.records(t) {
		if r.Reason == audit.ReasonSize {
			size = append(size, r)
		}
	}
	if len(size) != 2 || size[0].Decision != audit.Denied || size[0].Session != sid || size[1].Session == "" {
		t.Fatalf("size refusals audited: %+v, want 2 denied records naming their sessions", size)
	}
}
