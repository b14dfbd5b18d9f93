package configs

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
)

// UpstreamOAuth is the oauth key of one [upstreams.NAME]: viewmux logs in to the
// upstream as an OAuth 2.1 client (the MCP authorization spec) and keeps
// its tokens in StateDir. `oauth = true` leaves every field but StateDir
// empty: the client registers itself (a Client ID Metadata Document or
// dynamic registration) and asks for the scopes the upstream names.
type UpstreamOAuth struct {
	// ClientID and ClientSecret are a client registered with the
	// upstream's authorization server beforehand; when set they are used
	// instead of a Client ID Metadata Document or dynamic registration
	// (the MCP spec's order). ClientSecret is ${ENV}-expanded and masked
	// like every configured secret.
	ClientID     string
	ClientSecret string
	// Scopes, when set, are asked for instead of those the upstream's
	// 401 or its metadata names.
	Scopes []string
	// ClientMetadataURL is the https URL of this client's Client ID
	// Metadata Document, used as the client_id where the authorization
	// server supports it.
	ClientMetadataURL string
	// Audience, for credentials = "exchange", is the audience asked of
	// the identity provider beside the resource (the upstream's URL);
	// "" = that URL. Some providers name a target by a client id.
	Audience string
	// StateDir is server.state_dir, where the upstream's token file lives
	// ("" = none known: logging in then fails with statedir.ErrNoDir).
	StateDir string
}

// upstreamOAuthKeys are the keys of an upstream's oauth table.
var upstreamOAuthKeys = []string{"client_id", "client_secret", "client_metadata_url", "scopes", "audience"}

// upstreamOAuth checks an upstream's oauth key: a boolean, or a table of
// upstreamOAuthKeys. stdio upstreams cannot have one (they take credentials
// through env).
func (v *validator) upstreamOAuth(p keyPath, raw any, stdio bool) *UpstreamOAuth {
	if raw == nil {
		return nil
	}
	var o *UpstreamOAuth
	switch x := raw.(type) {
	case bool:
		if !x {
			return nil
		}
		o = &UpstreamOAuth{}
	case map[string]any:
		o = &UpstreamOAuth{}
		for _, k := range slices.Sorted(maps.Keys(x)) {
			if !slices.Contains(upstreamOAuthKeys, k) {
				v.errorf(p.key(k), "unknown key %q in oauth (want %s)", k, joinQuoted(upstreamOAuthKeys))
				continue
			}
			if k == "scopes" {
				list, ok := x[k].([]any)
				if !ok {
					v.errorf(p.key(k), "scopes must be a list of strings")
					continue
				}
				for i, s := range list {
					str, ok := s.(string)
					if !ok || str == "" {
						v.errorf(p.key(k).at(i), "a scope must be a non-empty string")
						continue
					}
					o.Scopes = append(o.Scopes, str)
				}
				continue
			}
			str, ok := x[k].(string)
			if !ok {
				v.errorf(p.key(k), "%s must be a string", k)
				continue
			}
			str, _ = v.expand(p.key(k), str)
			switch k {
			case "client_id":
				o.ClientID = str
			case "client_secret":
				o.ClientSecret = str
			case "audience":
				o.Audience = str
			case "client_metadata_url":
				o.ClientMetadataURL = str
				if u, err := url.Parse(str); err != nil || u.Scheme != "https" || u.Host == "" || u.Path == "" || u.Path == "/" {
					v.errorf(p.key(k), "client_metadata_url must be an https URL with a path (the Client ID Metadata Document)")
				}
			}
		}
		if o.ClientSecret != "" && o.ClientID == "" {
			v.errorf(p.key("client_secret"), "client_secret needs client_id")
		}
	default:
		v.errorf(p, "oauth must be true, false or a table (client_id, client_secret, scopes, client_metadata_url, audience), not %s", tomlKind(raw))
		return nil
	}
	if stdio {
		v.errorf(p, "oauth applies only to url upstreams (http, sse); pass credentials to a command through env")
		return nil
	}
	return o
}

// joinQuoted returns keys quoted and comma-separated.
func joinQuoted(keys []string) string {
	s := ""
	for i, k := range keys {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%q", k)
	}
	return s
}

// tomlKind names the TOML kind of a decoded value, for messages.
func tomlKind(x any) string {
	switch x.(type) {
	case string:
		return "a string"
	case int64, float64:
		return "a number"
	case []any, []map[string]any:
		return "an array"
	}
	return fmt.Sprintf("%T", x)
}
