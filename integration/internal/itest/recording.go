//go:build unix

package itest

import (
	"fmt"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// The recording tests (call rules and ambiguous keys, the request path, the security bounds): two
// recording upstreams — rec speaking 2025-11-25, mod speaking 2026-07-28 —
// mounted over streamable HTTP with a query secret in their URLs, behind a
// profile that hides secret_tool and allows run only with
// command = "git status". Every test runs on every front door: a legacy
// session on /mcp, stateless 2026-07-28 requests on /mcp, websocket, legacy
// SSE and `serve --stdio`. What the recorders were sent is the oracle for
// what viewmux forwarded, byte for byte, and for what it did not.

// RecEnv is one viewmux with its two recorders.
type RecEnv struct {
	Mux      *Mux
	CfgPath  string
	Rec, Mod *Recorder
	Stdio    map[string]*SyncBuffer // stderr of each stdio door, by test name
	barrier  int
}

// RecConfig mounts rec and mod under the recording profile.
func RecConfig(rec, mod *Recorder) string {
	return fmt.Sprintf(`[server]
shutdown_grace = "5s"
default_profile = %[3]q

[upstreams.rec]
url = %[1]s
required = true
call_timeout = "1s"

[upstreams.mod]
url = %[2]s
protocol = "2026-07-28"
required = true
call_timeout = "1s"

[profiles.%[3]s]
deny = ["rec__secret_tool", "mod__secret_tool"]

[[profiles.%[3]s.call_rules]]
tool = "rec__run"
args = { command = ["git status"] }

[[profiles.%[3]s.call_rules]]
tool = "mod__run"
args = { command = ["git status"] }
`, TomlString(rec.URL), TomlString(mod.URL), RecProfile)
}

func (env *RecEnv) Doors() []RecDoor {
	return RecDoors(env.Mux, env.CfgPath, func(name string, logs *SyncBuffer) { env.Stdio[name] = logs })
}

func (env *RecEnv) Recorder(name string) *Recorder {
	if name == "mod" {
		return env.Mod
	}
	return env.Rec
}

// Marks returns the current position of both recorders.
func (env *RecEnv) Marks() [2]int { return [2]int{env.Rec.Mark(), env.Mod.Mark()} }

// Forwarded returns the routed requests each recorder got since m.
func (env *RecEnv) Forwarded(m [2]int) (rec, mod []RecRequest) {
	return env.Rec.Since(m[0]), env.Mod.Since(m[1])
}

// CheckNothingForwarded sends an allowed call (the barrier: anything that
// was forwarded for the requests before it has arrived once the barrier
// has) and fails the test unless the barrier is the only routed request
// either recorder got since m, and no request ever carried token.
func (env *RecEnv) CheckNothingForwarded(t *testing.T, c RecClient, m [2]int, token string) {
	t.Helper()
	env.barrier++
	b := fmt.Sprintf("barrier-%d", env.barrier)
	a := c.Do(t, "tools/call", `{"name":"rec__run","arguments":{"command":"git status"},"_meta":{"barrier":"`+b+`"}}`)
	if a.Msg.Error != nil || a.Msg.Result == nil {
		t.Fatalf("the barrier call failed: %s", a)
	}
	rec, mod := env.Forwarded(m)
	if len(rec) != 1 || len(mod) != 0 || !strings.Contains(string(rec[0].Body), b) {
		t.Errorf("upstreams were sent %d request(s) to rec and %d to mod, want only the barrier:\n%s", len(rec), len(mod), RecDescribe(append(rec, mod...)))
	}
	if token != "" {
		if got := append(env.Rec.Containing(token), env.Mod.Containing(token)...); len(got) > 0 {
			t.Errorf("the refused request reached an upstream:\n%s", RecDescribe(got))
		}
	}
}

func RecDescribe(rs []RecRequest) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "  %s %s\n", r.Method, r.Body)
	}
	return b.String()
}

// RecPrintable is how viewmux wants a client's tool name echoed: every
// rune that is not printable replaced, cut to 128 bytes.
func RecPrintable(s string) string {
	var b strings.Builder
	for _, r := range s {
		if !unicode.IsPrint(r) || r == utf8.RuneError {
			r = '?'
		}
		if b.Len()+utf8.RuneLen(r) > 128 {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}
