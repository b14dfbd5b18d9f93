package sessions

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/sessions/status"
	"github.com/viewmux/viewmux/upstream/oauth"
	"github.com/viewmux/viewmux/upstream/oauth/oauthtest"
)

// hostileUpstream is an upstream whose child writes markup and a URL with
// secrets to stderr and exits: its error and stderr lines reach the page.
const hostileUpstream = `
[upstreams.evil]
command = "sh"
args = ["-c", "echo '<script>alert(1)</script><img src=x onerror=alert(2)> https://user:pw-secret@example.com/x?key=q-secret' >&2; exit 3"]
`

// fetchStatus fetches path from hs with the given headers.
func fetchStatus(t *testing.T, hs *httptest.Server, method, path string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, hs.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// rowOf returns the HTML of the table row whose data-name is name.
func rowOf(t *testing.T, page, class, name string) string {
	t.Helper()
	re := regexp.MustCompile(`(?s)<tr class="` + class + `" data-name="` + regexp.QuoteMeta(name) + `">.*?</tr>`)
	row := re.FindString(page)
	if row == "" {
		t.Fatalf("no %s row for %q in the page:\n%s", class, name, page)
	}
	return row
}

func TestStatusPage(t *testing.T) {
	up := newUpstreamServer(t, 6)
	s := newBenchServer(t, up.http.URL, hostileUpstream+`
[upstreams.up.toolsets]
first = ["tool_0000", "tool_0001"]
[profiles.readonly]
read_only = true
[profiles.all]
[profiles.everything]
[profiles.dyn]
dynamic_toolsets = true
`)
	h := s.Handler()
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)

	id := openSession(t, h, "?profile=all")
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"up__tool_0001","arguments":{"query":"q"}}}`
	if w := post(h, "?profile=all", id, call); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"ok"`) {
		t.Fatalf("tools/call: %d %s", w.Code, w.Body)
	}

	// An upstream of the config may still come up (a rebuild) while the
	// page is made: the page shows a snapshot from this span.
	snapBefore := s.agg.Snapshot().Version
	resp, page := fetchStatus(t, hs, http.MethodGet, "/", nil)
	snapAfter := s.agg.Snapshot().Version
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy = %q, want default-src 'none'", csp)
	}
	if !strings.Contains(page, `<meta http-equiv="refresh" content="5">`) {
		t.Error("the page does not refresh itself")
	}

	t.Run("server", func(t *testing.T) {
		for _, want := range []string{"replica <b>" + s.cfg.Server.ReplicaID + "</b>", "config <code>bench.toml</code>", "version <b>dev</b>"} {
			if !strings.Contains(page, want) {
				t.Errorf("page lacks %q", want)
			}
		}
		shown := false
		for v := snapBefore; v <= snapAfter; v++ {
			shown = shown || strings.Contains(page, fmt.Sprintf("snapshot <b>%d</b>", v))
		}
		if !shown {
			t.Errorf("page shows no snapshot between %d and %d", snapBefore, snapAfter)
		}
	})
	t.Run("upstream that is up", func(t *testing.T) {
		row := rowOf(t, page, "upstream", "up")
		for _, want := range []string{`class="state up">up<`, `class="n tools">6<`, "2025-11-25", "http", `class="n restarts">0<`, "(1 calls)", "<code>" + up.http.URL + "</code>"} {
			if !strings.Contains(row, want) {
				t.Errorf("row lacks %q:\n%s", want, row)
			}
		}
	})
	t.Run("hostile stderr is text, and secrets are redacted", func(t *testing.T) {
		row := rowOf(t, page, "upstream", "evil")
		if !strings.Contains(row, `&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;`) {
			t.Errorf("the child's stderr line is not shown escaped:\n%s", row)
		}
		if !strings.Contains(row, `upstream &#34;evil&#34;`) {
			t.Errorf("the error does not name the upstream:\n%s", row)
		}
		if strings.Contains(row, "<code>sh -c") {
			t.Errorf("the command's arguments are shown:\n%s", row)
		}
		for _, bad := range []string{"<script", "<img", "pw-secret", "q-secret"} {
			if strings.Contains(page, bad) {
				t.Errorf("page contains %q", bad)
			}
		}
		if !strings.Contains(row, "REDACTED") {
			t.Errorf("the URL in the stderr line is not redacted:\n%s", row)
		}
		if strings.Contains(row, `class="state up"`) {
			t.Errorf("a child that exits at start is shown up:\n%s", row)
		}
	})
	t.Run("profiles", func(t *testing.T) {
		for _, tc := range []struct{ name, tools, sessions string }{
			{"readonly", "3", "0"}, {"all", "6", "1"}, {"everything", "6", "0"},
		} {
			row := rowOf(t, page, "profile", tc.name)
			if !strings.Contains(row, `class="n tools">`+tc.tools+`<`) || !strings.Contains(row, `class="n sessions">`+tc.sessions+`<`) {
				t.Errorf("profile %s: want %s tools and %s sessions:\n%s", tc.name, tc.tools, tc.sessions, row)
			}
			if !strings.Contains(row, "up ") || !strings.Contains(row, "("+tc.tools+" tools)") {
				t.Errorf("profile %s: no token estimate for upstream up:\n%s", tc.name, row)
			}
		}
		if row := rowOf(t, page, "profile", "dyn"); !strings.Contains(row, "dynamic: a session starts with 7 tools, ~") {
			t.Errorf("profile dyn: its initial view (the 4 tools outside every toolset and viewmux's 3) is not shown:\n%s", row)
		}
		if row := rowOf(t, page, "profile", "all"); strings.Contains(row, "dynamic") {
			t.Errorf("profile all is shown dynamic:\n%s", row)
		}
		if !regexp.MustCompile(`(?s)<td>#\d+ <span class="meta">[0-9a-f]{8}</span></td><td>all, dyn, everything</td><td class="n sessions">1</td>`).MatchString(page) {
			t.Errorf("profiles all, dyn (its ceiling) and everything are not shown sharing one filter with one session:\n%s", page)
		}
	})
	t.Run("sessions by door", func(t *testing.T) {
		if !strings.Contains(page, "mcp <b>1</b>") {
			t.Errorf("sessions by door:\n%s", page)
		}
	})

	t.Run("status.json", func(t *testing.T) {
		resp, body := fetchStatus(t, hs, http.MethodGet, "/status.json", nil)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("GET /status.json: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		var st status.Data
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		if len(st.Upstreams) != 2 || st.Upstreams[0].Name != "evil" || st.Upstreams[1].Name != "up" {
			t.Fatalf("upstreams = %+v", st.Upstreams)
		}
		evil, good := st.Upstreams[0], st.Upstreams[1]
		if good.State != "up" || good.Tools != 6 || good.Calls != 1 || good.P50 == "" || good.P99 == "" || good.Connects != 1 {
			t.Errorf("up = %+v", good)
		}
		if evil.State == "up" || evil.LastError == "" || len(evil.Stderr) != 1 || !strings.HasPrefix(evil.Stderr[0], "<script>") || strings.Contains(body, "secret") {
			t.Errorf("evil = %+v", evil)
		}
		if st.Sessions["mcp"] != 1 || st.FilterCount < 2 || len(st.Profiles) != 4 {
			t.Errorf("sessions %v, filter instances %d, profiles %+v", st.Sessions, st.FilterCount, st.Profiles)
		}
	})
}

// TestStatusPageIsRootOnly checks that the page answers only GET / (and
// HEAD): every other unknown path stays 404.
func TestStatusPageIsRootOnly(t *testing.T) {
	up := newUpstreamServer(t, 1)
	hs := httptest.NewServer(newBenchServer(t, up.http.URL, "").Handler())
	t.Cleanup(hs.Close)
	for _, tc := range []struct {
		method, path string
		code         int
	}{
		{http.MethodGet, "/", 200},
		{http.MethodHead, "/", 200},
		{http.MethodGet, "/status.json", 200},
		{http.MethodGet, "/index.html", 404},
		{http.MethodGet, "/favicon.ico", 404},
		{http.MethodGet, "/status", 404},
		{http.MethodGet, "/status.json/x", 404},
		{http.MethodPost, "/", 405},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			resp, body := fetchStatus(t, hs, tc.method, tc.path, nil)
			if resp.StatusCode != tc.code {
				t.Errorf("%d, want %d", resp.StatusCode, tc.code)
			}
			if tc.code != 200 && strings.Contains(body, "viewmux status") {
				t.Errorf("the status page answered %s %s", tc.method, tc.path)
			}
		})
	}
}

// TestStatusPageIsProtected checks the page and its JSON like /metrics:
// a bearer token once tokens are configured, and Host and Origin always.
func TestStatusPageIsProtected(t *testing.T) {
	up := newUpstreamServer(t, 1)
	hs := httptest.NewServer(newBenchServer(t, up.http.URL, `
[profiles.all]
[[auth.tokens]]
token = "tok-a"
profiles = ["all"]
`).Handler())
	t.Cleanup(hs.Close)
	for _, path := range []string{"/", "/status.json"} {
		for _, tc := range []struct {
			name string
			hdr  map[string]string
			code int
		}{
			{"no token", nil, http.StatusUnauthorized},
			{"wrong token", map[string]string{"Authorization": "Bearer tok-b"}, http.StatusUnauthorized},
			{"token", map[string]string{"Authorization": "Bearer tok-a"}, http.StatusOK},
			{"token, foreign Host", map[string]string{"Authorization": "Bearer tok-a", "Host": "evil.example"}, http.StatusForbidden},
			{"token, foreign Origin", map[string]string{"Authorization": "Bearer tok-a", "Origin": "https://evil.example"}, http.StatusForbidden},
		} {
			t.Run(path+" "+tc.name, func(t *testing.T) {
				resp, body := fetchStatus(t, hs, http.MethodGet, path, tc.hdr)
				if resp.StatusCode != tc.code {
					t.Errorf("%d, want %d", resp.StatusCode, tc.code)
				}
				if shown := strings.Contains(body, "tool_0000") || strings.Contains(body, `"upstreams"`) || strings.Contains(body, "Upstreams"); shown != (tc.code == http.StatusOK) {
					t.Errorf("status %d, status shown %v:\n%.300s", resp.StatusCode, shown, body)
				}
			})
		}
	}
}

func TestLatencyWindow(t *testing.T) {
	var l latencies
	if _, _, n := l.quantiles("up"); n != 0 {
		t.Fatalf("no calls: n = %d", n)
	}
	// 5,000 calls: only the last latencyWindow (1..1024 ms, in a
	// scrambled order) count.
	for i := range 5000 - latencyWindow {
		l.observe("up", time.Hour+time.Duration(i))
	}
	for i := range latencyWindow {
		l.observe("up", time.Duration((i*7)%latencyWindow+1)*time.Millisecond)
	}
	l.observe("other", time.Second)
	p50, p99, n := l.quantiles("up")
	if n != latencyWindow || p50 != 512*time.Millisecond || p99 != 1014*time.Millisecond {
		t.Errorf("p50 %s, p99 %s over %d calls; want 512ms, 1.014s over %d", p50, p99, n, latencyWindow)
	}
	l.retain(map[string]bool{"other": true})
	if _, _, n := l.quantiles("up"); n != 0 {
		t.Errorf("a removed upstream kept %d calls", n)
	}
	if p50, _, n := l.quantiles("other"); n != 1 || p50 != time.Second {
		t.Errorf("other: p50 %s over %d calls", p50, n)
	}
}

// BenchmarkStatusPage is what a client reloading GET / in a loop costs
// viewmux per request (1,000 tools, three profiles, a full latency
// window). What each request would cost if the per-profile part (token
// estimates) were not cached per snapshot is status.BenchmarkProfiles.
func BenchmarkStatusPage(b *testing.B) {
	up := newUpstreamServer(b, 1000)
	s := newBenchServer(b, up.http.URL, "[profiles.a]\n[profiles.b]\nread_only = true\n[profiles.c]\ndeny = [\"up__tool_00*\"]\n")
	for i := range latencyWindow {
		s.metrics.observeCall("up", false, nil, time.Duration(i)*time.Microsecond)
	}
	b.Run("GET /", func(b *testing.B) {
		h := s.Handler()
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
		req.Host = "127.0.0.1"
		b.ReportAllocs()
		for b.Loop() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				b.Fatalf("GET /: %d", rec.Code)
			}
		}
	})
}

// leakyUpstreams are upstreams whose configured secrets would reach the
// page through their error, their stderr lines or their target, one per
// leak a review found: an env value a child echoes on stderr, a URL
// password and a query value with a single quote in them (which once ended
// the redaction's URL scan), and a key in a URL's path (Zapier, Composio).
const leakyUpstreams = `
[upstreams.leaky]
command = "sh"
args = ["-c", "echo \"starting with token $$MYSECRET\" >&2; echo \"{\\\"msg\\\":\\\"json $$MYSECRET\\\"}\" >&2; exit 3"]
env = { MYSECRET = "hunter2-env-secret" }
[upstreams.password]
url = "http://user:ab'cd-PASSWORD-TAIL@127.0.0.1:1/mcp"
[upstreams.query]
url = "http://127.0.0.1:1/mcp?key=ab'cd-QUERYTAIL"
[upstreams.path]
url = "http://127.0.0.1:1/mcp/sk-ak-PATHSECRET/sse"
[upstreams.unparsable]
command = "sh"
args = ["-c", "echo 'dial https://user:pa%zz-PCTSECRET@host/x failed' >&2; exit 3"]
`

// TestStatusPageHidesConfiguredSecrets: no byte of a configured secret
// reaches GET / or GET /status.json, however the upstream repeats it.
func TestStatusPageHidesConfiguredSecrets(t *testing.T) {
	up := newUpstreamServer(t, 1)
	s := newBenchServer(t, up.http.URL, leakyUpstreams)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	secrets := []string{"hunter2", "env-secret", "PASSWORD-TAIL", "cd-PASSWORD", "QUERYTAIL", "cd-QUERY", "PATHSECRET", "sk-ak", "PCTSECRET", "pa%zz"}

	_, page := fetchStatus(t, hs, http.MethodGet, "/", nil)
	_, body := fetchStatus(t, hs, http.MethodGet, "/status.json", nil)
	for _, sec := range secrets {
		for name, text := range map[string]string{"GET /": page, "GET /status.json": body} {
			if strings.Contains(text, sec) {
				t.Errorf("%s shows %q:\n%s", name, sec, text)
			}
		}
	}
	var st status.Data
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	rows := make(map[string]status.UpstreamRow)
	for _, r := range st.Upstreams {
		rows[r.Name] = r
		if all := r.Target + r.LastError + strings.Join(r.Stderr, "\n"); strings.Contains(all, "ab'cd") {
			t.Errorf("upstream %s shows ab'cd: %+v", r.Name, r)
		}
	}
	// The secrets are hidden, not the upstreams' state: each row still
	// says what failed.
	leaky := rows["leaky"]
	if leaky.LastError == "" || len(leaky.Stderr) != 2 || leaky.Stderr[0] != "starting with token REDACTED" || leaky.Stderr[1] != `{"msg":"json REDACTED"}` {
		t.Errorf("leaky = %+v, want its error and its stderr lines with the env value masked", leaky)
	}
	if u := rows["unparsable"]; len(u.Stderr) != 1 || u.Stderr[0] != "dial https://user:REDACTED@host/x failed" {
		t.Errorf("unparsable = %+v, want the password of the URL that does not parse masked", u)
	}
	for _, name := range []string{"password", "query", "path"} {
		r := rows[name]
		if r.Target != "http://127.0.0.1:1" || r.LastError == "" || r.State == "up" {
			t.Errorf("%s = %+v, want target http://127.0.0.1:1 and its error", name, r)
		}
		if !strings.Contains(page, "<code>http://127.0.0.1:1</code>") {
			t.Errorf("GET / does not show %s's target as http://127.0.0.1:1", name)
		}
	}
	t.Logf("path's error: %s", rows["path"].LastError)
	t.Logf("query's error: %s", rows["query"].LastError)
	t.Logf("password's error: %s", rows["password"].LastError)
}

// TestStatusPageTellsNodeUpstreamsApart: two upstreams with the same
// command show different targets on the page, and a configured secret in
// an argument is masked.
func TestStatusPageTellsNodeUpstreamsApart(t *testing.T) {
	up := newUpstreamServer(t, 1)
	s := newBenchServer(t, up.http.URL, `
[upstreams.a]
command = "sh"
args = ["/nonexistent/alpha-server.sh"]
[upstreams.b]
command = "sh"
args = ["/nonexistent/beta-server.sh"]
[upstreams.c]
command = "sh"
args = ["/nonexistent/hunter2secretvalue.sh"]
env = { KEY = "hunter2secretvalue" }
`)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	_, page := fetchStatus(t, hs, http.MethodGet, "/", nil)
	for name, want := range map[string]string{"a": "<code>sh /nonexistent/alpha-server.sh</code>", "b": "<code>sh /nonexistent/beta-server.sh</code>"} {
		if row := rowOf(t, page, "upstream", name); !strings.Contains(row, want) {
			t.Errorf("upstream %s's row lacks %s:\n%s", name, want, row)
		}
	}
	if strings.Contains(page, "hunter2") {
		t.Errorf("the page shows a configured secret:\n%s", rowOf(t, page, "upstream", "c"))
	}
}

// TestStatusPageSummarizesHTMLErrors is issue 18, item 5: a server that
// answers with an HTML error page filled the narrow "last error" column.
// The upstream package leaves out a body labelled text/html; this one is
// labelled text/plain, so its markup reaches the error. The cell shows a
// summary with no markup, cut short; the whole text is in its title and
// in /status.json.
func TestStatusPageSummarizesHTMLErrors(t *testing.T) {
	html := "<!DOCTYPE html><html><head><title>501 Not Implemented</title><style>body{font-family:sans-serif}</style></head>" +
		"<body><h1>Not Implemented</h1><p>" + strings.Repeat("The server does not support the action requested. ", 8) + "</p></body></html>"
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusNotImplemented)
		io.WriteString(w, html)
	}))
	t.Cleanup(broken.Close)
	up := newUpstreamServer(t, 1)
	s := newBenchServer(t, up.http.URL, fmt.Sprintf("[upstreams.broken]\nurl = %q\ntransport = \"sse\"\n", broken.URL+"/sse"))
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)

	_, body := fetchStatus(t, hs, http.MethodGet, "/status.json", nil)
	var st status.Data
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	var full string
	for _, r := range st.Upstreams {
		if r.Name == "broken" {
			full = r.LastError
		}
	}
	if !strings.Contains(full, "501 Not Implemented") || !strings.Contains(full, "<title>") {
		t.Fatalf("/status.json's last_error %q lacks the status and the body's start", full)
	}

	_, page := fetchStatus(t, hs, http.MethodGet, "/", nil)
	row := rowOf(t, page, "upstream", "broken")
	m := regexp.MustCompile(`<summary class="err" title="([^"]*)">([^<]*)</summary>`).FindStringSubmatch(row)
	if m == nil {
		t.Fatalf("no error summary in the row:\n%s", row)
	}
	title, summary := m[1], m[2]
	if !strings.Contains(summary, "501 Not Implemented") || !strings.Contains(summary, `upstream &#34;broken&#34;`) {
		t.Errorf("summary %q lacks the upstream or the status", summary)
	}
	if strings.Contains(summary, "&lt;") || strings.Contains(summary, "<") {
		t.Errorf("summary %q shows markup", summary)
	}
	if n := len([]rune(summary)); n > status.MaxErrorShown+20 { // escaping adds a little
		t.Errorf("summary is %d characters, want about %d at most: %q", n, status.MaxErrorShown, summary)
	}
	if !strings.Contains(title, "&lt;title&gt;501 Not Implemented&lt;/title&gt;") {
		t.Errorf("the title does not hold the whole text, escaped: %q", title)
	}
}

// TestStatusPageSessionCountsAgree is issue 18, item 5: the profile table
// and the filter table counted different totals, the filter count did not
// match its rows, and sessions whose client had exited stayed counted
// with nothing saying why.
func TestStatusPageSessionCountsAgree(t *testing.T) {
	up := newUpstreamServer(t, 3)
	s := newBenchServer(t, up.http.URL, "[profiles.all]\n[profiles.readonly]\nread_only = true\n")
	h := s.Handler()
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	plain := openSession(t, h, "?profile=all")
	narrowed := openSession(t, h, "?profile=all&tools=up__tool_0001")
	openSession(t, h, "?profile=readonly")

	status := func() status.Data {
		_, body := fetchStatus(t, hs, http.MethodGet, "/status.json", nil)
		var st status.Data
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := status()
	byProfile, byFilter := st.OtherProfileSessions, st.OtherFilterSessions
	for _, p := range st.Profiles {
		byProfile += p.Sessions
	}
	for _, f := range st.Filters {
		byFilter += f.Sessions
	}
	if st.Bound != 3 || byProfile != 3 || byFilter != 3 {
		t.Errorf("bound %d, by profile %d, by filter %d; want 3 each: %+v", st.Bound, byProfile, byFilter, st)
	}
	if st.OtherFilterSessions != 1 || st.Filters[0].Sessions != 1 {
		t.Errorf("the narrowed session is not counted apart from profile all's filter: %+v", st)
	}
	if st.FilterCount != len(st.Filters)+st.OtherFilters || st.OtherFilters < 1 {
		t.Errorf("%d filters held, %d rows and %d others", st.FilterCount, len(st.Filters), st.OtherFilters)
	}
	_, page := fetchStatus(t, hs, http.MethodGet, "/", nil)
	held := regexp.MustCompile(`<p id="filters">(\d+) held: the (\d+) that profiles resolve to, one row each, and (\d+) other`).FindStringSubmatch(page)
	if rows := strings.Count(page, `<tr class="filter">`); held == nil || held[2] != fmt.Sprint(rows) || held[1] != fmt.Sprint(st.FilterCount) {
		t.Errorf("the page's filter count %q does not match its %d rows", held, rows)
	}

	// A client that exits without DELETE leaves its session open until
	// session_idle_timeout: the page counts it idle and says when it goes.
	s.mu.Lock()
	s.sessions[plain].life.seen.Store(time.Now().Add(-10 * time.Minute).UnixNano())
	s.mu.Unlock()
	st = status()
	if st.Idle != 1 || st.IdleTimeout != "30m0s" || st.NextExpiry != "20m0s" {
		t.Errorf("idle %d, timeout %q, next expiry %q; want 1, 30m0s, 20m0s", st.Idle, st.IdleTimeout, st.NextExpiry)
	}
	if _, page := fetchStatus(t, hs, http.MethodGet, "/", nil); !strings.Contains(page, "session_idle_timeout (30m0s)") || !strings.Contains(page, "the longest idle expires in 20m0s") {
		t.Errorf("the page does not explain idle expiry:\n%s", page)
	}

	// A DELETE ends a session at once: nothing stays counted.
	for id, query := range map[string]string{plain: "?profile=all", narrowed: "?profile=all&tools=up__tool_0001"} {
		req := newRequest(query, id, "")
		req.Method = http.MethodDelete
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("DELETE: %d %s", rec.Code, rec.Body)
		}
	}
	if st = status(); st.Bound != 1 || st.Open != 1 || st.Idle != 0 {
		t.Errorf("after two DELETEs: bound %d, open %d, idle %d; want 1, 1, 0", st.Bound, st.Open, st.Idle)
	}
}

// TestStatusPageNeedsLogin: an oauth upstream without a token is "needs
// login", its error naming the command to run, and the server runs.
func TestStatusPageNeedsLogin(t *testing.T) {
	up := newUpstreamServer(t, 1)
	extra := fmt.Sprintf("[upstreams.lin]\nurl = \"http://127.0.0.1:1/mcp\"\noauth = true\n[server]\nstate_dir = %q\n", t.TempDir())
	s := newBenchServer(t, up.http.URL, extra)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	_, body := fetchStatus(t, hs, http.MethodGet, "/status.json", nil)
	var st status.Data
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range st.Upstreams {
		switch r.Name {
		case "lin":
			found = true
			if r.State != "needs login" || !strings.Contains(r.LastError, "run `viewmux auth login lin`") {
				t.Errorf("lin = %+v, want needs login naming the command", r)
			}
		case "up":
			if r.State != "up" {
				t.Errorf("the other upstream is %q, want up", r.State)
			}
		}
	}
	if !found {
		t.Fatalf("no row for lin:\n%s", body)
	}
	_, page := fetchStatus(t, hs, http.MethodGet, "/", nil)
	if row := rowOf(t, page, "upstream", "lin"); !strings.Contains(row, "needs login") {
		t.Errorf("GET / row for lin does not say needs login:\n%s", row)
	}
}

// loggedInLin logs in to an oauth upstream lin, the bench upstream behind
// the test authorization server, its tokens kept in a temporary folder.
// It returns lin's client, the login, and serve, which starts viewmux on
// the bench upstream and lin over HTTP.
func loggedInLin(t *testing.T) (*oauth.Client, *oauth.Record, func() (*Server, *httptest.Server)) {
	t.Helper()
	up := newUpstreamServer(t, 1)
	as := oauthtest.New(t, up.http.Config.Handler)
	dir := t.TempDir()
	c := oauth.New("lin", as.URL(), configs.UpstreamOAuth{StateDir: dir}, oauth.Options{})
	rec, err := c.Login(context.Background(), oauth.LoginOptions{RedirectURI: "http://127.0.0.1:1/cb", Authorize: oauth.AutoApprove(nil)})
	if err != nil {
		t.Fatal(err)
	}
	serve := func() (*Server, *httptest.Server) {
		extra := fmt.Sprintf("[upstreams.lin]\nurl = %q\noauth = true\n[server]\nstate_dir = %q\n", as.URL(), dir)
		s := newBenchServer(t, up.http.URL, extra)
		hs := httptest.NewServer(s.Handler())
		t.Cleanup(hs.Close)
		return s, hs
	}
	return c, rec, serve
}

// TestOAuthTokensAreMasked: the tokens of a logged-in oauth upstream are
// masked like configured secrets in what viewmux shows (Redact: the status
// page's errors, check, audit), and the page never shows them.
func TestOAuthTokensAreMasked(t *testing.T) {
	_, rec, serve := loggedInLin(t)
	s, hs := serve()
	_, body := fetchStatus(t, hs, http.MethodGet, "/status.json", nil)
	if !regexp.MustCompile(`"name": "lin",[^}]*"state": "up"`).MatchString(body) {
		t.Fatalf("lin is not up:\n%s", body)
	}
	_, page := fetchStatus(t, hs, http.MethodGet, "/", nil)
	for _, tok := range []string{rec.AccessToken, rec.RefreshToken} {
		if got := s.Aggregator().Redact("upstream said: bad token " + tok); strings.Contains(got, tok) {
			t.Errorf("Redact leaves a token: %s", got)
		}
		if strings.Contains(body+page, tok) {
			t.Error("the status page shows a token")
		}
	}
}
