package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// requireChromium returns Debian's chromium. Without it the test skips,
// or fails under CI=true: .ci/run installs it.
func requireChromium(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true and chromium is not installed (apt-get install chromium; .ci/run does it)")
	}
	t.Skip("skipping: chromium is not installed (apt-get install chromium)")
	return ""
}

// newBrowser starts a headless chromium with a fresh profile and returns
// a tab's context; the browser is stopped at cleanup.
func newBrowser(t *testing.T, chromium string) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc() // waits for the browser to exit
	})
	// Start the browser now, so a failure to launch is reported as such.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	return ctx
}

// browse runs steps in the tab, bounded by timeout.
func browse(t *testing.T, tab context.Context, timeout time.Duration, steps ...chromedp.Action[chromedp.Void]) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, timeout)
	defer cancel()
	return chromedp.Do(ctx, steps...)
}

// read runs one action in the tab, bounded by timeout, and returns its value.
func read[T any](tab context.Context, timeout time.Duration, a chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(tab, timeout)
	defer cancel()
	return chromedp.Run(ctx, a)
}

// upstreamRow is what the page shows of one upstream.
type upstreamRow struct {
	state, tools, restarts, lastError string
}

// readUpstream reads the row of upstream name from the page in tab.
func readUpstream(t *testing.T, tab context.Context, name string) (upstreamRow, error) {
	t.Helper()
	sel := fmt.Sprintf(`tr.upstream[data-name=%q] `, name)
	var r upstreamRow
	var err error
	for _, f := range []struct {
		td  string
		to  *string
		all bool // textContent: the closed <details> too
	}{{"td.state", &r.state, false}, {"td.tools", &r.tools, false}, {"td.restarts", &r.restarts, false}, {"td.lasterror", &r.lastError, true}} {
		a := chromedp.Text(chromedp.CSS(sel + f.td))
		if f.all {
			a = chromedp.TextContent(chromedp.CSS(sel + f.td))
		}
		if *f.to, err = read(tab, 5*time.Second, a); err != nil {
			return r, fmt.Errorf("upstream %s, %s: %w", name, f.td, err)
		}
	}
	return r, nil
}

// readProfile reads the tools and sessions of profile name.
func readProfile(t *testing.T, tab context.Context, name string) (tools, sessions string, err error) {
	t.Helper()
	sel := fmt.Sprintf(`tr.profile[data-name=%q] `, name)
	if tools, err = read(tab, 5*time.Second, chromedp.Text(chromedp.CSS(sel+"td.tools"))); err != nil {
		return "", "", err
	}
	sessions, err = read(tab, 5*time.Second, chromedp.Text(chromedp.CSS(sel+"td.sessions")))
	return tools, sessions, err
}

// TestStatusPageInABrowser loads the status page of a real viewmux with two
// demo upstreams and a child that dies at start printing markup, in
// headless chromium: the rows show what runs, the markup is text, and
// after one child is killed the page, refreshing itself (never navigated
// again), shows the restart and the error.
func TestStatusPageInABrowser(t *testing.T) {
	t.Parallel()
	itest.RequireProc(t)
	chromium := requireChromium(t)
	evil := `[upstreams.evil]
command = "sh"
args = ["-c", "echo '<script>document.title=\"pwned\"</script><img src=x onerror=\"document.title=1\">' >&2; exit 3"]
`
	// alpha runs the demo server, or hangs while the file hold exists.
	hold := filepath.Join(t.TempDir(), "hold")
	alpha := fmt.Sprintf(`[upstreams.alpha]
command = "sh"
args = ['-c', 'if [ -e "$0" ]; then exec sleep 1000; fi; exec "$1" demo-server --name alpha', %q, %q]
connect_timeout = "6s"
`, hold, itest.MuxBinary(t))
	m := itest.StartMux(t, alpha+itest.DemoUpstream(t, "beta")+evil+`
[profiles.all]
[profiles.readonly]
read_only = true
`)
	tab := newBrowser(t, chromium)
	page := "http://" + m.Addr + "/"
	if err := browse(t, tab, 20*time.Second,
		chromedp.Navigate(page),
		chromedp.WaitVisible(chromedp.ID("upstreams")),
	); err != nil {
		t.Fatalf("loading %s: %v\n--- viewmux stderr ---\n%s", page, err, m.Stderr())
	}

	title, err := read(tab, 5*time.Second, chromedp.Title())
	if err != nil {
		t.Fatal(err)
	}
	scripts, err := read(tab, 5*time.Second, chromedp.Evaluate[[]string](`[...document.querySelectorAll("script, img")].map(e => e.outerHTML)`))
	if err != nil {
		t.Fatal(err)
	}
	if title != "viewmux status" || len(scripts) != 0 {
		t.Errorf("title %q, script and img elements %q: the child's stderr became markup", title, scripts)
	}

	for _, name := range []string{"alpha", "beta"} {
		r, err := readUpstream(t, tab, name)
		if err != nil {
			t.Fatalf("upstream %s: %v", name, err)
		}
		if r.state != "up" || r.tools != "7" || r.restarts != "0" || r.lastError != "none" {
			t.Errorf("upstream %s: %+v, want up with 7 tools, no restart, no error", name, r)
		}
	}
	r, err := readUpstream(t, tab, "evil")
	if err != nil {
		t.Fatal(err)
	}
	if r.state == "up" || !strings.Contains(r.lastError, `upstream "evil"`) || !strings.Contains(r.lastError, `<script>document.title="pwned"</script><img src=x onerror="document.title=1">`) {
		t.Errorf("upstream evil: %+v, want not up, its error, and its stderr line as text", r)
	}
	for _, tc := range []struct{ name, tools string }{{"all", "14"}, {"readonly", "8"}} {
		tools, sessions, err := readProfile(t, tab, tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if tools != tc.tools || sessions != "0" {
			t.Errorf("profile %s: %s tools, %s sessions; want %s and 0", tc.name, tools, sessions, tc.tools)
		}
	}

	// Kill alpha's child while its restart is held: the new child hangs
	// (never answers initialize) as long as the hold file exists.
	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	pid := itest.DemoChild(t, m.Marker, m.Stderr, "alpha", 10*time.Second)
	markDocument(t, tab, "killed")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// No navigation from here on: only the page's own refresh can change
	// what the tab shows, and each wait below needs a reloaded document.
	r = waitRefreshed(t, tab, m, "killed", "alpha restarting after the kill", func(r upstreamRow) bool {
		return r.state == "restarting" && r.restarts == "1" && strings.Contains(r.lastError, `upstream "alpha": connection lost`)
	})
	if !strings.Contains(r.lastError, "killed") {
		t.Errorf("alpha's last error %q does not say the child was killed", r.lastError)
	}
	markDocument(t, tab, "released")
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	// The held attempt times out (connect_timeout), the next one is up.
	waitRefreshed(t, tab, m, "released", "alpha up again", func(r upstreamRow) bool {
		return r.state == "up" && r.restarts == "2" && r.tools == "7" && strings.Contains(r.lastError, "timed out")
	})
	if b, err := readUpstream(t, tab, "beta"); err != nil || b.state != "up" || b.restarts != "0" {
		t.Errorf("beta after alpha's kill: %+v, %v; want up, no restart", b, err)
	}
}

// markDocument marks the tab's current document with the attribute
// data-NAME: a document the page's refresh loaded does not carry it.
func markDocument(t *testing.T, tab context.Context, name string) {
	t.Helper()
	if err := browse(t, tab, 5*time.Second, chromedp.SetAttributeValue(chromedp.CSS("body"), "data-"+name, "1")); err != nil {
		t.Fatal(err)
	}
}

// waitRefreshed waits, up to 40s, until the tab holds a document loaded
// after markDocument(mark) whose alpha row satisfies ok, and returns that
// row.
func waitRefreshed(t *testing.T, tab context.Context, m *itest.Mux, mark, what string, ok func(upstreamRow) bool) upstreamRow {
	t.Helper()
	var seen []upstreamRow
	deadline := time.Now().Add(40 * time.Second)
	for {
		marked, err := read(tab, 5*time.Second, chromedp.Evaluate[[]string](`[...document.querySelectorAll("body[data-`+mark+`]")].map(e => e.tagName)`))
		if err != nil {
			t.Fatal(err)
		}
		if len(marked) == 0 {
			r, err := readUpstream(t, tab, "alpha")
			if err == nil && ok(r) {
				t.Logf("%s: %+v; rows seen before: %+v", what, r, seen)
				return r
			}
			if err == nil && !slices.Contains(seen, r) {
				seen = append(seen, r)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page never showed %s; document refreshed: %v; rows seen: %+v\n--- viewmux stderr ---\n%s", what, len(marked) == 0, seen, m.Stderr())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestStatusPageNeedsAToken checks GET / against a real viewmux with
// [[auth.tokens]]: 401 without the token, and the page with it, in plain
// HTTP and in chromium sending the header.
func TestStatusPageNeedsAToken(t *testing.T) {
	chromium := requireChromium(t)
	m := itest.StartMux(t, itest.DemoUpstream(t, "alpha")+`
[profiles.all]
[[auth.tokens]]
token = "status-token"
profiles = ["all"]
`)
	page := "http://" + m.Addr + "/"
	for _, tc := range []struct {
		auth string
		code int
	}{{"", http.StatusUnauthorized}, {"Bearer wrong", http.StatusUnauthorized}, {"Bearer status-token", http.StatusOK}} {
		req, err := http.NewRequest(http.MethodGet, page, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || strings.Contains(string(body), "alpha") != (tc.code == http.StatusOK) {
			t.Errorf("GET / with Authorization %q: %d %.200s; want %d", tc.auth, resp.StatusCode, body, tc.code)
		}
	}

	tab := newBrowser(t, chromium)
	if _, err := chromedp.Call(tab, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(tab, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": "Bearer status-token"}}); err != nil {
		t.Fatal(err)
	}
	if err := browse(t, tab, 20*time.Second, chromedp.Navigate(page)); err != nil {
		t.Fatalf("loading %s with the token: %v", page, err)
	}
	state, err := read(tab, 5*time.Second, chromedp.Text(chromedp.CSS(`tr.upstream[data-name="alpha"] td.state`)))
	if err != nil {
		t.Fatal(err)
	}
	if state != "up" {
		t.Errorf("alpha is %q in the browser, want up", state)
	}
}
