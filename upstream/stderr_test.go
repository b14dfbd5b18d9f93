package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/configs"
)

// shConfig is a stdio upstream running script with sh.
func shConfig(name, script string) *configs.Upstream {
	return &configs.Upstream{
		Name:            name,
		Transport:       configs.TransportStdio,
		Command:         "sh",
		Args:            []string{"-c", script},
		ConnectTimeout:  5 * time.Second,
		CallTimeout:     5 * time.Second,
		MaxMessageBytes: 16 << 20,
	}
}

// startErr starts u, which must fail, and returns the error.
func startErr(t *testing.T, u *Upstream) error {
	t.Helper()
	t.Cleanup(func() { u.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := u.Start(ctx)
	if err == nil {
		t.Fatal("Start succeeded; want an error")
	}
	return err
}

// TestChildDyingAtStartShowsItsStderr: the reason a child gives on stderr
// before it dies is in the error of the attempt, not only in the logs.
func TestChildDyingAtStartShowsItsStderr(t *testing.T) {
	cases := []struct {
		name   string
		script string
		want   []string
	}{
		{"one line", `echo "None of the specified directories are accessible" >&2; exit 1`,
			[]string{"None of the specified directories are accessible"}},
		{"only the last ten", `for i in $(seq 1 15); do echo "line $i" >&2; done; exit 3`,
			[]string{"line 6", "line 7", "line 8", "line 9", "line 10", "line 11", "line 12", "line 13", "line 14", "line 15"}},
		{"a long line is cut", `printf '%0600d\n' 0 >&2; exit 1`,
			[]string{strings.Repeat("0", maxTailLine) + "…"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := startErr(t, New(shConfig("fs", tc.script), fastOptions(&logSink{})))
			var se *StderrError
			if !errors.As(err, &se) {
				t.Fatalf("error %q carries no stderr lines", err)
			}
			if fmt.Sprint(se.Stderr) != fmt.Sprint(tc.want) {
				t.Errorf("stderr lines = %q, want %q", se.Stderr, tc.want)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, `upstream "fs": connect: `) || strings.Count(msg, `upstream "fs"`) != 1 {
				t.Errorf("error %q does not name the upstream exactly once", msg)
			}
			if !strings.Contains(msg, "\n  stderr| "+tc.want[len(tc.want)-1]) {
				t.Errorf("error text %q does not show the last stderr line", msg)
			}
		})
	}
}

// TestHealthyChildErrorHasNoStderr: a child that fails without writing to
// stderr gets a plain error.
func TestHealthyChildErrorHasNoStderr(t *testing.T) {
	err := startErr(t, New(shConfig("quiet", "exit 1"), fastOptions(&logSink{})))
	var se *StderrError
	if errors.As(err, &se) || strings.Contains(err.Error(), "stderr|") {
		t.Errorf("error %q shows stderr lines the child never wrote", err)
	}
}

// TestJSONStderrLineIsLoggedAsFields: a JSON stderr line (pino, zap, …)
// is logged as fields under "stderr", not as one quoted string.
func TestJSONStderrLineIsLoggedAsFields(t *testing.T) {
	var buf lockedWriter
	var out bytes.Buffer
	buf.w = &out
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	script := `echo '{"level":30,"time":1700000000000,"msg":"server started","nested":{"port":8080,"ok":true},"tags":["a","b"],"ratio":0.5}' >&2
echo 'plain text {not json}' >&2
exit 1`
	u := New(shConfig("pino", script), Options{Logger: log})
	startErr(t, u)
	u.Close()

	var records []map[string]any
	buf.mu.Lock()
	for _, line := range bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if m["msg"] == "stderr" {
			records = append(records, m)
		}
	}
	buf.mu.Unlock()
	if len(records) != 2 {
		t.Fatalf("want 2 stderr records, got %v", records)
	}
	fields, ok := records[0]["stderr"].(map[string]any)
	if !ok {
		t.Fatalf("the JSON line was logged as %#v, want an object of fields", records[0]["stderr"])
	}
	want := map[string]any{"level": 30.0, "time": 1.7e12, "msg": "server started",
		"nested": map[string]any{"port": 8080.0, "ok": true}, "tags": []any{"a", "b"}, "ratio": 0.5}
	if fmt.Sprint(fields) != fmt.Sprint(want) {
		t.Errorf("fields = %v, want %v", fields, want)
	}
	if records[0]["upstream"] != "pino" {
		t.Errorf("record %v does not name the upstream", records[0])
	}
	if records[1]["stderr"] != "plain text {not json}" {
		t.Errorf("a plain line was logged as %#v", records[1]["stderr"])
	}
}

// TestJSONAttrs pins which lines count as JSON objects.
func TestJSONAttrs(t *testing.T) {
	cases := []struct {
		line string
		want string // the attrs as slog's text handler shows them; "" = not JSON
	}{
		{`{"a":1,"b":"x"}`, `a=1 b=x`},
		{`  {"z":1,"a":2}  `, `z=1 a=2`}, // the object's order, not sorted
		{`{"n":null,"f":1.5,"big":12345678901234567890}`, `n=<nil> f=1.5 big=1.2345678901234567e+19`},
		{`{"o":{"p":{"q":true}}}`, `o.p.q=true`},
		{`{}`, ``},
		{`[1,2]`, ``},
		{`{"a":1} trailing`, ``},
		{`"just a string"`, ``},
		{`{"a":`, ``},
	}
	for _, tc := range cases {
		attrs, ok := jsonAttrs([]byte(tc.line))
		var b bytes.Buffer
		h := slog.NewTextHandler(&b, &slog.HandlerOptions{ReplaceAttr: func(g []string, a slog.Attr) slog.Attr {
			if len(g) == 0 && (a.Key == "time" || a.Key == "level" || a.Key == "msg") {
				return slog.Attr{}
			}
			return a
		}})
		slog.New(h).LogAttrs(context.Background(), slog.LevelInfo, "", attrs...)
		got := strings.TrimSpace(b.String())
		if ok != (tc.want != "") || got != tc.want {
			t.Errorf("jsonAttrs(%s) = %q, %v; want %q", tc.line, got, ok, tc.want)
		}
	}
}

// TestRefusedStreamableHTTPKeepsEachAttemptsError: an endpoint that
// refuses the initialize POST with 403 shows that refusal, its body, and
// the SSE fallback's own error.
func TestRefusedStreamableHTTPKeepsEachAttemptsError(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			http.Error(w, "forbidden: token lacks the mcp scope", http.StatusForbidden)
			return
		}
		http.Error(w, "no SSE here", http.StatusNotFound)
	}))
	defer ts.Close()
	cfg := &configs.Upstream{Name: "remote", Transport: configs.TransportHTTP, URL: ts.URL + "/mcp",
		ConnectTimeout: 5 * time.Second, CallTimeout: 5 * time.Second, MaxMessageBytes: 1 << 20}
	msg := startErr(t, New(cfg, fastOptions(&logSink{}))).Error()
	for _, want := range []string{
		`upstream "remote": connect: streamable HTTP: `,
		`HTTP 403 Forbidden: "forbidden: token lacks the mcp scope"`,
		`; legacy SSE fallback: `,
		`404`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if strings.Count(msg, `upstream "remote"`) != 1 {
		t.Errorf("error %q names the upstream more than once", msg)
	}
}

// TestWrongURLIsNotCalledLegacy is issue 18, item 6: a URL that answers
// 404 to the initialize POST and to the legacy SSE GET is a wrong URL, not
// "likely a legacy SSE server"; the error says what each answered and
// names the upstream and the URL (without its query).
func TestWrongURLIsNotCalledLegacy(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	defer ts.Close()
	cfg := &configs.Upstream{Name: "wrong", Transport: configs.TransportHTTP, URL: ts.URL + "/nope/mcp?key=q",
		ConnectTimeout: 5 * time.Second, CallTimeout: 5 * time.Second, MaxMessageBytes: 1 << 20}
	msg := startErr(t, New(cfg, fastOptions(&logSink{}))).Error()
	for _, want := range []string{
		`upstream "wrong": connect: streamable HTTP: `,
		`HTTP 404 Not Found`,
		`; legacy SSE fallback: start sse transport: SSE stream: the server answered the GET with 404 Not Found`,
		ts.URL + "/nope/mcp serves neither streamable HTTP nor legacy SSE: check the url of [upstreams.wrong]",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	for _, bad := range []string{"likely", "legacy SSE server", "key=q"} {
		if strings.Contains(msg, bad) {
			t.Errorf("error %q says %q", msg, bad)
		}
	}
}

// TestRefusedPortErrorHasNoRepeats is issue 18, item 6: the error of a
// loopback port that refuses connections reads once, with no prefix
// doubled ("failed to send request: failed to send request:").
func TestRefusedPortErrorHasNoRepeats(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	for _, transport := range []string{configs.TransportHTTP, configs.TransportSSE, configs.TransportWebsocket} {
		t.Run(transport, func(t *testing.T) {
			scheme := "http://"
			if transport == configs.TransportWebsocket {
				scheme = "ws://"
			}
			cfg := &configs.Upstream{Name: "refused", Transport: transport, URL: scheme + addr + "/mcp",
				ConnectTimeout: 5 * time.Second, CallTimeout: 5 * time.Second, MaxMessageBytes: 1 << 20}
			msg := startErr(t, New(cfg, fastOptions(&logSink{}))).Error()
			if !strings.Contains(msg, "connection refused") || !strings.HasPrefix(msg, `upstream "refused": `) {
				t.Errorf("error %q does not name the upstream and say the connection was refused", msg)
			}
			t.Log(msg)
			if rep := repeatedPart(msg); rep != "" {
				t.Errorf("error %q repeats %q", msg, rep)
			}
		})
	}
}

// repeatedPart returns a ": "-separated part of msg that appears twice in
// a row ("a: a: b"), or "".
func repeatedPart(msg string) string {
	parts := strings.Split(msg, ": ")
	for i := 1; i < len(parts); i++ {
		if parts[i] == parts[i-1] {
			return parts[i]
		}
	}
	return ""
}

// TestAttemptsErr pins how the errors of several attempts are joined.
func TestAttemptsErr(t *testing.T) {
	a, b := errors.New("refused"), errors.New("timed out")
	cases := []struct {
		name string
		in   attempts
		want string
	}{
		{"same error twice is said once", attempts{{"", a}, {"with 2026-07-28 discovery", errors.New("refused")}}, "refused"},
		{"different errors are both kept", attempts{{"", a}, {"with 2026-07-28 discovery", b}}, "refused; with 2026-07-28 discovery: timed out"},
		{"labelled", attempts{{"streamable HTTP", a}, {"legacy SSE fallback", b}}, "streamable HTTP: refused; legacy SSE fallback: timed out"},
		{"labelled, repeated", attempts{{"streamable HTTP", a}, {"discovery", a}, {"legacy SSE fallback", b}}, "streamable HTTP: refused; legacy SSE fallback: timed out"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.in.err()
			if err.Error() != tc.want {
				t.Errorf("got %q, want %q", err, tc.want)
			}
			if !errors.Is(err, a) {
				t.Errorf("errors.Is(%q, first error) = false", err)
			}
		})
	}
}

// TestRepeatedStartFailureLogsItsStderrOnce is issue 18, item 6: a child
// that dies at start with a multi-line stack (a missing node script) has
// its stderr logged in full once; each retry that writes the same lines
// logs them at debug, and its warning is one line. A retry that fails
// differently is logged in full again.
func TestRepeatedStartFailureLogsItsStderrOnce(t *testing.T) {
	counter := filepath.Join(t.TempDir(), "attempts")
	// From the fourth attempt on, the child writes one line more, first.
	script := `n=$(cat ` + counter + ` 2>/dev/null || echo 0); n=$((n+1)); echo $n > ` + counter + `
[ "$n" -ge 4 ] && echo "warning: a different start" >&2
echo "Error: Cannot find module '/srv/missing.js'" >&2
echo "    at Module._resolveFilename (node:internal/modules/cjs/loader:1207:15)" >&2
echo "Node.js v20.20.2" >&2
exit 1`
	logs := &logSink{}
	opts := fastOptions(logs)
	opts.MinBackoff = 5 * time.Millisecond
	u := New(shConfig("missing", script), opts)
	if err := startErr(t, u); !strings.Contains(err.Error(), "stderr| Error: Cannot find module") {
		t.Fatalf("the first attempt's error lacks its stderr: %v", err)
	}
	warnings := func() []map[string]string {
		return logs.find(func(r map[string]string) bool { return r["msg"] == "connect failed" })
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(warnings()) < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("%d retries in 30s, want 4", len(warnings()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	u.Close()

	lines := func(level string) int {
		return len(logs.find(func(r map[string]string) bool {
			return r["msg"] == "stderr" && r["level"] == level && r["stderr"] == "Error: Cannot find module '/srv/missing.js'"
		}))
	}
	// Attempts 1 and 4 at info; 2, 3, 5 and any later one at debug.
	if info, debug := lines("INFO"), lines("DEBUG"); info != 2 || debug < 3 {
		t.Errorf("the stack's first line was logged %d times at info and %d at debug; want 2 (attempts 1 and 4) and at least 3", info, debug)
	}
	w := warnings()
	for i, full := range []bool{false, false, true, false} { // attempts 2 to 5
		hasStack := strings.Contains(w[i]["err"], "stderr|")
		if hasStack != full || (!full && w[i]["stderr"] == "") {
			t.Errorf("warning of attempt %d: err %q, stderr %q; want the lines in full: %v", i+2, w[i]["err"], w[i]["stderr"], full)
		}
		if !strings.HasPrefix(w[i]["err"], `upstream "missing": connect: `) {
			t.Errorf("warning of attempt %d does not name the upstream: %q", i+2, w[i]["err"])
		}
	}
	if h := u.Health(); len(h.Stderr) == 0 {
		t.Errorf("Health lost the stderr lines: %+v", h)
	}
}
