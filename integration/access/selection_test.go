//go:build unix

package access

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// End-to-end tests of GitHub-compatible selection: the path
// forms (/mcp/readonly, /mcp/x/{toolsets}[/readonly], /mcp/p/{profile}…,
// and the same under /sse and /ws) and GitHub's X-MCP-* headers, driven by
// the official TypeScript SDK client over all three HTTP doors against the
// real binary mounting two demo servers. Each form must list exactly what
// the equivalent profile or Mcp-* narrowing lists, and none may widen
// what a token allows.

// selectionConfig mounts two demo servers, alpha and beta, each with
// toolsets "notes" (list, read, write, delete) and "misc" (echo,
// slow_count), and profiles that stand for the path and header forms.
func selectionConfig(t *testing.T, extra string) string {
	bin := itest.TomlString(itest.MuxBinary(t))
	return fmt.Sprintf(`[server]
shutdown_grace = "5s"

[upstreams.alpha]
command = %[1]s
args = ["demo-server", "--name", "alpha"]
required = true
[upstreams.alpha.toolsets]
notes = ["*_note", "list_notes"]
misc = ["echo", "slow_count"]

[upstreams.beta]
command = %[1]s
args = ["demo-server", "--name", "beta"]
required = true
[upstreams.beta.toolsets]
notes = ["*_note", "list_notes"]
misc = ["echo", "slow_count"]

[profiles.full]
[profiles.readonly]
read_only = true
[profiles.alphaonly]
toolsets = ["alpha"]
[profiles.exclude]
deny = ["alpha__write_note", "beta__delete_note"]
%[2]s`, bin, extra)
}

// alphaNotes lists the alpha demo server's notes through url.
func alphaNotes(t *testing.T, url string, headers map[string]string) []string {
	t.Helper()
	r := itest.Drive(t, itest.Script{URL: url, Headers: headers, Steps: []itest.Op{itest.OpCall("alpha__list_notes", map[string]any{})}}).Steps(t)[0].Call(t)
	var out struct {
		Titles []string `json:"titles"`
	}
	if err := json.Unmarshal(r.StructuredContent, &out); err != nil || r.IsError {
		t.Fatalf("alpha__list_notes: structuredContent %s (isError %v): %v", r.StructuredContent, r.IsError, err)
	}
	return out.Titles
}

// selForm is one way of asking for a view, and the Mcp-* or profile form
// that must list the same tools.
type selForm struct {
	name    string
	path    string            // after the door: "/readonly", "/x/alpha", "" …
	headers map[string]string // sent on every request (not on /ws)
	equiv   string            // "/mcp" + equiv (query) lists the reference
	eqHdr   map[string]string // headers of the reference
	want    func(all, ro []string) []string
}

func TestSelectionForms(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	mux := itest.StartMux(t, selectionConfig(t, ""))
	base := "http://" + mux.Addr

	// The whole catalog and its read-only part, as the SDK lists them.
	whole := itest.Drive(t, itest.Script{URL: base + "/mcp", Steps: []itest.Op{itest.OpList()}}).Steps(t)[0]
	all := slices.Sorted(slices.Values(whole.Names))
	var ro []string
	for _, tl := range whole.Tools {
		if tl.Annotations != nil && itest.IsTrue(tl.Annotations.ReadOnlyHint) {
			ro = append(ro, tl.Name)
		}
	}
	slices.Sort(ro)
	for _, n := range []string{"alpha__write_note", "alpha__echo", "beta__delete_note", "beta__list_notes"} {
		if !slices.Contains(all, n) {
			t.Fatalf("the catalog lacks %s: %v", n, all)
		}
	}
	if len(ro) == 0 || len(ro) == len(all) {
		t.Fatalf("the catalog must mix read-only and other tools: %v of %v", ro, all)
	}
	under := func(names []string, prefix string, keep ...string) []string {
		var out []string
		for _, n := range names {
			if strings.HasPrefix(n, prefix) && (len(keep) == 0 || slices.ContainsFunc(keep, func(k string) bool { return strings.HasSuffix(n, "__"+k) })) {
				out = append(out, n)
			}
		}
		return out
	}
	notes := []string{"list_notes", "read_note", "write_note", "delete_note"}
	misc := []string{"echo", "slow_count"}
	exact := func(names ...string) func(_, _ []string) []string {
		return func(_, _ []string) []string { return slices.Sorted(slices.Values(names)) }
	}
	pathForms := []selForm{
		{name: "readonly", path: "/readonly", equiv: "?profile=readonly",
			want: func(_, ro []string) []string { return ro }},
		{name: "x/alpha", path: "/x/alpha", equiv: "?profile=alphaonly",
			want: func(all, _ []string) []string { return under(all, "alpha__") }},
		{name: "x/alpha/readonly", path: "/x/alpha/readonly", equiv: "?toolsets=alpha&read_only=true",
			want: func(_, ro []string) []string { return under(ro, "alpha__") }},
		{name: "x/list/readonly", path: "/x/alpha/notes,beta/misc/readonly", equiv: "?toolsets=alpha/notes,beta/misc&read_only=true",
			want: func(_, ro []string) []string {
				return slices.Sorted(slices.Values(append(under(ro, "alpha__", notes...), under(ro, "beta__", misc...)...)))
			}},
		{name: "x/encoded list", path: "/x/alpha%2Fnotes%2Cbeta", equiv: "?toolsets=alpha/notes,beta",
			want: func(all, _ []string) []string {
				return slices.Sorted(slices.Values(append(under(all, "alpha__", notes...), under(all, "beta__")...)))
			}},
		{name: "x/all", path: "/x/all", equiv: "",
			want: func(all, _ []string) []string { return all }},
		{name: "p/readonly", path: "/p/readonly", equiv: "?profile=readonly",
			want: func(_, ro []string) []string { return ro }},
		{name: "p/alphaonly/x/alpha/notes/readonly", path: "/p/alphaonly/x/alpha/notes/readonly", equiv: "?profile=alphaonly&toolsets=alpha/notes&read_only=true",
			want: func(_, ro []string) []string { return under(ro, "alpha__", notes...) }},
		{name: "p/exclude/readonly", path: "/p/exclude/readonly", equiv: "?profile=exclude&read_only=true",
			want: func(_, ro []string) []string { return ro }},
	}
	headerForms := []selForm{
		{name: "X-MCP-Toolsets", headers: map[string]string{"X-MCP-Toolsets": "alpha/notes, beta"},
			equiv: "", eqHdr: map[string]string{"Mcp-Toolsets": "alpha/notes,beta"},
			want: func(all, _ []string) []string {
				return slices.Sorted(slices.Values(append(under(all, "alpha__", notes...), under(all, "beta__")...)))
			}},
		{name: "X-MCP-Readonly", headers: map[string]string{"X-MCP-Readonly": "true"},
			equiv: "", eqHdr: map[string]string{"Mcp-Read-Only": "true"},
			want: func(_, ro []string) []string { return ro }},
		{name: "X-MCP-Tools", headers: map[string]string{"X-MCP-Tools": "alpha__echo,beta__write_note,nope"},
			equiv: "", eqHdr: map[string]string{"Mcp-Tools": "alpha__echo,beta__write_note,nope"},
			want: exact("alpha__echo", "beta__write_note")},
		{name: "X-MCP-Exclude-Tools", headers: map[string]string{"X-MCP-Exclude-Tools": "alpha__write_note,beta__delete_note"},
			equiv: "?profile=exclude",
			want: func(all, _ []string) []string {
				return slices.DeleteFunc(slices.Clone(all), func(n string) bool { return n == "alpha__write_note" || n == "beta__delete_note" })
			}},
		{name: "X-MCP-Exclude-Tools takes names, not globs", headers: map[string]string{"X-MCP-Exclude-Tools": "alpha__*,*"},
			equiv: "", want: func(all, _ []string) []string { return all }},
		{name: "X-MCP-Toolsets and X-MCP-Readonly", headers: map[string]string{"X-MCP-Toolsets": "alpha", "X-MCP-Readonly": "yes"},
			equiv: "?toolsets=alpha&read_only=true",
			want:  func(_, ro []string) []string { return under(ro, "alpha__") }},
		{name: "X-MCP-Toolsets and Mcp-Toolsets intersect", headers: map[string]string{"X-MCP-Toolsets": "alpha", "Mcp-Toolsets": "alpha/misc,beta"},
			equiv: "?toolsets=alpha/misc",
			want:  func(all, _ []string) []string { return under(all, "alpha__", misc...) }},
	}

	// One drive.mjs run per door: every form's session and its
	// reference's, concurrently.
	for _, door := range []struct {
		name, transport, scheme, prefix string
		headers                         bool
	}{
		{"mcp", "http", "http", "/mcp", true},
		{"sse", "sse", "http", "/sse", true},
		{"ws", "ws", "ws", "/ws", false},
	} {
		t.Run(door.name, func(t *testing.T) {
			forms := slices.Clone(pathForms)
			if door.headers {
				forms = append(forms, headerForms...)
				// A path and headers at once: both narrow.
				forms = append(forms, selForm{name: "path and X-MCP-Readonly false", path: "/x/beta",
					headers: map[string]string{"X-MCP-Readonly": "false"}, equiv: "?toolsets=beta",
					want: func(all, _ []string) []string { return under(all, "beta__") }})
				forms = append(forms, selForm{name: "path and X-MCP-Toolsets", path: "/readonly",
					headers: map[string]string{"X-MCP-Toolsets": "beta/notes"}, equiv: "?toolsets=beta/notes&read_only=true",
					want: func(_, ro []string) []string { return under(ro, "beta__", notes...) }})
			}
			var sessions []itest.SessionScript
			var refs []itest.SessionScript
			for _, f := range forms {
				sessions = append(sessions, itest.SessionScript{URL: door.scheme + "://" + mux.Addr + door.prefix + f.path, Headers: f.headers,
					Steps: []itest.Op{itest.OpList(), itest.OpCallExpectError("alpha__write_note_nope", map[string]any{})}})
			}
			res := itest.DriveDoor(t, itest.DoorScript{Transport: door.transport, Script: itest.Script{Sessions: sessions}})
			for _, f := range forms {
				refs = append(refs, itest.SessionScript{URL: base + "/mcp" + f.equiv, Headers: f.eqHdr, Steps: []itest.Op{itest.OpList()}})
			}
			refRes := itest.Drive(t, itest.Script{Sessions: refs})
			for i, f := range forms {
				t.Run(f.name, func(t *testing.T) {
					got := res.Clients[i].Steps[0].Names
					itest.CheckNames(t, fmt.Sprintf("%s%s %v", door.prefix, f.path, f.headers), got, f.want(all, ro))
					itest.CheckNames(t, fmt.Sprintf("%s%s %v against /mcp%s %v", door.prefix, f.path, f.headers, f.equiv, f.eqHdr), got, refRes.Clients[i].Steps[0].Names)
				})
			}
		})
	}

	// A call outside a narrowed view is refused with -32601 at viewmux, on
	// every door, and never reaches the demo server.
	t.Run("calls outside the view", func(t *testing.T) {
		write := func(title string) itest.Op {
			return itest.OpCallExpectError("alpha__write_note", map[string]any{"title": title, "text": "x"})
		}
		var titles []string
		for _, c := range []struct {
			transport, url string
			headers        map[string]string
		}{
			{"http", base + "/mcp/readonly", nil},
			{"http", base + "/mcp/x/beta", nil},
			{"http", base + "/mcp/x/alpha/notes/readonly", nil},
			{"http", base + "/mcp", map[string]string{"X-MCP-Readonly": "true"}},
			{"http", base + "/mcp", map[string]string{"X-MCP-Exclude-Tools": "alpha__write_note"}},
			{"http", base + "/mcp", map[string]string{"X-MCP-Tools": "alpha__echo"}},
			{"http", base + "/mcp", map[string]string{"X-MCP-Toolsets": "alpha/misc"}},
			{"sse", base + "/sse/x/alpha/readonly", nil},
			{"sse", base + "/sse", map[string]string{"X-MCP-Readonly": "1"}},
			{"ws", "ws://" + mux.Addr + "/ws/readonly", nil},
			{"ws", "ws://" + mux.Addr + "/ws/p/alphaonly/x/alpha/misc", nil},
		} {
			title := fmt.Sprintf("refused-%d", len(titles))
			titles = append(titles, title)
			r := itest.DriveDoor(t, itest.DoorScript{Transport: c.transport, Script: itest.Script{URL: c.url, Headers: c.headers, Steps: []itest.Op{write(title)}}})
			itest.WantToolNotFound(t, r.Clients[0].Steps[0].Error, "alpha__write_note")
		}
		// The reference: the same call through the whole view works.
		r := itest.Drive(t, itest.Script{URL: base + "/mcp", Steps: []itest.Op{itest.OpCall("alpha__write_note", map[string]any{"title": "allowed", "text": "x"})}}).Steps(t)[0].Call(t)
		if r.IsError {
			t.Fatalf("alpha__write_note through the whole view: %q", r.Text())
		}
		got := alphaNotes(t, base+"/mcp", nil)
		if !slices.Contains(got, "allowed") {
			t.Errorf("alpha's notes = %q, want \"allowed\" among them", got)
		}
		for _, title := range titles {
			if slices.Contains(got, title) {
				t.Errorf("alpha's notes = %q: the refused call writing %q reached the demo server", got, title)
			}
		}
	})

	t.Run("unknown paths", func(t *testing.T) {
		for _, c := range []struct {
			method, path string
			status       int
			body         string
		}{
			{http.MethodPost, "/mcp/nope", 404, "/mcp/x/{toolsets}"},
			{http.MethodPost, "/mcp/readonly/readonly", 404, "/mcp/p/{profile}"},
			{http.MethodGet, "/sse/nope", 404, "/sse/readonly"},
			{http.MethodGet, "/ws/nope", 404, "/ws/x/{toolsets}/readonly"},
			{http.MethodPost, "/mcp/x/", 400, "names no toolset"},
			{http.MethodPost, "/mcp/x/alpha/nope", 400, `unknown toolset \"alpha/nope\"`},
			{http.MethodPost, "/mcp/p/nope", 404, "known: alphaonly, exclude, full, readonly"},
		} {
			req, _ := http.NewRequest(c.method, base+c.path, strings.NewReader(itest.InitializeBody()))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e struct {
				Error *struct{ Message string } `json:"error"`
			}
			if resp.StatusCode != c.status || json.Unmarshal(body, &e) != nil || e.Error == nil || !strings.Contains(string(body), c.body) {
				t.Errorf("%s %s: %d %s, want %d with a JSON-RPC error containing %q", c.method, c.path, resp.StatusCode, body, c.status, c.body)
			}
		}
	})
}

// TestSelectionCannotWiden: with a token allowed only the readonly
// profile, no path form or header gets past read-only: each lists within
// the readonly view or is refused with 403, and a write is refused
// without reaching the demo server. The websocket door is covered by the
// sessions tests: the SDK's websocket client cannot send a token.
func TestSelectionCannotWiden(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	mux := itest.StartMux(t, selectionConfig(t, `
[[auth.tokens]]
token = "tok-ro"
profiles = ["readonly"]
[[auth.tokens]]
token = "tok-full"
profiles = ["full", "readonly", "alphaonly", "exclude"]
`))
	base := "http://" + mux.Addr
	ro := map[string]string{"Authorization": "Bearer tok-ro"}
	full := map[string]string{"Authorization": "Bearer tok-full"}
	with := func(kv ...string) map[string]string {
		out := map[string]string{"Authorization": "Bearer tok-ro"}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	readOnly := itest.Drive(t, itest.Script{URL: base + "/mcp", Headers: ro, Steps: []itest.Op{itest.OpList()}}).Steps(t)[0].Names
	fullView := itest.Drive(t, itest.Script{URL: base + "/mcp", Headers: full, Steps: []itest.Op{itest.OpList()}}).Steps(t)[0].Names
	if len(readOnly) == 0 || len(readOnly) >= len(fullView) || slices.Contains(readOnly, "alpha__write_note") {
		t.Fatalf("tok-ro must see a strict read-only part: %v of %v", readOnly, fullView)
	}
	within := func(got []string) bool {
		for _, n := range got {
			if !slices.Contains(readOnly, n) {
				return false
			}
		}
		return true
	}

	t.Run("listed within readonly", func(t *testing.T) {
		for _, door := range []struct{ transport, prefix string }{{"http", "/mcp"}, {"sse", "/sse"}} {
			cases := []struct {
				path    string
				headers map[string]string
				want    []string // nil: any subset of readOnly
			}{
				{"", with("X-MCP-Readonly", "false"), readOnly},
				{"", with("X-MCP-Readonly", ""), readOnly},
				{"", with("Mcp-Read-Only", "false", "X-MCP-Readonly", "off"), readOnly},
				{"", with("X-MCP-Toolsets", "all"), readOnly},
				{"", with("X-MCP-Toolsets", "alpha,beta,alpha/notes,alpha/misc,beta/notes,beta/misc,default"), readOnly},
				{"", with("X-MCP-Tools", "alpha__write_note,alpha__delete_note,alpha__echo"), []string{"alpha__echo"}},
				{"", with("X-MCP-Exclude-Tools", ""), readOnly},
				{"/x/all", ro, readOnly},
				{"/x/alpha,beta", ro, readOnly},
				{"/x/alpha/notes", ro, nil},
				{"/p/readonly", ro, readOnly},
				{"/p/readonly/x/all", with("X-MCP-Readonly", "false"), readOnly},
				{"/", ro, readOnly},
			}
			var sessions []itest.SessionScript
			for _, c := range cases {
				sessions = append(sessions, itest.SessionScript{URL: base + door.prefix + c.path, Headers: c.headers,
					Steps: []itest.Op{itest.OpList(), itest.OpCallExpectError("alpha__write_note", map[string]any{"title": "widened", "text": "x"})}})
			}
			res := itest.DriveDoor(t, itest.DoorScript{Transport: door.transport, Script: itest.Script{Sessions: sessions}})
			for i, c := range cases {
				got := res.Clients[i].Steps[0].Names
				what := fmt.Sprintf("%s%s %v", door.prefix, c.path, c.headers)
				if c.want != nil {
					itest.CheckNames(t, what, got, c.want)
				} else if !within(got) || len(got) == 0 {
					t.Errorf("%s lists %v, want a non-empty part of the readonly view %v", what, got, readOnly)
				}
				itest.WantToolNotFound(t, res.Clients[i].Steps[1].Error, "alpha__write_note")
			}
		}
	})

	t.Run("refused", func(t *testing.T) {
		for _, c := range []struct {
			path    string
			headers map[string]string
			status  int
		}{
			{"/mcp/p/full", ro, 403},
			{"/mcp/p/alphaonly/x/alpha", ro, 403},
			{"/mcp/p/full/readonly", ro, 403},
			{"/mcp/p/readonly", with("Mcp-Profile", "full"), 403},
			{"/mcp?profile=readonly", with("Mcp-Profile", "exclude"), 403},
			{"/mcp/p/nope", ro, 404},
			{"/mcp/readonly", nil, 401},
			{"/mcp/x/all", map[string]string{"Authorization": "Bearer nope"}, 401},
		} {
			r := itest.RawInitialize(t, base+c.path, c.headers)
			if r.Status != c.status || r.Header.Get("Mcp-Session-Id") != "" || r.Msg == nil || r.Msg.Error == nil {
				t.Errorf("initialize %s %v: %s, want %d with a JSON-RPC error and no session", c.path, c.headers, r, c.status)
			}
		}
		for _, c := range []struct {
			path    string
			headers map[string]string
			status  int
		}{
			{"/sse/p/full", ro, 403},
			{"/sse/readonly", with("Mcp-Profile", "full"), 403},
			{"/ws/p/full", ro, 403},
			{"/ws/readonly", nil, 401},
		} {
			req, _ := http.NewRequest(http.MethodGet, base+c.path, nil)
			for k, v := range c.headers {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status || !strings.Contains(string(body), `"error"`) {
				t.Errorf("GET %s %v: %d %s, want %d", c.path, c.headers, resp.StatusCode, body, c.status)
			}
		}
	})

	t.Run("a bound session keeps its narrowing", func(t *testing.T) {
		s := itest.OpenRawSession(t, base+"/mcp/readonly", full)
		for _, c := range []struct {
			url     string
			headers map[string]string
		}{
			{base + "/mcp", with("Authorization", "Bearer tok-full", "Mcp-Profile", "full")},
			{base + "/mcp/p/full", full},
			{base + "/mcp/x/all", full},
			{base + "/mcp", with("Authorization", "Bearer tok-full", "X-MCP-Toolsets", "alpha")},
		} {
			other := &itest.RawSession{URL: c.url, ID: s.ID, Headers: c.headers}
			r := other.Post(t, "", nil, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"alpha__write_note","arguments":{"title":"bound","text":"x"}}}`)
			if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Body), "start a new session") {
				t.Errorf("a call on the /mcp/readonly session through %s %v: %s, want 400", c.url, c.headers, r)
			}
		}
	})

	if got := alphaNotes(t, base+"/mcp", full); slices.Contains(got, "widened") || slices.Contains(got, "bound") || len(got) == 0 {
		t.Errorf("alpha's notes = %q: a refused write reached the demo server", got)
	}
}
