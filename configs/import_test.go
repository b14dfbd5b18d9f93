package configs

import (
	"reflect"
	"strings"
	"testing"
)

// allSet is a lookupEnv in which every variable is set to its own name, so
// imported ${VAR} references round-trip visibly.
func allSet(name string) (string, bool) { return "<" + name + ">", true }

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
    "my_server": {"type": "stdio", "command": "node", "args": ["server.js", "--key", "${input:api-key}", "${workspaceFolder}", "${userHome}/x"], "cwd": "/src"},
    "my.server": {"type": "http", "url": "https://example.com/mcp"}
  }
}`, func(t *testing.T, cfg *Config) {
			// "my.server" sorts before "my_server", so it gets the plain name.
			if u := cfg.Upstream("my-server"); u == nil || u.URL != "https://example.com/mcp" {
				t.Errorf("my-server = %+v", u)
			}
			u := cfg.Upstream("my-server-2")
			if u == nil || u.Dir != "/src" || !reflect.DeepEqual(u.Args, []string{"server.js", "--key", "${input:api-key}", "${workspaceFolder}", "<HOME>/x"}) {
				t.Errorf("my-server-2 = %+v (VS Code placeholders must stay literal)", u)
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
			out, err := Import([]byte(tt.json))
			if err != nil {
				t.Fatalf("Import: %v", err)
			}
			if !strings.HasPrefix(string(out), "# mcpmux config") {
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
	out, err := Import([]byte(`{"mcpServers": {"zeta": {"command": "z"}, "a b": {"command": "a", "autoApprove": []}}}`))
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	a, z := strings.Index(s, "[upstreams.a-b]"), strings.Index(s, "[upstreams.zeta]")
	if a < 0 || z < 0 || a > z {
		t.Errorf("tables missing or not sorted:\n%s", s)
	}
	for _, want := range []string{`# from "a b"`, "# ignored keys: autoApprove"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}

func TestImportErrors(t *testing.T) {
	tests := []struct {
		name, json, want string
	}{
		{"not json", `{"mcpServers": `, "import: line 1:"},
		{"syntax error line", "{\n\"mcpServers\": {\n\"a\": {\"command\": x}}}", "line 3"},
		{"no servers object", `{"other": {}}`, `no "mcpServers", "servers"`},
		{"servers not an object", `{"mcpServers": []}`, "servers must be an object"},
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
			out, err := Import([]byte(tt.json))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Import() = %q, %v; want error %q", out, err, tt.want)
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
