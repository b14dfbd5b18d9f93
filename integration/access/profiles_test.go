//go:build unix

package access

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// catalog is the whole catalog as a client with no profile lists it.
type catalog struct {
	list itest.StepResult
	all  []string // every name, sorted
}

// names returns the sorted names of the listed tools for which keep is true.
func (c catalog) names(keep func(itest.Tool) bool) []string {
	var out []string
	for _, tool := range c.list.Tools {
		if keep(tool) {
			out = append(out, tool.Name)
		}
	}
	slices.Sort(out)
	return out
}

// readOnly: annotations.readOnlyHint === true, as the listing says.
func (c catalog) readOnly() []string {
	return c.names(func(t itest.Tool) bool { return t.Annotations != nil && itest.IsTrue(t.Annotations.ReadOnlyHint) })
}

// under returns the names under any of the prefixes (prefix+"__").
func (c catalog) under(prefixes ...string) []string {
	return c.names(func(t itest.Tool) bool {
		return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(t.Name, p+"__") })
	})
}

// listCatalog lists url with headers and checks that the tools the tests
// rely on are there.
func listCatalog(t *testing.T, url string, headers map[string]string) catalog {
	t.Helper()
	list := itest.Drive(t, itest.Script{URL: url, Headers: headers, Steps: []itest.Op{itest.OpList()}}).Steps(t)[0]
	c := catalog{list: list, all: slices.Sorted(slices.Values(list.Names))}
	for _, name := range []string{
		"every__echo", "every__get-sum", "memory__read_graph", "memory__create_entities",
		"fs__read_text_file", "fs__write_file", "fs__list_directory",
		"demo__echo", "demo__write_note", "demo__list_notes", "demo__add_tool",
	} {
		if !slices.Contains(c.all, name) {
			t.Fatalf("the whole catalog lacks %s; it is %v", name, c.all)
		}
	}
	if len(c.readOnly()) == 0 || len(c.readOnly()) == len(c.all) {
		t.Fatalf("the catalog must mix read-only and other tools; read-only %v of %v", c.readOnly(), c.all)
	}
	return c
}

// intersect returns the sorted names in both a and b.
func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	slices.Sort(out)
	return out
}

// union returns the sorted, deduplicated names of every list.
func union(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// viewCase is one client whose tools/list must be exactly want, then runs
// extra steps.
type viewCase struct {
	name    string
	url     string
	headers map[string]string
	want    []string
	extra   []itest.Op
}

// checkViews runs every case as one session of a single drive.mjs run (they
// run concurrently), then checks each listing in a subtest named after the
// case. It returns the clients' results by case name.
func checkViews(t *testing.T, cases []viewCase) map[string]itest.ClientResult {
	t.Helper()
	sessions := make([]itest.SessionScript, len(cases))
	for i, c := range cases {
		sessions[i] = itest.SessionScript{URL: c.url, Headers: c.headers, Steps: append([]itest.Op{itest.OpList()}, c.extra...)}
	}
	res := itest.Drive(t, itest.Script{Sessions: sessions, Terminate: true})
	if len(res.Clients) != len(cases) {
		t.Fatalf("drive.mjs ran %d clients, want %d", len(res.Clients), len(cases))
	}
	byName := make(map[string]itest.ClientResult, len(cases))
	for i, c := range cases {
		if _, dup := byName[c.name]; dup {
			t.Fatalf("two view cases are named %q", c.name)
		}
		byName[c.name] = res.Clients[i]
		t.Run(c.name, func(t *testing.T) {
			itest.CheckNames(t, fmt.Sprintf("tools/list of %s (headers %v)", c.url, c.headers), res.Clients[i].Steps[0].Names, c.want)
		})
	}
	return byName
}

// noteTitles lists the demo server's notes through url with headers.
func noteTitles(t *testing.T, url string, headers map[string]string) []string {
	t.Helper()
	r := itest.Drive(t, itest.Script{URL: url, Headers: headers, Steps: []itest.Op{itest.OpCall("demo__list_notes", map[string]any{})}}).Steps(t)[0].Call(t)
	var out struct {
		Titles []string `json:"titles"`
	}
	if err := json.Unmarshal(r.StructuredContent, &out); err != nil || r.IsError {
		t.Fatalf("demo__list_notes: structuredContent %s (isError %v): %v", r.StructuredContent, r.IsError, err)
	}
	return out.Titles
}

// requireNoFile fails the test when path exists.
func requireNoFile(t testing.TB, path, why string) {
	t.Helper()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		b, _ := os.ReadFile(path)
		t.Errorf("%s: %s exists (stat error %v, content %q); the call reached server-filesystem", why, path, err, b)
	}
}

func TestProfiles(t *testing.T) {
	itest.RequireFilesystemServer(t)
	fsRoot := itest.RealTempDir(t)
	existing := filepath.Join(fsRoot, "existing.txt")
	if err := os.WriteFile(existing, []byte("existing ✓\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mux := itest.StartMux(t, itest.ProfilesConfig(t, fsRoot, ""))
	url := mux.URL()
	cat := listCatalog(t, url, nil)
	readOnly := cat.readOnly()
	fsTools := cat.under("fs")
	demoTools := cat.under("demo")

	t.Run("readonly lists exactly the read-only tools", func(t *testing.T) {
		t.Parallel()
		if len(readOnly) == 0 || len(readOnly) >= len(cat.all) {
			t.Fatalf("expected read-only set %v must be non-empty and smaller than the catalog (%d)", readOnly, len(cat.all))
		}
		checkViews(t, []viewCase{
			{name: "query", url: url + "?profile=readonly", want: readOnly},
			{name: "header", url: url, headers: map[string]string{"Mcp-Profile": "readonly"}, want: readOnly},
			{name: "readonly2 same rules", url: url + "?profile=readonly2", want: readOnly},
		})
	})

	t.Run("profile selection", func(t *testing.T) {
		t.Parallel()
		checkViews(t, []viewCase{
			{name: "header fsonly", url: url, headers: map[string]string{"Mcp-Profile": "fsonly"}, want: fsTools},
			{name: "query fsonly", url: url + "?profile=fsonly", want: fsTools},
			{name: "header fsonly beats query readonly", url: url + "?profile=readonly",
				headers: map[string]string{"Mcp-Profile": "fsonly"}, want: fsTools},
			{name: "header readonly beats query fsonly", url: url + "?profile=fsonly",
				headers: map[string]string{"Mcp-Profile": "readonly"}, want: readOnly},
			{name: "fsread extends fsonly", url: url + "?profile=fsread", want: intersect(fsTools, readOnly)},
			{name: "ci", url: url + "?profile=ci", want: []string{"demo__echo", "demo__write_note"}},
		})
		if len(intersect(fsTools, readOnly)) == 0 || len(intersect(fsTools, readOnly)) == len(fsTools) {
			t.Errorf("fs must mix read-only and other tools for fsread to mean anything: %v", fsTools)
		}
	})

	t.Run("hidden tool is never called", func(t *testing.T) {
		t.Parallel()
		hidden := filepath.Join(fsRoot, "hidden-"+itest.RandomHex(t, 4)+".txt")
		visible := filepath.Join(fsRoot, "visible-"+itest.RandomHex(t, 4)+".txt")
		steps := itest.Drive(t, itest.Script{URL: url + "?profile=readonly", Steps: []itest.Op{
			itest.OpCallExpectError("fs__write_file", map[string]any{"path": hidden, "content": "through readonly"}),
		}}).Steps(t)
		itest.WantToolNotFound(t, steps[0].Error, "fs__write_file")
		requireNoFile(t, hidden, "fs__write_file through readonly")

		// The same call through the default profile writes: the test can see
		// a write when one happens.
		w := itest.Drive(t, itest.Script{URL: url, Steps: []itest.Op{
			itest.OpCall("fs__write_file", map[string]any{"path": visible, "content": "through default ✓"}),
		}}).Steps(t)[0].Call(t)
		if w.IsError {
			t.Fatalf("fs__write_file through the default profile: isError result %q", w.Text())
		}
		if b, err := os.ReadFile(visible); err != nil || string(b) != "through default ✓" {
			t.Fatalf("fs__write_file through the default profile: file %s = %q, %v", visible, b, err)
		}
		// That call went through the same upstream after the refused one:
		// had the refused one been forwarded, its file would exist by now.
		requireNoFile(t, hidden, "fs__write_file through readonly, checked after a later allowed write")
	})

	t.Run("hidden and unknown tools are refused alike", func(t *testing.T) {
		t.Parallel()
		args := map[string]any{"path": filepath.Join(fsRoot, "alike.txt"), "content": "x"}
		names := []string{"fs__write_file", "fs__no_such_tool", "nosuchprefix__write_file", "write_file", "fs__Write_file"}
		var ops []itest.Op
		for _, n := range names {
			ops = append(ops, itest.OpCallExpectError(n, args))
		}
		steps := itest.Drive(t, itest.Script{URL: url + "?profile=readonly", Steps: ops}).Steps(t)
		for i, n := range names {
			itest.WantToolNotFound(t, steps[i].Error, n)
		}
		requireNoFile(t, args["path"].(string), "hidden and unknown calls")

		// A long name is echoed cut to 128 characters.
		long := "fs__write_file" + strings.Repeat("x", 300)
		steps = itest.Drive(t, itest.Script{URL: url, Steps: []itest.Op{itest.OpCallExpectError(long, args)}}).Steps(t)
		itest.WantToolNotFound(t, steps[0].Error, long[:128])

		// Byte for byte, over raw HTTP: the answers differ only in the name.
		sess := itest.OpenRawSession(t, url+"?profile=readonly", nil)
		var first itest.RawResponse
		for i, n := range names {
			r := sess.Post(t, "", nil, itest.ToolsCallBody(t, 7, n, args))
			if r.Msg == nil || r.Msg.Error == nil {
				t.Fatalf("raw tools/call %s: no JSON-RPC error: %s", n, r)
			}
			if r.Msg.Error.Code != -32601 || r.Msg.Error.Message != "Tool not found: "+n || r.Msg.Error.Data != nil || r.Msg.Result != nil {
				t.Errorf("raw tools/call %s: %s", n, r.RawMsg)
			}
			norm := strings.ReplaceAll(string(r.RawMsg), "Tool not found: "+n+`"`, `Tool not found: NAME"`)
			if i == 0 {
				first = r
				first.RawMsg = []byte(norm)
				continue
			}
			if norm != string(first.RawMsg) || r.Status != first.Status || r.Header.Get("Content-Type") != first.Header.Get("Content-Type") {
				t.Errorf("the answers for hidden %s and unknown %s differ beyond the name:\n  %s: HTTP %d %s %s\n  %s: HTTP %d %s %s",
					names[0], n, names[0], first.Status, first.Header.Get("Content-Type"), first.RawMsg,
					n, r.Status, r.Header.Get("Content-Type"), norm)
			}
		}
		requireNoFile(t, args["path"].(string), "hidden and unknown calls over raw HTTP")
	})

	t.Run("look-alike names are refused", func(t *testing.T) {
		t.Parallel()
		for _, p := range []struct {
			profile string
			url     string
		}{
			{"default", url},
			{"readonly", url + "?profile=readonly"},
		} {
			t.Run(p.profile, func(t *testing.T) {
				var ops []itest.Op
				var names []string
				var written []string
				for _, base := range []string{"fs__read_text_file", "fs__write_file"} {
					for _, n := range lookAlikes(base) {
						var args map[string]any
						if base == "fs__write_file" {
							path := filepath.Join(fsRoot, fmt.Sprintf("lookalike-%s-%d.txt", p.profile, len(written)))
							written = append(written, path)
							args = map[string]any{"path": path, "content": "look-alike " + n}
						} else {
							args = map[string]any{"path": existing}
						}
						names = append(names, n)
						ops = append(ops, itest.OpCallExpectError(n, args))
					}
				}
				// The real names still work (read) or are refused as hidden
				// (write through readonly): the variants are what is refused.
				ops = append(ops, itest.OpCall("fs__read_text_file", map[string]any{"path": existing}))
				steps := itest.Drive(t, itest.Script{URL: p.url, Steps: ops}).Steps(t)
				for i, n := range names {
					e := steps[i].Error
					if e == nil || e.Kind != "jsonrpc" || e.Code == nil || *e.Code != -32601 ||
						!strings.HasPrefix(e.Message, "Tool not found: ") || len(e.Data) != 0 {
						t.Errorf("call %q: got %v, want jsonrpc error -32601 \"Tool not found: …\" without data", n, e)
						continue
					}
					if printable(n) {
						if want := "Tool not found: " + n; e.Message != want {
							t.Errorf("call %q: message %q, want %q", n, e.Message, want)
						}
					} else if !printable(e.Message) {
						t.Errorf("call %q: the message %q echoes control or invisible characters; the name must be sanitized", n, e.Message)
					}
				}
				if got := steps[len(names)].Call(t); got.IsError || !strings.Contains(got.Text(), "existing ✓") {
					t.Errorf("fs__read_text_file itself: %q (isError %v)", got.Text(), got.IsError)
				}
				for _, path := range written {
					requireNoFile(t, path, "a look-alike of fs__write_file")
				}
			})
		}
	})

	t.Run("request narrowing", func(t *testing.T) {
		t.Parallel()
		two := []string{"demo__echo", "fs__read_text_file"}
		clients := checkViews(t, []viewCase{
			{name: "?toolsets=fs", url: url + "?toolsets=fs", want: fsTools},
			{name: "Mcp-Toolsets fs", url: url, headers: map[string]string{"Mcp-Toolsets": "fs"}, want: fsTools},
			{name: "?toolsets=fs,demo", url: url + "?toolsets=fs,demo", want: union(fsTools, demoTools)},
			{name: "fsonly ?toolsets=demo never widens", url: url + "?profile=fsonly&toolsets=demo", want: nil,
				extra: []itest.Op{itest.OpCallExpectError("demo__echo", map[string]any{"text": "x"})}},
			{name: "fsonly Mcp-Toolsets demo never widens", url: url,
				headers: map[string]string{"Mcp-Profile": "fsonly", "Mcp-Toolsets": "demo"}, want: nil},
			{name: "fsonly ?toolsets=fs,demo", url: url + "?profile=fsonly&toolsets=fs,demo", want: fsTools},
			{name: "Mcp-Read-Only true", url: url, headers: map[string]string{"Mcp-Read-Only": "true"}, want: readOnly},
			{name: "?read_only=true", url: url + "?read_only=true", want: readOnly},
			{name: "?read_only=false", url: url + "?read_only=false", want: cat.all},
			{name: "fsonly ?read_only=true", url: url + "?profile=fsonly&read_only=true", want: intersect(fsTools, readOnly)},
			{name: "?tools=a,b", url: url + "?tools=" + strings.Join(two, ","), want: two,
				extra: []itest.Op{
					itest.OpCall("demo__echo", map[string]any{"text": "narrowed"}),
					itest.OpCallExpectError("fs__list_directory", map[string]any{"path": fsRoot}),
				}},
			{name: "Mcp-Tools a,b", url: url, headers: map[string]string{"Mcp-Tools": strings.Join(two, ",")}, want: two},
			{name: "readonly ?tools= with a hidden tool never widens", url: url + "?profile=readonly&tools=demo__echo,fs__write_file",
				want: []string{"demo__echo"}},
			// Inside the narrowing stage, toolsets and tools add up (README:
			// like GitHub's --tools adding to --toolsets) and read_only
			// applies on top; the stage as a whole still only narrows the
			// profile.
			{name: "?toolsets=fs&tools= adds up", url: url + "?toolsets=fs&tools=demo__echo,fs__read_text_file",
				want: union(fsTools, []string{"demo__echo"})},
			{name: "Mcp-Toolsets + Mcp-Tools add up", url: url,
				headers: map[string]string{"Mcp-Toolsets": "fs", "Mcp-Tools": "demo__echo"}, want: union(fsTools, []string{"demo__echo"})},
			{name: "fsonly ?toolsets=fs&tools= outside fs never widens", url: url + "?profile=fsonly&toolsets=fs&tools=demo__echo",
				want: fsTools},
			{name: "all three narrowings", url: url + "?toolsets=fs&read_only=true&tools=fs__write_file,demo__echo",
				want: union(intersect(fsTools, readOnly), []string{"demo__echo"})},
			{name: "all three narrowings on fsonly", url: url + "?profile=fsonly&toolsets=fs&read_only=true&tools=fs__write_file,demo__echo",
				want: intersect(fsTools, readOnly)},
		})
		itest.WantToolNotFound(t, clients["fsonly ?toolsets=demo never widens"].Steps[1].Error, "demo__echo")
		if got := clients["?tools=a,b"].Steps[1].Call(t).Text(); got != "narrowed" {
			t.Errorf("demo__echo through ?tools= = %q, want %q", got, "narrowed")
		}
		itest.WantToolNotFound(t, clients["?tools=a,b"].Steps[2].Error, "fs__list_directory")

		t.Run("bad narrowing is 400", func(t *testing.T) {
			for _, c := range []struct {
				name    string
				url     string
				headers map[string]string
				mention string
			}{
				{"unknown toolset in query", url + "?toolsets=nosuchset", nil, "nosuchset"},
				{"unknown toolset in header", url, map[string]string{"Mcp-Toolsets": "fs,nosuchset"}, "nosuchset"},
				{"unknown toolset with a profile", url + "?profile=fsonly&toolsets=nosuchset", nil, "nosuchset"},
				{"read_only not a boolean", url + "?read_only=maybe", nil, "maybe"},
			} {
				t.Run(c.name, func(t *testing.T) {
					r := itest.RawInitialize(t, c.url, c.headers)
					if r.Status != http.StatusBadRequest {
						t.Errorf("initialize %s (headers %v): %s, want HTTP 400", c.url, c.headers, r)
					}
					if !strings.Contains(string(r.Body), c.mention) {
						t.Errorf("the 400 body does not name %q: %s", c.mention, r.Body)
					}
					if r.Header.Get("Mcp-Session-Id") != "" {
						t.Errorf("a refused initialize got a session id: %s", r)
					}
				})
			}
		})
	})

	t.Run("call_rules", func(t *testing.T) {
		t.Parallel()
		bad := []map[string]any{
			{"title": "prod", "text": "must not be written"},
			{"title": 42, "text": "non-string title"},
			{"title": []string{"ci-1"}, "text": "array title"},
			{"title": map[string]any{"ci-1": true}, "text": "object title"},
			{"title": nil, "text": "null title"},
			{"text": "missing title"},
			{"title": "CI-2", "text": "the glob is case-sensitive"},
			{"title": " ci-3", "text": "leading space"},
		}
		ops := []itest.Op{
			itest.OpList(),
			itest.OpCall("demo__write_note", map[string]any{"title": "ci-1", "text": "from ci ✓"}),
			itest.OpCall("demo__echo", map[string]any{"text": "ci echo"}),
			itest.OpCallExpectError("demo__delete_note", map[string]any{"title": "ci-1"}),
		}
		for _, a := range bad {
			ops = append(ops, itest.OpCallExpectError("demo__write_note", a))
		}
		steps := itest.Drive(t, itest.Script{URL: url + "?profile=ci", Steps: ops}).Steps(t)
		itest.CheckNames(t, "profile ci", steps[0].Names, []string{"demo__echo", "demo__write_note"})
		if r := steps[1].Call(t); r.IsError {
			t.Errorf("demo__write_note ci-1 through ci: isError %q", r.Text())
		}
		if got := steps[2].Call(t).Text(); got != "ci echo" {
			t.Errorf("demo__echo through ci = %q", got)
		}
		itest.WantToolNotFound(t, steps[3].Error, "demo__delete_note")
		for i, a := range bad {
			itest.WantArgsNotAllowed(t, steps[4+i].Error, "demo__write_note", a)
		}
		titles := noteTitles(t, url, nil)
		if !slices.Contains(titles, "ci-1") {
			t.Errorf("note ci-1 (allowed) was not written; notes %q", titles)
		}
		for _, refused := range []string{"prod", "CI-2", " ci-3"} {
			if slices.Contains(titles, refused) {
				t.Errorf("note %q was written although its call was refused; notes %q", refused, titles)
			}
		}
	})

	t.Run("bound session keeps its profile", func(t *testing.T) {
		t.Parallel()
		sess := itest.OpenRawSession(t, url+"?profile=readonly", nil)
		// Naming nothing: the bound view.
		r := sess.Post(t, "", nil, itest.ToolsListBody(2))
		if r.Status != http.StatusOK {
			t.Fatalf("tools/list on the bound session: %s", r)
		}
		itest.CheckNames(t, "tools/list on a session bound to readonly", r.ToolNames(t), readOnly)
		// Naming the same profile again is fine.
		if r := sess.Post(t, "", map[string]*string{"Mcp-Profile": itest.Ptr("readonly")}, itest.ToolsListBody(3)); r.Status != http.StatusOK {
			t.Errorf("tools/list naming the bound profile again: %s, want HTTP 200", r)
		} else {
			itest.CheckNames(t, "tools/list naming the bound profile again", r.ToolNames(t), readOnly)
		}
		// Naming another is refused, by header or query, for any method.
		for _, c := range []struct {
			name    string
			url     string
			headers map[string]*string
			body    string
		}{
			{"Mcp-Profile fsonly", "", map[string]*string{"Mcp-Profile": itest.Ptr("fsonly")}, itest.ToolsListBody(4)},
			{"?profile=fsonly", url + "?profile=fsonly", nil, itest.ToolsListBody(5)},
			{"Mcp-Profile fsonly on tools/call", "", map[string]*string{"Mcp-Profile": itest.Ptr("fsonly")},
				itest.ToolsCallBody(t, 6, "fs__read_text_file", map[string]any{"path": existing})},
			{"Mcp-Tools narrowing", "", map[string]*string{"Mcp-Tools": itest.Ptr("demo__echo")}, itest.ToolsListBody(7)},
		} {
			t.Run(c.name, func(t *testing.T) {
				u := c.url
				if u == "" {
					u = url + "?profile=readonly"
				}
				r := sess.Post(t, u, c.headers, c.body)
				if r.Status != http.StatusBadRequest {
					t.Errorf("request on the session bound to readonly with %s: %s, want HTTP 400", c.name, r)
				}
				if r.Msg != nil && r.Msg.Result != nil {
					t.Errorf("the refused request was answered with a result: %s", r.RawMsg)
				}
			})
		}
		// The session still works afterwards, with its own view.
		if r := sess.Post(t, "", nil, itest.ToolsListBody(8)); r.Status != http.StatusOK {
			t.Errorf("tools/list after the refusals: %s", r)
		} else {
			itest.CheckNames(t, "tools/list after the refusals", r.ToolNames(t), readOnly)
		}
	})
}

// lookAlikes returns names a client might send that are not base but could
// be mistaken for it: case, whitespace, control characters, invisible
// characters, homoglyphs and separator variants.
func lookAlikes(base string) []string {
	prefix, rest, _ := strings.Cut(base, "__")
	out := []string{
		strings.ToUpper(prefix) + "__" + rest, // FS__read_text_file
		strings.ToUpper(base),
		prefix + "__" + strings.ToUpper(rest[:1]) + rest[1:],
		" " + base,
		base + " ",
		"\t" + base,
		base + "\n",
		base + "\r\n",
		base + "\x00",
		"\u200b" + base, // zero-width space
		prefix + "__" + rest[:4] + "\u200b" + rest[4:], // zero-width space inside
		base + "\u200b",
		prefix + "\u200d__" + rest, // zero-width joiner
		"\ufeff" + base,            // byte order mark
		"f\u0455__" + rest,         // Cyrillic dze for s
		prefix + "__" + strings.Replace(rest, "e", "\u0435", 1), // Cyrillic ie for e
		prefix + "__" + strings.Replace(rest, "i", "\u0456", 1), // Cyrillic i
		"\uff46\uff53__" + rest,                                 // fullwidth fs
		prefix + "\uff3f\uff3f" + rest,                          // fullwidth low lines
		prefix + "_" + rest,
		prefix + "___" + rest,
		prefix + "__" + rest + "_",
		prefix + "__" + strings.ReplaceAll(rest, "_", "-"),
	}
	// Every variant must really differ from base.
	return slices.DeleteFunc(out, func(s string) bool { return s == base })
}

// printable reports whether every character of s is printable (letters,
// marks, numbers, punctuation, symbols and the ASCII space): no control
// characters, no invisible format characters such as zero-width spaces.
// viewmux has the name in "Tool not found: <name>" sanitized; a message
// must not echo what a reader cannot see.
func printable(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) })
}

// tokenTOML is the [[auth.tokens]] part of the TestTokens config, plus a
// profile "full" that filters nothing (for a token that sees everything).
func tokenTOML() string {
	sum := sha256.Sum256([]byte("tok-ci"))
	return fmt.Sprintf(`
[profiles.full]

[[auth.tokens]]
token = "tok-ro"
profiles = ["readonly"]

[[auth.tokens]]
token_sha256 = %q
profiles = ["ci", "readonly"]

[[auth.tokens]]
token = "tok-full"
profiles = ["full"]
`, hex.EncodeToString(sum[:]))
}

func TestTokens(t *testing.T) {
	itest.RequireFilesystemServer(t)
	fsRoot := itest.RealTempDir(t)
	mux := itest.StartMux(t, itest.ProfilesConfig(t, fsRoot, tokenTOML()))
	url := mux.URL()
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	knownProfiles := []string{"ci", "fsonly", "fsread", "full", "readonly", "readonly2"}
	tokenProfiles := map[string][]string{"tok-ro": {"readonly"}, "tok-ci": {"ci", "readonly"}}
	ciSum := sha256.Sum256([]byte("tok-ci"))

	t.Run("initialize status", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			name    string
			url     string
			headers map[string]string
			status  int
		}{
			{"no Authorization", url, nil, 401},
			{"wrong token", url, bearer("nope"), 401},
			{"empty bearer", url, map[string]string{"Authorization": "Bearer "}, 401},
			{"token without scheme", url, map[string]string{"Authorization": "tok-ro"}, 401},
			{"Basic scheme", url, map[string]string{"Authorization": "Basic tok-ro"}, 401},
			{"prefix of a token", url, bearer("tok-r"), 401},
			{"token plus a suffix", url, bearer("tok-ro2"), 401},
			{"token in another case", url, bearer("TOK-RO"), 401},
			{"sha256 of a token instead of the token", url, bearer(hex.EncodeToString(ciSum[:])), 401},
			{"token in ?token=", url + "?token=tok-ro", nil, 401},
			{"token in ?access_token=", url + "?access_token=tok-ro", nil, 401},
			{"token in ?token= with a profile", url + "?profile=readonly&token=tok-ro", nil, 401},
			{"no token, unknown profile", url + "?profile=nope", nil, 401},
			{"no token, existing profile", url + "?profile=readonly", nil, 401},
			{"wrong token, unknown profile", url + "?profile=nope", bearer("nope"), 401},
			{"tok-ro", url, bearer("tok-ro"), 200},
			{"tok-ro, scheme in lower case", url, map[string]string{"Authorization": "bearer tok-ro"}, 200},
			{"tok-ci", url, bearer("tok-ci"), 200},
			{"tok-ro ?profile=readonly", url + "?profile=readonly", bearer("tok-ro"), 200},
			{"tok-ro ?profile=ci", url + "?profile=ci", bearer("tok-ro"), 403},
			{"tok-ro Mcp-Profile ci", url, map[string]string{"Authorization": "Bearer tok-ro", "Mcp-Profile": "ci"}, 403},
			{"tok-ro ?profile=readonly2 (same rules, not its profile)", url + "?profile=readonly2", bearer("tok-ro"), 403},
			{"tok-ci ?profile=fsonly", url + "?profile=fsonly", bearer("tok-ci"), 403},
			{"tok-ci ?profile=readonly", url + "?profile=readonly", bearer("tok-ci"), 200},
			{"tok-ro ?profile=nope", url + "?profile=nope", bearer("tok-ro"), 404},
			{"tok-ci Mcp-Profile nope", url, map[string]string{"Authorization": "Bearer tok-ci", "Mcp-Profile": "nope"}, 404},
		} {
			t.Run(c.name, func(t *testing.T) {
				r := itest.RawInitialize(t, c.url, c.headers)
				if r.Status != c.status {
					t.Fatalf("initialize %s (headers %v): %s, want HTTP %d", c.url, c.headers, r, c.status)
				}
				switch c.status {
				case 200:
					if r.Header.Get("Mcp-Session-Id") == "" || r.Msg == nil || r.Msg.Result == nil {
						t.Errorf("accepted initialize without a session or result: %s", r)
					}
				case 401:
					if h := r.Header.Get("WWW-Authenticate"); !strings.HasPrefix(h, "Bearer") {
						t.Errorf("401 with WWW-Authenticate %q, want a Bearer challenge: %s", h, r)
					}
					for _, p := range knownProfiles {
						if itest.MentionsName(string(r.Body), p) {
							t.Errorf("the 401 body tells an unauthenticated client about profile %q: %s", p, r.Body)
						}
					}
				case 404:
					// It names the profiles this token may use, and no
					// other profile of the config (issue 17).
					tok := strings.TrimPrefix(c.headers["Authorization"], "Bearer ")
					for _, p := range knownProfiles {
						if yours := slices.Contains(tokenProfiles[tok], p); itest.MentionsName(string(r.Body), p) != yours {
							t.Errorf("the 404 body to %s names profile %q: %v, want %v: %s", tok, p, !yours, yours, r.Body)
						}
					}
				}
				if c.status != 200 && r.Header.Get("Mcp-Session-Id") != "" {
					t.Errorf("a refused initialize got a session id: %s", r)
				}
			})
		}
	})

	t.Run("views by token", func(t *testing.T) {
		t.Parallel()
		cat := listCatalog(t, url, bearer("tok-full"))
		readOnly := cat.readOnly()
		ci := []string{"demo__echo", "demo__write_note"}
		clients := checkViews(t, []viewCase{
			{name: "tok-ci without a profile gets ci", url: url, headers: bearer("tok-ci"), want: ci,
				extra: []itest.Op{
					itest.OpCall("demo__write_note", map[string]any{"title": "ci-token", "text": "x"}),
					itest.OpCallExpectError("demo__write_note", map[string]any{"title": "prod-token", "text": "x"}),
					itest.OpCallExpectError("fs__read_text_file", map[string]any{"path": fsRoot}),
				}},
			{name: "tok-ci Mcp-Profile readonly", url: url,
				headers: map[string]string{"Authorization": "Bearer tok-ci", "Mcp-Profile": "readonly"}, want: readOnly},
			{name: "tok-ci ?profile=readonly", url: url + "?profile=readonly", headers: bearer("tok-ci"), want: readOnly},
			{name: "tok-ci ?profile=ci", url: url + "?profile=ci", headers: bearer("tok-ci"), want: ci},
			{name: "tok-ro", url: url, headers: bearer("tok-ro"), want: readOnly},
			{name: "tok-ro ?read_only=true narrows nothing more", url: url + "?read_only=true", headers: bearer("tok-ro"), want: readOnly},
			{name: "tok-ci ?toolsets=fs narrows ci to nothing", url: url + "?toolsets=fs", headers: bearer("tok-ci"), want: nil},
		})
		tokCI := clients["tok-ci without a profile gets ci"]
		if r := tokCI.Steps[1].Call(t); r.IsError {
			t.Errorf("demo__write_note ci-token with tok-ci: isError %q", r.Text())
		}
		itest.WantArgsNotAllowed(t, tokCI.Steps[2].Error, "demo__write_note", "prod-token")
		itest.WantToolNotFound(t, tokCI.Steps[3].Error, "fs__read_text_file")
	})

	t.Run("the token is checked on every request", func(t *testing.T) {
		t.Parallel()
		sess := itest.OpenRawSession(t, url, bearer("tok-ro"))
		for _, c := range []struct {
			name string
			auth *string
		}{
			{"no Authorization", nil},
			{"wrong token", itest.Ptr("Bearer nope")},
		} {
			t.Run(c.name, func(t *testing.T) {
				r := sess.Post(t, "", map[string]*string{"Authorization": c.auth}, itest.ToolsListBody(2))
				if r.Status != http.StatusUnauthorized {
					t.Errorf("tools/list on a tok-ro session with %s: %s, want HTTP 401", c.name, r)
				}
			})
		}
		r := sess.Post(t, "", nil, itest.ToolsListBody(3))
		if r.Status != http.StatusOK {
			t.Fatalf("tools/list on the tok-ro session with its token: %s", r)
		}
	})

	t.Run("another token cannot ride a session into a profile it may not use", func(t *testing.T) {
		t.Parallel()
		// tok-ci's session is bound to ci; tok-ro may not use ci.
		sess := itest.OpenRawSession(t, url, bearer("tok-ci"))
		title := "ci-ridden-" + itest.RandomHex(t, 4)
		r := sess.Post(t, "", map[string]*string{"Authorization": itest.Ptr("Bearer tok-ro")},
			itest.ToolsCallBody(t, 2, "demo__write_note", map[string]any{"title": title, "text": "written with tok-ro"}))
		refused := r.Status == http.StatusForbidden || r.Status == http.StatusUnauthorized ||
			r.Status == http.StatusBadRequest || (r.Msg != nil && r.Msg.Error != nil)
		if !refused {
			t.Errorf("tok-ro called demo__write_note on tok-ci's session (bound to ci, which tok-ro may not use): %s", r)
		}
		titles := noteTitles(t, url, bearer("tok-full"))
		if slices.Contains(titles, title) {
			t.Errorf("note %q was written by tok-ro through tok-ci's ci session; notes %q", title, titles)
		}
	})
}
