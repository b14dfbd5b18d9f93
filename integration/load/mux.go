package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/viewmux/viewmux/integration/internal/gobuild"
)

// muxProc is the viewmux child process.
type muxProc struct {
	cmd     *exec.Cmd
	base    string // http://127.0.0.1:PORT
	logPath string
	exited  chan struct{} // closed when the process has been waited for
	waitErr error         // valid after exited is closed
}

// buildMux builds ./cmd/viewmux of the module this program belongs to into
// dir and returns the binary's path and what it was built from (see
// treeState).
func buildMux(ctx context.Context, dir string) (string, string, error) {
	root, err := gobuild.Root(ctx)
	if err != nil {
		return "", "", fmt.Errorf("%w, or pass --viewmux PATH", err)
	}
	bin, err := gobuild.Build(ctx, root, "./cmd/viewmux", filepath.Join(dir, "viewmux"))
	if err != nil {
		return "", "", err
	}
	return bin, treeState(ctx, root), nil
}

// treeState says which commit the working tree at root is on, and whether
// files outside integration/ differ from it (then the binary is that commit
// plus those changes). Builds may not stamp VCS information (-buildvcs=false),
// so this is the only record of what was measured.
func treeState(ctx context.Context, root string) string {
	head, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "working tree (no git commit known)"
	}
	s := "working tree at commit " + strings.TrimSpace(string(head))
	dirty, err := exec.CommandContext(ctx, "git", "-C", root, "status", "--porcelain", "--untracked-files=no", "--", ".", ":!integration").Output()
	if err == nil && len(bytes.TrimSpace(dirty)) > 0 {
		s += " + uncommitted changes outside integration/"
	}
	return s
}

// binVersion returns the commit line of `bin version`, for a binary the
// load program did not build.
func binVersion(ctx context.Context, bin string) string {
	out, err := exec.CommandContext(ctx, bin, "version").Output()
	if err != nil {
		return bin + " (version unknown)"
	}
	for line := range strings.Lines(string(out)) {
		if c, ok := strings.CutPrefix(strings.TrimSpace(line), "commit "); ok {
			return bin + " at commit " + c
		}
	}
	return bin
}

// muxConfig mounts the upstream as "up" and defines the read-only profile
// "ro". No profile is called "default", so a request naming no profile gets
// the unfiltered view. It also mounts the upstream a second time for the
// large-result series (quietUpstreamConfig).
func muxConfig(upURL string) string {
	return fmt.Sprintf(`# written by integration/load
[upstreams.up]
url = %q
max_message_bytes = "300MiB" # the large-result series goes up to --big's sizes

[profiles.ro]
read_only = true
`, upURL) + quietUpstreamConfig(upURL)
}

// startMux writes the config into dir/config/, starts bin serving it on a
// free loopback port and waits until GET /readyz answers 200. A port taken
// between choosing it and the child binding it is retried.
//
// The config gets a directory of its own: viewmux watches the config's
// directory for hot reload, and its log, written on every denied call,
// would otherwise wake that watcher on every line.
func startMux(ctx context.Context, bin, dir, upURL, logLevel string) (*muxProc, error) {
	cfgDir := filepath.Join(dir, "config")
	if err := os.Mkdir(cfgDir, 0o700); err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(cfgDir, "viewmux.toml")
	if err := os.WriteFile(cfgPath, []byte(muxConfig(upURL)), 0o600); err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := range 3 {
		addr, err := freeLoopbackAddr()
		if err != nil {
			return nil, err
		}
		m, err := spawnMux(bin, cfgPath, addr, filepath.Join(dir, fmt.Sprintf("viewmux-%d.log", attempt)), logLevel)
		if err != nil {
			return nil, err
		}
		err = m.waitReady(ctx, 30*time.Second)
		if err == nil {
			return m, nil
		}
		m.stop()
		lastErr = err
		if !strings.Contains(m.logTail(4096), "address already in use") {
			break
		}
	}
	return nil, lastErr
}

func spawnMux(bin, cfgPath, addr, logPath, logLevel string) (*muxProc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(bin, "serve", "--config", cfgPath, "--listen", addr, "--log-level", logLevel)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Env = append(os.Environ(), "VIEWMUX_CONFIG=") // only --config counts
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	m := &muxProc{cmd: cmd, base: "http://" + addr, logPath: logPath, exited: make(chan struct{})}
	go func() {
		m.waitErr = cmd.Wait()
		close(m.exited)
	}()
	return m, nil
}

func (m *muxProc) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	hc := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-m.exited:
			return fmt.Errorf("viewmux exited before it was ready (%v):\n%s", m.waitErr, m.logTail(4096))
		case <-ctx.Done():
			return context.Cause(ctx)
		default:
		}
		resp, err := hc.Get(m.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("viewmux not ready after %v (last: %v):\n%s", limit, statusOrErr(resp, err), m.logTail(4096))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func statusOrErr(resp *http.Response, err error) string {
	if err != nil {
		return err.Error()
	}
	return resp.Status
}

// stop ends the child: SIGTERM, then SIGKILL after a grace period. It is
// safe to call more than once.
func (m *muxProc) stop() {
	if m == nil {
		return
	}
	select {
	case <-m.exited:
		return
	default:
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(5 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
}

// alive reports an error when the child has exited.
func (m *muxProc) alive() error {
	select {
	case <-m.exited:
		return fmt.Errorf("viewmux exited during the run (%v):\n%s", m.waitErr, m.logTail(4096))
	default:
		return nil
	}
}

// logTail returns the last n bytes of the child's log, leaving out the
// line viewmux logs for every denied call.
func (m *muxProc) logTail(n int) string {
	raw, err := os.ReadFile(m.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	var b []byte
	for line := range bytes.Lines(raw) {
		if !bytes.Contains(line, []byte(`msg="tools/call refused"`)) {
			b = append(b, line...)
		}
	}
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// freeLoopbackAddr returns a loopback address that was free a moment ago.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}
