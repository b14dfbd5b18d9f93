//go:build unix

package access

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

func startPins(t *testing.T, mode string) *itest.PinsEnv {
	t.Helper()
	env := &itest.PinsEnv{Rug: itest.StartRug(t), Dir: t.TempDir()}
	env.CfgPath = filepath.Join(env.Dir, "viewmux.toml")
	env.AuditLog = filepath.Join(env.Dir, "audit.jsonl")
	cfg := fmt.Sprintf(`[server]
pin = %q
state_dir = %s

[audit]
path = %s

[upstreams.rug]
url = %s

[profiles.agent]
`, mode, itest.TomlString(filepath.Join(env.Dir, "state")), itest.TomlString(env.AuditLog), itest.TomlString(env.Rug.URL))
	env.Mux = itest.StartMuxWith(t, itest.MuxOptions{Config: cfg, Dir: env.Dir})
	return env
}

// TestPinsQuarantine is the rug pull: lookup is pinned on first sight,
// then its upstream rewrites its description. Under quarantine the tool
// disappears from every door as if it did not exist, the upstream is never
// sent a call of it, `viewmux pins list` shows the diff, and `viewmux pins
// approve` (the real binary, against the same state_dir) brings it back
// in the running server. The change and the approval are audited.
func TestPinsQuarantine(t *testing.T) {
	env := startPins(t, "quarantine")
	env.Await(t, "first sight", func(m map[string]string) bool { return m["rug__lookup"] == itest.RugHonest })
	if code, out, errOut := env.Cli(t, "list"); code != 0 || !strings.Contains(out, "no pending changes") {
		t.Fatalf("pins list before any change: exit %d\n%s%s", code, out, errOut)
	}

	env.Rug.Pull()
	env.Await(t, "quarantine", func(m map[string]string) bool { _, ok := m["rug__lookup"]; return !ok && m["rug__other"] != "" })

	for _, d := range visDoors(env.Mux, env.CfgPath, "agent") {
		t.Run(d.Name, func(t *testing.T) {
			c := d.Open(t)
			got := visListed(t, "tools/list", c.Do(t, "tools/list", `{}`))
			if slices.Contains(got, "rug__lookup") || !slices.Contains(got, "rug__other") {
				t.Errorf("tools/list = %q, want rug__other and no rug__lookup", got)
			}
			call := `{"name":%q,"arguments":{"word":"x"}}`
			hidden := c.Do(t, "tools/call", fmt.Sprintf(call, "rug__lookup"))
			missing := c.Do(t, "tools/call", fmt.Sprintf(call, "rug__nolook"))
			visSame(t, "tools/call", hidden, missing, "rug__lookup", "rug__nolook")
		})
	}
	if n := env.Rug.Called("lookup"); n != 0 {
		t.Fatalf("the quarantined lookup reached its upstream %d times", n)
	}

	code, out, errOut := env.Cli(t, "list")
	if code != 3 || !strings.Contains(out, "rug__lookup (upstream rug, tool lookup): changed") ||
		!strings.Contains(out, `-   "description": "`+itest.RugHonest+`",`) || !strings.Contains(out, `+   "description": "`+itest.RugPulled+`",`) {
		t.Fatalf("pins list: exit %d, want 3 and the diff of lookup's description\n%s%s", code, out, errOut)
	}
	code, out, _ = env.Cli(t, "list", "--json")
	var pending []struct{ Upstream, Tool, Exposed, Kind string }
	if code != 3 || json.Unmarshal([]byte(out), &pending) != nil || len(pending) != 1 || pending[0].Exposed != "rug__lookup" || pending[0].Kind != "changed" {
		t.Fatalf("pins list --json: exit %d\n%s", code, out)
	}
	// `viewmux check` counts the quarantined tool; it is not an error.
	if code, out, errOut := itest.RunMux(t, 30*time.Second, env.Dir, nil, "check", "--config", env.CfgPath); code != 0 ||
		!strings.Contains(out, "1 quarantined: changed since pinned") {
		t.Errorf("viewmux check: exit %d, want 0 and the quarantined tool counted\n%s%s", code, out, errOut)
	}
	// `viewmux tools` shows what a client gets: not the quarantined tool.
	if code, out, errOut := itest.RunMux(t, 30*time.Second, env.Dir, nil, "tools", "--config", env.CfgPath, "--profile", "agent"); code != 0 ||
		strings.Contains(out, "rug__lookup") || !strings.Contains(out, "rug__other") {
		t.Errorf("viewmux tools: exit %d, want rug__other and no rug__lookup\n%s%s", code, out, errOut)
	}
	if recs := env.AuditPins(t); len(recs) != 1 || recs[0]["tool"] != "rug__lookup" || recs[0]["reason"] != "pin_changed" || recs[0]["decision"] != "denied" || recs[0]["upstream"] != "rug" {
		t.Fatalf("audit log, pins records: %v; want one pin_changed, denied, of rug__lookup", recs)
	}
	if !strings.Contains(env.Mux.Stderr(), "pinned tool definition changed") {
		t.Errorf("viewmux logged no change:\n%s", env.Mux.Stderr())
	}

	if code, out, errOut := env.Cli(t, "approve", "rug__nope"); code != 1 || !strings.Contains(errOut, `no pending change for tool "rug__nope"`) {
		t.Errorf("approve of a tool with no change: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := env.Cli(t, "approve", "rug__lookup"); code != 0 || !strings.Contains(out, "approved rug__lookup") {
		t.Fatalf("pins approve: exit %d\n%s%s", code, out, errOut)
	}
	env.Await(t, "approved", func(m map[string]string) bool { return m["rug__lookup"] == itest.RugPulled })
	c := &itest.RecHTTP{S: itest.OpenRawSession(t, env.Mux.URL()+"?profile=agent", nil)}
	if a := c.Do(t, "tools/call", `{"name":"rug__lookup","arguments":{"word":"x"}}`); a.Msg.Error != nil || !strings.Contains(string(a.Msg.Result), "lookup ran") {
		t.Errorf("call of the approved tool: %s", a)
	}
	if n := env.Rug.Called("lookup"); n != 1 {
		t.Errorf("the approved lookup reached its upstream %d times, want 1", n)
	}
	recs := env.AuditPins(t)
	if len(recs) != 2 || recs[1]["reason"] != "pin_approved" || recs[1]["tool"] != "rug__lookup" || recs[1]["hash"] != recs[0]["hash"] {
		t.Errorf("audit log, pins records: %v; want the change, then its approval with the same hash", recs)
	}
	if code, out, errOut := env.Cli(t, "list"); code != 0 {
		t.Errorf("pins list after approval: exit %d\n%s%s", code, out, errOut)
	}
}

// TestPinsWarn: under warn the changed tool stays listed and callable,
// and the change is logged with its diff, counted and audited.
func TestPinsWarn(t *testing.T) {
	env := startPins(t, "warn")
	env.Await(t, "first sight", func(m map[string]string) bool { return m["rug__lookup"] == itest.RugHonest })
	env.Rug.Pull()
	env.Await(t, "changed", func(m map[string]string) bool { return m["rug__lookup"] == itest.RugPulled })

	c := &itest.RecHTTP{S: itest.OpenRawSession(t, env.Mux.URL()+"?profile=agent", nil)}
	if a := c.Do(t, "tools/call", `{"name":"rug__lookup","arguments":{"word":"x"}}`); a.Msg.Error != nil {
		t.Errorf("call of the changed tool under warn: %s", a)
	}
	if n := env.Rug.Called("lookup"); n != 1 {
		t.Errorf("lookup reached its upstream %d times, want 1", n)
	}
	logs := env.Mux.Stderr()
	if !strings.Contains(logs, "level=WARN msg=\"pinned tool definition changed") || !strings.Contains(logs, "quarantined=false") ||
		!strings.Contains(logs, `+   \"description\": \"`+itest.RugPulled) {
		t.Errorf("no WARN line with the diff of lookup's description:\n%s", logs)
	}
	if recs := env.AuditPins(t); len(recs) != 1 || recs[0]["reason"] != "pin_changed" || recs[0]["decision"] != "allowed" {
		t.Errorf("audit log, pins records: %v; want one pin_changed, allowed", recs)
	}
	resp, err := http.Get("http://" + env.Mux.Addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(metrics), `viewmux_pin_changes_total{kind="changed",upstream="rug"} 1`) {
		t.Errorf("/metrics has no count of the change:\n%s", grepLines(string(metrics), "pin"))
	}
	if code, out, errOut := env.Cli(t, "list"); code != 3 || !strings.Contains(out, "rug__lookup") {
		t.Errorf("pins list under warn: exit %d, want 3 and lookup\n%s%s", code, out, errOut)
	}
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestPinsNewTool: a tool the demo server adds at run time (add_tool) on
// an upstream whose tools are pinned is quarantined like a change, and
// `viewmux pins approve --upstream` brings it in.
func TestPinsNewTool(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "viewmux.toml")
	mux := itest.StartMuxWith(t, itest.MuxOptions{Dir: dir, Config: fmt.Sprintf(`[server]
pin = "quarantine"
state_dir = %s

[upstreams.demo]
command = %s
args = ["demo-server", "--name", "demo"]
required = true
`, itest.TomlString(filepath.Join(dir, "state")), itest.TomlString(itest.MuxBinary(t)))})
	c := &itest.RecHTTP{S: itest.OpenRawSession(t, mux.URL(), nil)}
	if a := c.Do(t, "tools/call", `{"name":"demo__add_tool","arguments":{"name":"fresh"}}`); a.Msg.Error != nil || !strings.Contains(string(a.Msg.Result), "added fresh") {
		t.Fatalf("add_tool: %s", a)
	}
	pendingFresh := func() bool {
		code, out, _ := itest.RunMux(t, 30*time.Second, dir, nil, "pins", "list", "--json", "--config", cfgPath)
		return code == 3 && strings.Contains(out, `"exposed": "demo__fresh"`) && strings.Contains(out, `"kind": "new"`)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !pendingFresh() {
		if time.Now().After(deadline) {
			t.Fatalf("demo__fresh never became pending\n--- viewmux stderr ---\n%s", mux.Stderr())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := visListed(t, "tools/list", c.Do(t, "tools/list", `{}`)); slices.Contains(got, "demo__fresh") || !slices.Contains(got, "demo__echo") {
		t.Errorf("tools/list = %q, want demo__echo and no demo__fresh", got)
	}
	hidden := c.Do(t, "tools/call", `{"name":"demo__fresh","arguments":{}}`)
	missing := c.Do(t, "tools/call", `{"name":"demo__stale","arguments":{}}`)
	visSame(t, "tools/call", hidden, missing, "demo__fresh", "demo__stale")

	if code, out, errOut := itest.RunMux(t, 30*time.Second, dir, nil, "pins", "approve", "--upstream", "demo", "--config", cfgPath); code != 0 || !strings.Contains(out, "approved demo__fresh") {
		t.Fatalf("pins approve --upstream demo: exit %d\n%s%s", code, out, errOut)
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		a := c.Do(t, "tools/call", `{"name":"demo__fresh","arguments":{"k":1}}`)
		if a.Msg.Error == nil {
			if !strings.Contains(string(a.Msg.Result), `{\"k\":1}`) {
				t.Errorf("the approved demo__fresh answered %s", a)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo__fresh is still refused after approval: %s", a)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
