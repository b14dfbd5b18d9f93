//go:build unix

package gateway

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/viewmux/viewmux/integration/internal/itest"
	"github.com/viewmux/viewmux/internal/pins"
	"github.com/viewmux/viewmux/upstream/oauth/oauthtest"
)

// The fleet on one state store: replicas viewmux-a and viewmux-b, each with
// a disk of its own, keep their pins (and what else outlives a request) in
// one real redis-server, and behave as one gateway.

// fleetStateHonest and fleetStateQuarantined say what a listing of the rug
// upstream shows before its pull, and under quarantine after it.
func fleetStateHonest(m map[string]string) bool { return m["rug__lookup"] == itest.RugHonest }

func fleetStateQuarantined(m map[string]string) bool {
	_, ok := m["rug__lookup"]
	return !ok && m["rug__other"] != ""
}

func fleetStatePulled(m map[string]string) bool { return m["rug__lookup"] == itest.RugPulled }

// TestFleetStatePinApproval: the rug upstream changes lookup's
// definition after both replicas pinned it; both quarantine it, and the
// fleet has one pending change. `viewmux pins approve`, run with replica
// A's config, approves it, and replica B serves the new definition within
// a second of the approval reaching the store (measured from the change
// the store publishes), without a restart; sessions through nginx, on
// either replica, then call it.
func TestFleetStatePinApproval(t *testing.T) {
	t.Parallel()
	requireNginx(t)
	f := newFleetState(t)
	a := f.start(t, "viewmux-a")
	b := f.start(t, "viewmux-b")
	a.await(t, "first sight on viewmux-a", fleetStateHonest)
	b.await(t, "first sight on viewmux-b", fleetStateHonest)

	f.Rug.Pull()
	a.await(t, "quarantine on viewmux-a", fleetStateQuarantined)
	b.await(t, "quarantine on viewmux-b", fleetStateQuarantined)
	code, out, errOut := b.pins(t, "list", "--json")
	var pending []struct{ Upstream, Tool, Kind string }
	if code != 3 || json.Unmarshal([]byte(out), &pending) != nil || len(pending) != 1 || pending[0].Tool != "lookup" || pending[0].Kind != "changed" {
		t.Fatalf("pins list with viewmux-b's config: exit %d, want 3 and one change of lookup for the fleet\n%s%s", code, out, errOut)
	}
	if n := f.Rug.Called("lookup"); n != 0 {
		t.Fatalf("the quarantined lookup reached its upstream %d times", n)
	}

	// The approval's moment is when the store publishes the change of
	// the pins: every replica hears it from there.
	feed := f.watch(t)
	approvedAt := make(chan time.Time, 1)
	go func() {
		for k := range feed {
			if k == pins.FileName {
				approvedAt <- time.Now()
				return
			}
		}
	}()
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	approve := exec.Command(itest.MuxBinary(t), "pins", "approve", "rug__lookup", "--config", a.CfgPath)
	approve.Dir = a.Dir
	start := time.Now()
	go func() {
		out, err := approve.CombinedOutput()
		done <- result{out, err}
	}()

	// Poll both replicas, each on one session, every 10 ms.
	ca, cb := a.session(t), b.session(t)
	var servedA, servedB time.Time
	for deadline := start.Add(20 * time.Second); servedA.IsZero() || servedB.IsZero(); time.Sleep(10 * time.Millisecond) {
		if servedA.IsZero() && fleetStatePulled(fleetStateListed(t, ca)) {
			servedA = time.Now()
		}
		if servedB.IsZero() && fleetStatePulled(fleetStateListed(t, cb)) {
			servedB = time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("20s after `pins approve`, viewmux-a serves the approved lookup: %v, viewmux-b: %v\n--- viewmux-b stderr ---\n%s",
				!servedA.IsZero(), !servedB.IsZero(), b.Stderr())
		}
	}
	res := <-done
	if res.err != nil || !strings.Contains(string(res.out), "approved rug__lookup") {
		t.Fatalf("pins approve with viewmux-a's config: %v\n%s", res.err, res.out)
	}
	var at time.Time
	select {
	case at = <-approvedAt:
	case <-time.After(5 * time.Second):
		t.Fatalf("the store published no change of %s for the approval", pins.FileName)
	}
	t.Logf("approval published %v after `pins approve` started; served by viewmux-a %v and viewmux-b %v after it",
		at.Sub(start).Round(time.Millisecond), servedA.Sub(at).Round(time.Millisecond), servedB.Sub(at).Round(time.Millisecond))
	for id, served := range map[string]time.Time{"viewmux-a": servedA, "viewmux-b": servedB} {
		if d := served.Sub(at); d > time.Second {
			t.Errorf("%s served the approved definition %v after the approval, want within 1s", id, d.Round(time.Millisecond))
		}
	}

	// Through nginx, new sessions land on both replicas; every one of
	// them lists and calls the approved lookup.
	ng := startNginx(t, func(listen string) string { return nginxConf(t, listen, a.Addr, b.Addr) })
	on := map[string]int{}
	for range 6 {
		s := itest.OpenRawSession(t, ng.URL(), map[string]string{"Authorization": "Bearer " + fleetStateAgent})
		on[replicaOf(s.ID)]++
		c := &itest.RecHTTP{S: s}
		if got := fleetStateListed(t, c); !fleetStatePulled(got) {
			t.Errorf("session %s through nginx lists %v, want the approved lookup", s.ID, got)
		}
		if r := c.Do(t, "tools/call", `{"name":"rug__lookup","arguments":{"word":"x"}}`); r.Msg.Error != nil || !strings.Contains(string(r.Msg.Result), "lookup ran") {
			t.Errorf("session %s through nginx: call of the approved lookup: %s", s.ID, r.Raw)
		}
	}
	if on["viewmux-a"] == 0 || on["viewmux-b"] == 0 {
		t.Errorf("nginx put the sessions on %v, want both replicas", on)
	}
	if n := f.Rug.Called("lookup"); n != 6 {
		t.Errorf("the approved lookup reached its upstream %d times, want 6", n)
	}
}

// kill SIGKILLs r, as a node's loss would, and waits for it.
func (r *fleetStateReplica) kill(t *testing.T) {
	t.Helper()
	if err := r.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Wait(10 * time.Second); !ok {
		t.Fatalf("%s did not die of SIGKILL", r.ID)
	}
}

// TestFleetStateRestartOnEmptyDisk: both replicas pinned the honest lookup
// and are killed; the rug pull lands while the fleet is down; a replica
// started again on an empty disk does not take the pulled definition as
// a first sight. It keeps the fleet's pins from the store: the changed
// lookup is quarantined from its first listing on, and waits for approval.
func TestFleetStateRestartOnEmptyDisk(t *testing.T) {
	t.Parallel()
	f := newFleetState(t)
	a := f.start(t, "viewmux-a")
	b := f.start(t, "viewmux-b")
	a.await(t, "first sight on viewmux-a", fleetStateHonest)
	b.await(t, "first sight on viewmux-b", fleetStateHonest)
	a.kill(t)
	b.kill(t)

	f.Rug.Pull()
	again := f.start(t, "viewmux-a")
	c := again.session(t)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got := fleetStateListed(t, c)
		if _, ok := got["rug__lookup"]; ok {
			t.Fatalf("viewmux-a restarted on an empty disk lists %v: the pull became its baseline", got)
		}
		if got["rug__other"] != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("viewmux-a restarted lists %v, want rug__other\n%s", got, again.Stderr())
		}
	}
	if got := again.call(t, "rug__lookup"); strings.Contains(got, "lookup ran") {
		t.Errorf("call of the quarantined lookup on the restarted replica: %s", got)
	}
	if n := f.Rug.Called("lookup"); n != 0 {
		t.Errorf("the quarantined lookup reached its upstream %d times", n)
	}
	code, out, errOut := again.pins(t, "list")
	if code != 3 || !strings.Contains(out, "rug__lookup (upstream rug, tool lookup): changed") || !strings.Contains(out, "+   \"description\": \""+itest.RugPulled) {
		t.Errorf("pins list after the restart: exit %d, want 3 and the change of lookup\n%s%s", code, out, errOut)
	}
	if !strings.Contains(again.Stderr(), "pinned tool definition changed") || strings.Contains(again.Stderr(), "pinned tool definitions on first sight") {
		t.Errorf("the restarted replica did not log the change against the fleet's pins:\n%s", again.Stderr())
	}
}

// TestFleetStateNoTokenInStore: a user connects the per-user upstream rug
// (behind a test authorization server) and calls it, and a refresh
// replaces the access token. Then no key or value of the store holds a
// token: not the static bearer tokens of the config, not the upstream's
// API key or the encryption key, not any access token, refresh token or
// code the authorization server issued, neither as it is nor as base64
// or hex.
func TestFleetStateNoTokenInStore(t *testing.T) {
	t.Parallel()
	f := newFleetState(t)
	as := oauthtest.New(t, server.NewStreamableHTTPServer(f.RugSrv))
	f.RugURL, f.PublicURL = as.URL(), "http://"+fleetStatePublic
	f.RugTable = "oauth = true\ncredentials = \"per-user\"\n"
	a := f.start(t, "viewmux-a")

	newFleetStateBrowser(t).connect(t, a.link(t), "alice", a, a, a)
	a.await(t, "rug through alice's connection", fleetStateHonest)
	if got := a.call(t, "rug__lookup"); !strings.Contains(got, "lookup ran") {
		t.Fatalf("alice's call: %s", got)
	}
	as.RevokeAccess() // the next call refreshes
	if got := a.call(t, "rug__lookup"); !strings.Contains(got, "lookup ran") {
		t.Fatalf("alice's call after her access token was revoked: %s", got)
	}
	refreshed := false
	for _, tok := range fleetStateIssued(as) {
		refreshed = refreshed || strings.HasPrefix(tok, "refresh-token-")
	}
	if !refreshed {
		t.Fatal("viewmux did not refresh alice's token: the test saw too few tokens")
	}

	dump := f.dump(t)
	if _, ok := dump["viewmux:doc:"+pins.FileName]; !ok {
		t.Fatalf("the store holds no pins: the search below would look at nothing\n%v", slices.Sorted(maps.Keys(dump)))
	}
	login := false
	for k := range dump {
		login = login || strings.HasPrefix(k, "viewmux:doc:oauth-rug.user-")
	}
	if !login {
		t.Fatalf("the store holds no login of alice: the search below would miss where tokens go\n%v", slices.Sorted(maps.Keys(dump)))
	}
	secrets := append([]string{fleetStateAgent, fleetStateAdmin, fleetStateAPIKey, fleetStateKey,
		"access-token-", "refresh-token-", "code:"}, fleetStateIssued(as)...)
	for k, v := range dump {
		if found := fleetStateReveals(k+"\n"+v, secrets); len(found) != 0 {
			t.Errorf("the store's key %s holds %q", k, found)
		}
	}
	keys := slices.Sorted(maps.Keys(dump))
	t.Logf("%d secrets looked for in the store's keys %q", len(secrets), keys)
}

// fleetStateCodes counts the logins (authorization_code grants) as saw.
func fleetStateCodes(as *oauthtest.Server) int {
	as.Lock()
	defer as.Unlock()
	n := 0
	for _, f := range as.TokenForms {
		if f.Get("grant_type") == "authorization_code" {
			n++
		}
	}
	return n
}

// fleetStateLastCall returns the subject and token of the last call the
// upstream let through.
func fleetStateLastCall(t *testing.T, as *oauthtest.Server) oauthtest.Call {
	t.Helper()
	as.Lock()
	defer as.Unlock()
	if len(as.Calls) == 0 {
		t.Fatal("the upstream saw no call")
	}
	return as.Calls[len(as.Calls)-1]
}

// TestFleetStateConnectAcrossReplicas: the operator logs in once, with
// viewmux-a's config, and both replicas list the upstream. A per-user
// connect link minted by
// viewmux-a is opened on viewmux-a, confirmed on viewmux-b, and the
// authorization server's callback comes back to viewmux-a; a call on
// viewmux-b then reaches the upstream as the user. The ticket and the
// callback are good once for the fleet. Both replicas are then killed,
// and one started again on an empty disk still acts as the user without
// a new login.
func TestFleetStateConnectAcrossReplicas(t *testing.T) {
	t.Parallel()
	f := newFleetState(t)
	as := oauthtest.New(t, server.NewStreamableHTTPServer(f.RugSrv))
	f.RugURL, f.PublicURL = as.URL(), "http://"+fleetStatePublic
	f.RugTable = "oauth = true\ncredentials = \"per-user\"\n"
	a := f.start(t, "viewmux-a")
	b := f.start(t, "viewmux-b")

	// The operator's shared login, made with viewmux-a's config, lists
	// rug on every replica.
	a.operatorLogin(t)
	a.await(t, "rug on viewmux-a after the operator's login", fleetStateHonest)
	b.await(t, "rug on viewmux-b after the operator's login", fleetStateHonest)

	link := a.link(t)
	if !strings.HasPrefix(link, "http://"+fleetStatePublic+"/") {
		t.Fatalf("viewmux-a's link %s is not on the fleet's public URL", link)
	}
	br := newFleetStateBrowser(t)
	cb := br.connect(t, link, "alice", a, b, a)

	if got := b.call(t, "rug__lookup"); !strings.Contains(got, "lookup ran") {
		t.Fatalf("alice's call on viewmux-b: %s\n%s", got, b.Stderr())
	}
	if c := fleetStateLastCall(t, as); c.Subject != "alice" || c.Token == fleetStateAgent {
		t.Fatalf("alice's call on viewmux-b reached the upstream as %q", c.Subject)
	}

	// Good once for the fleet: the ticket on the other replica, the
	// callback replayed on each.
	lu, _ := url.Parse(link)
	br.via(b)
	req, _ := http.NewRequest(http.MethodPost, "http://"+fleetStatePublic+"/oauth/connect/rug",
		strings.NewReader(url.Values{"ticket": {lu.Query().Get("ticket")}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://"+fleetStatePublic)
	if resp, body := br.do(t, req); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("the used ticket posted again on viewmux-b: %d %s", resp.StatusCode, body)
	}
	for _, r := range []*fleetStateReplica{a, b} {
		br.via(r)
		if resp, _ := br.get(t, cb); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("the callback replayed on %s: %d", r.ID, resp.StatusCode)
		}
	}

	codes := fleetStateCodes(as)
	a.kill(t)
	b.kill(t)
	again := f.start(t, "viewmux-b")
	again.await(t, "rug on viewmux-b restarted on an empty disk", fleetStateHonest)
	if got := again.call(t, "rug__lookup"); !strings.Contains(got, "lookup ran") {
		t.Fatalf("alice's call on viewmux-b restarted on an empty disk: %s", got)
	}
	if c := fleetStateLastCall(t, as); c.Subject != "alice" {
		t.Fatalf("alice's call after the restart reached the upstream as %q", c.Subject)
	}
	if n := fleetStateCodes(as); n != codes {
		t.Errorf("alice logged in %d more times after the restart, want 0: the login was not kept", n-codes)
	}
}

// fleetStateModern sends one stateless 2026-07-28 request, as the agent,
// to replica r, and returns the JSON-RPC answer.
func fleetStateModern(t *testing.T, r *fleetStateReplica, method, params string) itest.RecAnswer {
	t.Helper()
	params = itest.WithModernMeta(params)
	h := map[string]string{mcp.HeaderProtocolVersion: mcp.ProtocolVersion20260728, "Authorization": "Bearer " + fleetStateAgent}
	for k, v := range mcp.StandardHeaders(mcp.ProtocolVersion20260728, mcp.MCPMethod(method), json.RawMessage(params)) {
		h[k] = v
	}
	res := itest.RawPost(t, r.URL(), h, itest.RecBody(1, method, params))
	if res.Msg == nil {
		t.Fatalf("2026-07-28 %s on %s: no JSON-RPC answer: %s", method, r.ID, res)
	}
	return itest.RecAnswer{Raw: res.RawMsg, Msg: *res.Msg, Status: res.Status}
}

// TestFleetStateStatelessApproval: a 2026-07-28 client's call of a tool
// that needs a person's approval is asked on viewmux-a and answered on
// viewmux-b, which runs it once. The same answer replayed, on either
// replica, runs nothing; nor does an answer carried by a call with other
// arguments.
func TestFleetStateStatelessApproval(t *testing.T) {
	t.Parallel()
	f := newFleetState(t)
	f.Extra = "approve = [\"rug__lookup\"]\n"
	a := f.start(t, "viewmux-a")
	b := f.start(t, "viewmux-b")
	a.await(t, "rug on viewmux-a", fleetStateHonest)
	b.await(t, "rug on viewmux-b", fleetStateHonest)

	const caps = `"_meta":{"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}}}`
	call := func(word string) string { return `{"name":"rug__lookup","arguments":{"word":"` + word + `"},` + caps }
	// ask sends the call to r and returns its requestState and the key
	// of its one input request.
	ask := func(r *fleetStateReplica, word string) (state, key string) {
		t.Helper()
		ans := fleetStateModern(t, r, "tools/call", call(word)+`}`)
		var res struct {
			ResultType    string                     `json:"resultType"`
			RequestState  string                     `json:"requestState"`
			InputRequests map[string]json.RawMessage `json:"inputRequests"`
		}
		if err := json.Unmarshal(ans.Msg.Result, &res); err != nil || res.ResultType != "input_required" || res.RequestState == "" || len(res.InputRequests) != 1 {
			t.Fatalf("the call on %s: %s, want input_required with one input request", r.ID, ans.Raw)
		}
		for k := range res.InputRequests {
			key = k
		}
		return res.RequestState, key
	}
	// answer retries the call of word on r with the person's yes, and
	// returns what r answered.
	answer := func(r *fleetStateReplica, word, state, key string) string {
		t.Helper()
		ans := fleetStateModern(t, r, "tools/call", call(word)+`,"requestState":`+fleetStateJSON(state)+
			`,"inputResponses":{`+fleetStateJSON(key)+`:{"action":"accept","content":{"allow":true}}}}`)
		return string(ans.Raw)
	}

	state, key := ask(a, "x")
	if n := f.Rug.Called("lookup"); n != 0 {
		t.Fatalf("the upstream ran lookup %d times before the answer", n)
	}
	if got := answer(b, "x", state, key); !strings.Contains(got, "lookup ran") {
		t.Fatalf("the answer on viewmux-b to viewmux-a's question: %s\n%s", got, b.Stderr())
	}
	if n := f.Rug.Called("lookup"); n != 1 {
		t.Fatalf("the upstream ran lookup %d times for one approved call, want 1", n)
	}
	for _, r := range []*fleetStateReplica{a, b} {
		got := answer(r, "x", state, key)
		if strings.Contains(got, "lookup ran") || !strings.Contains(got, "answered already") {
			t.Errorf("the answer replayed on %s: %s, want an error saying it was answered already", r.ID, got)
		}
	}
	// An approval of lookup("x") does not carry lookup("y").
	state, key = ask(a, "x")
	if got := answer(b, "y", state, key); strings.Contains(got, "lookup ran") {
		t.Errorf("an approval of other arguments, answered on viewmux-b, ran the call: %s", got)
	}
	if n := f.Rug.Called("lookup"); n != 1 {
		t.Errorf("the upstream ran lookup %d times, want only the approved call", n)
	}
}

// fleetStateJSON is s as a JSON string.
func fleetStateJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
