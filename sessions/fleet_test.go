package sessions

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/aggregator"
	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/internal/state/statetest"
)

// fleetConfig is a replica's config: an approve profile and two
// rate-limited ones of 6 calls a minute.
func fleetConfig(replica string) string {
	return fmt.Sprintf(`[server]
replica_id = %q
[profiles.agent]
approve = ["up__tool_0001"]
approve_timeout = "1m"
[profiles.limited.rate]
calls_per_minute = 6
[profiles.fresh.rate]
calls_per_minute = 6
`, replica)
}

// fleetPair starts two replicas, a and b, of one config over one
// upstream, each with a handle of its own on one redis-server (kept in
// an append-only file, so that a restart keeps what was written).
func fleetPair(t *testing.T) (a, b *Server, up *upstreamServer, rs *statetest.Redis, stores [2]*state.Redis) {
	t.Helper()
	rs = statetest.StartRedis(t, statetest.Options{AOF: true})
	up = newUpstreamServer(t, 4)
	var servers [2]*Server
	for i, id := range []string{"a", "b"} {
		stores[i] = rs.Open(t, state.RedisOptions{Timeout: 300 * time.Millisecond})
		servers[i] = newServerWith(t, up.http.URL, fleetConfig(id), Options{Aggregator: aggregator.Options{State: stores[i]}})
		servers[i].fleet.every = 0 // count the replicas at every take: b's arrival is seen at a's next call
	}
	return servers[0], servers[1], up, rs, stores
}

// modernCall posts a stateless tools/call of up__tool_0001 with args to
// s under profile, declaring form elicitation; extra are members of its
// params before _meta, each followed by a comma.
func modernCall(t testing.TB, s *Server, profile, args, extra string) rpcMsg {
	t.Helper()
	return modernCallAs(t, s, "", profile, args, extra)
}

// modernCallAs is modernCall with a bearer token ("" for none).
func modernCallAs(t testing.TB, s *Server, token, profile, args, extra string) rpcMsg {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"up__tool_0001","arguments":` + args + `,` + extra +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}}}}}`
	req := newRequest("?profile="+profile, "", body)
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "up__tool_0001")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	var m rpcMsg
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatalf("tools/call on replica %s: %d %s", s.cfg.Server.ReplicaID, rec.Code, rec.Body)
	}
	return m
}

// askApproval sends the call to s and returns the requestState of the
// input_required answer asking for approval.
func askApproval(t *testing.T, s *Server, args string) string {
	t.Helper()
	m := modernCall(t, s, "agent", args, "")
	var res struct {
		ResultType    string                     `json:"resultType"`
		RequestState  string                     `json:"requestState"`
		InputRequests map[string]json.RawMessage `json:"inputRequests"`
	}
	if m.Error != nil || json.Unmarshal(m.Result, &res) != nil || res.ResultType != "input_required" || len(res.InputRequests) != 1 {
		t.Fatalf("call needing approval on %s: %s %+v, want input_required", s.cfg.Server.ReplicaID, m.Result, m.Error)
	}
	return res.RequestState
}

const allow = `{"action":"accept","content":{"allow":true}}`

// answerApproval retries the call on s with answer for reqState.
func answerApproval(t *testing.T, s *Server, args, reqState, answer string) rpcMsg {
	t.Helper()
	st, _ := json.Marshal(reqState)
	return modernCall(t, s, "agent", args, `"requestState":`+string(st)+`,"inputResponses":{"viewmux":`+answer+`},`)
}

// TestFleetApproval checks a 2026-07-28 client's approval across two
// replicas on one Redis store: asked on a and answered on b, the call runs
// once, upstream, without viewmux's requestState; a replay of the answer,
// on either replica, runs nothing; and a retry of other arguments spends
// the question without running anything.
func TestFleetApproval(t *testing.T) {
	a, b, up, _, _ := fleetPair(t)
	const args = `{"query":"rm -rf"}`
	before := up.requests.Load()
	state := askApproval(t, a, args)
	if !strings.HasPrefix(state, approvalStatePrefix) {
		t.Fatalf("requestState %q, want one of a stateless approval", state)
	}
	if n := up.requests.Load() - before; n != 0 {
		t.Fatalf("the upstream got %d requests before the answer", n)
	}
	if m := answerApproval(t, b, args, state, allow); m.Error != nil || !strings.Contains(string(m.Result), `"ok"`) {
		t.Fatalf("answer on b: %s %+v, want the upstream's result", m.Result, m.Error)
	}
	if n := up.requests.Load() - before; n != 1 {
		t.Fatalf("the upstream got %d requests for one approved call, want 1", n)
	}
	for _, s := range []*Server{a, b} {
		m := answerApproval(t, s, args, state, allow)
		if m.Error == nil || !strings.Contains(m.Error.Message, "answered already") {
			t.Errorf("replay on %s: %s %+v, want it refused as answered already", s.cfg.Server.ReplicaID, m.Result, m.Error)
		}
	}
	if n := up.requests.Load() - before; n != 1 {
		t.Fatalf("the upstream got %d requests after replays, want 1", n)
	}

	t.Run("other arguments", func(t *testing.T) {
		before := up.requests.Load()
		state := askApproval(t, b, args)
		if m := answerApproval(t, a, `{"query":"rm -rf /"}`, state, allow); m.Error == nil || !strings.Contains(m.Error.Message, "another request") {
			t.Errorf("retry with other arguments: %s %+v, want it refused", m.Result, m.Error)
		}
		if m := answerApproval(t, a, args, state, allow); m.Error == nil || !strings.Contains(m.Error.Message, "answered already") {
			t.Errorf("retry after a mismatch: %s %+v, want the question spent", m.Result, m.Error)
		}
		if n := up.requests.Load() - before; n != 0 {
			t.Errorf("the upstream got %d requests", n)
		}
	})
	t.Run("forged", func(t *testing.T) {
		id, _, _ := strings.Cut(strings.TrimPrefix(askApproval(t, a, args), approvalStatePrefix), ".")
		if m := answerApproval(t, b, args, approvalStatePrefix+id+".AAAA", allow); m.Error == nil || !strings.Contains(m.Error.Message, "not minted") {
			t.Errorf("retry with a forged signature: %s %+v, want it refused", m.Result, m.Error)
		}
	})
	t.Run("declined", func(t *testing.T) {
		before := up.requests.Load()
		m := answerApproval(t, b, args, askApproval(t, a, args), `{"action":"decline"}`)
		if m.Error != nil || !strings.Contains(string(m.Result), "declined by the user") {
			t.Errorf("declined: %s %+v, want a tool error", m.Result, m.Error)
		}
		if n := up.requests.Load() - before; n != 0 {
			t.Errorf("the upstream got %d requests", n)
		}
	})
}

// countAllowed sends n stateless calls of profile, alternating between
// servers, and returns how many each allowed and the last refusal.
func countAllowed(t *testing.T, servers []*Server, profile string, n int) ([]int, string) {
	t.Helper()
	got := make([]int, len(servers))
	last := ""
	for i := range n {
		m := modernCall(t, servers[i%len(servers)], profile, `{"query":"q"}`, "")
		switch {
		case m.Error == nil:
			got[i%len(servers)]++
		case m.Error.Code == rateLimited:
			last = m.Error.Message
		default:
			t.Fatalf("call %d: %+v, want a result or -32029", i, m.Error)
		}
	}
	return got, last
}

// TestFleetRateLimit checks the stateless rate limit of two replicas on
// one Redis store: a bucket of 6 a minute allows 6 in all; while Redis is
// down, each replica allows its share (6 / 2 replicas = 3) and says so,
// and approvals fail closed; once it is back, both heal without a restart,
// and a question asked before the outage is answered after it.
func TestFleetRateLimit(t *testing.T) {
	a, b, up, rs, stores := fleetPair(t)
	both := []*Server{a, b}
	if got, last := countAllowed(t, both, "limited", 14); got[0]+got[1] != 6 || !strings.Contains(last, "per caller") {
		t.Fatalf("allowed %v of 14 (last refusal %q), want 6 in all", got, last)
	}
	const args = `{"query":"deploy"}`
	pending := askApproval(t, a, args)

	rs.Stop()
	got, last := countAllowed(t, both, "limited", 10)
	if got[0] != 3 || got[1] != 3 || !strings.Contains(last, "allows its share, 3 per minute") {
		t.Fatalf("store down: allowed %v of 10 (last refusal %q), want 3 on each replica, its share", got, last)
	}
	before := up.requests.Load()
	if m := modernCall(t, b, "agent", args, ""); m.Error == nil || !strings.Contains(m.Error.Message, "state store that keeps approvals is unreachable") {
		t.Errorf("approval asked while the store is down: %s %+v, want a clear error", m.Result, m.Error)
	}
	if m := answerApproval(t, b, args, pending, allow); m.Error == nil || !strings.Contains(m.Error.Message, "unreachable") {
		t.Errorf("approval answered while the store is down: %s %+v, want a clear error", m.Result, m.Error)
	}
	if n := up.requests.Load() - before; n != 0 {
		t.Fatalf("the upstream got %d requests while approvals could not be checked", n)
	}

	rs.Start()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, st := range stores {
		for {
			if _, err := st.Get(ctx, "heal-probe"); err == nil {
				break
			} else if ctx.Err() != nil {
				t.Fatalf("the store did not come back: %v", err)
			}
		}
	}
	if got, last := countAllowed(t, both, "fresh", 14); got[0]+got[1] != 6 || strings.Contains(last, "unreachable") {
		t.Fatalf("healed: allowed %v of 14 (last refusal %q), want 6 in all, from the fleet's bucket", got, last)
	}
	if m := answerApproval(t, b, args, pending, allow); m.Error != nil || !strings.Contains(string(m.Result), `"ok"`) {
		t.Fatalf("healed: the answer to a question asked before the outage: %s %+v, want the upstream's result", m.Result, m.Error)
	}
	if n := up.requests.Load() - before; n != 7 {
		t.Fatalf("the upstream got %d requests since the outage, want 7 (6 limited calls and the approved one)", n)
	}
}

// TestFleetRateUncounted checks a replica that has never reached the
// store (it started during an outage): it cannot know its share, so it
// allows no rate-limited stateless call, and says why.
func TestFleetRateUncounted(t *testing.T) {
	rs := statetest.StartRedis(t, statetest.Options{})
	st := rs.Open(t, state.RedisOptions{Timeout: 300 * time.Millisecond})
	rs.Stop()
	up := newUpstreamServer(t, 4)
	s := newServerWith(t, up.http.URL, fleetConfig("c"), Options{Aggregator: aggregator.Options{State: st}})
	if got, last := countAllowed(t, []*Server{s}, "limited", 3); got[0] != 0 || !strings.Contains(last, "has not counted the replicas") {
		t.Fatalf("allowed %d (last refusal %q), want none", got[0], last)
	}
}

// TestWithoutRetry checks what of an approved retry goes upstream: its
// params without viewmux's requestState and inputResponses (in any case,
// as the decoder matches them), every other member as the bytes that came.
func TestWithoutRetry(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`{"name":"t","arguments":{"a":"<b>"},"requestState":"viewmux2.x.y","inputResponses":{"viewmux":{}}}`, `{"name":"t","arguments":{"a":"<b>"}}`},
		{`{"requestState":"viewmux2.x.y","name":"t", "arguments" : { "z":1,"a":2 },"_meta":{"k":1}}`, `{"name":"t","arguments" : { "z":1,"a":2 },"_meta":{"k":1}}`},
		{`{"RequestState":"viewmux2.x.y","INPUTRESPONSES":{},"name":"t"}`, `{"name":"t"}`},
		{`{"name":"t"}`, `{"name":"t"}`},
	} {
		if got := string(withoutRetry(json.RawMessage(tt.in))); got != tt.want {
			t.Errorf("withoutRetry(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
	if st, answer, ok := approvalRetry(json.RawMessage(`{"RequestState":"viewmux2.x.y","inputResponses":{"viewmux":{"action":"decline"}}}`)); !ok || st != "viewmux2.x.y" || string(answer) != `{"action":"decline"}` {
		t.Errorf("approvalRetry = %q, %s, %v", st, answer, ok)
	}
	for _, p := range []string{`{"requestState":"viewmux1.x.y"}`, `{"requestState":"upstream's own"}`, `[]`, `{}`} {
		if _, _, ok := approvalRetry(json.RawMessage(p)); ok {
			t.Errorf("approvalRetry(%s) took it for an approval's retry", p)
		}
	}
}

// TestFleetStoreHoldsNoToken checks what a token's stateless approvals
// and rate limit leave in the store: no value or key holds the token, or
// the arguments of the call asked about.
func TestFleetStoreHoldsNoToken(t *testing.T) {
	const token = "fleet-token-0123456789abcdefghijklmnop"
	rs := statetest.StartRedis(t, statetest.Options{})
	up := newUpstreamServer(t, 4)
	cfg := fleetConfig("a") + "[[auth.tokens]]\ntoken = \"" + token + "\"\nprofiles = [\"agent\", \"limited\"]\n"
	s := newServerWith(t, up.http.URL, cfg, Options{Aggregator: aggregator.Options{State: rs.Open(t, state.RedisOptions{})}})
	if m := modernCallAs(t, s, token, "limited", `{"query":"q"}`, ""); m.Error != nil {
		t.Fatalf("rate-limited call: %+v", m.Error)
	}
	const secretArg = "arg-not-for-the-store"
	if m := modernCallAs(t, s, token, "agent", `{"query":"`+secretArg+`"}`, ""); m.Error != nil || !strings.Contains(string(m.Result), "input_required") {
		t.Fatalf("call needing approval: %s %+v", m.Result, m.Error)
	}
	dump, err := rs.Dump(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(dump) == 0 {
		t.Fatal("the store is empty: nothing was checked")
	}
	for k, vs := range dump {
		for _, v := range append(vs, k) {
			if strings.Contains(v, token) || strings.Contains(v, secretArg) {
				t.Errorf("store key %s holds the token or the arguments: %q", k, v)
			}
		}
	}
}
