package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// dyingUpstream is a stdio upstream that says why on stderr and exits,
// the way @modelcontextprotocol/server-filesystem does with a bad path.
const dyingUpstream = `[upstreams.fs]
command = "sh"
args = ["-c", "echo 'None of the specified directories are accessible' >&2; exit 1"]
`

// TestCheckShowsWhyAChildDied runs `viewmux check` against a real child
// that dies at start, next to a healthy one.
func TestCheckShowsWhyAChildDied(t *testing.T) {
	path := writeConfig(t, dyingUpstream+"\n"+demoUpstream(t, "demo", "demo-server", "--name", "demo"))
	var stdout, stderr bytes.Buffer
	code := run([]string{"check", "--config", path}, &stdout, &stderr)
	out := stdout.String()
	if code != exitRuntime {
		t.Errorf("exit %d, want %d", code, exitRuntime)
	}
	if !strings.Contains(out, "\n  stderr| None of the specified directories are accessible\n") {
		t.Errorf("the child's stderr line is not shown:\n%s", out)
	}
	if n := strings.Count(out, `error: upstream "fs": connect: `); n != 1 {
		t.Errorf("the error line is printed %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, `"fs": connect: `); n != 1 {
		t.Errorf("the error's text appears %d times (table and list?), want once:\n%s", n, out)
	}
	if strings.Contains(out, `upstream "fs": upstream "fs"`) {
		t.Errorf("the upstream is named twice in a row:\n%s", out)
	}
	if got := stderr.String(); got != "viewmux: check found 1 problem\n" {
		t.Errorf("stderr = %q, want the count of problems in the singular", got)
	}
	if !strings.Contains(out, "1 profile shares 1 filter instance;") {
		t.Errorf("the filter summary is not in the singular:\n%s", out)
	}
	// The upstream table has a token estimate per upstream.
	header := regexp.MustCompile(`(?m)^UPSTREAM +TRANSPORT +STATE +TOOLS +~TOKENS +NOTE$`)
	if !header.MatchString(out) {
		t.Fatalf("no ~TOKENS column in the upstream table:\n%s", out)
	}
	demo := regexp.MustCompile(`(?m)^demo +stdio +up +(\d+) +(\d+) *$`).FindStringSubmatch(out)
	fs := regexp.MustCompile(`(?m)^fs +stdio +down +0 +0 +failed to start: see below$`).FindStringSubmatch(out)
	if demo == nil || fs == nil {
		t.Fatalf("unexpected upstream rows:\n%s", out)
	}
	// The demo upstream is the only one up, so its estimate is the
	// profile's, less the few bytes of one wrapper.
	profile := regexp.MustCompile(`(?m)^\(none\) +\d+ +(\d+) `).FindStringSubmatch(out)
	up, _ := strconv.Atoi(demo[2])
	all, _ := strconv.Atoi(profile[1])
	if up == 0 || up != all {
		t.Errorf("demo's ~TOKENS = %d, the profile's = %d; want the same non-zero estimate", up, all)
	}
}

// TestCheckNoConnect validates without starting a child or dialing a URL.
func TestCheckNoConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var dialed atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dialed.Add(1)
			c.Close()
		}
	}()
	defer ln.Close()
	marker := filepath.Join(t.TempDir(), "started")
	path := writeConfig(t, fmt.Sprintf(`[upstreams.local]
command = "sh"
args = ["-c", "touch %s"]
required = true

[upstreams.remote]
url = "http://%s/mcp?api_key=secret"

[profiles.default]
[profiles.readonly]
read_only = true
`, marker, ln.Addr()))
	code, out := runCLI(t, "check", "--no-connect", "--config", path)
	if code != exitOK {
		t.Errorf("exit %d, want 0\n%s", code, out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("check --no-connect started the stdio child")
	}
	if n := dialed.Load(); n != 0 {
		t.Errorf("check --no-connect dialed the HTTP upstream %d times", n)
	}
	golden(t, "check_no_connect", strings.ReplaceAll(out, path, "CONFIG"))

	code, out = runCLI(t, "check", "--no-connect", "--config", writeConfig(t, "[upstreams.x]\ncommand = \"sh\"\nbogus = 1\n"))
	if code != exitUsage || !strings.Contains(out, "bogus") {
		t.Errorf("an invalid config: exit %d, want %d naming the bad key\n%s", code, exitUsage, out)
	}
}

// TestLogFormat: --log-format wins over server.log_format; JSON logs keep
// the redaction and an upstream's JSON stderr line as fields.
func TestLogFormat(t *testing.T) {
	const pino = `[upstreams.pino]
command = "sh"
args = ["-c", "echo '{\"level\":50,\"msg\":\"cannot open\",\"path\":\"/nope\"}' >&2; exit 1"]

[upstreams.remote]
url = "http://127.0.0.1:1/mcp?api_key=s3cr3t"
connect_timeout = "2s"
`
	cases := []struct {
		name     string
		server   string // the [server] table's log_format; "" = unset
		flag     string // --log-format; "" = unset
		wantJSON bool
	}{
		{"default is text", "", "", false},
		{"config json", "json", "", true},
		{"flag json", "", "json", true},
		{"flag wins over config", "json", "text", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := pino
			if tc.server != "" {
				cfg = fmt.Sprintf("[server]\nlog_format = %q\n\n%s", tc.server, cfg)
			}
			args := []string{"check", "--log-level", "info", "--config", writeConfig(t, cfg)}
			if tc.flag != "" {
				args = append(args, "--log-format", tc.flag)
			}
			var stdout, stderr bytes.Buffer
			run(args, &stdout, &stderr)
			logs := strings.TrimSuffix(stderr.String(), "viewmux: check found 2 problems\n")
			if strings.Contains(logs, "s3cr3t") {
				t.Errorf("a secret reached the logs:\n%s", logs)
			}
			lines := strings.Split(strings.TrimSpace(logs), "\n")
			if len(lines) < 3 {
				t.Fatalf("want logs at info, got:\n%s", stderr.String())
			}
			var sawFields bool
			for _, l := range lines {
				var rec map[string]any
				isJSON := json.Unmarshal([]byte(l), &rec) == nil
				if isJSON != tc.wantJSON {
					t.Fatalf("log line %q: JSON = %v, want %v", l, isJSON, tc.wantJSON)
				}
				if isJSON && rec["msg"] == "stderr" {
					f, _ := rec["stderr"].(map[string]any)
					sawFields = f["msg"] == "cannot open" && f["level"] == 50.0 && f["path"] == "/nope"
				}
				if !isJSON && strings.Contains(l, "msg=stderr") {
					sawFields = strings.Contains(l, `stderr.msg="cannot open"`) && strings.Contains(l, "stderr.level=50")
				}
			}
			if !sawFields {
				t.Errorf("the upstream's JSON stderr line was not logged as fields:\n%s", logs)
			}
		})
	}
}

// TestCheckMasksConfiguredSecrets runs `viewmux check` against an HTTP
// upstream whose URL path holds a key and that refuses us (its errors quote
// the URL), and a child that echoes an env value on stderr and dies: no
// byte of either secret reaches check's output or its logs, at debug level.
func TestCheckMasksConfiguredSecrets(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refuse := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no entry for "+r.URL.Path, http.StatusForbidden)
	})}
	go refuse.Serve(ln)
	t.Cleanup(func() { refuse.Close() })
	const pathKey, envValue = "sk-ak-PATHSECRET123", "hunter2-env-secret"
	path := writeConfig(t, fmt.Sprintf(`
[upstreams.keyed]
url = "http://%s/mcp/%s/sse"
[upstreams.leaky]
command = "sh"
args = ["-c", "echo \"starting with token $$MYSECRET\" >&2; exit 3"]
env = { MYSECRET = %q }
`, ln.Addr(), pathKey, envValue))
	var stdout, stderr bytes.Buffer
	code := run([]string{"check", "--config", path, "--log-level", "debug"}, &stdout, &stderr)
	out := stdout.String() + stderr.String()
	if code != exitRuntime {
		t.Errorf("exit %d, want %d:\n%s", code, exitRuntime, out)
	}
	for _, secret := range []string{"PATHSECRET", "hunter2"} {
		if strings.Contains(out, secret) {
			t.Errorf("check's output holds %q:\n%s", secret, out)
		}
	}
	if !strings.Contains(out, "starting with token REDACTED") || !strings.Contains(out, `upstream "keyed"`) {
		t.Errorf("the errors themselves are missing:\n%s", out)
	}
}

// TestCheckWarnsOnNothingToServe: an empty config, and one without
// upstreams, are valid, but check says what a client would get (issue 18).
func TestCheckWarnsOnNothingToServe(t *testing.T) {
	for _, tt := range []struct {
		name, config, want string
	}{
		{"empty", "# nothing yet\n", "is empty: no upstream, no profile"},
		{"no upstreams", "[profiles.default]\n[profiles.readonly]\nread_only = true\n", "mounts no upstream"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.config)
			for _, args := range [][]string{{"check", "--no-connect"}, {"check"}} {
				code, out := runCLI(t, append(args, "--config", path)...)
				if code != exitOK {
					t.Errorf("%v: exit %d, want 0 (a warning is not an error)\n%s", args, code, out)
				}
				if !strings.Contains(out, "warning: config "+path+" "+tt.want) {
					t.Errorf("%v: no warning %q:\n%s", args, tt.want, out)
				}
			}
		})
	}
	code, out := runCLI(t, "check", "--no-connect", "--config", writeConfig(t, "[upstreams.x]\ncommand = \"sh\"\n"))
	if code != exitOK || strings.Contains(out, "warning") {
		t.Errorf("a config with an upstream: exit %d, want 0 and no warning:\n%s", code, out)
	}
}

// TestCheckShowsOverrideProblems checks that `check` names both tools of a
// rename that collides with a tool the upstream lists, and notes an
// override of a tool the upstream does not list.
func TestCheckShowsOverrideProblems(t *testing.T) {
	path := writeConfig(t, demoUpstream(t, "demo", "demo-server", "--name", "demo")+`
[upstreams.demo.overrides.write_note]
name = "read_note"
[upstreams.demo.overrides.no_such_tool]
title = "Nothing"
`)
	var stdout, stderr bytes.Buffer
	run([]string{"check", "--config", path}, &stdout, &stderr)
	out := stdout.String()
	for _, want := range []string{
		`config error: tool name "demo__read_note": upstream "demo" (tool "read_note") collides with upstream "demo" (tool "write_note", renamed by [upstreams.demo.overrides.write_note]); the latter is left out`,
		`note: upstream "demo" lists no tool "no_such_tool": its override applies once it does`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check does not say %q:\n%s", want, out)
		}
	}
}
