package configs

import (
	"strings"
	"testing"
)

const oauthBase = "[profiles.ops]\n[profiles.ro]\n[auth.oauth]\n"

func TestOAuthErrors(t *testing.T) {
	tests := []struct {
		name string
		text string
		want string
		line int
	}{
		{"no issuer", oauthBase + "audience = \"https://m.example\"\n[[auth.oauth.grants]]\nclaim = \"sub\"\nvalue = \"a\"\nprofiles = [\"ops\"]\n", "auth.oauth: needs issuer", 3},
		{"http issuer not loopback", oauthBase + "issuer = \"http://idp.example.com\"\n[[auth.oauth.grants]]\nclaim = \"sub\"\nvalue = \"a\"\nprofiles = [\"ops\"]\n", "uses http on a host that is not loopback", 4},
		{"issuer with query", oauthBase + "issuer = \"https://idp.example.com/?a=b\"\n[[auth.oauth.grants]]\nclaim = \"sub\"\nvalue = \"a\"\nprofiles = [\"ops\"]\n", "has a query or fragment", 4},
		{"issuer not a URL", oauthBase + "issuer = \"idp\"\n[[auth.oauth.grants]]\nclaim = \"sub\"\nvalue = \"a\"\nprofiles = [\"ops\"]\n", `issuer "idp" is not an absolute URL`, 4},
		{"ftp jwks", oauthBase + "issuer = \"https://idp.example.com\"\njwks_url = \"ftp://idp.example.com/k\"\n[[auth.oauth.grants]]\nclaim = \"sub\"\nvalue = \"a\"\nprofiles = [\"ops\"]\n", "is not an https URL", 5},
		{"audience relative", oauthBase + "issuer = \"https://idp.example.com\"\naudience = \"/mcp\"\n[[auth.oauth.grants]]\nclaim = \"sub\"\nvalue = \"a\"\nprofiles = [\"ops\"]\n", "is not an absolute URL", 5},
		{"audience on wildcard listen", "[server]\nlisten = \"0.0.0.0:8931\"\n" + oauthBase + "issuer = \"https://idp.example.com\"\n[[auth.oauth.grants]]\nclaim = \"sub\"\nvalue = \"a\"\nprofiles = [\"ops\"]\n", "needs audience", 5},
		{"no grants", oauthBase + "issuer = \"https://idp.example.com\"\n", "needs at least one [[auth.oauth.grants]]", 3},
		{"grant without claim", oauthBase + "issuer = \"https://idp.example.com\"\n[[auth.oauth.grants]]\nvalue = \"a\"\nprofiles = [\"ops\"]\n", "auth.oauth.grants[0]: needs claim", 5},
		{"grant without profiles", oauthBase + "issuer = \"https://idp.example.com\"\n[[auth.oauth.grants]]\nclaim = \"sub\"\nvalue = \"a\"\n", "auth.oauth.grants[0].profiles: grant needs a non-empty profiles list", 5},
		{"grant unknown profile", oauthBase + "issuer = \"https://idp.example.com\"\n[[auth.oauth.grants]]\nclaim = \"sub\"\nvalue = \"a\"\nprofiles = [\"ops\",\n \"nope\"]\n", `auth.oauth.grants[0].profiles[1]: unknown profile "nope" (have: ops, ro)`, 9},
		{"bad scope", oauthBase + "issuer = \"https://idp.example.com\"\nscopes_supported = [\"a b\"]\n[[auth.oauth.grants]]\nclaim = \"sub\"\nvalue = \"a\"\nprofiles = [\"ops\"]\n", "holds a space", 5},
		{"unknown key", oauthBase + "issuer = \"https://idp.example.com\"\nissuerr = \"x\"\n[[auth.oauth.grants]]\nclaim = \"sub\"\nvalue = \"a\"\nprofiles = [\"ops\"]\n", `unknown key "auth.oauth.issuerr"`, 5},
		{"unknown grant key", oauthBase + "issuer = \"https://idp.example.com\"\n[[auth.oauth.grants]]\nclaim = \"sub\"\nvalue = \"a\"\nprofiles = [\"ops\"]\nprofile = \"x\"\n", `unknown key "auth.oauth.grants[0].profile"`, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse("test.toml", []byte(tt.text), env(nil))
			if err == nil {
				t.Fatalf("Parse succeeded (%+v), want error %q on line %d", cfg, tt.want, tt.line)
			}
			for _, e := range configErrors(t, err) {
				if e.Line == tt.line && strings.Contains(e.Msg, tt.want) {
					return
				}
			}
			t.Errorf("no error on line %d containing %q; got:\n%v", tt.line, tt.want, err)
		})
	}
}

func TestOAuthValues(t *testing.T) {
	text := "[server]\nlisten = \"127.0.0.1:9000\"\n" + oauthBase +
		"issuer = \"http://127.0.0.1:4444/\"\nscopes_supported = [\"mcp:tools\"]\n" +
		"[[auth.oauth.grants]]\nclaim = \"groups\"\nvalue = \"sre\"\nprofiles = [\"ops\", \"ro\"]\nadmin = true\n" +
		"[[auth.oauth.grants]]\nclaim = \"scope\"\nvalue = \"mcp:tools\"\nprofiles = [\"ro\"]\n"
	cfg, err := Parse("test.toml", []byte(text), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.Auth.OAuth
	if o == nil {
		t.Fatal("no OAuth")
	}
	if o.Issuer != "http://127.0.0.1:4444/" || o.Audience != "http://127.0.0.1:9000" || o.JWKSURL != "" {
		t.Errorf("issuer %q audience %q jwks %q", o.Issuer, o.Audience, o.JWKSURL)
	}
	if len(o.Grants) != 2 || o.Grants[0].Claim != "groups" || !o.Grants[0].Admin || o.Grants[1].Profiles[0] != "ro" || o.Grants[1].Line != 13 {
		t.Errorf("grants %+v", o.Grants)
	}
	if !cfg.Auth.Required() {
		t.Error("auth not required with [auth.oauth]")
	}
}
