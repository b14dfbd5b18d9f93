//go:build unix

package oauthclient

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// TestConformanceOAuthGateway runs the conformance suite's step-up client
// scenarios against viewmux as a gateway meets them: `viewmux serve` mounts
// the scenario's server as upstream x, and an operator logs in with the
// real `viewmux auth login --no-browser` (the scenario's authorization
// server approves by itself; the test follows the printed URL as a browser
// would). Nobody is at the gateway's keyboard, so a 403 insufficient_scope
// fails the call and shows on the status page and in `auth status` as
// "needs login (more scope: …)"; the operator's next `auth login` asks for
// the scopes granted before and the challenged ones (SEP-2350), and the
// running server's next call succeeds with the new token.
//
// auth/scope-step-up: the first login asks for the scope of the 401 (its
// server lets initialize through unauthenticated, so that challenge only
// comes from a later request), the call refused for mcp:write works after
// the second login. auth/scope-retry-limit: the upstream refuses whatever
// is granted; viewmux does not say a login would help, so the operator
// makes no second one, and the authorization server sees one attempt.
//
// This is the test of issue 30 §5: before it, the first login asked for
// the resource's scopes_supported, tools/list was refused, and a client
// of the gateway met "Tool not found: x__test-tool".
//
// The scenario's client command is a shell script that hands the server
// URL to the test through a FIFO and exits when the test closes another:
// the gateway, its login and its client are driven from here.
func TestConformanceOAuthGateway(t *testing.T) {
	t.Parallel() // beside TestConformanceOAuthClient, whose scenarios run one at a time
	itest.RequireConformance(t)
	bin := itest.MuxBinary(t)
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version+"/auth/scope-step-up", func(t *testing.T) {
			checks := runGatewayScenario(t, bin, "auth/scope-step-up", version, func(t *testing.T, g *gateway) {
				first := g.login(t)
				if !slices.Contains(first, "mcp:basic") {
					t.Errorf("the first login asked for %v, want the 401's scope mcp:basic", first)
				}
				g.start(t)
				env := &itest.PinsEnv{Mux: g.mux}
				if got := env.Listed(t); !mapHas(got, "x__test-tool") {
					t.Fatalf("tools listed after the login: %v\n%s", got, g.mux.Stderr())
				}
				if a := g.call(t); a.Msg.Error == nil || !strings.Contains(string(a.Raw), "viewmux auth login x") {
					t.Fatalf("tools/call with mcp:basic only: %s, want an error naming `viewmux auth login x`", a.Raw)
				}
				row, page := g.status(t)
				if !slices.Equal(row.MoreScope, []string{"mcp:write"}) || !strings.Contains(page, "needs login (more scope: mcp:write)") {
					t.Errorf("status after the refused call: more_scope %v, page %q; want mcp:write and \"needs login (more scope: mcp:write)\"", row.MoreScope, pageState(page))
				}
				if out := g.authStatus(t); !strings.Contains(out, "x: needs login (more scope: mcp:write)") {
					t.Errorf("auth status after the refused call:\n%s", out)
				}
				second := g.login(t)
				for _, want := range []string{"mcp:basic", "mcp:write"} {
					if !slices.Contains(second, want) {
						t.Errorf("the second login asked for %v, want the union of mcp:basic (granted) and mcp:write (challenged)", second)
						break
					}
				}
				if a := g.call(t); a.Msg.Error != nil || a.Msg.Result == nil {
					t.Fatalf("tools/call after the second login: %s\n%s", a.Raw, g.mux.Stderr())
				}
				if out := g.authStatus(t); strings.Contains(out, "more scope") {
					t.Errorf("auth status after the second login still wants more scope:\n%s", out)
				}
			})
			for _, c := range checks {
				if c.Status != "SUCCESS" && c.Status != "INFO" {
					t.Errorf("check %s: %s %s %s", c.ID, c.Status, c.Description, c.ErrorMessage)
				}
			}
		})
		t.Run(version+"/auth/scope-retry-limit", func(t *testing.T) {
			checks := runGatewayScenario(t, bin, "auth/scope-retry-limit", version, func(t *testing.T, g *gateway) {
				g.login(t)
				g.start(t)
				env := &itest.PinsEnv{Mux: g.mux}
				if got := env.Listed(t); len(got) != 0 {
					t.Fatalf("tools listed from an upstream that refuses its catalog: %v", got)
				}
				row, page := g.status(t)
				if len(row.MoreScope) != 0 || strings.Contains(page, "more scope") || !strings.Contains(row.LastError, "logging in again would not help") {
					t.Errorf("status of an upstream refusing a granted scope: %+v; page %q", row, pageState(page))
				}
				if out := g.authStatus(t); strings.Contains(out, "more scope") {
					t.Errorf("auth status asks for a login that cannot help:\n%s", out)
				}
			})
			attempts := 0
			for _, c := range checks {
				if c.ID == "scope-retry-auth-attempt" {
					attempts++
				}
				if c.Status == "FAILURE" {
					t.Errorf("check %s: %s %s", c.ID, c.Description, c.ErrorMessage)
				}
			}
			if attempts != 1 {
				t.Errorf("%d authorization attempts, want the operator's one", attempts)
			}
		})
	}
}

// gateway is one scenario's viewmux: its config, its server once started.
type gateway struct {
	bin, dir, cfgPath string
	mux               *itest.Mux
	rec               *itest.RecHTTP
}

// runGatewayScenario runs the conformance CLI's client scenario sc at
// version with a command that hands its server URL to drive, which runs
// the gateway against it; the scenario ends when drive returns. It
// returns the scenario's checks.
func runGatewayScenario(t *testing.T, bin, sc, version string, drive func(*testing.T, *gateway)) []itest.ConformanceCheck {
	dir := t.TempDir()
	urlFIFO, doneFIFO := filepath.Join(dir, "url"), filepath.Join(dir, "done")
	for _, p := range []string{urlFIFO, doneFIFO} {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	script := filepath.Join(dir, "client.sh")
	// The URL, and the protocol version the scenario's server speaks (the
	// CLI tells its client in MCP_CONFORMANCE_PROTOCOL_VERSION), which the
	// operator pins in the upstream's config as oauth-client does.
	body := "#!/bin/sh\nprintf '%s %s\\n' \"$1\" \"$MCP_CONFORMANCE_PROTOCOL_VERSION\" > " + urlFIFO + "\nexec cat " + doneFIFO + "\n"
	if err := os.WriteFile(script, []byte(body), 0o700); err != nil {
		t.Fatal(err)
	}
	outDir := filepath.Join(dir, "out")
	type result struct {
		out string
		err error
	}
	ran := make(chan result, 1)
	go func() {
		out, err := itest.RunConformanceQuiet(2*time.Minute, "client", "--command", script, "--scenario", sc,
			"--spec-version", version, "--timeout", "90000", "--output-dir", outDir)
		ran <- result{out, err}
	}()

	got := make(chan string, 1)
	go func() {
		b, _ := os.ReadFile(urlFIFO) // blocks until the script writes, EOF when it closes
		got <- strings.TrimSpace(string(b))
	}()
	var serverURL, protocol string
	select {
	case line := <-got:
		serverURL, protocol, _ = strings.Cut(line, " ")
	case r := <-ran:
		unblockFIFO(urlFIFO) // no script: release the reader
		t.Fatalf("the conformance CLI ended before running the client: %v\n%s", r.err, itest.Tail(r.out, 4000))
	}
	g := &gateway{bin: bin, dir: dir, cfgPath: filepath.Join(dir, "viewmux.toml")}
	cfg := "[server]\nstate_dir = " + itest.TomlString(filepath.Join(dir, "state")) + "\n\n" +
		"[upstreams.x]\nurl = " + itest.TomlString(serverURL) + "\noauth = true\n"
	if protocol != "" {
		cfg += "protocol = " + itest.TomlString(protocol) + "\n"
	}
	cfg += "\n[profiles.agent]\n"
	if err := os.WriteFile(g.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var r result
	func() {
		// The client exits however drive ends (a t.Fatal included): the
		// script's cat sees EOF once this opens and closes the FIFO.
		defer func() {
			opened := make(chan struct{})
			go func() {
				defer close(opened)
				if f, err := os.OpenFile(doneFIFO, os.O_WRONLY, 0); err == nil {
					f.Close()
				}
			}()
			select {
			case <-opened:
				r = <-ran
			case r = <-ran: // the CLI killed the script at its timeout: no reader will come
				if f, err := os.OpenFile(doneFIFO, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
					<-opened
					f.Close()
				}
			}
		}()
		drive(t, g)
	}()
	if t.Failed() {
		t.Logf("conformance CLI:\n%s\n--- viewmux stderr ---\n%s", itest.Tail(r.out, 4000), g.stderr())
	}
	checks := readClientChecks(t, outDir, sc)
	if r.err != nil || len(checks) == 0 {
		t.Fatalf("%s at %s through the gateway: %d checks (%v)\n%s", sc, version, len(checks), r.err, itest.Tail(r.out, 4000))
	}
	return checks
}

// unblockFIFO opens path for writing without blocking and closes it, so
// that a reader blocked opening it sees EOF.
func unblockFIFO(path string) {
	if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		f.Close()
	}
}

func (g *gateway) stderr() string {
	if g.mux == nil {
		return ""
	}
	return g.mux.Stderr()
}

// start serves the gateway's config.
func (g *gateway) start(t *testing.T) {
	t.Helper()
	cfg, err := os.ReadFile(g.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	g.mux = itest.StartMuxWith(t, itest.MuxOptions{Config: string(cfg), Dir: g.dir})
}

// call calls x__test-tool on a session of the agent profile.
func (g *gateway) call(t *testing.T) itest.RecAnswer {
	t.Helper()
	if g.rec == nil {
		g.rec = &itest.RecHTTP{S: itest.OpenRawSession(t, g.mux.URL()+"?profile=agent", nil)}
	}
	return g.rec.Do(t, "tools/call", `{"name":"x__test-tool","arguments":{}}`)
}

// login runs `viewmux auth login --no-browser x`, follows the URL it
// prints (the authorization server redirects to its loopback callback at
// once), and returns the scopes that URL asked for.
func (g *gateway) login(t *testing.T) []string {
	t.Helper()
	authURL, _ := itest.AuthLogin(t, g.bin, g.dir, g.cfgPath, "x")
	u, err := url.Parse(authURL)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(u.Query().Get("scope"))
}

// authStatus returns what `viewmux auth status` prints.
func (g *gateway) authStatus(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(g.bin, "auth", "status", "--config", g.cfgPath).CombinedOutput()
	if err != nil {
		t.Fatalf("auth status: %v\n%s", err, out)
	}
	return string(out)
}

// statusRow is what the test reads of upstream x on /status.json.
type statusRow struct {
	Name      string   `json:"name"`
	State     string   `json:"state"`
	MoreScope []string `json:"more_scope"`
	LastError string   `json:"last_error"`
}

// status returns x's row of /status.json and the status page's HTML.
func (g *gateway) status(t *testing.T) (statusRow, string) {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	get := func(path string) []byte {
		resp, err := hc.Get("http://" + g.mux.Addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return b
	}
	var st struct {
		Upstreams []statusRow `json:"upstreams"`
	}
	if err := json.Unmarshal(get("/status.json"), &st); err != nil {
		t.Fatalf("/status.json: %v", err)
	}
	for _, r := range st.Upstreams {
		if r.Name == "x" {
			return r, string(get("/"))
		}
	}
	t.Fatalf("/status.json has no upstream x")
	return statusRow{}, ""
}

func mapHas(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// pageState returns the state cell of the status page's row of x.
func pageState(page string) string {
	m := regexp.MustCompile(`(?s)data-name="x">.*?<td class="state[^"]*">([^<]*)</td>`).FindStringSubmatch(page)
	if m == nil {
		return "(no row of x)"
	}
	return m[1]
}
