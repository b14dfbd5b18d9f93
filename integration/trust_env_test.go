//go:build unix

package integration

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// TestTrustChildEnvironment is finding 1 of issue 17: server-everything's
// read-only get-env tool, mounted through mcpmux, prints its environment.
// mcpmux's own environment holds a token, another upstream's key and an
// unrelated variable; none may reach the child. What the child gets is
// exactly the fixed variables, its own env and what its inherit_env names.
func TestTrustChildEnvironment(t *testing.T) {
	requireNode(t)
	secrets := map[string]string{
		"TRUST_ADMIN_TOKEN": "adm-" + randomHex(t, 12),
		"TRUST_OTHER_KEY":   "oth-" + randomHex(t, 12),
		"TRUST_UNRELATED":   "unr-" + randomHex(t, 12),
	}
	cfg := fmt.Sprintf(`[upstreams.every]
command = %[1]s
args = %[2]s
env = { TRUST_OWN = "own-value" }
inherit_env = ["TRUST_PASSED_*", "TRUST_EXACT", %[3]s]
required = true

[upstreams.other]
command = %[1]s
args = %[2]s
env = { OTHER_API_KEY = "${TRUST_OTHER_KEY}" }
required = true

[profiles.default]

[[auth.tokens]]
token = "${TRUST_ADMIN_TOKEN}"
profiles = ["default"]
`, tomlString(harness.node), tomlArray(everythingEntry(), "stdio"), tomlString(markerEnv))
	env := []string{"TRUST_PASSED_ONE=passed-1", "TRUST_EXACT=exact-1", "TRUST_EXACTLY=not-a-prefix"}
	for _, k := range slices.Sorted(maps.Keys(secrets)) {
		env = append(env, k+"="+secrets[k])
	}
	mux := startMuxWith(t, muxOptions{Config: cfg, Env: env})

	res := drive(t, Script{URL: mux.URL(), Headers: map[string]string{"Authorization": "Bearer " + secrets["TRUST_ADMIN_TOKEN"]},
		Steps: []Op{opCall("every__get-env", map[string]any{})}}).Steps(t)[0].Call(t)
	text := res.Text()
	var got map[string]string
	if err := json.Unmarshal([]byte(text), &got); err != nil {
		t.Fatalf("get-env did not return a JSON object: %v\n%s", err, text)
	}
	for k, v := range secrets {
		if _, ok := got[k]; ok || strings.Contains(text, v) {
			t.Errorf("the child got %s from mcpmux's environment", k)
		}
	}
	if got["TRUST_PASSED_ONE"] != "passed-1" || got["TRUST_EXACT"] != "exact-1" {
		t.Errorf("inherit_env's variables did not reach the child: TRUST_PASSED_ONE=%q TRUST_EXACT=%q", got["TRUST_PASSED_ONE"], got["TRUST_EXACT"])
	}
	if _, ok := got["TRUST_OWN"]; !ok {
		t.Errorf("the child's own env did not reach it")
	}
	allowed := []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", // every child's
		"TRUST_OWN", "TRUST_PASSED_ONE", "TRUST_EXACT", markerEnv, // its env and inherit_env
		"MCPMUX_CHILD"} // mcpmux's marker for its children's descendants (Linux)
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if !slices.Contains(allowed, k) {
			t.Errorf("the child got %s, which neither its env nor its inherit_env names", k)
		}
	}
	if _, ok := got["PATH"]; !ok {
		t.Errorf("the child did not get PATH")
	}
}
