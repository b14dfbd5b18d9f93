package configs

import (
	"bytes"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/internal/redact"
)

// Keys and a password of the [state] tests: none of them may appear in
// any error.
const (
	testKey      = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	testOldKey   = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100"
	testPassword = "s3cr3t-redis-pw"
)

// oauthUpstream is an upstream whose logins a store would hold.
const oauthUpstream = "[upstreams.gh]\nurl = \"https://mcp.example.com/mcp\"\noauth = true\n"

func TestStateDefaults(t *testing.T) {
	cfg := mustParse(t, oauthUpstream, nil)
	want := State{KeyPrefix: "viewmux:", Timeout: time.Second}
	if s := cfg.State; s.URL != "" || s.EncryptionKey != nil || s.OldEncryptionKeys != nil || s.KeyPrefix != want.KeyPrefix || s.Timeout != want.Timeout || s.Line != 0 {
		t.Errorf("no [state]: %+v, want the files engine with %+v", s, want)
	}
	// An empty [state], and a url that expands to "", are the files
	// engine too: the Helm chart's config relies on the second.
	for _, text := range []string{
		"[state]\n",
		"[state]\nurl = \"\"\nencryption_key = \"\"\n",
		"[state]\nurl = \"${VIEWMUX_STATE_URL:-}\"\nencryption_key = \"${VIEWMUX_STATE_KEY:-}\"\n",
	} {
		cfg := mustParse(t, oauthUpstream+text, nil)
		if cfg.State.URL != "" || cfg.State.EncryptionKey != nil {
			t.Errorf("%q: URL %q, key %v: want the files engine, no key", text, cfg.State.URL, cfg.State.EncryptionKey)
		}
		if cfg.State.Line != 4 {
			t.Errorf("%q: Line = %d, want 4", text, cfg.State.Line)
		}
	}
}

func TestStateValid(t *testing.T) {
	key, _ := hex.DecodeString(testKey)
	old, _ := hex.DecodeString(testOldKey)
	for _, tt := range []struct {
		name string
		text string
		vars map[string]string
		want State
	}{
		{"redis", "[state]\nurl = \"redis://redis:6379\"\n", nil,
			State{URL: "redis://redis:6379", KeyPrefix: "viewmux:", Timeout: time.Second}},
		{"rediss with user, password and database", "[state]\nurl = \"rediss://viewmux:" + testPassword + "@valkey.example.com:6380/2\"\n", nil,
			State{URL: "rediss://viewmux:" + testPassword + "@valkey.example.com:6380/2", KeyPrefix: "viewmux:", Timeout: time.Second}},
		{"trailing slash", "[state]\nurl = \"redis://10.0.0.5/\"\n", nil,
			State{URL: "redis://10.0.0.5/", KeyPrefix: "viewmux:", Timeout: time.Second}},
		{"IPv6 host", "[state]\nurl = \"redis://[::1]:6379/0\"\n", nil,
			State{URL: "redis://[::1]:6379/0", KeyPrefix: "viewmux:", Timeout: time.Second}},
		{"expanded", oauthUpstream + "[state]\nurl = \"${STATE_URL}\"\nencryption_key = \"${STATE_KEY}\"\nold_encryption_keys = [\"${OLD_KEY}\"]\n",
			map[string]string{"STATE_URL": "redis://:" + testPassword + "@redis:6379/1", "STATE_KEY": testKey, "OLD_KEY": testOldKey},
			State{URL: "redis://:" + testPassword + "@redis:6379/1", EncryptionKey: key, OldEncryptionKeys: [][]byte{old}, KeyPrefix: "viewmux:", Timeout: time.Second}},
		{"uppercase hex", "[state]\nencryption_key = \"" + strings.ToUpper(testKey) + "\"\n", nil,
			State{EncryptionKey: key, KeyPrefix: "viewmux:", Timeout: time.Second}},
		{"prefix and timeout", "[state]\nurl = \"redis://redis\"\nkey_prefix = \"team-a/viewmux:\"\ntimeout = \"250ms\"\n", nil,
			State{URL: "redis://redis", KeyPrefix: "team-a/viewmux:", Timeout: 250 * time.Millisecond}},
		{"longest timeout", "[state]\ntimeout = \"30s\"\n", nil,
			State{KeyPrefix: "viewmux:", Timeout: 30 * time.Second}},
		{"longest prefix", "[state]\nkey_prefix = \"" + strings.Repeat("p", 64) + "\"\n", nil,
			State{KeyPrefix: strings.Repeat("p", 64), Timeout: time.Second}},
		{"no key needed without oauth", "[upstreams.docs]\nurl = \"https://docs.example.com/mcp\"\n[state]\nurl = \"redis://redis\"\n", nil,
			State{URL: "redis://redis", KeyPrefix: "viewmux:", Timeout: time.Second}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := mustParse(t, tt.text, tt.vars).State
			s.Line = 0
			if s.URL != tt.want.URL || !bytes.Equal(s.EncryptionKey, tt.want.EncryptionKey) || s.KeyPrefix != tt.want.KeyPrefix || s.Timeout != tt.want.Timeout ||
				!slices.EqualFunc(s.OldEncryptionKeys, tt.want.OldEncryptionKeys, bytes.Equal) {
				t.Errorf("State = %+v, want %+v", s, tt.want)
			}
		})
	}
}

func TestStateErrors(t *testing.T) {
	vars := map[string]string{"BAD_URL": "http://:" + testPassword + "@redis", "SHORT_KEY": testKey[:62], "EMPTY": ""}
	for _, tt := range []struct {
		name string
		text string
		want string // substring of one error…
		line int    // …that is on this line
	}{
		{"unknown key", "[state]\nurl = \"redis://redis\"\nencryption_keys = []\n", `unknown key "state.encryption_keys" (did you mean "encryption_key"?)`, 3},
		{"unknown key in dotted form", "state.prefix = \"x\"\n", `unknown key "state.prefix"`, 1},
		{"url not a string", "[state]\nurl = 6379\n", "state.url: incompatible types", 2},

		{"bad scheme", "[state]\nurl = \"http://:" + testPassword + "@redis:6379\"\n", `state.url: url scheme "http" is not redis or rediss`, 2},
		{"bad scheme, expanded", "[state]\nurl = \"${BAD_URL}\"\n", `state.url: url scheme "http" is not redis or rediss`, 2},
		{"no scheme", "[state]\nurl = \"redis:6379\"\n", "state.url: is not a valid URL; want redis://[user:password@]host[:port][/db]", 2},
		{"host and port only", "[state]\n\nurl = \"redis.example.com:6379\"\n", `state.url: url scheme "redis.example.com"`, 3},
		{"no host", "[state]\nurl = \"redis://:" + testPassword + "@:6379/0\"\n", "state.url: url has no host", 2},
		{"empty authority", "[state]\nurl = \"redis:///0\"\n", "state.url: url has no host", 2},
		{"database not a number", "[state]\nurl = \"redis://redis:6379/cache\"\n", "state.url: url path must be /N, a database number", 2},
		{"deeper path", "[state]\nurl = \"redis://redis/0/1\"\n", "state.url: url path must be /N", 2},
		{"query", "[state]\nurl = \"redis://redis/0?dial_timeout=3s\"\n", "state.url: url has a query", 2},
		{"fragment", "[state]\nurl = \"redis://redis/0#x\"\n", "state.url: url has a fragment", 2},
		{"port out of range", "[state]\nurl = \"redis://redis:99999\"\n", "state.url: url port must be a number from 1 to 65535", 2},
		{"unparsable, password with a slash", "[state]\nurl = \"redis://:" + testPassword + "/x@redis\"\n", "state.url:", 2},
		{"unset variable", "[state]\nurl = \"${STATE_URL}\"\n", "state.url: environment variable STATE_URL is not set", 2},

		{"key too short", "[state]\nencryption_key = \"" + testKey[:62] + "\"\n", "state.encryption_key: must be 64 hex characters (32 bytes), e.g. the output of `openssl rand -hex 32`; got 62 characters", 2},
		{"key too short, expanded", "[state]\nencryption_key = \"${SHORT_KEY}\"\n", "state.encryption_key: must be 64 hex characters", 2},
		{"key too long", "[state]\nencryption_key = \"" + testKey + "00\"\n", "got 66 characters", 2},
		{"key not hex", "[state]\nencryption_key = \"" + testKey[:63] + "g\"\n", "state.encryption_key: must be 64 hex characters (32 bytes), e.g. the output of `openssl rand -hex 32`; it has a character that is not 0-9 or a-f", 2},
		{"key as base64", "[state]\nencryption_key = \"ABEiM0RVZneImaq7zN3u/wARIjNEVWZ3iJmqu8zd7v8=\"\n", "got 44 characters", 2},
		{"key unset variable", "[state]\nencryption_key = \"${STATE_KEY}\"\n", "state.encryption_key: environment variable STATE_KEY is not set", 2},

		{"key required with oauth", oauthUpstream + "[state]\nurl = \"redis://redis\"\n", `state.encryption_key: state.url is set and the store then holds the OAuth logins of upstream "gh": set state.encryption_key to 64 hex characters (32 bytes), e.g. the output of ` + "`openssl rand -hex 32`", 4},
		{"key required, expanded empty", oauthUpstream + "[state]\nurl = \"redis://redis\"\n\nencryption_key = \"${EMPTY}\"\n", `logins of upstream "gh"`, 7},
		{"key required with an oauth table", "[upstreams.z]\nurl = \"https://z.example.com/mcp\"\noauth = { client_id = \"c\" }\n[state]\nurl = \"${BAD_URL:-redis://redis}\"\n", `logins of upstream "z"`, 4},

		{"old key bad", "[state]\nencryption_key = \"" + testKey + "\"\nold_encryption_keys = [\n  \"" + testOldKey + "\",\n  \"" + testOldKey[1:] + "\",\n]\n", "state.old_encryption_keys[1]: must be 64 hex characters (32 bytes)", 5},
		{"old key not hex", "[state]\nencryption_key = \"" + testKey + "\"\nold_encryption_keys = [\"" + strings.Repeat("z", 64) + "\"]\n", "state.old_encryption_keys[0]: must be 64 hex characters (32 bytes), e.g. the output of `openssl rand -hex 32`; it has a character", 3},
		{"old key empty", "[state]\nencryption_key = \"" + testKey + "\"\nold_encryption_keys = [\"${EMPTY}\"]\n", "state.old_encryption_keys[0]: is empty", 3},
		{"old key unset", "[state]\nencryption_key = \"" + testKey + "\"\nold_encryption_keys = [\"" + testOldKey + "\", \"${OLD}\"]\n", "state.old_encryption_keys[1]: environment variable OLD is not set", 3},
		{"old keys without a key", "[state]\nold_encryption_keys = [\"" + testOldKey + "\"]\n", "state.old_encryption_keys: needs state.encryption_key", 2},
		{"old keys not strings", "[state]\nold_encryption_keys = [1]\n", "state.old_encryption_keys[0]: incompatible types", 2},

		{"empty prefix", "[state]\nkey_prefix = \"\"\n", "state.key_prefix: must not be empty", 2},
		{"prefix with a space", "[state]\nkey_prefix = \"view mux:\"\n", `state.key_prefix: key_prefix "view mux:" must be printable ASCII without spaces`, 2},
		{"prefix not ASCII", "[state]\nkey_prefix = \"vüewmux:\"\n", `must be printable ASCII without spaces`, 2},
		{"prefix with a control character", "[state]\nkey_prefix = \"a\\tb\"\n", `key_prefix "a\tb" must be printable ASCII`, 2},
		{"prefix too long", "[state]\nkey_prefix = \"" + strings.Repeat("p", 65) + "\"\n", "state.key_prefix: must be at most 64 characters, got 65", 2},
		{"prefix with a wildcard", "[state]\nkey_prefix = \"viewmux*\"\n", `state.key_prefix: key_prefix "viewmux*" must not contain * ? [ ] or \`, 2},

		{"timeout zero", "[state]\ntimeout = \"0s\"\n", `state.timeout: duration "0s" must be positive`, 2},
		{"timeout negative", "[state]\ntimeout = \"-1s\"\n", `state.timeout: duration "-1s" must be positive`, 2},
		{"timeout too long", "[state]\ntimeout = \"31s\"\n", "state.timeout: must be at most 30s", 2},
		{"timeout a bare number", "[state]\ntimeout = 1\n", "state.timeout: invalid duration 1: want a string with a unit", 2},
		{"timeout not a duration", "[state]\ntimeout = \"1 second\"\n", `state.timeout: invalid duration "1 second"`, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.toml", []byte(tt.text), env(vars))
			if err == nil {
				t.Fatalf("Parse accepted\n%s", tt.text)
			}
			found := false
			for _, e := range configErrors(t, err) {
				if strings.Contains(e.Error(), tt.want) && (tt.line == 0 || e.Line == tt.line) {
					found = true
				}
			}
			if !found {
				t.Errorf("no error containing %q on line %d; got:\n%v", tt.want, tt.line, err)
			}
			noSecrets(t, err.Error())
		})
	}
}

// noSecrets fails when text holds a key or password of the tests, or a
// good part of one.
func noSecrets(t *testing.T, text string) {
	t.Helper()
	for _, s := range []string{testKey, testOldKey, testPassword} {
		for _, part := range []string{s, s[:len(s)/2], s[len(s)/2:], strings.ToUpper(s[:min(16, len(s))])} {
			if len(part) >= 6 && strings.Contains(text, part) {
				t.Errorf("the error shows a secret (%q):\n%s", part, text)
			}
		}
	}
}

// TestStateNoPinDir: with a shared store, pins need no state directory.
func TestStateNoPinDir(t *testing.T) {
	const pins = "[server]\npin = \"warn\"\n"
	if _, err := Parse("test.toml", []byte(pins), env(nil)); err == nil || !strings.Contains(err.Error(), `test.toml:2: server.pin: pin "warn" needs a state directory to keep pins in: set server.state_dir (neither XDG_STATE_HOME nor HOME is set), or state.url`) {
		t.Errorf("pins without a directory or a store: %v", err)
	}
	mustParse(t, pins+"[state]\nurl = \"redis://redis\"\n", nil)
}

// TestStateSecretValues: the store's password and keys are masked in
// every output (Config.SecretValues feeds internal/redact), its user name
// and host are not.
func TestStateSecretValues(t *testing.T) {
	cfg := mustParse(t, oauthUpstream+"[state]\nurl = \"${STATE_URL}\"\nencryption_key = \"${STATE_KEY}\"\nold_encryption_keys = [\""+testOldKey+"\"]\n",
		map[string]string{"STATE_URL": "rediss://viewmux:" + strings.Replace(testPassword, "-", "%2D", 1) + "@redis.example.com:6380/0", "STATE_KEY": strings.ToUpper(testKey)})
	vs := cfg.SecretValues()
	for _, want := range []string{testPassword, strings.Replace(testPassword, "-", "%2D", 1), testKey, strings.ToUpper(testKey), testOldKey} {
		if !slices.Contains(vs, want) {
			t.Errorf("SecretValues() lacks %q: %q", want, vs)
		}
	}
	for _, not := range []string{"viewmux", "redis.example.com"} {
		if slices.Contains(vs, not) {
			t.Errorf("SecretValues() holds %q, which is no secret", not)
		}
	}
	masked := redact.NewSecrets(vs...).Mask("state: redis at " + cfg.State.URL + " with key " + testKey + ", old " + testOldKey)
	noSecrets(t, masked)
	if !strings.Contains(masked, "rediss://viewmux:") || !strings.Contains(masked, "@redis.example.com:6380/0") {
		t.Errorf("masking hid more than the secrets: %s", masked)
	}

	if vs := mustParse(t, "[state]\nurl = \"redis://redis:6379\"\n", nil).SecretValues(); len(vs) != 0 {
		t.Errorf("a url without a password and no keys: SecretValues() = %q, want none", vs)
	}
}
