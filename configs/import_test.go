package configs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// allSet is a lookupEnv in which every variable is set to its own name, so
// imported ${VAR} references round-trip visibly.
func allSet(name string) (string, bool) { return "<" + name + ">", true }

// importOne imports data as one file called name.
func importOne(name, data string) (*ImportResult, error) {
	return ImportFiles([]ImportFile{{Name: name, Data: []byte(data)}})
}

func TestImportRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		json  string
		check func(t *testing.T, cfg *Config)
	}{
		{"claude desktop", `{
  "mcpServers": {
    "filesystem": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop", "C:\\tmp"]
    },
    "github": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-github"],
      "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_TOKEN}", "PRICE": "$5 \"quoted\"\nline2"}
    }
  }
}`, func(t *testing.T, cfg *Config) {
			fs := cfg.Upstream("filesystem")
			if fs == nil || fs.Command != "npx" || !reflect.DeepEqual(fs.Args, []string{"-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop", `C:\tmp`}) {
				t.Errorf("filesystem = %+v", fs)
			}
			gh := cfg.Upstream("github")
			want := map[string]string{"GITHUB_PERSONAL_ACCESS_TOKEN": "<GITHUB_TOKEN>", "PRICE": "$5 \"quoted\"\nline2"}
			if gh == nil || !reflect.DeepEqual(gh.Env, want) {
				t.Errorf("github env = %+v, want %+v", gh, want)
			}
		}},
		{"cursor remote servers", `{
  "mcpServers": {
    "docs": {"url": "https://docs.example.com/mcp", "headers": {"Authorization": "Bearer ${env:DOCS_TOKEN}"}},
    "legacy": {"type": "sse", "url": "https://old.example.com/sse"},
    "streamable": {"type": "streamable-http", "url": "http://127.0.0.1:9000/mcp"},
    "socket": {"url": "wss://ws.example.com/mcp"}
  }
}`, func(t *testing.T, cfg *Config) {
			if d := cfg.Upstream("docs"); d == nil || d.Transport != TransportHTTP || d.Headers["Authorization"] != "Bearer <DOCS_TOKEN>" {
				t.Errorf("docs = %+v", d)
			}
			if u := cfg.Upstream("legacy"); u == nil || u.Transport != TransportSSE {
				t.Errorf("legacy = %+v", u)
			}
			if u := cfg.Upstream("streamable"); u == nil || u.Transport != TransportHTTP {
				t.Errorf("streamable = %+v", u)
			}
			if u := cfg.Upstream("socket"); u == nil || u.Transport != TransportWebsocket {
				t.Errorf("socket = %+v", u)
			}
		}},
		{"vs code mcp.json", `{
  "inputs": [{"type": "promptString", "id": "api-key", "password": true}],
  "servers": {
    "my_server": {"type": "stdio", "command": "node", "args": ["server.js", "--key", "<INPUT_API_KEY>", "${workspaceFolder}", "${userHome}/x"], "cwd": "/src"},
    "my.server": {"type": "http", "url": "https://example.com/mcp"}
  }
}`, func(t *testing.T, cfg *Config) {
			// "my.server" sorts before "my_server", so it gets the plain name.
			if u := cfg.Upstream("my-server"); u == nil || u.URL != "https://example.com/mcp" {
				t.Errorf("my-server = %+v", u)
			}
			u := cfg.Upstream("my-server-2")
			if u == nil || u.Dir != "/src" || !reflect.DeepEqual(u.Args, []string{"server.js", "--key", "<INPUT_API_KEY>", "${workspaceFolder}", "<HOME>/x"}) {
				t.Errorf("my-server-2 = %+v (inputs become variables, other VS Code placeholders stay literal)", u)
			}
		}},
		{"vs code settings with comments", `{
  // user settings
  "editor.fontSize": 14,
  "mcp": {
    "servers": {
      /* a block
         comment */
      "memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory",],}, // trailing commas
      "odd key!": {"command": "srv", "alwaysAllow": ["x"], "disabled": false, "url-ish": "// not a comment"},
    },
  },
}`, func(t *testing.T, cfg *Config) {
			if u := cfg.Upstream("memory"); u == nil || len(u.Args) != 2 {
				t.Errorf("memory = %+v", u)
			}
			if u := cfg.Upstream("odd-key"); u == nil || u.Command != "srv" {
				t.Errorf("odd-key = %+v", u)
			}
		}},
		{"disabled server is skipped", `{"mcpServers": {"off": {"command": "x", "disabled": true}, "on": {"command": "y"}}}`,
			func(t *testing.T, cfg *Config) {
				if len(cfg.Upstreams) != 1 || cfg.Upstreams[0].Name != "on" {
					t.Errorf("Upstreams = %+v", cfg.Upstreams)
				}
			}},
		{"no servers", `{"mcpServers": {}}`, func(t *testing.T, cfg *Config) {
			if len(cfg.Upstreams) != 0 {
				t.Errorf("Upstreams = %+v", cfg.Upstreams)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := importOne("client.json", tt.json)
			if err != nil {
				t.Fatalf("Import: %v", err)
			}
			out := res.TOML
			if !strings.HasPrefix(string(out), "# viewmux config") {
				t.Errorf("output lacks the header comment:\n%s", out)
			}
			cfg, err := Parse("imported.toml", out, allSet)
			if err != nil {
				t.Fatalf("imported TOML does not parse:\n%v\n--- output ---\n%s", err, out)
			}
			tt.check(t, cfg)
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
}

func TestImportSortedAndCommented(t *testing.T) {
	res, err := importOne("c.json", `{"mcpServers": {"zeta": {"command": "z"}, "a b": {"command": "a", "autoApprove": []}}}`)
	if err != nil {
		t.Fatal(err)
	}
	s := string(res.TOML)
	a, z := strings.Index(s, "[upstreams.a-b]"), strings.Index(s, "[upstreams.zeta]")
	if a < 0 || z < 0 || a > z {
		t.Errorf("tables missing or not sorted:\n%s", s)
	}
	if want := `# from c.json, server "a b"`; !strings.Contains(s, want) {
		t.Errorf("output lacks %q:\n%s", want, s)
	}
	var notes []string
	for _, n := range res.Notes {
		notes = append(notes, n.String())
	}
	for _, want := range []string{
		`import: c.json: server "a b": key "autoApprove" is not carried (viewmux has no per-tool approval)`,
		`import: c.json: server "a b" is mounted as upstream "a-b" (names must be [A-Za-z0-9-]+ and unique)`,
	} {
		if !slices.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, strings.Join(notes, "\n"))
		}
	}
	if res.Lost() != 1 {
		t.Errorf("Lost() = %d, want 1 (the autoApprove key; a rename loses nothing)", res.Lost())
	}
}

func TestImportErrors(t *testing.T) {
	tests := []struct {
		name, json, want string
	}{
		{"not json", `{"mcpServers": `, "import c.json: line 1:15: unexpected end of JSON input"},
		{"syntax error line", "{\n\"mcpServers\": {\n\"a\": {\"command\": x}}}", "import c.json: line 3:18: invalid character 'x'"},
		{"root not an object", `[1]`, "import c.json: line 1:1: json: cannot unmarshal array"},
		{"server not an object", `{"mcpServers": {"s": "npx"}}`, `import c.json: server "s": must be an object, got JSON string`},
		{"env not strings", `{"mcpServers": {"t": {"command": "x", "env": {"A": 1}}}}`, `server "t": env: want string, got JSON number`},
		{"bad toolFilter mode", `{"mcpProxy": {}, "mcpServers": {"t": {"command": "x", "options": {"toolFilter": {"mode": "deny", "list": ["a"]}}}}}`, `server "t": options.toolFilter.mode "deny" is neither allow nor block`},
		{"url and serverUrl", `{"mcpServers": {"t": {"url": "http://a", "serverUrl": "http://b"}}}`, `server "t": has both url and serverUrl`},
		{"no servers object", `{"other": {}}`, `no "mcpServers", "servers"`},
		{"servers not an object", `{"mcpServers": []}`, `"mcpServers" must be an object of named servers`},
		{"neither command nor url", `{"mcpServers": {"broken": {"args": ["x"]}}}`, `server "broken": has neither command nor url`},
		{"both command and url", `{"mcpServers": {"both": {"command": "x", "url": "http://h"}}}`, `server "both": has both command and url`},
		{"unknown type", `{"mcpServers": {"t": {"type": "grpc", "url": "http://h"}}}`, `server "t": unknown type "grpc"`},
		{"sse with command", `{"mcpServers": {"t": {"type": "sse", "command": "x"}}}`, `server "t": type "sse" needs a url`},
		{"sse with ws url", `{"mcpServers": {"t": {"type": "sse", "url": "ws://h"}}}`, `server "t": type "sse" needs an http or https url`},
		{"bad scheme", `{"mcpServers": {"t": {"url": "file:///x"}}}`, `server "t": url has no host`},
		{"args not strings", `{"mcpServers": {"t": {"command": "x", "args": [1]}}}`, `server "t": args`},
		{"headers with command", `{"mcpServers": {"t": {"command": "x", "headers": {"A": "b"}}}}`, `server "t": headers apply only`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := importOne("c.json", tt.json)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Import() error = %v; want %q", err, tt.want)
			}
		})
	}
}

func TestSanitizePrefix(t *testing.T) {
	tests := []struct{ in, want string }{
		{"github", "github"},
		{"my_server", "my-server"},
		{"@scope/pkg name", "scope-pkg-name"},
		{"--x--", "x"},
		{"ü", "server"},
		{"", "server"},
		{"A-1", "A-1"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got := sanitizePrefix(tt.in)
			if got != tt.want || !prefixRE.MatchString(got) {
				t.Errorf("sanitizePrefix(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestImportReservedName: a client's server named "viewmux" (a client
// pointed at viewmux itself, as docs/clients.md shows) is mounted under
// another name, since the prefix viewmux is reserved; the import once wrote a
// config that did not load.
func TestImportReservedName(t *testing.T) {
	res, err := importOne("claude_desktop_config.json", `{"mcpServers": {
  "viewmux": {"command": "viewmux", "args": ["serve", "--stdio"]},
  "viewmux-2": {"command": "other"}
}}`)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse("imported.toml", res.TOML, nil)
	if err != nil {
		t.Fatalf("the imported config does not load: %v\n%s", err, res.TOML)
	}
	// Servers are placed in sorted order, so "viewmux" comes first and
	// takes "viewmux-2"; the server of that name moves on, as in any clash.
	if u := cfg.Upstream("viewmux-2"); u == nil || u.Command != "viewmux" {
		t.Errorf("server viewmux not mounted as viewmux-2:\n%s", res.TOML)
	}
	if u := cfg.Upstream("viewmux-2-2"); u == nil || u.Command != "other" {
		t.Errorf("server viewmux-2 not mounted as viewmux-2-2:\n%s", res.TOML)
	}
	found := false
	for _, n := range res.Notes {
		found = found || strings.Contains(n.String(), `is mounted as upstream "viewmux-2": the prefix "viewmux" is reserved`)
	}
	if !found || res.Lost() != 0 {
		t.Errorf("want an informational note on the rename, no loss; notes %v, lost %d", res.Notes, res.Lost())
	}
}

// TestImportChildReferences: mcp-remote's documented pattern passes a
// header whose ${VAR} the child expands from its own env; viewmux must hand
// it over literally, while ${VAR} in env values stays viewmux's.
func TestImportChildReferences(t *testing.T) {
	res, err := importOne("claude_desktop_config.json", `{"mcpServers": {"docs": {
  "command": "npx",
  "args": ["mcp-remote", "https://docs.example.com/mcp", "--header", "Authorization: Bearer ${DOCS_TOKEN}", "--other", "${OUTER}"],
  "env": {"DOCS_TOKEN": "${DOCS_API_TOKEN}"}}}}`)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"DOCS_API_TOKEN": "secret", "OUTER": "outer"}
	cfg, err := Parse("imported.toml", res.TOML, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("does not load with only DOCS_API_TOKEN and OUTER set: %v\n%s", err, res.TOML)
	}
	u := cfg.Upstream("docs")
	wantArgs := []string{"mcp-remote", "https://docs.example.com/mcp", "--header", "Authorization: Bearer ${DOCS_TOKEN}", "--other", "outer"}
	if !reflect.DeepEqual(u.Args, wantArgs) || u.Env["DOCS_TOKEN"] != "secret" {
		t.Errorf("args = %q, env = %q; want args %q and DOCS_TOKEN = secret", u.Args, u.Env, wantArgs)
	}
	if res.Lost() != 0 {
		t.Errorf("Lost() = %d, want 0: nothing is lost", res.Lost())
	}
}

// TestImportSeveralFiles: servers of several files merge; a duplicate is
// imported once and a clash is renamed, each with a note naming both files.
func TestImportSeveralFiles(t *testing.T) {
	res, err := ImportFiles([]ImportFile{
		{Name: "a.json", Data: []byte(`{"mcpServers": {"memory": {"command": "npx", "args": ["m"]}, "git": {"command": "git-mcp"}}}`)},
		{Name: "b.json", Data: []byte(`{"mcpServers": {"memory": {"command": "npx", "args": ["m"]}, "git": {"command": "other-git-mcp"}}}`)},
		{Name: "settings.json", Data: []byte(`{"editor.fontSize": 12}`), Optional: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse("merged.toml", res.TOML, nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, res.TOML)
	}
	var names []string
	for _, u := range cfg.Upstreams {
		names = append(names, u.Name+"="+u.Command)
	}
	if want := []string{"git=git-mcp", "git-2=other-git-mcp", "memory=npx"}; !reflect.DeepEqual(names, want) {
		t.Errorf("upstreams = %q, want %q", names, want)
	}
	var notes []string
	for _, n := range res.Notes {
		notes = append(notes, n.String())
	}
	for _, want := range []string{
		`import: b.json: server "git" is mounted as upstream "git-2": "git" is taken by server "git" of a.json`,
		`import: b.json: server "memory" is identical to server "memory" of a.json, imported once as upstream "memory"`,
		`import: settings.json: holds no MCP servers: skipped`,
	} {
		if !slices.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, strings.Join(notes, "\n"))
		}
	}
	// A named file without servers is an error, not a skip.
	if _, err := importOne("settings.json", `{"editor.fontSize": 12}`); err == nil || !strings.Contains(err.Error(), `import settings.json: no "mcpServers"`) {
		t.Errorf("named file without servers: err = %v", err)
	}
}

func TestImportScanPaths(t *testing.T) {
	linux := ImportScanPaths("/h", "/w", "linux", "")
	for _, want := range []string{
		"/h/.config/Claude/claude_desktop_config.json", "/h/.claude.json", "/w/.mcp.json",
		"/h/.cursor/mcp.json", "/w/.cursor/mcp.json", "/w/.vscode/mcp.json", "/h/.config/Code/User/settings.json",
		"/h/.codeium/windsurf/mcp_config.json", "/h/.config/mcphub/servers.json",
	} {
		if !slices.Contains(linux, want) {
			t.Errorf("linux paths lack %s: %q", want, linux)
		}
	}
	mac := ImportScanPaths("/h", "/h", "darwin", "")
	if !slices.Contains(mac, "/h/Library/Application Support/Claude/claude_desktop_config.json") {
		t.Errorf("darwin paths lack Claude Desktop's: %q", mac)
	}
	if n := len(slices.Compact(slices.Sorted(slices.Values(mac)))); n != len(mac) {
		t.Errorf("paths repeat when cwd is home: %q", mac)
	}
}

// TestImportNotes: each loss is a note marked Lost, each informational
// change a note that is not.
func TestImportNotes(t *testing.T) {
	tests := []struct {
		name, file, json string
		readFile         func(string) ([]byte, error)
		want             string
		lost             bool
	}{
		{"undeclared input", "mcp.json", `{"servers": {"s": {"url": "https://h/mcp", "headers": {"K": "${input:api}"}}}}`, nil,
			`import: mcp.json: server "s": ${input:api} becomes ${INPUT_API} (the input is not declared in "inputs"): set INPUT_API in viewmux's environment`, false},
		{"editor variable outside .vscode", "mcp.json", `{"servers": {"s": {"command": "x", "args": ["${workspaceFolder}"]}}}`, nil,
			`import: mcp.json: server "s": ${workspaceFolder} means nothing outside the editor: kept literally; replace it with a path`, true},
		{"odd placeholder", "c.json", `{"mcpServers": {"s": {"command": "x", "args": ["${not a var}"]}}}`, nil,
			`import: c.json: server "s": the placeholder ${not a var} is not an environment variable: kept literally; replace it`, true},
		{"envFile not readable", "c.json", `{"mcpServers": {"s": {"command": "x", "envFile": ".env"}}}`,
			func(string) ([]byte, error) { return nil, errors.New("permission denied") },
			`import: c.json: server "s": envFile ".env" is not carried: permission denied`, true},
		{"options without mcpProxy", "c.json", `{"mcpServers": {"s": {"command": "x", "options": {"toolFilter": {"list": ["a"]}}}}}`, nil,
			`import: c.json: server "s": key "options" is not carried (it is TBXark mcp-proxy's, and the file has no "mcpProxy")`, true},
		{"open addr without tokens", "config.json", `{"mcpProxy": {"addr": "0.0.0.0:9090"}, "mcpServers": {"s": {"command": "x"}}}`, nil,
			`import: config.json: mcpProxy.addr "0.0.0.0:9090" is carried as listen = "127.0.0.1:9090": viewmux refuses a non-loopback address without [[auth.tokens]] (or allow_unauthenticated = true)`, true},
		{"server without token among tokened ones", "config.json", `{"mcpProxy": {}, "mcpServers": {"a": {"command": "x", "options": {"authTokens": ["t"]}}, "b": {"command": "y"}}}`, nil,
			`import: config.json: server "b": TBXark served it without a token; viewmux checks a token on every HTTP request once [[auth.tokens]] exist, and no token's profile names upstream "b"`, true},
		{"url server with env", "c.json", `{"mcpServers": {"s": {"url": "https://h/mcp", "env": {"A": "b"}}}}`, nil,
			`import: c.json: server "s": env and envFile are not carried: they apply only to servers viewmux starts as a child, and this one has a url`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := ImportFiles([]ImportFile{{Name: tt.file, Data: []byte(tt.json), ReadFile: tt.readFile}})
			if err != nil {
				t.Fatal(err)
			}
			checkNote(t, res.Notes, func(n string) bool { return n == tt.want }, tt.want, tt.lost)
			if _, err := Parse("imported.toml", res.TOML, allSet); err != nil {
				t.Errorf("output does not load: %v\n%s", err, res.TOML)
			}
		})
	}
}

// FuzzImportFiles: no input makes ImportFiles panic, and what it accepts
// is TOML (it may still be invalid config: a header name or a url the
// source got wrong is Parse's to report, with its line).
func FuzzImportFiles(f *testing.F) {
	for _, seed := range []string{
		`{"mcpServers": {"a": {"command": "x", "args": ["${A}", "$$", "${input:b}"], "env": {"A": null}}}}`,
		`{"mcpProxy": {"addr": ":1", "options": {"authTokens": ["t"]}}, "mcpServers": {"a": {"url": "http://h", "options": {"toolFilter": {"mode": "allow", "list": ["x*"]}}}}}`,
		`{"servers": {"a": {"url": "ws://h", "headers": {"K": "${workspaceFolder}"}}}, "inputs": [{"id": "b"}]}`,
		`{"projects": {"/p": {"mcpServers": {"a": {"command": "${cmd: x}"}}}}, "mcpServers": {}}`,
		"{\"mcp\": {\"servers\": {\"a\": {\"command\": \"x\",},},}, // c\n}",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data string) {
		res, err := ImportFiles([]ImportFile{{Name: "f.json", Data: []byte(data)}, {Name: "g.json", Data: []byte(data), Optional: true}})
		if err != nil {
			return
		}
		var v map[string]any
		if _, err := toml.Decode(string(res.TOML), &v); err != nil {
			t.Fatalf("output is not TOML: %v\n%s", err, res.TOML)
		}
	})
}

// TestImportTBXarkTokens: TBXark expands $VAR and ${VAR} in its whole
// config (os.ExpandEnv) before it reads authTokens, so a token that is one
// reference becomes viewmux's token = "${VAR}", and one with any other $
// is not carried: hashing its text would make the placeholder a working
// token and refuse the real one.
func TestImportTBXarkTokens(t *testing.T) {
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	tests := []struct {
		name   string
		tokens string // the JSON list in mcpProxy.options.authTokens
		env    map[string]string
		want   []string // each token's Token (when from ${VAR}) or SHA256
		note   string
		lost   bool
	}{
		{"braced reference", `["${AUTH_TOKEN}"]`, map[string]string{"AUTH_TOKEN": "real"}, []string{"real"},
			`authTokens ${AUTH_TOKEN} is written as token = "${AUTH_TOKEN}": set AUTH_TOKEN in viewmux's environment`, false},
		{"bare reference", `["$AUTH_TOKEN"]`, map[string]string{"AUTH_TOKEN": "real"}, []string{"real"},
			`authTokens $AUTH_TOKEN is written as token = "${AUTH_TOKEN}": set AUTH_TOKEN in viewmux's environment`, false},
		{"literal and reference", `["lit", "${T2}"]`, map[string]string{"T2": "two"}, []string{sum("lit"), "two"}, "", false},
		// TBXark compares a token whole: a comma is part of it.
		{"comma is not a separator", `["a,b"]`, nil, []string{sum("a,b")}, "", false},
		{"reference in the middle", `["pre-${X}"]`, nil, nil,
			`mcpProxy.options.authTokens[0] is not carried: it holds a $ that is not exactly one ${VAR} or $VAR, so what TBXark expanded it to is unknown; add it as [[auth.tokens]] yourself`, true},
		{"default syntax", `["${X:-fallback}"]`, nil, nil, `mcpProxy.options.authTokens[0] is not carried`, true},
		{"two references", `["$A$B"]`, nil, nil, `mcpProxy.options.authTokens[0] is not carried`, true},
		{"empty", `[""]`, nil, nil, `mcpProxy.options.authTokens[0] is not carried: it is empty, and TBXark accepts no empty token`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := importOne("config.json", `{"mcpProxy": {"addr": ":9090", "options": {"authTokens": `+tt.tokens+`}}, "mcpServers": {"a": {"command": "x"}}}`)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := Parse("imported.toml", res.TOML, func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
			if err != nil {
				t.Fatalf("does not load: %v\n%s", err, res.TOML)
			}
			var got []string
			for _, tok := range cfg.Auth.Tokens {
				if tok.Token != "" {
					got = append(got, tok.Token)
				} else {
					got = append(got, tok.SHA256)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("tokens = %q, want %q\n%s", got, tt.want, res.TOML)
			}
			var raw []string
			if err := json.Unmarshal([]byte(tt.tokens), &raw); err != nil {
				t.Fatal(err)
			}
			for _, r := range raw {
				if strings.Contains(r, "$") && strings.Contains(string(res.TOML), sum(r)) {
					t.Errorf("the placeholder text %q is hashed into a token:\n%s", r, res.TOML)
				}
			}
			if len(tt.want) == 0 && cfg.Server.Listen != "127.0.0.1:9090" {
				t.Errorf("no token carried, yet listen = %q: viewmux must not listen openly", cfg.Server.Listen)
			}
			if tt.note == "" {
				return
			}
			checkNote(t, res.Notes, func(n string) bool { return strings.Contains(n, tt.note) }, tt.note, tt.lost)
		})
	}
}

// TestImportLiteralSecrets: a literal value that may be a secret is
// carried (the source held it) but named in an informational note that
// never shows the value.
func TestImportLiteralSecrets(t *testing.T) {
	res, err := importOne("claude_desktop_config.json", `{"mcpServers": {
  "gh": {"command": "npx", "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_SECRET1", "FROM_ENV": "${OTHER}"}},
  "api": {"url": "https://user:SECRET2@api.example.com/mcp?api_key=SECRET3&ref=${REF}", "headers": {"Authorization": "Bearer SECRET4", "X-Api-Key": "SECRET5", "X-Ref": "${REF}"}}
}}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse("imported.toml", res.TOML, allSet); err != nil {
		t.Fatalf("does not load: %v\n%s", err, res.TOML)
	}
	var all []string
	for _, n := range res.Notes {
		all = append(all, n.String())
		if strings.Contains(n.Msg, "SECRET") {
			t.Errorf("a note shows a secret value: %s", n)
		}
		if strings.Contains(n.Msg, "literal value") && n.Lost {
			t.Errorf("note %q counts as a loss; the value is carried", n)
		}
	}
	for _, want := range []string{
		`import: claude_desktop_config.json: server "gh": env GITHUB_PERSONAL_ACCESS_TOKEN holds a literal value, copied into the config; consider ${GITHUB_PERSONAL_ACCESS_TOKEN}`,
		`import: claude_desktop_config.json: server "api": header Authorization holds a literal value, copied into the config; consider "Bearer ${AUTHORIZATION}"`,
		`import: claude_desktop_config.json: server "api": header X-Api-Key holds a literal value, copied into the config; consider "${X_API_KEY}"`,
		`import: claude_desktop_config.json: server "api": url holds a user name or password (user:password@), copied into the config; consider ${VAR} in its place`,
		`import: claude_desktop_config.json: server "api": url query parameter api_key holds a literal value, copied into the config; consider ${API_KEY}`,
	} {
		if !slices.Contains(all, want) {
			t.Errorf("notes lack %q:\n%s", want, strings.Join(all, "\n"))
		}
	}
	for _, n := range all {
		for _, quiet := range []string{"FROM_ENV", "X-Ref", "parameter ref"} {
			if strings.Contains(n, quiet) {
				t.Errorf("a value that is a ${VAR} reference is noted as literal: %s", n)
			}
		}
	}
	if !strings.Contains(string(res.TOML), "ghp_SECRET1") {
		t.Errorf("the literal env value is not carried:\n%s", res.TOML)
	}
}

// TestImportClaudeApprovals: a Claude Code server the user disabled, or a
// project .mcp.json server the user never approved, is not something
// viewmux starts: it is written as a comment.
func TestImportClaudeApprovals(t *testing.T) {
	dir := t.TempDir()
	mcpJSON := filepath.Join(dir, ".mcp.json")
	servers := `{"mcpServers": {"a": {"command": "a"}, "b": {"command": "b"}, "c": {"command": "c"}}}`
	state := func(project string) *ClaudeState {
		return &ClaudeState{Name: "/home/me/.claude.json", Data: []byte(`{"projects": {` + strconv.Quote(dir) + `: ` + project + `}}`)}
	}
	tests := []struct {
		name    string
		scanned bool // found by --scan rather than named
		claude  *ClaudeState
		active  []string
		note    string
		lost    bool
	}{
		{"named, no ~/.claude.json", false, nil, []string{"a", "b", "c"}, "", false},
		{"named, rejected one", false, state(`{"disabledMcpjsonServers": ["b"]}`), []string{"a", "c"},
			`server "b" was rejected in Claude Code for ` + dir + ` (disabledMcpjsonServers in /home/me/.claude.json): written as a comment`, false},
		{"named, disabled one", false, state(`{"disabledMcpServers": ["c"]}`), []string{"a", "b"},
			`server "c" is disabled in Claude Code for ` + dir + ` (disabledMcpServers in /home/me/.claude.json): written as a comment`, false},
		{"scanned, no ~/.claude.json", true, nil, nil,
			`server "a" was never approved in Claude Code: --scan found it in ` + dir + `, and no ~/.claude.json was read to show an approval; written as a comment (uncomment it if you trust it)`, true},
		{"scanned, other project only", true, &ClaudeState{Name: "/home/me/.claude.json", Data: []byte(`{"projects": {"/elsewhere": {"enableAllProjectMcpServers": true}}}`)}, nil,
			`server "a" was never approved in Claude Code for ` + dir + ` (/home/me/.claude.json has neither enableAllProjectMcpServers nor it in enabledMcpjsonServers): written as a comment (uncomment it if you trust it)`, true},
		{"scanned, one approved", true, state(`{"enabledMcpjsonServers": ["a"]}`), []string{"a"}, "", false},
		{"scanned, all approved but one rejected", true, state(`{"enableAllProjectMcpServers": true, "disabledMcpjsonServers": ["b"], "disabledMcpServers": ["c"]}`), []string{"a"}, "", false},
		{"scanned, approved then disabled", true, state(`{"enabledMcpjsonServers": ["a", "b"], "disabledMcpServers": ["b"]}`), []string{"a"}, "", false},
		{"scanned, unreadable ~/.claude.json", true, &ClaudeState{Name: "/home/me/.claude.json", Data: []byte(`{"projects": [`)}, nil,
			`/home/me/.claude.json is not read for Claude Code's approvals: line 1:14: unexpected end of JSON input`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := ImportFiles([]ImportFile{{Name: mcpJSON, Data: []byte(servers), Optional: tt.scanned, Claude: tt.claude}})
			if err != nil {
				t.Fatal(err)
			}
			active := activeUpstreams(t, res.TOML)
			if !slices.Equal(active, tt.active) {
				t.Errorf("active upstreams = %q, want %q\n%s", active, tt.active, res.TOML)
			}
			for _, name := range []string{"a", "b", "c"} {
				if !slices.Contains(tt.active, name) && !strings.Contains(string(res.TOML), "# [upstreams."+name+"]") {
					t.Errorf("inactive server %q is not written as a comment:\n%s", name, res.TOML)
				}
			}
			if tt.note == "" {
				return
			}
			checkNote(t, res.Notes, func(n string) bool { return strings.Contains(n, tt.note) }, tt.note, tt.lost)
		})
	}
	// A scanned .mcp.json is gated by where it was found, not by what its
	// content looks like: one shaped like VS Code's is not let through.
	res, err := ImportFiles([]ImportFile{{Name: mcpJSON, Data: []byte(`{"servers": {"v": {"command": "v"}}}`), Optional: true}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := Parse("imported.toml", res.TOML, nil); err != nil || len(cfg.Upstreams) != 0 {
		t.Errorf("a scanned .mcp.json in VS Code's shape is imported active (err %v):\n%s", err, res.TOML)
	}
}

// TestImportClaudeJSONDisabled: ~/.claude.json's per-project
// disabledMcpServers turns that project's own server off; a user-wide
// server disabled in one project stays on (viewmux has no projects), with a
// note that counts as a loss.
func TestImportClaudeJSONDisabled(t *testing.T) {
	res, err := importOne(".claude.json", `{
  "mcpServers": {"memory": {"command": "mem"}},
  "projects": {
    "/src/app": {"mcpServers": {"db": {"command": "db"}, "kv": {"command": "kv"}}, "disabledMcpServers": ["db", "memory"]},
    "/src/other": {"disabledMcpServers": ["memory"]}
  }
}`)
	if err != nil {
		t.Fatal(err)
	}
	active := activeUpstreams(t, res.TOML)
	if want := []string{"app-kv", "memory"}; !slices.Equal(active, want) {
		t.Errorf("active upstreams = %q, want %q\n%s", active, want, res.TOML)
	}
	if !strings.Contains(string(res.TOML), "# [upstreams.app-db] — disabled in Claude Code for project \"/src/app\"\n") {
		t.Errorf("the disabled project server is not a comment:\n%s", res.TOML)
	}
	notes := map[string]bool{}
	var all []string
	for _, n := range res.Notes {
		notes[n.String()] = n.Lost
		all = append(all, n.String())
	}
	for want, lost := range map[string]bool{
		`import: .claude.json: server "db" is disabled in Claude Code for project "/src/app" (disabledMcpServers): written as a comment`:                                                      false,
		`import: .claude.json: server "memory" is disabled in Claude Code for project "/src/app", "/src/other" (disabledMcpServers), but imported active: viewmux has no per-project servers`: true,
	} {
		if got, ok := notes[want]; !ok || got != lost {
			t.Errorf("notes lack %q (Lost %v):\n%s", want, lost, strings.Join(all, "\n"))
		}
	}
}

// checkNote fails t unless one of notes matches (given its text), and that
// note's Lost is lost; want names it in the failure.
func checkNote(t *testing.T, notes []ImportNote, match func(string) bool, want string, lost bool) {
	t.Helper()
	var all []string
	for _, n := range notes {
		all = append(all, n.String())
		if match(n.String()) {
			if n.Lost != lost {
				t.Errorf("note %q: Lost = %v, want %v", want, n.Lost, lost)
			}
			return
		}
	}
	t.Errorf("notes lack %q:\n%s", want, strings.Join(all, "\n"))
}

// TestImportTBXarkBareVariables checks that TBXark's $VAR, which it expands
// from its own environment over the whole file, becomes viewmux's ${VAR}
// everywhere, a child's env included (TBXark has no mcp-remote rule: it
// expands before any child starts), with a note, and that the output loads
// and reads those variables.
func TestImportTBXarkBareVariables(t *testing.T) {
	src := `{"mcpProxy":{"addr":"127.0.0.1:9090"},"mcpServers":{"gh":{"command":"npx",
		"args":["server-github","--token","$GH_TOKEN","--host=${GH_HOST}","--price","5$"],
		"env":{"GITHUB_TOKEN":"$GH_TOKEN","HOST":"${GH_HOST}"}}}}`
	res, err := ImportFiles([]ImportFile{{Name: "tbx.json", Data: []byte(src)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`args = ["server-github", "--token", "${GH_TOKEN}", "--host=${GH_HOST}", "--price", "5$$"]`,
		`env = { GITHUB_TOKEN = "${GH_TOKEN}", HOST = "${GH_HOST}" }`,
	} {
		if !strings.Contains(string(res.TOML), want) {
			t.Errorf("output lacks %s:\n%s", want, res.TOML)
		}
	}
	checkNote(t, res.Notes, func(n string) bool { return strings.Contains(n, "TBXark expands $VAR") }, "TBXark expands $VAR", false)
	for _, n := range res.Notes {
		if strings.Contains(n.String(), "literal value") {
			t.Errorf("a $VAR reference is noted as a literal value: %s", n)
		}
	}
	cfg, err := Parse("imported.toml", res.TOML, func(name string) (string, bool) {
		return map[string]string{"GH_TOKEN": "tok-123", "GH_HOST": "ghe.example"}[name], name == "GH_TOKEN" || name == "GH_HOST"
	})
	if err != nil {
		t.Fatalf("output does not load: %v\n%s", err, res.TOML)
	}
	if got := cfg.Upstreams[0].Args; !slices.Equal(got, []string{"server-github", "--token", "tok-123", "--host=ghe.example", "--price", "5$"}) {
		t.Errorf("args = %q", got)
	}
}

// activeUpstreams loads imported TOML and returns the names of the
// upstreams it mounts, in order; a server written as a comment is not one.
func activeUpstreams(t *testing.T, toml []byte) []string {
	t.Helper()
	cfg, err := Parse("imported.toml", toml, nil)
	if err != nil {
		t.Fatalf("does not load: %v\n%s", err, toml)
	}
	var active []string
	for _, u := range cfg.Upstreams {
		active = append(active, u.Name)
	}
	return active
}

func TestWorkspaceFile(t *testing.T) {
	home := filepath.FromSlash("/home/me")
	tests := []struct {
		path string
		want bool
	}{
		{"/src/repo/.mcp.json", true},
		{"/home/me/.mcp.json", true},
		{"/src/repo/.vscode/mcp.json", true},
		{"/src/repo/.cursor/mcp.json", true},
		{"/home/me/.cursor/mcp.json", false}, // the user's own, for every project
		{"/home/me/.config/Code/User/mcp.json", false},
		{"/home/me/.claude.json", false},
		{"/src/repo/mcp.json", false},
		{"/src/repo/.vscode/settings.json", false},
	}
	for _, tt := range tests {
		if got := WorkspaceFile(filepath.FromSlash(tt.path), home); got != tt.want {
			t.Errorf("WorkspaceFile(%s) = %v, want %v", tt.path, got, tt.want)
		}
	}
}
