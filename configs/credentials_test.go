package configs

import (
	"strings"
	"testing"
)

func TestUpstreamCredentialsKey(t *testing.T) {
	const head = "[upstreams.gh]\nurl = \"https://mcp.example.com/mcp\"\noauth = true\n"
	const oauth = "[auth.oauth]\nissuer = \"https://idp.example.com\"\naudience = \"https://mux.example.com/mcp\"\n[[auth.oauth.grants]]\nclaim = \"sub\"\nvalue = \"x\"\nprofiles = [\"p\"]\n[profiles.p]\n"
	t.Run("default shared", func(t *testing.T) {
		cfg := mustParse(t, head, nil)
		if u := cfg.Upstreams[0]; u.Credentials != CredentialsShared || u.PerUser() {
			t.Fatalf("Credentials = %q", u.Credentials)
		}
	})
	t.Run("per-user with public_url", func(t *testing.T) {
		cfg := mustParse(t, "[server]\nlisten = \"0.0.0.0:8931\"\npublic_url = \"https://mux.example.com/\"\n"+head+"credentials = \"per-user\"\n", nil)
		if u := cfg.Upstreams[0]; u.Credentials != CredentialsPerUser || !u.PerUser() {
			t.Fatalf("Credentials = %q", u.Credentials)
		}
		if b, ok := cfg.PublicBase(); !ok || b != "https://mux.example.com" {
			t.Fatalf("PublicBase = %q %v", b, ok)
		}
	})
	t.Run("per-user from listen", func(t *testing.T) {
		cfg := mustParse(t, head+"credentials = \"per-user\"\n", nil)
		if b, ok := cfg.PublicBase(); !ok || b != "http://127.0.0.1:8931" {
			t.Fatalf("PublicBase = %q %v", b, ok)
		}
	})
	t.Run("per-user from audience", func(t *testing.T) {
		cfg := mustParse(t, "[server]\nlisten = \"0.0.0.0:8931\"\n"+head+"credentials = \"per-user\"\n"+oauth, nil)
		if b, ok := cfg.PublicBase(); !ok || b != "https://mux.example.com" {
			t.Fatalf("PublicBase = %q %v", b, ok)
		}
	})
	t.Run("exchange", func(t *testing.T) {
		cfg := mustParse(t, "[upstreams.gh]\nurl = \"https://mcp.example.com/mcp\"\ncredentials = \"exchange\"\n[upstreams.gh.oauth]\nclient_id = \"mux\"\nclient_secret = \"s3cret-value\"\naudience = \"gh-api\"\n"+oauth, nil)
		if u := cfg.Upstreams[0]; u.Credentials != CredentialsExchange || !u.PerUser() || u.OAuth.Audience != "gh-api" {
			t.Fatalf("Credentials = %q, oauth %+v", u.Credentials, u.OAuth)
		}
	})
	for _, tt := range []struct{ name, text, want string }{
		{"unknown value", head + "credentials = \"mine\"\n", `test.toml:4: upstreams.gh.credentials: credentials "mine": want "shared"`},
		{"no oauth", "[upstreams.gh]\nurl = \"https://mcp.example.com/mcp\"\ncredentials = \"per-user\"\n", `test.toml:3: upstreams.gh.credentials: credentials "per-user" needs oauth = true`},
		{"stdio", "[upstreams.gh]\ncommand = \"x\"\ncredentials = \"per-user\"\n", `test.toml:3: upstreams.gh.credentials: credentials "per-user" applies only to url upstreams`},
		{"session scope", head + "scope = \"session\"\ncredentials = \"per-user\"\n", `test.toml:5: upstreams.gh.credentials: credentials "per-user" gives each caller a connection of their own already`},
		{"required", head + "required = true\ncredentials = \"per-user\"\n", `test.toml:5: upstreams.gh.credentials: credentials "per-user" gives each caller a connection of their own, which no start can wait for`},
		{"exchange without auth.oauth", head + "credentials = \"exchange\"\n", `test.toml:4: upstreams.gh.credentials: credentials "exchange" trades the caller's OAuth access token`},
		{"exchange without client_id", head + "credentials = \"exchange\"\n" + oauth, `test.toml:4: upstreams.gh.credentials: credentials "exchange" needs the client viewmux is at`},
		{"per-user without a public URL", "[server]\nlisten = \"0.0.0.0:8931\"\n" + head + "credentials = \"per-user\"\n", `test.toml:6: upstreams.gh.credentials: credentials "per-user" sends users to viewmux's /oauth/connect`},
		{"public_url with a path", "[server]\npublic_url = \"https://mux.example.com/mcp\"\n", `test.toml:2: server.public_url: public_url "https://mux.example.com/mcp" must be only a scheme, host and port`},
		{"public_url http", "[server]\npublic_url = \"http://mux.example.com\"\n", `test.toml:2: server.public_url: public_url "http://mux.example.com" uses http on a host that is not loopback`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.toml", []byte(tt.text), env(nil))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}
