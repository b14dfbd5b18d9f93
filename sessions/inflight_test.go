package sessions

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// TestInflight: a notifications/cancelled cancels exactly the request its
// requestId names, and a request that ends forgets only its own entry, not
// that of a later request reusing its id.
func TestInflight(t *testing.T) {
	var in inflight
	a, forgetA := in.track(context.Background(), json.RawMessage(`7`))
	b, forgetB := in.track(context.Background(), json.RawMessage(`"x"`))
	in.cancelNamed(json.RawMessage(`{"requestId":"x","reason":"user"}`))
	if b.Err() == nil || a.Err() != nil {
		t.Fatalf("cancelling \"x\": x %v, 7 %v; want only x cancelled", b.Err(), a.Err())
	}
	for _, params := range []string{`{}`, `{"requestId":8}`, `not json`, `{"requestId":"7"}`} {
		in.cancelNamed(json.RawMessage(params))
		if a.Err() != nil {
			t.Fatalf("params %s cancelled request 7", params)
		}
	}
	forgetB()

	// A client reuses id 7 while the first request with it still runs.
	again, forgetAgain := in.track(context.Background(), json.RawMessage(`7`))
	forgetA() // the first one ends
	if a.Err() == nil {
		t.Error("forget did not cancel its own context")
	}
	in.cancelNamed(json.RawMessage(`{"requestId":7}`))
	if again.Err() == nil {
		t.Error("the request reusing id 7 could not be cancelled after the first one ended")
	}
	forgetAgain()
	if len(in.m) != 0 {
		t.Errorf("%d entries left after every request ended", len(in.m))
	}

	c, forgetC := in.track(context.Background(), json.RawMessage(`1`))
	defer forgetC()
	in.cancelAll()
	if c.Err() == nil {
		t.Error("cancelAll left a request running")
	}
}

// TestMCPCancellation: on /mcp, a notifications/cancelled POSTed on the
// session cancels its call in flight upstream.
func TestMCPCancellation(t *testing.T) {
	su := newSlowUpstream(t)
	s := newBenchServer(t, su.url, "")
	h := s.Handler()
	sid := post(h, "", "", initializeBody).Header().Get(mcp.HeaderSessionID)
	if sid == "" {
		t.Fatal("initialize on /mcp gave no session id")
	}
	post(h, "", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	done := make(chan struct{})
	go func() {
		defer close(done)
		post(h, "", sid, waitCall(41))
	}()
	upstreamSaw(t, su.started, "start")
	if rec := post(h, "", sid, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":41}}`); rec.Code != 202 {
		t.Fatalf("notifications/cancelled: HTTP %d %s", rec.Code, rec.Body)
	}
	upstreamSaw(t, su.cancelled, "cancelled")
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled call's POST never ended")
	}
}
