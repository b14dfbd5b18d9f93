//go:build unix

package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"
	"github.com/viewmux/viewmux/integration/internal/itest"
	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/internal/state/statetest"
)

// Helpers of fleet_state_test.go: replicas of one gateway whose state is
// kept in one real redis-server, each with a disk (server.state_dir) of
// its own, so that nothing they share goes through a file.

// The secrets of the fleet's config. None of them may reach the store.
const (
	fleetStateAgent  = "fleet-state-agent-token-0001"
	fleetStateAdmin  = "fleet-state-admin-token-0002"
	fleetStateAPIKey = "fleet-state-upstream-api-key-0003"
	fleetStateKey    = "5f3c9a0e7d21b4c68e9f0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f"
)

// fleetStateRug is what the tests use of itest.StartRug's upstream.
type fleetStateRug interface {
	Pull()
	Called(name string) int
}

// fleetState is one gateway: a redis-server and the upstream rug, pinned
// under quarantine, which its replicas share. Replicas are started with
// start, each on an empty state_dir.
type fleetState struct {
	Redis  *statetest.Redis
	Rug    fleetStateRug
	RugSrv *server.MCPServer // rug's MCP server, to put behind another front
	// RugURL is the MCP endpoint of rug. RugTable is TOML added to its
	// table; Extra, to the end of every replica's config.
	RugURL, RugTable, Extra string
	// PublicURL is server.public_url: where browsers reach the fleet.
	PublicURL string
	// Pin is server.pin; "" is quarantine.
	Pin string
}

// newFleetState starts a redis-server (with its append-only file, so that
// a restart of the server keeps what it held) and the rug upstream.
func newFleetState(t *testing.T) *fleetState {
	t.Helper()
	rug := itest.StartRug(t)
	return &fleetState{Redis: statetest.StartRedis(t, statetest.Options{AOF: true}), Rug: rug, RugSrv: rug.Srv, RugURL: rug.URL}
}

// config is the config of replica id with its state_dir under dir.
func (f *fleetState) config(id, dir string) string {
	pin := f.Pin
	if pin == "" {
		pin = "quarantine"
	}
	server := ""
	if f.PublicURL != "" {
		server = fmt.Sprintf("public_url = %q\n", f.PublicURL)
	}
	return fmt.Sprintf(`[server]
%sreplica_id = %q
pin = %q
state_dir = %s

[state]
url = %q
encryption_key = %q

[[auth.tokens]]
token = %q
profiles = ["agent"]

[[auth.tokens]]
token = %q
profiles = ["agent"]
admin = true

[upstreams.rug]
url = %s
headers = { X-Api-Key = %q }
%s
[profiles.agent]
%s`, server, id, pin, itest.TomlString(filepath.Join(dir, "state")), f.Redis.URL(), fleetStateKey,
		fleetStateAgent, fleetStateAdmin, itest.TomlString(f.RugURL), fleetStateAPIKey, f.RugTable, f.Extra)
}

// fleetStateReplica is one running replica.
type fleetStateReplica struct {
	*itest.Mux
	ID      string
	CfgPath string
}

// start starts replica id in a new directory: its disk is empty.
func (f *fleetState) start(t *testing.T, id string) *fleetStateReplica {
	t.Helper()
	dir := t.TempDir()
	m := itest.StartMuxWith(t, itest.MuxOptions{Config: f.config(id, dir), Dir: dir})
	return &fleetStateReplica{Mux: m, ID: id, CfgPath: filepath.Join(dir, "viewmux.toml")}
}

// watch returns the keys of the documents that change in the store, as a
// store of the test's own sees them, once its subscription holds.
func (f *fleetState) watch(t *testing.T) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch := f.Redis.Open(t, state.RedisOptions{}).Watch(ctx)
	select {
	case k := <-ch:
		if k != "" {
			t.Fatalf("the store's change feed began with %q, want the subscription's \"\"", k)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no subscription to the store's change feed within 10s")
	}
	return ch
}

// dump returns every key of the store with its values joined.
func (f *fleetState) dump(t *testing.T) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := f.Redis.Dump(ctx)
	if err != nil {
		t.Fatalf("dump of the store: %v", err)
	}
	out := make(map[string]string, len(d))
	for k, v := range d {
		out[k] = strings.Join(v, "\n")
	}
	return out
}

// session opens a /mcp session of the agent token.
func (r *fleetStateReplica) session(t *testing.T) *itest.RecHTTP {
	t.Helper()
	return &itest.RecHTTP{S: itest.OpenRawSession(t, r.URL(), map[string]string{"Authorization": "Bearer " + fleetStateAgent})}
}

// listed returns the tools c lists, by name, with their descriptions.
func fleetStateListed(t *testing.T, c *itest.RecHTTP) map[string]string {
	t.Helper()
	a := c.Do(t, "tools/list", `{}`)
	var res struct {
		Tools []struct{ Name, Description string }
	}
	if a.Msg.Error != nil || json.Unmarshal(a.Msg.Result, &res) != nil {
		t.Fatalf("tools/list: %s", a.Raw)
	}
	out := map[string]string{}
	for _, tool := range res.Tools {
		out[tool.Name] = tool.Description
	}
	return out
}

// await polls what a session of r lists, every 10 ms, until ok holds, and
// returns it with the moment ok was first seen; it fails the test after
// a generous bound (what the tests measure, they measure from the
// moment returned).
func (r *fleetStateReplica) await(t *testing.T, what string, ok func(map[string]string) bool) (map[string]string, time.Time) {
	t.Helper()
	c := r.session(t)
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := fleetStateListed(t, c)
		if ok(got) {
			return got, time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s still lists %v\n--- %s stderr ---\n%s", what, r.ID, got, r.ID, r.Stderr())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// call calls tool on a new session and returns the result's text, or the
// error's message.
func (r *fleetStateReplica) call(t *testing.T, tool string) string {
	t.Helper()
	a := r.session(t).Do(t, "tools/call", `{"name":`+fmt.Sprintf("%q", tool)+`,"arguments":{"word":"x"}}`)
	if a.Msg.Error != nil {
		return "error: " + a.Msg.Error.Message
	}
	return string(a.Msg.Result)
}

// pins runs `viewmux pins ARGS --config` with r's config: the command an
// operator runs beside replica r.
func (r *fleetStateReplica) pins(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return itest.RunMux(t, 30*time.Second, r.Dir, nil, append(append([]string{"pins"}, args...), "--config", r.CfgPath)...)
}

// fleetStateStore is the state_store of /status.json.
type fleetStateStore struct {
	Engine string `json:"engine"`
	Where  string `json:"where"`
	Up     bool   `json:"up"`
	Since  string `json:"since"`
	Error  string `json:"error"`
}

// fleetStateStatus is what the tests read of /status.json.
type fleetStateStatus struct {
	Store     *fleetStateStore `json:"state_store"`
	Upstreams []struct {
		Name        string `json:"name"`
		State       string `json:"state"`
		Tools       int    `json:"tools"`
		Quarantined int    `json:"quarantined"`
	} `json:"upstreams"`
}

// status returns r's /status.json, as the admin sees it.
func (r *fleetStateReplica) status(t *testing.T) fleetStateStatus {
	t.Helper()
	resp, body := puGet(t, itest.RawClient, "http://"+r.Addr+"/status.json", map[string]string{"Authorization": "Bearer " + fleetStateAdmin})
	var st fleetStateStatus
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil || st.Store == nil {
		t.Fatalf("%s /status.json: %d %s", r.ID, resp.StatusCode, body)
	}
	return st
}

// store returns the state store's row of r's /status.json.
func (r *fleetStateReplica) store(t *testing.T) fleetStateStore {
	t.Helper()
	return *r.status(t).Store
}

// awaitStore polls r's /status.json until its store is up (or down),
// and returns the row.
func (r *fleetStateReplica) awaitStore(t *testing.T, up bool) fleetStateStore {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := r.store(t)
		if st.Up == up {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s /status.json: state store %+v, want up = %v\n--- %s stderr ---\n%s", r.ID, st, up, r.ID, r.Stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitUpstream polls r's /status.json until its upstream rug is up.
func (r *fleetStateReplica) awaitUpstream(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := r.status(t)
		if len(st.Upstreams) == 1 && st.Upstreams[0].State == "up" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s /status.json: upstreams %+v, want rug up\n--- %s stderr ---\n%s", r.ID, st.Upstreams, r.ID, r.Stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// storeUp returns r's gauge viewmux_state_store_up, as the admin
// scrapes it.
func (r *fleetStateReplica) storeUp(t *testing.T) float64 {
	t.Helper()
	resp, body := puGet(t, itest.RawClient, "http://"+r.Addr+"/metrics", map[string]string{"Authorization": "Bearer " + fleetStateAdmin})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s /metrics: %d %s", r.ID, resp.StatusCode, body)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, "viewmux_state_store_up "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s /metrics: %q: %v", r.ID, line, err)
			}
			return f
		}
	}
	t.Fatalf("%s /metrics has no viewmux_state_store_up", r.ID)
	return 0
}
