//go:build unix

package gateway

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"
	"github.com/viewmux/viewmux/integration/internal/itest"
	"github.com/viewmux/viewmux/upstream/oauth/oauthtest"
)

// TestFleetStateOutage: redis-server is killed under a running fleet.
// The outage is reported (/status.json, viewmux_state_store_up, a WARN)
// and widens nothing: a definition that changes during it is not served,
// a stateless approval cannot be asked (and nothing runs), and a replica
// started during it serves nothing it cannot check, while what was
// verified before it is still served. When redis-server is back, every
// replica reports it up and serves from the store again without a
// restart.
func TestFleetStateOutage(t *testing.T) {
	t.Parallel()
	f := newFleetState(t)
	f.Extra = "approve = [\"rug__lookup\"]\n"
	a := f.start(t, "viewmux-a")
	b := f.start(t, "viewmux-b")
	a.await(t, "first sight on viewmux-a", fleetStateHonest)
	b.await(t, "first sight on viewmux-b", fleetStateHonest)
	if st := a.store(t); !st.Up || st.Engine != "redis" || st.Where != f.Redis.Addr() {
		t.Fatalf("viewmux-a's state store before the outage: %+v, want redis at %s, up", st, f.Redis.Addr())
	}
	if v := a.storeUp(t); v != 1 {
		t.Fatalf("viewmux_state_store_up before the outage: %v, want 1", v)
	}

	f.Redis.Stop()
	// A stateless approval needs the store: asking fails closed.
	ans := fleetStateModern(t, a, "tools/call", `{"name":"rug__lookup","arguments":{"word":"x"},`+
		`"_meta":{"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}}}}`)
	if strings.Contains(string(ans.Raw), "lookup ran") || strings.Contains(string(ans.Raw), "input_required") || !strings.Contains(string(ans.Raw), "state store") {
		t.Errorf("a stateless call needing approval during the outage: %s, want an error naming the state store", ans.Raw)
	}

	for _, r := range []*fleetStateReplica{a, b} {
		st := r.awaitStore(t, false)
		if st.Error == "" || st.Since == "" {
			t.Errorf("%s /status.json during the outage: %+v, want why and since when", r.ID, st)
		}
		if v := r.storeUp(t); v != 0 {
			t.Errorf("%s viewmux_state_store_up during the outage: %v, want 0", r.ID, v)
		}
		itest.WaitStderr(t, r.Mux, "state store is unreachable", 10*time.Second)
		// What was verified before the outage is still served, from memory.
		if got := fleetStateListed(t, r.session(t)); !fleetStateHonest(got) || got["rug__other"] == "" {
			t.Errorf("%s during the outage lists %v, want the verified tools, from memory", r.ID, got)
		}
		if got := r.call(t, "rug__other"); !strings.Contains(got, "other ran") {
			t.Errorf("%s during the outage: call of the verified rug__other: %s", r.ID, got)
		}
	}

	// The pull during the outage: the new definition cannot be checked
	// against the store, and is not served.
	f.Rug.Pull()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(a.Stderr(), "pinned tool definition changed") {
		if time.Now().After(deadline) {
			t.Fatalf("viewmux-a never saw the pull\n%s", a.Stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, r := range []*fleetStateReplica{a, b} {
		if got := fleetStateListed(t, r.session(t)); got["rug__lookup"] == itest.RugPulled {
			t.Errorf("%s serves the definition pulled during the outage: %v", r.ID, got)
		}
	}

	// A replica that starts during the outage has verified nothing.
	c := f.start(t, "viewmux-c")
	c.awaitUpstream(t)
	if st := c.store(t); st.Up {
		t.Errorf("viewmux-c, started during the outage, shows its store up: %+v", st)
	}
	if got := fleetStateListed(t, c.session(t)); len(got) != 0 {
		t.Errorf("viewmux-c, started during the outage, lists %v, want nothing it cannot check", got)
	}
	other := f.Rug.Called("other")
	if got := c.call(t, "rug__other"); strings.Contains(got, "other ran") {
		t.Errorf("viewmux-c, started during the outage, called rug__other: %s", got)
	}
	if f.Rug.Called("other") != other || f.Rug.Called("lookup") != 0 {
		t.Errorf("a call during the outage reached the upstream")
	}

	for _, r := range []*fleetStateReplica{a, b} {
		if n := strings.Count(r.Stderr(), "state store is unreachable"); n != 1 {
			t.Errorf("%s logged the outage %d times, want one WARN (a minute apart)", r.ID, n)
		}
	}
	f.Redis.Start()
	for _, r := range []*fleetStateReplica{a, b, c} {
		r.awaitStore(t, true)
		if v := r.storeUp(t); v != 1 {
			t.Errorf("%s viewmux_state_store_up after the outage: %v, want 1", r.ID, v)
		}
	}
	itest.WaitStderr(t, a.Mux, "state store answers again", 10*time.Second)

	// Everything resumes without a restart: the replica that started
	// during the outage builds its catalog from the store, the pull is
	// still quarantined everywhere, and an approval reaches all three.
	c.await(t, "viewmux-c after the outage", fleetStateQuarantined)
	for _, r := range []*fleetStateReplica{a, b} {
		if got := fleetStateListed(t, r.session(t)); !fleetStateQuarantined(got) {
			t.Errorf("%s after the outage lists %v, want lookup still quarantined", r.ID, got)
		}
	}
	code, out, errOut := c.pins(t, "approve", "rug__lookup")
	if code != 0 || !strings.Contains(out, "approved rug__lookup") {
		t.Fatalf("pins approve after the outage: exit %d\n%s%s", code, out, errOut)
	}
	for _, r := range []*fleetStateReplica{a, b, c} {
		r.await(t, r.ID+" after the approval", fleetStatePulled)
	}
}

// TestFleetStateOutageLogins: with the store down, a login cached in a
// replica's memory keeps working, and a new connect fails with an error
// that says why; with the store back, connecting works again, without a
// restart.
func TestFleetStateOutageLogins(t *testing.T) {
	t.Parallel()
	f := newFleetState(t)
	as := oauthtest.New(t, server.NewStreamableHTTPServer(f.RugSrv))
	f.RugURL, f.PublicURL = as.URL(), "http://"+fleetStatePublic
	f.RugTable = "oauth = true\ncredentials = \"per-user\"\n"
	f.Pin = "off" // logins alone: the pins' outage is TestFleetStateOutage's
	a := f.start(t, "viewmux-a")
	a.operatorLogin(t)
	a.await(t, "rug after the operator's login", fleetStateHonest)
	newFleetStateBrowser(t).connect(t, a.link(t), "alice", a, a, a)
	if got := a.call(t, "rug__lookup"); !strings.Contains(got, "lookup ran") {
		t.Fatalf("alice's call: %s", got)
	}

	f.Redis.Stop()
	// The connect needs the store (and so is the first to find it down).
	resp, body := puGet(t, itest.RawClient, "http://"+a.Addr+"/oauth/connect/rug", map[string]string{"Authorization": "Bearer " + fleetStateAgent})
	if resp.StatusCode == http.StatusOK && fleetStateLink.MatchString(body) {
		t.Errorf("a connect link was minted during the outage: %s", body)
	} else if !strings.Contains(body, "state store") {
		t.Errorf("a connect during the outage: %d %q, want an error naming the state store", resp.StatusCode, body)
	}
	a.awaitStore(t, false)
	if got := a.call(t, "rug__lookup"); !strings.Contains(got, "lookup ran") {
		t.Errorf("alice's call during the outage, with her login in memory: %s", got)
	}
	if c := fleetStateLastCall(t, as); c.Subject != "alice" {
		t.Errorf("alice's call during the outage reached the upstream as %q", c.Subject)
	}

	f.Redis.Start()
	a.awaitStore(t, true)
	newFleetStateBrowser(t).connect(t, a.link(t), "alice", a, a, a)
	if got := a.call(t, "rug__lookup"); !strings.Contains(got, "lookup ran") {
		t.Errorf("alice's call after she connected again: %s", got)
	}
}
