package configs

import (
	"slices"
	"strings"
	"testing"
)

func TestUpstreamOAuthKey(t *testing.T) {
	const head = "[upstreams.lin]\nurl = \"https://mcp.example.com/mcp\"\n"
	t.Run("true", func(t *testing.T) {
		cfg := mustParse(t, "[server]\nstate_dir = \"/var/lib/mux\"\n"+head+"oauth = true\n", nil)
		o := cfg.Upstreams[0].OAuth
		if o == nil || o.ClientID != "" || o.StateDir != "/var/lib/mux" {
			t.Fatalf("OAuth = %+v, want empty table with state_dir", o)
		}
	})
	t.Run("false", func(t *testing.T) {
		cfg := mustParse(t, head+"oauth = false\n", nil)
		if cfg.Upstreams[0].OAuth != nil {
			t.Fatalf("OAuth = %+v, want nil", cfg.Upstreams[0].OAuth)
		}
	})
	t.Run("table", func(t *testing.T) {
		cfg := mustParse(t, head+"[upstreams.lin.oauth]\nclient_id = \"abc\"\nclient_secret = \"${SECRET}\"\nscopes = [\"read\", \"write\"]\n"+
			"client_metadata_url = \"https://mux.example.com/client.json\"\n", map[string]string{"SECRET": "s3cr3t-value"})
		o := cfg.Upstreams[0].OAuth
		if o.ClientID != "abc" || o.ClientSecret != "s3cr3t-value" || !slices.Equal(o.Scopes, []string{"read", "write"}) || o.ClientMetadataURL != "https://mux.example.com/client.json" {
			t.Fatalf("OAuth = %+v", o)
		}
		if !slices.Contains(cfg.SecretValues(), "s3cr3t-value") {
			t.Fatal("client_secret is not among the secret values")
		}
	})
	for _, tt := range []struct{ name, text, want string }{
		{"unknown key", head + "[upstreams.lin.oauth]\nclient = \"x\"\n", `test.toml:4: upstreams.lin.oauth.client: unknown key "client"`},
		{"not a bool", head + "oauth = \"yes\"\n", "test.toml:3: upstreams.lin.oauth: oauth must be true, false or a table"},
		{"stdio", "[upstreams.lin]\ncommand = \"x\"\noauth = true\n", "test.toml:3: upstreams.lin.oauth: oauth applies only to url upstreams"},
		{"websocket", "[upstreams.lin]\nurl = \"wss://x.example/mcp\"\noauth = true\n", "test.toml:3: upstreams.lin.oauth: oauth applies to http and sse upstreams, not websocket"},
		{"secret without id", head + "[upstreams.lin.oauth]\nclient_secret = \"abcdefgh\"\n", "test.toml:4: upstreams.lin.oauth.client_secret: client_secret needs client_id"},
		{"metadata url http", head + "[upstreams.lin.oauth]\nclient_metadata_url = \"http://x.example/c.json\"\n", "test.toml:4: upstreams.lin.oauth.client_metadata_url: client_metadata_url must be an https URL"},
		{"scopes not list", head + "[upstreams.lin.oauth]\nscopes = \"read\"\n", "test.toml:4: upstreams.lin.oauth.scopes: scopes must be a list"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.toml", []byte(tt.text), env(nil))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}
