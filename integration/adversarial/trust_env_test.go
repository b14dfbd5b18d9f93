//go:build unix

package adversarial

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// TestTrustChildEnvironment is finding 1 of issue 17: server-everything's
// read-only get-env tool, mounted through viewmux, prints its environment.
// viewmux's own environment holds a token, another upstream's key and an
// unrelated variable; none may reach the child. What the child gets is
// exactly the fixed variables, its own env and what its inherit_env names.
func TestTrustChildEnvironment(t *testing.T) {
	itest.RequireNode(t)
	secrets := map[string]string{
		"TRUST_ADMIN_TOKEN": "adm-" + itest.RandomHex(t, 12),
		"TRUST_OTHER_KEY":   "oth-" + itest.RandomHex(t, 12),
		"TRUST_UNRELATED":   "unr-" + itest.RandomHex(t, 12),
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
`, itest.TomlString(itest.Harness.Node), itest.TomlArray(itest.EverythingEntry(), "stdio"), itest.TomlString(itest.MarkerEnv))
	env := []string{"TRUST_PASSED_ONE=passed-1", "TRUST_EXACT=exact-1", "TRUST_EXACTLY=not-a-prefix"}
	for _, k := range slices.Sorted(maps.Keys(secrets)) {
		env = append(env, k+"="+secrets[k])
	}
	mux := itest.StartMuxWith(t, itest.MuxOptions{Config: cfg, Env: env})

	res := itest.Drive(t, itest.Script{URL: mux.URL(), Headers: map[string]string{"Authorization": "Bearer " + secrets["TRUST_ADMIN_TOKEN"]},
		Steps: []itest.Op{itest.OpCall("every__get-env", map[string]any{})}}).Steps(t)[0].Call(t)
	text := res.Text()
	var got map[string]string
	if err := json.Unmarshal([]byte(text), &got); err != nil {
		t.Fatalf("get-env did not return a JSON object: %v\n%s", err, text)
	}
	for k, v := range secrets {
		if _, ok := got[k]; ok || strings.Contains(text, v) {
			t.Errorf("the child got %s from viewmux's environment", k)
		}
	}
	if got["TRUST_PASSED_ONE"] != "passed-1" || got["TRUST_EXACT"] != "exact-1" {
		t.Errorf("inherit_env's variables did not reach the child: TRUST_PASSED_ONE=%q TRUST_EXACT=%q", got["TRUST_PASSED_ONE"], got["TRUST_EXACT"])
	}
	if _, ok := got["TRUST_OWN"]; !ok {
		t.Errorf("the child's own env did not reach it")
	}
	allowed := []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", // every child's
		"TRUST_OWN", "TRUST_PASSED_ONE", "TRUST_EXACT", itest.MarkerEnv, // its env and inherit_env
		"VIEWMUX_CHILD"} // viewmux's marker for its children's descendants (Linux)
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if !slices.Contains(allowed, k) {
			t.Errorf("the child got %s, which neither its env nor its inherit_env names", k)
		}
	}
	if _, ok := got["PATH"]; !ok {
		t.Errorf("the child did not get PATH")
	}
}

// TestTrustRedirectKeepsHeaders is finding 7 of issue 17 through the
// built binary: an HTTP upstream whose URL 307-redirects every request to
// a second loopback listener on another port (another origin). The
// configured X-Api-Key and bearer token, the url's user:password@ and its
// query key must not reach the second listener, which records every
// request it gets.
func TestTrustRedirectKeepsHeaders(t *testing.T) {
	const key, bearer, password, query = "key-7a41c9", "tok-93bb02", "pw-e0d4a7", "q-1c55f0"
	var (
		mu   sync.Mutex
		seen []string // one line per request: its headers
	)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		for k, vs := range r.Header {
			fmt.Fprintf(&b, "%s: %s; ", k, strings.Join(vs, ", "))
		}
		mu.Lock()
		seen = append(seen, b.String())
		mu.Unlock()
		http.NotFound(w, r)
	}))
	t.Cleanup(target.Close)
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/landing", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirector.Close)
	upURL := strings.Replace(redirector.URL, "http://", "http://user:"+password+"@", 1) + "/mcp?key=" + query

	cfg := fmt.Sprintf(`[upstreams.redir]
url = %s
headers = { X-Api-Key = "${TRUST_API_KEY}", Authorization = "Bearer ${TRUST_BEARER}" }
connect_timeout = "5s"
`, itest.TomlString(upURL))
	mux := itest.StartMuxWith(t, itest.MuxOptions{Config: cfg, Env: []string{"TRUST_API_KEY=" + key, "TRUST_BEARER=" + bearer}})

	deadline := time.Now().Add(15 * time.Second)
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 {
		t.Fatalf("no request reached the redirect target\n--- viewmux stderr ---\n%s", mux.Stderr())
	}
	for i, h := range seen {
		for _, secret := range []string{key, bearer, query, "Authorization:"} {
			if strings.Contains(h, secret) {
				t.Errorf("request %d to another origin carried %q: %s", i, secret, h)
			}
		}
	}
}

// TestTrustTerminalEscapes is finding 9 of issue 17 through the built
// binary: a child writes an OSC 52 clipboard write and a clear screen to
// stderr and fails. Neither `check` nor `serve` (whose required upstream
// fails, a fatal error) may print a raw ESC or BEL, in their output or in
// their text log; the sequence is shown escaped.
func TestTrustTerminalEscapes(t *testing.T) {
	dir := t.TempDir()
	cfg := `[upstreams.evil]
command = "sh"
args = ["-c", "printf '\\033]52;c;cm0gLXJmIH4=\\007\\033[2J\\033[H' >&2; exit 1"]
required = true
`
	path := dir + "/viewmux.toml"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"check", "--config", path, "--log-level", "debug"},
		{"serve", "--config", path, "--listen", "127.0.0.1:0", "--log-level", "debug"},
	} {
		t.Run(args[0], func(t *testing.T) {
			code, stdout, stderr := itest.RunMux(t, 30*time.Second, dir, nil, args...)
			if code == 0 {
				t.Fatalf("exit 0, want a failure\n%s\n%s", stdout, stderr)
			}
			if strings.ContainsAny(stdout+stderr, "\x1b\x07") {
				t.Errorf("raw escape characters reached the terminal:\n%q\n%q", stdout, stderr)
			}
			if !strings.Contains(stdout+stderr, `\x1b]52;c;cm0gLXJmIH4=`) {
				t.Errorf("the child's sequence is not shown escaped:\n%s\n%s", stdout, stderr)
			}
		})
	}
}
