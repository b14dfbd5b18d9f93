//go:build unix

package itest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/server"

	"github.com/viewmux/viewmux/integration/typedrec"
)

// The typed upstreams of the adversarial tests: typedrec's mcp-go server,
// whose typed tool handlers record what they would execute — the argument
// as mcp-go's decoder bound it, which is what a Go upstream acts on, as
// distinct from the bytes viewmux forwarded. It runs twice behind one
// viewmux: in this test process over streamable HTTP on a loopback
// listener ("typed"), and as a stdio child built from typedrec/child
// ("typedio"), which appends its runs to a file.

// typedUp is one typed upstream as the tests see it.
type typedUp struct {
	Name string // its upstream name in viewmux's config, the prefix of its tools
	runs func(t testing.TB) []typedrec.Exec
}

// tool returns the exposed name of the upstream's tool.
func (u *typedUp) tool(name string) string { return u.Name + "__" + name }

// startTypedHTTP serves typedrec over streamable HTTP on a loopback
// listener for the test's lifetime, recording runs in memory.
func startTypedHTTP(t *testing.T) (*typedUp, string) {
	t.Helper()
	var mu sync.Mutex
	var runs []typedrec.Exec
	srv := typedrec.New("typedrec-http", func(e typedrec.Exec) {
		mu.Lock()
		defer mu.Unlock()
		runs = append(runs, e)
	})
	h := httptest.NewServer(server.NewStreamableHTTPServer(srv))
	t.Cleanup(h.Close)
	return &typedUp{Name: "typed", runs: func(testing.TB) []typedrec.Exec {
		mu.Lock()
		defer mu.Unlock()
		return append([]typedrec.Exec(nil), runs...)
	}}, h.URL + "/mcp"
}

// typedChildBinary builds typedrec/child once per test run.
func typedChildBinary(t testing.TB) string {
	t.Helper()
	return Fixture(t, "./typedrec/child")
}

// typedStdio is the stdio typed upstream: its runs are the lines of the
// log file every child of it (one per viewmux process) appends to, read
// incrementally.
func typedStdio(t *testing.T) (up *typedUp, bin, log string) {
	t.Helper()
	bin = typedChildBinary(t)
	log = filepath.Join(t.TempDir(), "typedio-runs.jsonl")
	var (
		mu   sync.Mutex
		runs []typedrec.Exec
		read int64 // bytes of log parsed into runs
	)
	return &typedUp{Name: "typedio", runs: func(t testing.TB) []typedrec.Exec {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		f, err := os.Open(log)
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.NewSectionReader(f, read, 1<<40))
		if err != nil {
			t.Fatal(err)
		}
		// Only whole lines: a child may be writing the next one.
		b = b[:bytes.LastIndexByte(b, '\n')+1]
		read += int64(len(b))
		for line := range bytes.Lines(b) {
			var e typedrec.Exec
			if err := json.Unmarshal(line, &e); err != nil {
				t.Fatalf("typedio run log: %v: %q", err, line)
			}
			runs = append(runs, e)
		}
		return append([]typedrec.Exec(nil), runs...)
	}}, bin, log
}

// typedEnv is one viewmux in front of both typed upstreams, with the
// adversarial profile (typedConfig).
type typedEnv struct {
	mux     *Mux
	cfgPath string
	Ups     []*typedUp
	barrier int
}

// TypedLinkPrefix is what open_link's call rule admits.
const TypedLinkPrefix = "https://docs.example.com/"

// typedConfig mounts the typed upstreams under the recording profile:
// secret_tool hidden, and every other tool callable only under its call
// rule — shell_run with "git status" or "git log *", read_file with a
// docs/*.md path (args_regex), open_link with a docs link.
func typedConfig(httpURL, childBin, childLog string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `[server]
shutdown_grace = "5s"
default_profile = %[1]q

[upstreams.typed]
url = %[2]s
required = true
call_timeout = "10s"

[upstreams.typedio]
command = %[3]s
env = { TYPEDREC_LOG = %[4]s }
required = true
call_timeout = "10s"

[profiles.%[1]s]
deny = ["typed__secret_tool", "typedio__secret_tool"]
`, RecProfile, TomlString(httpURL), TomlString(childBin), TomlString(childLog))
	for _, up := range []string{"typed", "typedio"} {
		fmt.Fprintf(&b, `
[[profiles.%[1]s.call_rules]]
tool = "%[2]s__shell_run"
args = { command = ["git status", "git log *"] }

[[profiles.%[1]s.call_rules]]
tool = "%[2]s__read_file"
args_regex = { path = ['^docs/[a-z0-9_/-]+\.md$'] }

[[profiles.%[1]s.call_rules]]
tool = "%[2]s__open_link"
args = { link = [%[3]s] }
`, RecProfile, up, TomlString(TypedLinkPrefix+"*"))
	}
	return b.String()
}

// StartTyped starts both typed upstreams and an viewmux in front of them.
func StartTyped(t *testing.T) *typedEnv {
	t.Helper()
	httpUp, url := startTypedHTTP(t)
	ioUp, bin, log := typedStdio(t)
	env := &typedEnv{Ups: []*typedUp{httpUp, ioUp}}
	env.mux = StartMux(t, typedConfig(url, bin, log))
	env.cfgPath = filepath.Join(env.mux.Dir, "viewmux.toml")
	return env
}

func (env *typedEnv) Doors() []RecDoor { return RecDoors(env.mux, env.cfgPath, nil) }

// Marks returns how many runs each typed upstream has recorded so far.
func (env *typedEnv) Marks(t testing.TB) []int {
	t.Helper()
	m := make([]int, len(env.Ups))
	for i, u := range env.Ups {
		m[i] = len(u.runs(t))
	}
	return m
}

// since returns the runs of upstream i after mark m.
func (env *typedEnv) since(t testing.TB, i int, m []int) []typedrec.Exec {
	t.Helper()
	return env.Ups[i].runs(t)[m[i]:]
}

// CheckNothingExecuted sends an allowed, marked call to every typed
// upstream (the barrier: whatever was forwarded before it has run once
// its answer is back) and fails the test unless each upstream ran nothing
// since m but its barrier.
func (env *typedEnv) CheckNothingExecuted(t *testing.T, c RecClient, m []int) {
	t.Helper()
	env.barrier++
	b := fmt.Sprintf("barrier-%d", env.barrier)
	for _, u := range env.Ups {
		a := c.Do(t, "tools/call", `{"name":"`+u.tool("shell_run")+`","arguments":{"command":"git status"},"_meta":{"barrier":"`+b+`"}}`)
		if a.Msg.Error != nil || a.Msg.Result == nil {
			t.Fatalf("the barrier call to %s failed: %s", u.Name, a)
		}
	}
	for i, u := range env.Ups {
		runs := env.since(t, i, m)
		want := typedrec.Exec{Tool: "shell_run", Value: "git status", Get: "git status", Raw: `{"command":"git status"}`, Barrier: b}
		if len(runs) != 1 || runs[0] != want {
			t.Errorf("%s executed %d call(s), want only the barrier:\n%s", u.Name, len(runs), typedDescribe(runs))
		}
	}
}

// CheckExecuted fails the test unless, since m, upstream i ran exactly one
// call — tool with value, as both its typed struct and GetString read it —
// and the other upstreams ran nothing.
func (env *typedEnv) CheckExecuted(t *testing.T, m []int, i int, tool, value string) {
	t.Helper()
	for j, u := range env.Ups {
		runs := env.since(t, j, m)
		if j != i {
			if len(runs) > 0 {
				t.Errorf("%s executed calls meant for %s:\n%s", u.Name, env.Ups[i].Name, typedDescribe(runs))
			}
			continue
		}
		if len(runs) != 1 || runs[0].Tool != tool || runs[0].Value != value || runs[0].Get != value || runs[0].Barrier != "" {
			t.Errorf("%s executed:\n%swant exactly one run of %s on %q", u.Name, typedDescribe(runs), tool, value)
		}
	}
}

func typedDescribe(runs []typedrec.Exec) string {
	var b strings.Builder
	for _, r := range runs {
		fmt.Fprintf(&b, "  %s value=%q get=%q raw=%s barrier=%q\n", r.Tool, r.Value, r.Get, r.Raw, r.Barrier)
	}
	return b.String()
}

// TypedRawAnswer sends body — any text, a batch or a message whose
// envelope no RecClient would write — on c and returns viewmux's answer to
// it: the HTTP body on /mcp, the next message that is not a notification
// or a server→client request on the other doors. status is the HTTP
// status on /mcp and 0 elsewhere.
func TypedRawAnswer(t *testing.T, c RecClient, body string) (answer []byte, status int) {
	t.Helper()
	switch c := c.(type) {
	case *RecHTTP:
		r := c.S.Post(t, "", nil, body)
		return bytes.TrimSpace(r.Body), r.Status
	case *RecModern:
		r := RawPost(t, c.URL, nil, body)
		return bytes.TrimSpace(r.Body), r.Status
	case *RecStream:
		if err := c.Send([]byte(body)); err != nil {
			t.Fatalf("%s: sending %s: %v", c.Door, body, err)
		}
		timeout := time.After(30 * time.Second)
		for {
			select {
			case raw, ok := <-c.In:
				if !ok {
					t.Fatalf("%s: the connection ended before an answer to %s", c.Door, body)
				}
				var probe struct {
					Method string `json:"method"`
				}
				if json.Unmarshal(raw, &probe) == nil && probe.Method != "" {
					continue
				}
				return bytes.TrimSpace(raw), 0
			case <-timeout:
				t.Fatalf("%s: no answer to %s within 30s", c.Door, body)
			}
		}
	}
	t.Fatalf("typedRawAnswer: unknown client %T", c)
	return nil, 0
}
