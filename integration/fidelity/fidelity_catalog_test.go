//go:build unix

package fidelity

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// The fidelity tests of the catalog rules, with real upstreams:
// server-everything over stdio, viewmux's demo server over stdio, and a
// recorder over streamable HTTP (handwritten bytes, tools without
// annotations or titles). Each upstream is also asked directly, in the same
// test, and what a client lists through viewmux must be those bytes apart
// from the name and viewmux's _meta: nothing added, not even a title.

// listings are the four listing methods and the result member of each.
var listings = []struct{ method, key string }{
	{"tools/list", "tools"},
	{"prompts/list", "prompts"},
	{"resources/list", "resources"},
	{"resources/templates/list", "resourceTemplates"},
}

// upstreamCaps are the client capabilities viewmux declares to upstreams
// (the aggregator's sampling, elicitation and roots handlers), so that the
// direct client is offered what viewmux is: server-everything registers some
// tools by them.
const upstreamCaps = `{"roots":{"listChanged":true},"sampling":{},"elicitation":{}}`

// directStdio is a raw JSON-RPC client to a stdio upstream started by the
// test itself.
type directStdio struct {
	in   io.WriteCloser
	out  *bufio.Reader
	next int
	// init is the initialize result, as sent.
	init json.RawMessage
}

// startDirectStdio starts name args… as a stdio MCP server and initializes
// it with upstreamCaps.
func startDirectStdio(t *testing.T, name string, args ...string) *directStdio {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("starting %s: %v", name, err)
	}
	t.Cleanup(func() {
		in.Close()
		cancel()
		cmd.Wait()
	})
	d := &directStdio{in: in, out: bufio.NewReaderSize(out, 1<<20)}
	d.init = d.request(t, "initialize", `{"protocolVersion":"`+itest.RawProtocolVersion+`","capabilities":`+upstreamCaps+`,"clientInfo":{"name":"viewmux","version":"fidelity"}}`)
	d.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	d.request(t, "ping", `{}`) // what initialized set up is in place
	return d
}

func (d *directStdio) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(d.in, line+"\n"); err != nil {
		t.Fatalf("writing to the upstream: %v", err)
	}
}

// request sends method with params and returns the result bytes; it
// answers the server's own requests on the way (roots/list with none).
func (d *directStdio) request(t *testing.T, method, params string) json.RawMessage {
	t.Helper()
	d.next++
	id := fmt.Sprint(d.next)
	d.send(t, itest.RecBody(d.next, method, params))
	for {
		line, err := d.out.ReadBytes('\n')
		if err != nil {
			t.Fatalf("%s: reading the upstream: %v", method, err)
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Result json.RawMessage `json:"result"`
			Error  *itest.RPCError `json:"error"`
		}
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		switch {
		case m.Method != "" && len(m.ID) > 0:
			if m.Method == "roots/list" {
				d.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"roots":[]}}`, m.ID))
			} else {
				d.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"not here"}}`, m.ID))
			}
		case m.Method != "":
		case string(m.ID) == id:
			if m.Error != nil {
				t.Fatalf("%s: upstream error %d %s", method, m.Error.Code, m.Error.Message)
			}
			return m.Result
		}
	}
}

// listAll follows every page of a listing and returns its items as sent.
func listAll(t *testing.T, key string, do func(params string) json.RawMessage) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	params := `{}`
	for range 100 {
		var page map[string]json.RawMessage
		if err := json.Unmarshal(do(params), &page); err != nil {
			t.Fatalf("listing %s: %v", key, err)
		}
		var items []json.RawMessage
		if len(page[key]) > 0 {
			if err := json.Unmarshal(page[key], &items); err != nil {
				t.Fatalf("listing %s: %v", key, err)
			}
		}
		out = append(out, items...)
		var cursor string
		json.Unmarshal(page["nextCursor"], &cursor)
		if cursor == "" {
			return out
		}
		params = fmt.Sprintf(`{"cursor":%q}`, cursor)
	}
	t.Fatalf("listing %s: more than 100 pages", key)
	return nil
}

// fidelityUpstream is one upstream as asked directly: its prefix and its
// items by listing key.
type fidelityUpstream struct {
	name  string
	items map[string][]json.RawMessage
}

// identity names an item across both sides: the original name of a tool
// or prompt, the URI of a resource, the URI template of a template.
func identity(key string, item map[string]any) string {
	switch key {
	case "resources":
		s, _ := item["uri"].(string)
		return s
	case "resourceTemplates":
		s, _ := item["uriTemplate"].(string)
		return s
	}
	s, _ := item["name"].(string)
	return s
}

func decodeItem(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber() // numbers compared as written
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatalf("not a JSON object: %s", raw)
	}
	return m
}

// checkListed compares what door lists for key against every upstream's
// own items: each item there is the upstream's, apart from name and
// viewmux's _meta keys; nothing is listed that no upstream listed.
func checkListed(t *testing.T, door, key string, listed []json.RawMessage, ups []fidelityUpstream) {
	t.Helper()
	byIdentity := map[string]map[string]any{} // "<upstream>\x00<identity>" → listed item
	for _, raw := range listed {
		m := decodeItem(t, raw)
		up, original := "", identity(key, m)
		switch key {
		case "tools":
			meta, _ := m["_meta"].(map[string]any)
			up, _ = meta["viewmux/upstream"].(string)
			original, _ = meta["viewmux/original"].(string)
		case "prompts":
			up, original, _ = strings.Cut(original, "__")
		default:
			for _, u := range ups {
				if slices.ContainsFunc(u.items[key], func(r json.RawMessage) bool { return identity(key, decodeItem(t, r)) == original }) {
					up = u.name
				}
			}
		}
		byIdentity[up+"\x00"+original] = m
	}
	n := 0
	for _, u := range ups {
		for _, raw := range u.items[key] {
			n++
			want := decodeItem(t, raw)
			id := identity(key, want)
			got, ok := byIdentity[u.name+"\x00"+id]
			if !ok {
				t.Errorf("%s: %s %q of upstream %s is not listed", door, key, id, u.name)
				continue
			}
			got = copyItem(got)
			if key == "tools" || key == "prompts" {
				if name, _ := got["name"].(string); name != u.name+"__"+id {
					t.Errorf("%s: %s %q of %s listed as %q", door, key, id, u.name, name)
				}
				delete(got, "name")
				delete(want, "name")
			}
			if key == "tools" {
				meta, _ := got["_meta"].(map[string]any)
				if meta["viewmux/upstream"] != u.name || meta["viewmux/original"] != id {
					t.Errorf("%s: tool %q of %s: _meta = %v, want viewmux/upstream and viewmux/original", door, id, u.name, meta)
				}
				delete(meta, "viewmux/upstream")
				delete(meta, "viewmux/original")
				if len(meta) == 0 {
					delete(got, "_meta")
				}
			}
			if !reflect.DeepEqual(got, want) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(want)
				t.Errorf("%s: %s %q of %s differs from the upstream's definition\n through viewmux: %s\n directly:      %s", door, key, id, u.name, g, w)
			}
		}
	}
	if len(listed) != n {
		t.Errorf("%s: %d %s listed, the upstreams list %d", door, len(listed), key, n)
	}
}

// copyItem returns a shallow copy of m whose _meta is a copy too.
func copyItem(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	if meta, ok := m["_meta"].(map[string]any); ok {
		c := make(map[string]any, len(meta))
		for k, v := range meta {
			c[k] = v
		}
		out["_meta"] = c
	}
	return out
}

// fidelityConfig mounts server-everything (every), the demo server (demo)
// and the recorder rec, all required; profile only-demo shows the demo
// server alone, only-rec the recorder alone.
func fidelityConfig(t *testing.T, rec *itest.Recorder) string {
	return fmt.Sprintf(`[server]
shutdown_grace = "5s"

[upstreams.every]
command = %[1]s
args = %[2]s
required = true

[upstreams.demo]
command = %[3]s
args = ["demo-server"]
required = true

[upstreams.rec]
url = %[4]s
required = true

[profiles.only-demo]
upstreams = ["demo"]

[profiles.only-rec]
upstreams = ["rec"]
`, itest.TomlString(itest.Harness.Node), itest.TomlArray(itest.EverythingEntry(), "stdio"), itest.TomlString(itest.MuxBinary(t)), itest.TomlString(rec.URL))
}

// fidelityDoors are the doors a fidelity test lists through, for profile
// ("" = the default).
func fidelityDoors(mux *itest.Mux, cfgPath, profile string) []itest.RecDoor {
	q := ""
	if profile != "" {
		q = "?profile=" + profile
	}
	return []itest.RecDoor{
		{Name: "http", Open: func(t *testing.T) itest.RecClient {
			return &itest.RecHTTP{S: itest.OpenRawSession(t, mux.URL()+q, nil)}
		}},
		{Name: "http 2026-07-28", Modern: true, Open: func(t *testing.T) itest.RecClient { return &itest.RecModern{URL: mux.URL() + q} }},
		{Name: "ws", Open: func(t *testing.T) itest.RecClient { return itest.OpenWS(t, "ws://"+mux.Addr+"/ws"+q, true) }},
		{Name: "ws 2026-07-28", Modern: true, Open: func(t *testing.T) itest.RecClient {
			return modernStream{itest.OpenWS(t, "ws://"+mux.Addr+"/ws"+q, false)}
		}},
		{Name: "sse", Open: func(t *testing.T) itest.RecClient { return itest.OpenSSE(t, "http://"+mux.Addr, "/sse"+q, true) }},
		{Name: "stdio", Open: func(t *testing.T) itest.RecClient {
			c, _ := itest.OpenStdioStream(t, cfgPath, profile, true)
			return c
		}},
	}
}

// modernStream sends stateless 2026-07-28 requests on a stream door.
type modernStream struct{ s *itest.RecStream }

func (m modernStream) Do(t testing.TB, method, params string) itest.RecAnswer {
	return m.s.Do(t, method, itest.WithModernMeta(params))
}

// directUpstreams asks every upstream of fidelityConfig for its listings.
func directUpstreams(t *testing.T, rec *itest.Recorder) (ups []fidelityUpstream, instructions map[string]string) {
	t.Helper()
	every := startDirectStdio(t, itest.Harness.Node, itest.EverythingEntry(), "stdio")
	demo := startDirectStdio(t, itest.MuxBinary(t), "demo-server")
	instructions = map[string]string{}
	for name, d := range map[string]*directStdio{"every": every, "demo": demo} {
		var init struct {
			Instructions string `json:"instructions"`
		}
		json.Unmarshal(d.init, &init)
		instructions[name] = init.Instructions
	}
	recDo := func(method string) func(string) json.RawMessage {
		return func(params string) json.RawMessage {
			r := itest.RawPost(t, rec.URL, nil, itest.RecBody(1, method, params))
			if r.Msg == nil || r.Msg.Error != nil {
				t.Fatalf("recorder %s: %s", method, r)
			}
			return r.Msg.Result
		}
	}
	// In config order (by name), as viewmux lists upstreams.
	for _, u := range []struct {
		name string
		do   func(method string) func(string) json.RawMessage
	}{
		{"demo", func(method string) func(string) json.RawMessage {
			return func(p string) json.RawMessage { return demo.request(t, method, p) }
		}},
		{"every", func(method string) func(string) json.RawMessage {
			return func(p string) json.RawMessage { return every.request(t, method, p) }
		}},
		{"rec", recDo},
	} {
		f := fidelityUpstream{name: u.name, items: map[string][]json.RawMessage{}}
		for _, l := range listings {
			f.items[l.key] = listAll(t, l.key, u.do(l.method))
		}
		ups = append(ups, f)
	}
	return ups, instructions
}

// TestCatalogFidelity lists every tool, prompt, resource and template
// through every door and compares each with the upstream's own listing.
func TestCatalogFidelity(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	rec := itest.StartRecorder(t, "rec", false)
	mux := itest.StartMux(t, fidelityConfig(t, rec))
	cfgPath := filepath.Join(mux.Dir, "viewmux.toml")
	ups, _ := directUpstreams(t, rec)

	// The cases the issue measured, on the direct side, so the checks
	// below cannot pass vacuously.
	var everyPrompts, recTools []json.RawMessage
	for _, u := range ups {
		switch u.name {
		case "every":
			everyPrompts = u.items["prompts"]
		case "rec":
			recTools = u.items["tools"]
		}
	}
	if !slices.ContainsFunc(everyPrompts, func(r json.RawMessage) bool { return bytes.Contains(r, []byte(`"required":false`)) }) {
		t.Fatal(`server-everything lists no prompt argument with "required":false; the check below would prove nothing`)
	}
	if len(recTools) == 0 || slices.ContainsFunc(recTools, func(r json.RawMessage) bool { return bytes.Contains(r, []byte(`"annotations"`)) }) {
		t.Fatal("the recorder's tools are expected to carry no annotations")
	}

	t.Run("viewmux tools --json", func(t *testing.T) {
		code, stdout, stderr := itest.RunMux(t, time.Minute, t.TempDir(), nil, "tools", "--json", "--config", cfgPath)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		printed := listAll(t, "tools", func(string) json.RawMessage { return json.RawMessage(stdout) })
		// server-everything adds tools after initialize, which a one-shot
		// listing may not wait for: the demo server and the recorder only.
		var some []json.RawMessage
		for _, raw := range printed {
			var c bytes.Buffer
			json.Compact(&c, raw)
			if n, _ := decodeItem(t, c.Bytes())["name"].(string); !strings.HasPrefix(n, "every__") {
				some = append(some, c.Bytes())
			}
		}
		var want []fidelityUpstream
		for _, u := range ups {
			if u.name != "every" {
				want = append(want, u)
			}
		}
		checkListed(t, "tools --json", "tools", some, want)
	})

	for _, d := range fidelityDoors(mux, cfgPath, "") {
		t.Run(d.Name, func(t *testing.T) {
			c := d.Open(t)
			want := 0
			for _, u := range ups {
				want += len(u.items["tools"])
			}
			// server-everything adds tools after initialize (by client
			// capabilities): wait until viewmux has refetched them.
			var tools []json.RawMessage
			deadline := time.Now().Add(20 * time.Second)
			for {
				a := c.Do(t, "tools/list", `{}`)
				if a.Msg.Error != nil {
					t.Fatalf("tools/list: %s", a)
				}
				tools = listAll(t, "tools", func(string) json.RawMessage { return a.Msg.Result })
				if len(tools) >= want || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			checkListed(t, d.Name, "tools", tools, ups)
			for _, l := range listings[1:] {
				a := c.Do(t, l.method, `{}`)
				if a.Msg.Error != nil {
					t.Fatalf("%s: %s", l.method, a)
				}
				items := listAll(t, l.key, func(string) json.RawMessage { return a.Msg.Result })
				checkListed(t, d.Name, l.key, items, ups)
			}

			// A listing after a cursor (mcp-go pages by name after the
			// base64 cursor) holds the same bytes as the whole listing.
			cursor := base64.StdEncoding.EncodeToString([]byte("every__~"))
			after := c.Do(t, "tools/list", `{"cursor":"`+cursor+`"}`)
			if after.Msg.Error != nil {
				t.Fatalf("tools/list after a cursor: %s", after)
			}
			paged := listAll(t, "tools", func(string) json.RawMessage { return after.Msg.Result })
			if len(paged) == 0 {
				t.Errorf("tools/list after cursor %q listed nothing", cursor)
			}
			for _, raw := range paged {
				if !slices.ContainsFunc(tools, func(r json.RawMessage) bool { return bytes.Equal(r, raw) }) {
					t.Errorf("tools/list after a cursor sent a definition the whole listing does not hold: %s", raw)
				}
			}

			// The two measured losses, as bytes.
			a := c.Do(t, "prompts/list", `{}`)
			var prompts struct {
				Prompts []struct {
					Name      string `json:"name"`
					Arguments []map[string]json.RawMessage
				} `json:"prompts"`
			}
			json.Unmarshal(a.Msg.Result, &prompts)
			kept := false
			for _, p := range prompts.Prompts {
				for _, arg := range p.Arguments {
					if strings.HasPrefix(p.Name, "every__") && string(arg["required"]) == "false" {
						kept = true
					}
				}
			}
			if !kept {
				t.Errorf(`no "required":false argument of server-everything's prompts reached the client: %s`, a.Msg.Result)
			}
			for _, raw := range tools {
				m := decodeItem(t, raw)
				if name, _ := m["name"].(string); strings.HasPrefix(name, "rec__") {
					if _, has := m["annotations"]; has {
						t.Errorf("tool %s gained annotations the upstream never sent: %s", name, raw)
					}
				}
			}
		})
	}
}

// TestUpstreamInstructions checks that each upstream's instructions reach
// a client's initialize (and server/discover) result under a heading with
// its prefix, in config order, for the upstreams the session's view shows
// only.
func TestUpstreamInstructions(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	rec := itest.StartRecorder(t, "rec", false)
	mux := itest.StartMux(t, fidelityConfig(t, rec))
	cfgPath := filepath.Join(mux.Dir, "viewmux.toml")
	_, direct := directUpstreams(t, rec)
	if direct["every"] == "" || direct["demo"] == "" {
		t.Fatalf("server-everything and the demo server are expected to send instructions: %q", direct)
	}
	// Each upstream's text as it sent it, trailing newline and all.
	section := func(prefix string) string { return "## " + prefix + "\n\n" + direct[prefix] }
	for _, c := range []struct {
		profile, want string
	}{
		{"", section("demo") + "\n\n" + section("every")}, // rec sends none
		{"only-demo", section("demo")},
		{"only-rec", ""},
	} {
		name := c.profile
		if name == "" {
			name = "default"
		}
		t.Run(name, func(t *testing.T) {
			for _, d := range fidelityDoors(mux, cfgPath, c.profile) {
				t.Run(d.Name, func(t *testing.T) {
					got := initInstructions(t, mux, cfgPath, d.Name, c.profile)
					if got != c.want {
						t.Errorf("instructions:\n got  %q\n want %q", got, c.want)
					}
				})
			}
		})
	}
}

// initInstructions returns the instructions of the initialize result on
// door (server/discover for the 2026-07-28 one) for profile.
func initInstructions(t *testing.T, mux *itest.Mux, cfgPath, door, profile string) string {
	t.Helper()
	q := ""
	if profile != "" {
		q = "?profile=" + profile
	}
	initParams := `{"protocolVersion":"` + itest.RawProtocolVersion + `","capabilities":{},"clientInfo":{"name":"instructions","version":"1"}}`
	var result json.RawMessage
	switch door {
	case "http":
		r := itest.RawInitialize(t, mux.URL()+q, nil)
		if r.Msg == nil || r.Msg.Error != nil {
			t.Fatalf("initialize: %s", r)
		}
		result = r.Msg.Result
	case "http 2026-07-28", "ws 2026-07-28":
		var c itest.RecClient = &itest.RecModern{URL: mux.URL() + q}
		if door == "ws 2026-07-28" {
			c = modernStream{itest.OpenWS(t, "ws://"+mux.Addr+"/ws"+q, false)}
		}
		a := c.Do(t, "server/discover", `{}`)
		if a.Msg.Error != nil {
			t.Fatalf("server/discover: %s", a)
		}
		result = a.Msg.Result
	default:
		var c *itest.RecStream
		switch door {
		case "ws":
			c = itest.OpenWS(t, "ws://"+mux.Addr+"/ws"+q, false)
		case "sse":
			c = itest.OpenSSE(t, "http://"+mux.Addr, "/sse"+q, false)
		case "stdio":
			c, _ = itest.OpenStdioStream(t, cfgPath, profile, false)
		}
		a := c.Do(t, "initialize", initParams)
		if a.Msg.Error != nil {
			t.Fatalf("initialize: %s", a)
		}
		result = a.Msg.Result
	}
	var r struct {
		Instructions *string `json:"instructions"`
	}
	if err := json.Unmarshal(result, &r); err != nil {
		t.Fatalf("result: %v: %s", err, result)
	}
	if r.Instructions == nil {
		return ""
	}
	if *r.Instructions == "" {
		t.Errorf("an empty instructions member was sent; it should be left out")
	}
	return *r.Instructions
}
