package lifecycle

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// grantConfig mounts the demo server (read-only: list_notes, read_note,
// slow_count, echo; the others write) behind a readonly profile limited to
// 60 calls a minute, and the token tok-ro whose default it is.
func grantConfig(t *testing.T, tokens string) string {
	return itest.DemoUpstream(t, "one") + `
[profiles.readonly]
read_only = true
[profiles.readonly.rate]
calls_per_minute = 60

[profiles.all]
` + tokens
}

const grantTokens = `
[[auth.tokens]]
token = "tok-ro"
profiles = ["readonly", "all"]
`

// reloadMux writes text as m's config, sends SIGHUP and waits until the
// reload is logged.
func reloadMux(t *testing.T, m *itest.Mux, text string) {
	t.Helper()
	logs := strings.Count(m.Stderr(), "config reloaded")
	if err := os.WriteFile(filepath.Join(m.Dir, "viewmux.toml"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := m.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for strings.Count(m.Stderr(), "config reloaded") == logs {
		if time.Now().After(deadline) {
			t.Fatalf("no reload logged\n--- stderr ---\n%s", m.Stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// grantWS is a websocket session opened with a bearer token, which keeps
// the error its connection ended with.
type grantWS struct {
	*itest.RecStream
	closed chan error // the read error that ended the connection
}

func openGrantWS(t *testing.T, m *itest.Mux, token string) *grantWS {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	conn, _, err := websocket.Dial(dctx, "ws://"+m.Addr+"/ws", &websocket.DialOptions{
		Subprotocols: []string{"mcp"}, HTTPHeader: map[string][]string{"Authorization": {"Bearer " + token}}})
	if err != nil {
		cancel()
		t.Fatalf("websocket with token %s: %v", token, err)
	}
	conn.SetReadLimit(16 << 20)
	g := &grantWS{RecStream: &itest.RecStream{Door: "ws", In: make(chan []byte, 64), Send: func(b []byte) error {
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		defer wcancel()
		return conn.Write(wctx, websocket.MessageText, b)
	}}, closed: make(chan error, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(g.In)
		for {
			_, b, err := conn.Read(ctx)
			if err != nil {
				g.closed <- err
				return
			}
			g.In <- b
		}
	}()
	t.Cleanup(func() {
		conn.Close(websocket.StatusNormalClosure, "")
		cancel()
		itest.DrainUntil(g.In, done)
	})
	g.Initialize(t)
	return g
}

// grantTools lists the tools of a session.
func grantTools(t *testing.T, c *itest.RecStream) []string {
	t.Helper()
	a := c.Do(t, "tools/list", `{}`)
	var res struct {
		Result struct {
			Tools []struct{ Name string } `json:"tools"`
		} `json:"result"`
	}
	if err := json.Unmarshal(a.Raw, &res); err != nil || a.Msg.Error != nil {
		t.Fatalf("%s: tools/list: %s", c.Door, a.Raw)
	}
	var out []string
	for _, tl := range res.Result.Tools {
		out = append(out, tl.Name)
	}
	slices.Sort(out)
	return out
}

// TestReloadGrants runs the case the issue measured against the real
// binary: a readonly token's websocket across a comment-only edit (SIGHUP)
// keeps its view, its refusal of a destructive tool and its rate limit;
// a reload that removes the token closes the websocket with 1008, and a
// new connection with it is refused.
func TestReloadGrants(t *testing.T) {
	base := grantConfig(t, grantTokens)
	m := itest.StartMux(t, base)
	ws := openGrantWS(t, m, "tok-ro")
	want := []string{"one__echo", "one__list_notes", "one__read_note", "one__slow_count"}
	if got := grantTools(t, ws.RecStream); !slices.Equal(got, want) {
		t.Fatalf("the readonly token's websocket lists %q, want %q", got, want)
	}

	reloadMux(t, m, "# reviewed\n"+base)
	if got := grantTools(t, ws.RecStream); !slices.Equal(got, want) {
		t.Fatalf("after a comment-only edit the websocket lists %q, want %q", got, want)
	}
	if a := ws.Do(t, "tools/call", `{"name":"one__delete_note","arguments":{"name":"x"}}`); a.Msg.Error == nil || a.Msg.Error.Code != -32601 {
		t.Fatalf("a destructive tool after the reload: %s, want -32601", a.Raw)
	}
	limited := false
	for range 61 {
		if a := ws.Do(t, "tools/call", `{"name":"one__echo","arguments":{"text":"hi"}}`); a.Msg.Error != nil {
			if a.Msg.Error.Code != -32029 {
				t.Fatalf("echo: %s", a.Raw)
			}
			limited = true
			break
		}
	}
	if !limited {
		t.Fatal("61 calls in a minute went through a limit of 60 after the reload")
	}

	reloadMux(t, m, strings.Replace(base, `token = "tok-ro"`, `token = "tok-new"`, 1))
	select {
	case err := <-ws.closed:
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, "config changed") {
			t.Fatalf("the removed token's websocket ended with %v, want a 1008 close naming the config change", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the removed token's websocket is still open")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, "ws://"+m.Addr+"/ws", &websocket.DialOptions{
		Subprotocols: []string{"mcp"}, HTTPHeader: map[string][]string{"Authorization": {"Bearer tok-ro"}}})
	if err == nil || resp == nil || resp.StatusCode != 401 {
		t.Fatalf("a new websocket with the removed token: %v %v, want 401", err, resp)
	}
}

// TestReloadEndsStdio checks `serve --stdio`: a reload that removes its
// profile ends it with a non-zero exit and an error naming the profile.
func TestReloadEndsStdio(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "viewmux.toml")
	base := grantConfig(t, "")
	if err := os.WriteFile(cfgPath, []byte(base), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(itest.MuxBinary(t), "serve", "--stdio", "--profile", "readonly", "--config", cfgPath)
	cmd.Dir = dir
	cmd.Env = itest.EnvWithout(os.Environ(), "VIEWMUX_CONFIG")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 2 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr itest.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		if t.Failed() {
			t.Logf("--- viewmux --stdio stderr ---\n%s", stderr.String())
		}
	})
	c := &itest.RecStream{Door: "stdio", In: make(chan []byte, 64), Send: func(b []byte) error {
		_, err := stdin.Write(append(b, '\n'))
		return err
	}}
	go func() {
		defer close(c.In)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			c.In <- append([]byte(nil), sc.Bytes()...)
		}
		exited <- cmd.Wait()
	}()
	c.Initialize(t)
	if got := grantTools(t, c); !slices.Equal(got, []string{"one__echo", "one__list_notes", "one__read_note", "one__slow_count"}) {
		t.Fatalf("stdio lists %q", got)
	}
	removed := strings.Replace(base, "[profiles.readonly]\nread_only = true\n[profiles.readonly.rate]\ncalls_per_minute = 60\n", "", 1)
	if err := os.WriteFile(cfgPath, []byte(removed), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(15 * time.Second)
drain:
	for {
		select {
		case _, ok := <-c.In:
			if !ok {
				break drain
			}
		case <-deadline:
			t.Fatal("viewmux --stdio still running after its profile was removed")
		}
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 {
			t.Fatalf("viewmux --stdio exited with %v after its profile was removed, want a non-zero status", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("viewmux --stdio still running after its profile was removed")
	}
	for _, w := range []string{"stdio: session ended: the config changed", `"readonly"`} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("stderr does not say %q:\n%s", w, stderr.String())
		}
	}
}
