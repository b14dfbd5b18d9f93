//go:build unix

package access

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// The upstream-visibility tests: prompts, resources and
// resource templates are filtered by the upstream serving them, on every
// door. Two recording upstreams, a (2025-11-25) and b (2026-07-28), each
// serve tools, the prompts greet and broken, the resources notes and
// broken, the template rec://<name>/files/{path} and completions. A hidden
// upstream's prompt, resource, template or completion ref must answer
// exactly as one that does not exist, and nothing may reach the upstream.

// visConfig mounts a and b with three profiles: open (no rules), none
// (deny = ["*"]: both upstreams serve tools, none is in the view) and
// only-a (upstreams = ["a"]).
func visConfig(a, b *itest.Recorder) string { return visConfigWith(a, b, `"a"`) }

// visConfigWith is visConfig with only-a's upstreams list as given (TOML
// array items).
func visConfigWith(a, b *itest.Recorder, onlyA string) string {
	return fmt.Sprintf(`[server]
shutdown_grace = "5s"
default_profile = "open"

[upstreams.a]
url = %[1]s
required = true
call_timeout = "2s"

[upstreams.b]
url = %[2]s
protocol = "2026-07-28"
required = true
call_timeout = "2s"

[profiles.open]
read_only = false

[profiles.none]
deny = ["*"]

[profiles.only-a]
upstreams = [%[3]s]
`, itest.TomlString(a.URL), itest.TomlString(b.URL), onlyA)
}

// visDoors is RecDoors for any profile.
func visDoors(mux *itest.Mux, cfgPath, profile string) []itest.RecDoor {
	q := "?profile=" + profile
	return []itest.RecDoor{
		{Name: "http", Open: func(t *testing.T) itest.RecClient {
			return &itest.RecHTTP{S: itest.OpenRawSession(t, mux.URL()+q, nil)}
		}},
		{Name: "http 2026-07-28", Modern: true, Open: func(t *testing.T) itest.RecClient {
			return &itest.RecModern{URL: mux.URL() + q}
		}},
		{Name: "ws", Open: func(t *testing.T) itest.RecClient {
			return itest.OpenWS(t, "ws://"+mux.Addr+"/ws"+q, true)
		}},
		{Name: "sse", Open: func(t *testing.T) itest.RecClient {
			return itest.OpenSSE(t, "http://"+mux.Addr, "/sse"+q, true)
		}},
		{Name: "stdio", Open: func(t *testing.T) itest.RecClient {
			c, _ := itest.OpenStdioStream(t, cfgPath, profile, true)
			return c
		}},
	}
}

// visEnv is one viewmux in front of the recorders a and b.
type visEnv struct {
	mux     *itest.Mux
	cfgPath string
	a, b    *itest.Recorder
}

func startVisibility(t *testing.T) *visEnv {
	t.Helper()
	env := &visEnv{a: itest.StartRecorder(t, "a", false), b: itest.StartRecorder(t, "b", true)}
	env.mux = itest.StartMux(t, visConfig(env.a, env.b))
	env.cfgPath = filepath.Join(env.mux.Dir, "viewmux.toml")
	return env
}

// visSent returns the requests u got since mark that a client's get, read,
// completion or subscription causes.
func visSent(u *itest.Recorder, mark int) []itest.RecRequest {
	u.Mu.Lock()
	defer u.Mu.Unlock()
	var out []itest.RecRequest
	for _, r := range u.Seen[mark:] {
		switch mcp.MCPMethod(r.Method) {
		case mcp.MethodPromptsGet, mcp.MethodResourcesRead, mcp.MethodCompletionComplete,
			mcp.MethodResourcesSubscribe, mcp.MethodResourcesUnsubscribe, mcp.MethodToolsCall:
			out = append(out, r)
		}
	}
	return out
}

// visListed returns the names (prompts, tools), URIs (resources) or URI
// templates (templates) a listing answer holds.
func visListed(t *testing.T, method string, a itest.RecAnswer) []string {
	t.Helper()
	if a.Msg.Error != nil || a.Msg.Result == nil {
		t.Fatalf("%s: %s", method, a)
	}
	var r struct {
		Prompts   []struct{ Name string }        `json:"prompts"`
		Tools     []struct{ Name string }        `json:"tools"`
		Resources []struct{ URI string }         `json:"resources"`
		Templates []struct{ URITemplate string } `json:"resourceTemplates"`
		Cursor    string                         `json:"nextCursor"`
	}
	if err := json.Unmarshal(a.Msg.Result, &r); err != nil {
		t.Fatalf("%s: result does not decode: %v: %s", method, err, a)
	}
	if r.Cursor != "" {
		t.Errorf("%s: a listing served from the view has no further page: %s", method, a)
	}
	var out []string
	switch method {
	case "prompts/list":
		for _, p := range r.Prompts {
			out = append(out, p.Name)
		}
	case "tools/list":
		for _, p := range r.Tools {
			out = append(out, p.Name)
		}
	case "resources/list":
		for _, p := range r.Resources {
			out = append(out, p.URI)
		}
	case "resources/templates/list":
		for _, p := range r.Templates {
			out = append(out, p.URITemplate)
		}
	}
	slices.Sort(out)
	return out
}

// visSame fails unless hidden and missing, the answers to the same request
// naming a hidden and a nonexistent target, are errors and identical byte
// for byte once each one's id and target are blanked.
func visSame(t *testing.T, what string, hidden, missing itest.RecAnswer, hiddenName, missingName string) {
	t.Helper()
	if hidden.Msg.Error == nil {
		t.Errorf("%s: a hidden %s was answered: %s", what, hiddenName, hidden)
		return
	}
	blank := func(a itest.RecAnswer, name string) string {
		s := strings.Replace(string(a.Raw), `"id":`+string(a.Msg.ID), `"id":ID`, 1)
		return strings.ReplaceAll(s, name, "TARGET")
	}
	if h, m := blank(hidden, hiddenName), blank(missing, missingName); h != m || hidden.Status != missing.Status {
		t.Errorf("%s: hidden and nonexistent answer differently:\n hidden:      HTTP %d %s\n nonexistent: HTTP %d %s", what, hidden.Status, h, missing.Status, m)
	}
}

// visProbe is one request against a target of a hidden upstream and the
// same request against one that exists nowhere.
type visProbe struct {
	what            string
	method          string
	params          string // %s is the target
	hidden, missing string
	legacyOnly      bool // resources/subscribe is a session's (2026-07-28 listens instead)
}

// visHiddenProbes are the requests against upstream up (hidden) and a
// nonexistent upstream z, with names of equal length.
func visHiddenProbes(up string) []visProbe {
	return []visProbe{
		{what: "prompts/get", method: "prompts/get", params: `{"name":%q,"arguments":{"who":"x"}}`,
			hidden: up + "__greet", missing: "z__greet"},
		{what: "resources/read of a listed resource", method: "resources/read", params: `{"uri":%q}`,
			hidden: "rec://" + up + "/notes", missing: "rec://z/notes"},
		{what: "resources/read of a templated URI", method: "resources/read", params: `{"uri":%q}`,
			hidden: "rec://" + up + "/files/secret.txt", missing: "rec://z/files/secret.txt"},
		{what: "completion/complete of a prompt", method: "completion/complete",
			params: `{"ref":{"type":"ref/prompt","name":%q},"argument":{"name":"who","value":"x"}}`,
			hidden: up + "__greet", missing: "z__greet"},
		{what: "completion/complete of a template", method: "completion/complete",
			params: `{"ref":{"type":"ref/resource","uri":%q},"argument":{"name":"path","value":"s"}}`,
			hidden: "rec://" + up + "/files/{path}", missing: "rec://z/files/{path}"},
		{what: "resources/subscribe", method: "resources/subscribe", params: `{"uri":%q}`,
			hidden: "rec://" + up + "/notes", missing: "rec://z/notes", legacyOnly: true},
	}
}

// checkHidden runs the probes against up through c and checks that each
// hidden answer is the nonexistent one and that neither recorder was sent
// anything.
func (env *visEnv) checkHidden(t *testing.T, d itest.RecDoor, c itest.RecClient, up string) {
	t.Helper()
	ma, mb := env.a.Mark(), env.b.Mark()
	for _, p := range visHiddenProbes(up) {
		if p.legacyOnly && d.Modern {
			continue
		}
		hidden := c.Do(t, p.method, fmt.Sprintf(p.params, p.hidden))
		missing := c.Do(t, p.method, fmt.Sprintf(p.params, p.missing))
		visSame(t, p.what, hidden, missing, p.hidden, p.missing)
	}
	// A request is recorded before it is answered, and every answer above
	// has arrived: whatever was forwarded is in the record by now.
	if got := append(visSent(env.a, ma), visSent(env.b, mb)...); len(got) > 0 {
		t.Errorf("hidden or nonexistent targets reached an upstream:\n%s", itest.RecDescribe(got))
	}
}

func TestVisibilityDenyAll(t *testing.T) {
	env := startVisibility(t)
	for _, d := range visDoors(env.mux, env.cfgPath, "none") {
		t.Run(d.Name, func(t *testing.T) {
			c := d.Open(t)
			for _, method := range []string{"tools/list", "prompts/list", "resources/list", "resources/templates/list"} {
				if got := visListed(t, method, c.Do(t, method, `{}`)); len(got) != 0 {
					t.Errorf("%s under deny = [\"*\"] lists %q, want nothing", method, got)
				}
			}
			env.checkHidden(t, d, c, "a")
			env.checkHidden(t, d, c, "b")
		})
	}
}

func TestVisibilityNamedUpstream(t *testing.T) {
	env := startVisibility(t)
	want := map[string][]string{
		"tools/list":               {"a__echo", "a__fail", "a__hang", "a__run", "a__secret_tool"},
		"prompts/list":             {"a__broken", "a__greet"},
		"resources/list":           {"rec://a/broken", "rec://a/notes"},
		"resources/templates/list": {"rec://a/files/{path}"},
	}
	for _, d := range visDoors(env.mux, env.cfgPath, "only-a") {
		t.Run(d.Name, func(t *testing.T) {
			c := d.Open(t)
			for method, w := range want {
				if got := visListed(t, method, c.Do(t, method, `{}`)); !slices.Equal(got, w) {
					t.Errorf("%s under upstreams = [\"a\"] lists %q, want %q", method, got, w)
				}
			}
			// A page after a cursor (which mcp-go answers, not the cached
			// listing) keeps only the shown upstream's items too. mcp-go's
			// cursor is the base64 of the last name seen.
			cursor := func(name string) string {
				return `{"cursor":"` + base64.StdEncoding.EncodeToString([]byte(name)) + `"}`
			}
			paged := map[string]struct {
				after string
				want  []string
			}{
				"prompts/list":             {"a__broken", []string{"a__greet"}},
				"resources/list":           {"broken", []string{"rec://a/notes"}},
				"resources/templates/list": {"a", []string{"rec://a/files/{path}"}},
			}
			for method, p := range paged {
				if got := visListed(t, method, c.Do(t, method, cursor(p.after))); !slices.Equal(got, p.want) {
					t.Errorf("%s after %q under upstreams = [\"a\"] lists %q, want %q", method, p.after, got, p.want)
				}
			}

			env.checkHidden(t, d, c, "b")
			// A tool of an unnamed upstream is hidden too, and answers as
			// an unknown one.
			hidden := c.Do(t, "tools/call", `{"name":"b__echo","arguments":{}}`)
			missing := c.Do(t, "tools/call", `{"name":"z__echo","arguments":{}}`)
			visSame(t, "tools/call", hidden, missing, "b__echo", "z__echo")

			// The shown upstream still works, and gets what it is asked.
			visible := []struct {
				method, params, sent string // sent: what a's request must carry
			}{
				{"prompts/get", `{"name":"a__greet","arguments":{"who":"x"}}`, `"name":"greet"`},
				{"resources/read", `{"uri":"rec://a/notes"}`, `"uri":"rec://a/notes"`},
				{"resources/read", `{"uri":"rec://a/files/readme.txt"}`, `"uri":"rec://a/files/readme.txt"`},
				{"completion/complete", `{"ref":{"type":"ref/prompt","name":"a__greet"},"argument":{"name":"who","value":"x"}}`, `"name":"greet"`},
				{"completion/complete", `{"ref":{"type":"ref/resource","uri":"rec://a/files/{path}"},"argument":{"name":"path","value":"r"}}`, `"uri":"rec://a/files/{path}"`},
			}
			for _, v := range visible {
				m := env.a.Mark()
				a := c.Do(t, v.method, v.params)
				if a.Msg.Error != nil || a.Msg.Result == nil {
					t.Errorf("%s %s on the shown upstream: %s", v.method, v.params, a)
					continue
				}
				got := visSent(env.a, m)
				if len(got) != 1 || got[0].Method != v.method || !strings.Contains(string(got[0].Body), v.sent) {
					t.Errorf("%s %s: upstream a was sent:\n%s", v.method, v.params, itest.RecDescribe(got))
				}
			}
			if !d.Modern {
				if a := c.Do(t, "resources/subscribe", `{"uri":"rec://a/notes"}`); a.Msg.Error != nil {
					t.Errorf("resources/subscribe on the shown upstream: %s", a)
				}
				// Unsubscribing a hidden URI the session never subscribed to
				// answers as for any such URI, and sends nothing.
				mb := env.b.Mark()
				hidden := c.Do(t, "resources/unsubscribe", `{"uri":"rec://b/notes"}`)
				missing := c.Do(t, "resources/unsubscribe", `{"uri":"rec://z/notes"}`)
				if strings.Replace(string(hidden.Raw), `"id":`+string(hidden.Msg.ID), "", 1) != strings.Replace(string(missing.Raw), `"id":`+string(missing.Msg.ID), "", 1) {
					t.Errorf("resources/unsubscribe: hidden %s, nonexistent %s", hidden, missing)
				}
				if got := visSent(env.b, mb); len(got) > 0 {
					t.Errorf("resources/unsubscribe of a hidden URI reached b:\n%s", itest.RecDescribe(got))
				}
			}
		})
	}
}

// TestVisibilityListen: a 2026-07-28 subscriptions/listen cannot subscribe
// to a hidden upstream's resources; it is refused as for a URI nobody
// serves, and the upstream is sent nothing.
func TestVisibilityListen(t *testing.T) {
	env := startVisibility(t)
	c := &itest.RecModern{URL: env.mux.URL() + "?profile=only-a"}
	listen := func(uri string) itest.RecAnswer {
		return c.Do(t, "subscriptions/listen", fmt.Sprintf(`{"notifications":{"resourceSubscriptions":[%q]}}`, uri))
	}
	ma, mb := env.a.Mark(), env.b.Mark()
	hidden := listen("rec://b/notes")
	missing := listen("rec://z/notes")
	visSame(t, "subscriptions/listen", hidden, missing, "rec://b/notes", "rec://z/notes")
	if got := append(visSent(env.a, ma), visSent(env.b, mb)...); len(got) > 0 {
		t.Errorf("a listen on hidden or nonexistent URIs reached an upstream:\n%s", itest.RecDescribe(got))
	}
}

// visNotes sends a ping on c and returns the methods of the notifications
// that arrive before its answer: the session's writer sends notifications
// queued before the answer first.
func visNotes(t *testing.T, c *itest.RecStream) []string {
	t.Helper()
	c.Next++
	id := fmt.Sprint(c.Next)
	if err := c.Send([]byte(`{"jsonrpc":"2.0","id":` + id + `,"method":"ping"}`)); err != nil {
		t.Fatalf("%s: ping: %v", c.Door, err)
	}
	var notes []string
	timeout := time.After(30 * time.Second)
	for {
		select {
		case raw, ok := <-c.In:
			if !ok {
				t.Fatalf("%s: the connection ended before the ping's answer", c.Door)
			}
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatalf("%s: not JSON: %q", c.Door, raw)
			}
			if m.Method != "" {
				notes = append(notes, m.Method)
				continue
			}
			if string(m.ID) == id {
				return notes
			}
		case <-timeout:
			t.Fatalf("%s: no answer to ping within 30s", c.Door)
		}
	}
}

// TestVisibilityListChanged: when a reload changes which upstreams a
// profile shows, its sessions are told prompts, resources and tools
// list_changed, and sessions whose listings did not change are told
// nothing. A reload can only narrow a live session (docs/operations.md,
// Reload): widening only-a to both upstreams leaves its live session as it
// was, while a new session gets both; narrowing it back narrows that new
// session.
func TestVisibilityListChanged(t *testing.T) {
	env := startVisibility(t)
	ws := func(profile string) *itest.RecStream {
		return itest.OpenWS(t, "ws://"+env.mux.Addr+"/ws?profile="+profile, true)
	}
	reload := func(onlyA string) {
		t.Helper()
		reloads := strings.Count(env.mux.Stderr(), "config reloaded")
		if err := os.WriteFile(env.cfgPath, []byte(visConfigWith(env.a, env.b, onlyA)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := env.mux.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(15 * time.Second)
		for strings.Count(env.mux.Stderr(), "config reloaded") == reloads {
			if time.Now().After(deadline) {
				t.Fatalf("no reload logged\n--- stderr ---\n%s", env.mux.Stderr())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	prompts := func(c *itest.RecStream) []string {
		t.Helper()
		return visListed(t, "prompts/list", c.Do(t, "prompts/list", `{}`))
	}
	onlyA, both := []string{"a__broken", "a__greet"}, []string{"a__broken", "a__greet", "b__broken", "b__greet"}

	early := ws("only-a")
	if notes := visNotes(t, early); len(notes) > 0 {
		t.Fatalf("only-a: notifications before any change: %q", notes)
	}
	reload(`"a", "b"`)
	// The notifications were queued before the reload was logged.
	if notes := visNotes(t, early); len(notes) > 0 {
		t.Errorf("a live only-a session was told %q by a reload that widened its profile", notes)
	}
	if got := prompts(early); !slices.Equal(got, onlyA) {
		t.Errorf("after the widening reload the live only-a session lists prompts %q, want %q", got, onlyA)
	}

	sessions := map[string]*itest.RecStream{"only-a": ws("only-a"), "open": ws("open"), "none": ws("none"), "early only-a": early}
	for name, c := range sessions {
		if notes := visNotes(t, c); len(notes) > 0 {
			t.Fatalf("%s: notifications before any change: %q", name, notes)
		}
	}
	if got := prompts(sessions["only-a"]); !slices.Equal(got, both) {
		t.Fatalf("a new only-a session lists prompts %q, want %q", got, both)
	}
	reload(`"a"`)
	want := map[string][]string{
		"only-a":       {"notifications/prompts/list_changed", "notifications/resources/list_changed", "notifications/tools/list_changed"},
		"open":         nil,
		"none":         nil,
		"early only-a": nil,
	}
	for name, c := range sessions {
		got := visNotes(t, c)
		slices.Sort(got)
		if !slices.Equal(got, want[name]) {
			t.Errorf("%s: notified %q, want %q", name, got, want[name])
		}
	}
	if got := prompts(sessions["only-a"]); !slices.Equal(got, onlyA) {
		t.Errorf("after the narrowing reload only-a lists prompts %q, want %q", got, onlyA)
	}
}

// TestVisibilityReferenceServers runs upstream visibility against the
// reference servers from npm: server-everything (tools, prompts, resources,
// templates, completions) and server-memory (tools only), on a legacy
// /mcp session. deny = ["*"] hides everything's prompts and resources
// (it serves tools, none in the view) and a hidden one answers as a
// nonexistent one; upstreams = ["every"] shows them and they work.
func TestVisibilityReferenceServers(t *testing.T) {
	itest.RequireNode(t)
	m := itest.StartMux(t, fmt.Sprintf(`[server]
shutdown_grace = "5s"

[upstreams.every]
command = %[1]s
args = %[2]s
required = true

[upstreams.memory]
command = %[1]s
args = %[3]s
env = { MEMORY_FILE_PATH = %[4]s }
required = true

[profiles.open]
read_only = false

[profiles.none]
deny = ["*"]

[profiles.every-only]
upstreams = ["every"]
`, itest.TomlString(itest.Harness.Node), itest.TomlArray(itest.EverythingEntry(), "stdio"), itest.TomlArray(itest.MemoryEntry()),
		itest.TomlString(filepath.Join(t.TempDir(), "memory.jsonl"))))
	session := func(profile string) *itest.RecHTTP {
		return &itest.RecHTTP{S: itest.OpenRawSession(t, m.URL()+"?profile="+profile, nil)}
	}

	// What everything serves, as the open profile lists it.
	open := session("open")
	prompts := visListed(t, "prompts/list", open.Do(t, "prompts/list", `{}`))
	resources := visListed(t, "resources/list", open.Do(t, "resources/list", `{}`))
	templates := visListed(t, "resources/templates/list", open.Do(t, "resources/templates/list", `{}`))
	if len(prompts) == 0 || len(resources) == 0 || len(templates) == 0 {
		t.Fatalf("server-everything lists prompts %q, resources %q, templates %q; want some of each", prompts, resources, templates)
	}
	prompt, resource := prompts[0], resources[0]
	if slices.Contains(prompts, "every__simple-prompt") {
		prompt = "every__simple-prompt" // takes no arguments
	}
	templated := regexp.MustCompile(`\{[^}]*\}`).ReplaceAllString(templates[0], "1")
	if a := open.Do(t, "resources/read", fmt.Sprintf(`{"uri":%q}`, templated)); a.Msg.Error != nil {
		t.Fatalf("resources/read %s through the open profile: %s", templated, a)
	}

	none := session("none")
	for _, method := range []string{"prompts/list", "resources/list", "resources/templates/list"} {
		if got := visListed(t, method, none.Do(t, method, `{}`)); len(got) != 0 {
			t.Errorf("%s under deny = [\"*\"] lists %q", method, got)
		}
	}
	// A nonexistent twin of each target: same length, another upstream's
	// namespace or a scheme nobody serves.
	twin := func(s string) string { return "z" + s[1:] }
	probes := []struct{ what, method, params, hidden string }{
		{"prompts/get", "prompts/get", `{"name":%q}`, prompt},
		{"resources/read", "resources/read", `{"uri":%q}`, resource},
		{"resources/read of a templated URI", "resources/read", `{"uri":%q}`, templated},
		{"completion/complete", "completion/complete", `{"ref":{"type":"ref/prompt","name":%q},"argument":{"name":"a","value":"b"}}`, prompt},
		{"resources/subscribe", "resources/subscribe", `{"uri":%q}`, resource},
	}
	for _, p := range probes {
		hidden := none.Do(t, p.method, fmt.Sprintf(p.params, p.hidden))
		missing := none.Do(t, p.method, fmt.Sprintf(p.params, twin(p.hidden)))
		visSame(t, p.what, hidden, missing, p.hidden, twin(p.hidden))
	}

	only := session("every-only")
	if got := visListed(t, "prompts/list", only.Do(t, "prompts/list", `{}`)); !slices.Equal(got, prompts) {
		t.Errorf("upstreams = [\"every\"] lists prompts %q, want %q", got, prompts)
	}
	for _, name := range visListed(t, "tools/list", only.Do(t, "tools/list", `{}`)) {
		if !strings.HasPrefix(name, "every__") {
			t.Errorf("upstreams = [\"every\"] lists tool %s", name)
		}
	}
	if a := only.Do(t, "resources/read", fmt.Sprintf(`{"uri":%q}`, resource)); a.Msg.Error != nil {
		t.Errorf("resources/read %s through upstreams = [\"every\"]: %s", resource, a)
	}
	if a := only.Do(t, "prompts/get", fmt.Sprintf(`{"name":%q}`, prompt)); a.Msg.Error != nil || a.Msg.Result == nil {
		t.Errorf("prompts/get %s through upstreams = [\"every\"]: %s", prompt, a)
	}
	// server-memory's resources are hidden there, as nonexistent ones.
	for _, uri := range visListed(t, "resources/list", only.Do(t, "resources/list", `{}`)) {
		if !slices.Contains(resources, uri) || strings.HasPrefix(uri, "memory://") {
			t.Errorf("upstreams = [\"every\"] lists resource %s", uri)
		}
	}
	if slices.Contains(resources, "memory://knowledge-graph") {
		hidden := only.Do(t, "resources/read", `{"uri":"memory://knowledge-graph"}`)
		missing := only.Do(t, "resources/read", `{"uri":"zemory://knowledge-graph"}`)
		visSame(t, "resources/read of server-memory's resource", hidden, missing, "memory://knowledge-graph", "zemory://knowledge-graph")
	}
}
