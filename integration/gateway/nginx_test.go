//go:build unix

package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// Helpers of fleet_test.go: a real nginx running the shipped
// configs/examples/deploy/nginx.conf, the upstream every replica shares,
// and the TypeScript SDK sessions of client/fleet.mjs.

// deployNginxConf returns the path of the shipped nginx configuration.
func deployNginxConf() string {
	return filepath.Join(itest.Harness.Dir, "..", "configs", "examples", "deploy", "nginx.conf")
}

// The addresses the shipped nginx.conf names, replaced by the test's ports.
const (
	deployListen   = "listen 127.0.0.1:8080;"
	deployReplicaA = "127.0.0.1:8931"
	deployReplicaB = "127.0.0.1:8932"
)

// requireNginx returns the nginx binary (PATH, then /usr/sbin, where
// Debian's nginx-light puts it). Without one the test skips, or fails under
// CI=true: .ci/run installs it.
func requireNginx(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true and nginx is not installed (apt-get install nginx-light; .ci/run does it)")
	}
	t.Skip("skipping: nginx is not installed (apt-get install nginx-light)")
	return ""
}

// nginxConf returns the shipped nginx.conf with its listen address and
// its two replicas' addresses replaced, and nothing else changed.
func nginxConf(t testing.TB, listen, a, b string) string {
	t.Helper()
	data, err := os.ReadFile(deployNginxConf())
	if err != nil {
		t.Fatal(err)
	}
	conf := string(data)
	for _, r := range []struct{ old, new string }{
		{deployListen, "listen " + listen + ";"},
		{deployReplicaA, a},
		{deployReplicaB, b},
	} {
		if !strings.Contains(conf, r.old) {
			t.Fatalf("%s no longer contains %q: update the test's template", deployNginxConf(), r.old)
		}
		conf = strings.ReplaceAll(conf, r.old, r.new)
	}
	return conf
}

// nginxProc is one nginx started by startNginx.
type nginxProc struct {
	Addr string
}

// URL returns the streamable HTTP endpoint through nginx.
func (n *nginxProc) URL() string { return "http://" + n.Addr + "/mcp" }

// startNginx runs nginx in the foreground through StartLoopbackServer (its
// own process group; SIGTERM, nginx's fast stop, then SIGKILL at cleanup;
// its output logged if the test failed), with conf(listen) as its
// configuration and every path it writes (pid, temporary files) in a
// temporary directory, so that it needs no root. It returns once nginx
// accepts connections.
func startNginx(t *testing.T, conf func(listen string) string) *nginxProc {
	t.Helper()
	bin := requireNginx(t)
	dir := t.TempDir()
	global := "daemon off; pid nginx.pid;"
	if os.Geteuid() == 0 {
		// Root's nginx would run its workers as nobody, who cannot enter
		// the test's private temporary directory.
		global += " user root;"
	}
	path := filepath.Join(dir, "nginx.conf")
	addr := itest.StartLoopbackServer(t, "nginx", func(addr string) *exec.Cmd {
		if err := os.WriteFile(path, []byte(conf(addr)), 0o600); err != nil {
			t.Fatal(err)
		}
		return exec.Command(bin, "-p", dir+"/", "-c", path, "-e", "stderr", "-g", global)
	}, func(addr string, exited <-chan struct{}) error {
		return itest.WaitAccepting(addr, exited, 10*time.Second)
	})
	return &nginxProc{Addr: addr}
}

// whoamiKey carries the X-Replica header of the request a tool call came
// in on.
type whoamiKey struct{}

// whoamiUpstream starts the upstream every replica of a fleet shares: an
// mcp-go streamable HTTP server whose tool whoami answers the X-Replica
// header of the request that carried the call. Each replica's config sets
// that header to its replica_id, so every call's result says which replica
// forwarded it.
func whoamiUpstream(t *testing.T) string {
	t.Helper()
	srv := server.NewMCPServer("whoami", "1.0.0", server.WithToolCapabilities(true))
	srv.AddTool(mcp.NewTool("whoami", mcp.WithDescription("names the viewmux replica that forwarded this call")),
		func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			who, _ := ctx.Value(whoamiKey{}).(string)
			return mcp.NewToolResultText(who), nil
		})
	ts := httptest.NewServer(server.NewStreamableHTTPServer(srv, server.WithHTTPContextFunc(
		func(ctx context.Context, r *http.Request) context.Context {
			return context.WithValue(ctx, whoamiKey{}, r.Header.Get("X-Replica"))
		})))
	t.Cleanup(ts.Close)
	return ts.URL + "/mcp"
}

// replicaConfig is the config of one replica of the fleet: its replica_id,
// and the shared upstream told who is calling.
func replicaConfig(id, upstreamURL string) string {
	return fmt.Sprintf("[server]\nreplica_id = %q\n\n[upstreams.who]\nurl = %q\nrequired = true\nheaders = { X-Replica = %q }\n", id, upstreamURL, id)
}

// fleetPeer is a running client/fleet.mjs: TypeScript SDK sessions driven
// command by command.
type fleetPeer struct {
	t      *testing.T
	in     io.WriteCloser
	lines  chan string
	stderr *itest.SyncBuffer
}

// fleetSession is one session's answer to open or reopen.
type fleetSession struct {
	Index     int       `json:"index"`
	SessionID string    `json:"sessionId"`
	Error     *fleetErr `json:"error"`
}

// fleetRound is one session's answer to round.
type fleetRound struct {
	Index     int       `json:"index"`
	SessionID string    `json:"sessionId"`
	OK        bool      `json:"ok"`
	Texts     []string  `json:"texts"`
	Tools     int       `json:"tools"`
	Error     *fleetErr `json:"error"`
	Ms        int       `json:"ms"`
}

type fleetErr struct {
	Name    string          `json:"name"`
	Code    json.RawMessage `json:"code"`
	Message string          `json:"message"`
}

func (e *fleetErr) String() string {
	if e == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%s (code %s): %s", e.Name, e.Code, e.Message)
}

// startFleetPeer starts client/fleet.mjs against url; it is ended at
// cleanup.
func startFleetPeer(t *testing.T, url string) *fleetPeer {
	t.Helper()
	itest.RequireNode(t)
	cmd := exec.Command(itest.Harness.Node, filepath.Join(itest.Harness.Dir, "client", "fleet.mjs"), url)
	cmd.Dir = itest.Harness.Dir
	cmd.Env = itest.EnvWithout(os.Environ(), itest.MarkerEnv)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &fleetPeer{t: t, in: in, lines: make(chan string, 4), stderr: &itest.SyncBuffer{}}
	cmd.Stderr = p.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	return p
}

// do sends one command and decodes its answer into out.
func (p *fleetPeer) do(cmd map[string]any, out any) {
	p.t.Helper()
	b, _ := json.Marshal(cmd)
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		p.t.Fatalf("fleet.mjs: %v\n%s", err, p.stderr.String())
	}
	select {
	case line, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("fleet.mjs exited on %s\n%s", b, p.stderr.String())
		}
		var fatal struct{ Fatal string }
		if json.Unmarshal([]byte(line), &fatal) == nil && fatal.Fatal != "" {
			p.t.Fatalf("fleet.mjs refused %s: %s\n%s", b, fatal.Fatal, p.stderr.String())
		}
		if err := json.Unmarshal([]byte(line), out); err != nil {
			p.t.Fatalf("fleet.mjs answered %s with %q: %v", b, line, err)
		}
	case <-time.After(90 * time.Second):
		p.t.Fatalf("fleet.mjs did not answer %s within 90s\n%s", b, p.stderr.String())
	}
}

func (p *fleetPeer) open(n int) []fleetSession {
	p.t.Helper()
	var out struct{ Sessions []fleetSession }
	p.do(map[string]any{"cmd": "open", "n": n}, &out)
	return out.Sessions
}

func (p *fleetPeer) reopen(only []int) []fleetSession {
	p.t.Helper()
	var out struct{ Sessions []fleetSession }
	p.do(map[string]any{"cmd": "reopen", "only": only}, &out)
	return out.Sessions
}

// round runs tools/list and calls × whoami on each session (only those
// listed, when only is not nil).
func (p *fleetPeer) round(calls int, only []int) []fleetRound {
	p.t.Helper()
	cmd := map[string]any{"cmd": "round", "calls": calls, "tool": "who__whoami"}
	if only != nil {
		cmd["only"] = only
	}
	var out struct{ Results []fleetRound }
	p.do(cmd, &out)
	return out.Results
}

// replicaOf returns the replica_id a session id starts with.
func replicaOf(sessionID string) string {
	id, _, _ := strings.Cut(sessionID, ".")
	return id
}

// TestDeployRouterConfig checks that the nginx configuration the
// Kubernetes manifest ships for its router is one nginx accepts (nginx -t).
// Its names exist only inside a cluster, so the resolver and the Service are
// pointed at loopback for the check; routing itself is what TestFleet runs
// with nginx.conf, whose location blocks the router repeats.
func TestDeployRouterConfig(t *testing.T) {
	bin := requireNginx(t)
	manifest, err := os.ReadFile(filepath.Join(itest.Harness.Dir, "..", "configs", "examples", "deploy", "k8s.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	conf := yamlLiteral(t, string(manifest), "nginx.conf")
	for _, name := range []string{"kube-dns.kube-system.svc.cluster.local", "viewmux.viewmux.svc.cluster.local"} {
		if !strings.Contains(conf, name) {
			t.Fatalf("the router's nginx.conf no longer names %s: update the test", name)
		}
		conf = strings.ReplaceAll(conf, name, "127.0.0.1")
	}
	dir := t.TempDir()
	conf = strings.ReplaceAll(conf, "/tmp/", dir+"/")
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-t", "-p", dir+"/", "-c", path, "-e", "stderr", "-g", "pid nginx.pid;").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "test is successful") {
		t.Fatalf("nginx -t on the router's nginx.conf: %v\n%s", err, out)
	}
}

// yamlLiteral returns the literal block scalar "key: |" of a YAML file,
// without its indentation.
func yamlLiteral(t *testing.T, yaml, key string) string {
	t.Helper()
	lines := strings.SplitAfter(yaml, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != key+": |" {
			continue
		}
		indent := strings.Repeat(" ", len(l)-len(strings.TrimLeft(l, " "))+2)
		var b strings.Builder
		for _, l := range lines[i+1:] {
			if strings.TrimSpace(l) != "" && !strings.HasPrefix(l, indent) {
				break
			}
			b.WriteString(strings.TrimPrefix(l, indent))
		}
		return b.String()
	}
	t.Fatalf("no %q block", key)
	return ""
}
