package upstream

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/redact"
)

func TestHealthAfterAKilledChild(t *testing.T) {
	cfg := stdioConfig(t, "healthy", "serve")
	cfg.Env[envStderr] = "1"
	u := New(cfg, fastOptions(&logSink{}))
	if h := u.Health(); h.Connects != 0 || h.Restarts != 0 || h.LastError != nil || h.Transport != "" {
		t.Fatalf("Health before Start = %+v, want nothing recorded", h)
	}
	startUpstream(t, u)
	h := u.Health()
	if h.State != StateUp || h.Transport != "stdio" || h.Protocol == "" || h.Connects != 1 || h.Restarts != 0 || h.LastError != nil {
		t.Fatalf("Health after Start = %+v, want up over stdio, a protocol, 1 connect, 0 restarts, no error", h)
	}
	before := whoami(t, u)
	waitFor(t, 5*time.Second, "the child's stderr lines", func() bool {
		return slices.Contains(u.current().proc.tail.snapshot(), "hello from stderr")
	})
	if err := syscall.Kill(before.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "the reconnect", func() bool {
		h := u.Health()
		return h.State == StateUp && h.Connects == 2
	})
	h = u.Health()
	if h.Restarts != 1 {
		t.Errorf("Restarts = %d after one kill, want 1", h.Restarts)
	}
	if h.LastError == nil || !strings.Contains(h.LastError.Error(), `upstream "healthy": connection lost`) || !strings.Contains(h.LastError.Error(), "signal: killed") || h.LastErrorAt.IsZero() {
		t.Errorf("LastError = %v at %v, want the lost connection naming the upstream and the child's exit status", h.LastError, h.LastErrorAt)
	}
	if !slices.Contains(h.Stderr, "hello from stderr") {
		t.Errorf("Stderr = %q, want the dead child's lines", h.Stderr)
	}
}

func TestHealthOfAChildThatDiesAtStart(t *testing.T) {
	cfg := stdioConfig(t, "doomed", "serve")
	cfg.Command, cfg.Args = "sh", []string{"-c", `echo '<b>boom</b>' >&2; exit 3`}
	opts := fastOptions(&logSink{})
	opts.MinBackoff = time.Hour // one attempt only
	u := New(cfg, opts)
	t.Cleanup(func() { u.Close() })
	if err := u.Start(context.Background()); err == nil {
		t.Fatal("Start succeeded for a child that exits at once")
	}
	h := u.Health()
	if h.State == StateUp || h.Connects != 0 || h.Restarts != 0 || h.Transport != "" {
		t.Errorf("Health = %+v, want not up, no connect, no restart", h)
	}
	if h.LastError == nil || !strings.Contains(h.LastError.Error(), `upstream "doomed"`) || strings.Contains(h.LastError.Error(), "stderr|") {
		t.Errorf("LastError = %v, want the attempt's error naming the upstream, without the stderr lines in it", h.LastError)
	}
	if !slices.Equal(h.Stderr, []string{"<b>boom</b>"}) {
		t.Errorf("Stderr = %q, want the child's one line", h.Stderr)
	}
}

// TestHealthMasksConfiguredSecrets: a child that echoes an env value on
// stderr, as a plain line and in a JSON line, has it masked in the
// attempt's error (what check prints), in Health and in the logs.
func TestHealthMasksConfiguredSecrets(t *testing.T) {
	cfg := stdioConfig(t, "leaky", "serve")
	cfg.Command, cfg.Args = "sh", []string{"-c", `echo "starting with token $MYSECRET" >&2; echo "{\"msg\":\"key $MYSECRET\",\"n\":{\"k\":\"$MYSECRET\"}}" >&2; exit 3`}
	cfg.Env["MYSECRET"] = "hunter2-env-secret"
	cfg.Env["SHORT"] = "true"
	sink := &logSink{}
	opts := fastOptions(sink)
	opts.MinBackoff = time.Hour // one attempt only
	u := New(cfg, opts)
	t.Cleanup(func() { u.Close() })
	err := u.Start(context.Background())
	if err == nil {
		t.Fatal("Start succeeded for a child that exits at once")
	}
	if strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "starting with token REDACTED") {
		t.Errorf("Start's error = %v, want the stderr line with the env value masked", err)
	}
	h := u.Health()
	if len(h.Stderr) != 2 || h.Stderr[0] != "starting with token REDACTED" || strings.Contains(strings.Join(h.Stderr, "\n"), "hunter2") {
		t.Errorf("Stderr = %q, want the env value masked", h.Stderr)
	}
	if got := u.Redact("x hunter2-env-secret true http://h/?k=v"); got != "x REDACTED true http://h/?k=REDACTED" {
		t.Errorf("Redact = %q", got)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	logged := 0
	for _, r := range sink.records {
		line := fmt.Sprint(r)
		if strings.Contains(line, "hunter2") {
			t.Errorf("log record carries the env value: %s", line)
		}
		if r["msg"] == "stderr" && strings.Contains(line, "REDACTED") {
			logged++
		}
	}
	if logged != 2 {
		t.Errorf("%d stderr lines logged masked, want 2: %v", logged, sink.records)
	}
}

func TestHealthSecretValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  configs.Upstream
		want []string // each must be masked
		keep []string // each must not be
	}{
		{"env, headers and args", configs.Upstream{
			Env:     map[string]string{"A": "env-value-1", "B": "1"},
			Headers: map[string]string{"Authorization": "Bearer tok-abcdef", "X-Api-Key": "xkey-123456"},
			Args:    []string{"--api-key=arg-secret-1", "--token", "arg-secret-2", "--dir", "/some/where/over"},
		}, []string{"env-value-1", "tok-abcdef", "Bearer tok-abcdef", "xkey-123456", "arg-secret-1", "arg-secret-2"}, []string{"/some/where/over", "Bearer"}},
		{"password with a quote", configs.Upstream{URL: "http://user:ab'cd-PASSWORD-TAIL@127.0.0.1:1/mcp"},
			[]string{"ab'cd-PASSWORD-TAIL"}, []string{"127.0.0.1"}},
		{"escaped password", configs.Upstream{URL: "https://user:pa%20ss-word@host/mcp"},
			[]string{"pa%20ss-word", "pa ss-word"}, nil},
		{"token as user", configs.Upstream{URL: "https://ghp_TOKEN123@host/mcp"}, []string{"ghp_TOKEN123"}, nil},
		{"query", configs.Upstream{URL: "http://127.0.0.1:1/mcp?key=ab'cd-QUERYTAIL&flag=1&e=a%2Bbcdefg"},
			[]string{"ab'cd-QUERYTAIL", "a%2Bbcdefg", "a+bcdefg"}, []string{"flag=1"}},
		{"key in the path", configs.Upstream{URL: "https://actions.zapier.com/mcp/sk-ak-PATHSECRET/sse"},
			[]string{"sk-ak-PATHSECRET"}, []string{"/mcp/", "/sse", "actions.zapier.com"}},
		{"uuid in the path", configs.Upstream{URL: "https://mcp.composio.dev/composio/server/0f8e2c1a-9b7d-4c3e-a1f2-3d4c5b6a7e8f/mcp"},
			[]string{"0f8e2c1a-9b7d-4c3e-a1f2-3d4c5b6a7e8f"}, []string{"composio", "server", "streamable-http"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redact.NewSecrets(tc.cfg.SecretValues()...)
			for _, w := range tc.want {
				if got := s.Mask("<" + w + ">"); got != "<REDACTED>" {
					t.Errorf("Mask(%q) = %q, want it masked", w, got)
				}
			}
			for _, k := range tc.keep {
				if got := s.Mask(k); got != k {
					t.Errorf("Mask(%q) = %q, want it kept", k, got)
				}
			}
		})
	}
}
