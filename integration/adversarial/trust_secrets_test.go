//go:build unix

package adversarial

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// leakyServer is a stdio MCP server, in the raw protocol, that repeats
// what the file its first argument names holds (the secrets it learned):
// on stderr when it starts, in the JSON-RPC error of leak_error (message
// and data), and in the isError result of leak_result. With a second
// argument "fail" it prints them on stderr and exits at once.
const leakyServer = `
const fs = require('fs');
const said = fs.readFileSync(process.argv[2], 'utf8').trim();
process.stderr.write('learned: ' + said + '\n');
if (process.argv[3] === 'fail') { process.exit(3); }
const send = (m) => process.stdout.write(JSON.stringify(Object.assign({jsonrpc: '2.0'}, m)) + '\n');
require('readline').createInterface({input: process.stdin}).on('line', (line) => {
  const m = JSON.parse(line);
  if (m.id === undefined) { return; }
  switch (m.method) {
  case 'initialize':
    return send({id: m.id, result: {protocolVersion: m.params.protocolVersion, capabilities: {tools: {}}, serverInfo: {name: 'leaky', version: '1.0.0'}}});
  case 'tools/list':
    return send({id: m.id, result: {tools: [
      {name: 'leak_error', inputSchema: {type: 'object'}},
      {name: 'leak_result', inputSchema: {type: 'object'}}]}});
  case 'tools/call':
    process.stderr.write('called ' + m.params.name + ' knowing ' + said + '\n');
    if (m.params.name === 'leak_error') {
      return send({id: m.id, error: {code: -32000, message: 'failed: ' + said, data: {said: said}}});
    }
    return send({id: m.id, result: {content: [{type: 'text', text: 'failed: ' + said}], isError: true}});
  }
  send({id: m.id, error: {code: -32601, message: 'Method not found'}});
});
`

// TestTrustSecretsMaskedEverywhere is finding 2 of issue 17 through the
// built binary: a child learned the admin token and another upstream's API
// key (here from a file) and repeats them on its stderr, in a JSON-RPC
// error and in an error result; a second child prints them on stderr and
// fails to start. Neither value may appear in viewmux's log, /status.json,
// the status page, `check`'s output, the audit log, or the error a client
// is given: one set of every configured secret is masked in every output,
// whoever's secret it is.
func TestTrustSecretsMaskedEverywhere(t *testing.T) {
	itest.RequireNode(t)
	admin := "adm-" + itest.RandomHex(t, 12)
	otherKey := "oth-" + itest.RandomHex(t, 12)
	dir := t.TempDir()
	script := filepath.Join(dir, "leaky.js")
	learned := filepath.Join(dir, "learned.txt")
	nothing := filepath.Join(dir, "nothing.txt")
	audit := filepath.Join(dir, "audit.jsonl")
	for path, text := range map[string]string{script: leakyServer, learned: "admin=" + admin + " other=" + otherKey, nothing: "nothing"} {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := fmt.Sprintf(`[upstreams.leaky]
command = %[1]s
args = %[2]s
required = true

[upstreams.broken]
command = %[1]s
args = %[3]s

[upstreams.other]
command = %[1]s
args = %[4]s
env = { OTHER_API_KEY = "${LEAK_OTHER_KEY}" }
required = true

[profiles.default]

[audit]
path = %[5]s
include_arguments = true

[[auth.tokens]]
token = "${LEAK_ADMIN_TOKEN}"
profiles = ["default"]
`, itest.TomlString(itest.Harness.Node), itest.TomlArray(script, learned), itest.TomlArray(script, learned, "fail"), itest.TomlArray(script, nothing), itest.TomlString(audit))
	env := []string{"LEAK_ADMIN_TOKEN=" + admin, "LEAK_OTHER_KEY=" + otherKey}
	secrets := map[string]string{"the admin token": admin, "the other upstream's key": otherKey}
	leaks := func(t *testing.T, where, text string) {
		t.Helper()
		for what, v := range secrets {
			if strings.Contains(text, v) {
				t.Errorf("%s shows %s:\n%s", where, what, text)
			}
		}
	}

	t.Run("serve", func(t *testing.T) {
		mux := itest.StartMuxWith(t, itest.MuxOptions{Config: cfg, Env: env, Dir: dir, Args: []string{"--log-level", "debug"}})
		steps := itest.Drive(t, itest.Script{URL: mux.URL(), Headers: map[string]string{"Authorization": "Bearer " + admin},
			Steps: []itest.Op{itest.OpCallExpectError("leaky__leak_error", map[string]any{}), itest.OpCall("leaky__leak_result", map[string]any{})}}).Steps(t)
		if e := steps[0].Error; e == nil || !strings.Contains(e.Message, "failed: ") {
			t.Fatalf("leak_error: got %v, want the upstream's error", e)
		} else {
			leaks(t, "the error a client is given", e.Message+string(e.Data))
		}
		if !strings.Contains(mux.Stderr(), "learned: ") || !strings.Contains(mux.Stderr(), "called leak_result") {
			t.Fatalf("the children's stderr is not in the log:\n%s", mux.Stderr())
		}
		for _, path := range []string{"/status.json", "/"} {
			body := itest.GetWithToken(t, "http://"+mux.Addr+path, admin)
			if !strings.Contains(body, "learned: ") {
				t.Errorf("%s does not show the failed child's stderr (nothing to check):\n%s", path, body)
			}
			leaks(t, path, body)
		}
		b, err := os.ReadFile(audit)
		if err != nil || !strings.Contains(string(b), "leak_error") {
			t.Fatalf("audit log: %v\n%s", err, b)
		}
		leaks(t, "the audit log", string(b))
		leaks(t, "the log", mux.Stderr())
	})
	t.Run("check", func(t *testing.T) {
		code, stdout, stderr := itest.RunMux(t, 60*time.Second, dir, env, "check", "--config", filepath.Join(dir, "viewmux.toml"), "--log-level", "debug")
		if !strings.Contains(stdout+stderr, "learned: ") {
			t.Fatalf("check (exit %d) does not show the failed child's stderr (nothing to check):\n%s\n%s", code, stdout, stderr)
		}
		leaks(t, "check's output", stdout+stderr)
	})
}
