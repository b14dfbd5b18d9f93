package sessions

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/internal/oauth/hydratest"
	"github.com/viewmux/viewmux/upstream/oauth/oauthtest"
)

// perUserLinServer is viewmux with the bench upstream up and a per-user
// upstream lin, handled by lin behind the test authorization server, its
// state in a temporary folder; extra follows the [server] table's
// state_dir (so it may add keys to that table before its own tables).
func perUserLinServer(t *testing.T, lin http.Handler, extra string) (*Server, *oauthtest.Server) {
	t.Helper()
	as := oauthtest.New(t, lin)
	return newBenchServer(t, newUpstreamServer(t, 1).http.URL, fmt.Sprintf(`
[upstreams.lin]
url = %q
oauth = true
credentials = "per-user"
[server]
state_dir = %q
`, as.URL(), t.TempDir())+extra), as
}

// discardHandler reads each request and answers nothing.
var discardHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) })

// connectServer is viewmux with a per-user upstream lin behind the test
// authorization server, and static tokens for alice and bob.
func connectServer(t *testing.T) (*Server, *oauthtest.Server) {
	t.Helper()
	return perUserLinServer(t, discardHandler, `[profiles.p]
[[auth.tokens]]
token = "tok-alice"
profiles = ["p"]
[[auth.tokens]]
token = "tok-bob"
profiles = ["p"]
`)
}

var ticketRE = regexp.MustCompile(`/oauth/connect/lin\?ticket=([A-Za-z0-9_-]+)`)

func connectGet(h http.Handler, path, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8931"+path, nil)
	req.Host = "127.0.0.1:8931"
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return httpDo(h, req)
}

func connectPost(h http.Handler, ticket, origin string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8931/oauth/connect/lin", strings.NewReader(url.Values{"ticket": {ticket}}.Encode()))
	req.Host = "127.0.0.1:8931"
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	return httpDo(h, req)
}

// TestConnectIsBounded is the attacker repeating /oauth/connect: 100,000
// link requests leave at most a handful of tickets (a new one replaces
// the oldest of the same identity), and repeated confirmations at most a
// handful of pending logins; memory does not grow with the repetitions.
func TestConnectIsBounded(t *testing.T) {
	s, as := connectServer(t)
	h := s.Handler()
	var tickets []string // the first, and the last five
	for i := range 100_000 {
		rec := connectGet(h, "/oauth/connect/lin", "tok-alice")
		if rec.Code != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, rec.Code, rec.Body)
		}
		if i == 0 || i >= 100_000-5 {
			tickets = append(tickets, ticketRE.FindStringSubmatch(rec.Body.String())[1])
		}
	}
	// Only the 4 newest tickets of the identity are held.
	for i, tk := range tickets {
		_, _, ok, err := s.Aggregator().ConnectTicket(tk)
		if want := i >= 2; ok != want || err != nil {
			t.Fatalf("ticket %d of the kept ones: held %v (%v), want %v: one identity holds 4 tickets", i, ok, err, want)
		}
	}
	var states []string
	for i := range 20 {
		m := ticketRE.FindStringSubmatch(connectGet(h, "/oauth/connect/lin", "tok-alice").Body.String())
		rec := connectPost(h, m[1], "http://127.0.0.1:8931")
		if rec.Code != http.StatusSeeOther {
			t.Fatalf("confirm %d: %d %s", i, rec.Code, rec.Body)
		}
		loc, _ := url.Parse(rec.Header().Get("Location"))
		states = append(states, loc.Query().Get("state"))
	}
	// Only the 4 newest pending logins are held: the callback of an older
	// one is a link not valid, whatever the cookie.
	for i, st := range states[:16] {
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8931/oauth/callback?state="+url.QueryEscape(st)+"&code=x", nil)
		if rec := httpDo(h, req); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "unknown, used or expired") {
			t.Fatalf("pending login %d of 20 still held: %d %s", i, rec.Code, rec.Body)
		}
	}
	// One client is registered with the upstream's authorization server
	// for all of them.
	as.Lock()
	registered := as.Registered
	as.Unlock()
	if registered != 1 {
		t.Fatalf("%d client registrations for 20 confirmations", registered)
	}
}

// TestConnectPages: asking for a link needs a bearer token; the ticket's
// page names the identity and the upstream and uses nothing; the form is
// refused from another origin and with another upstream's path; a ticket
// is good once; the callback needs the cookie of the browser that began
// the login.
func TestConnectPages(t *testing.T) {
	s, _ := connectServer(t)
	h := s.Handler()
	if rec := connectGet(h, "/oauth/connect/lin", ""); rec.Code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", rec.Code)
	}
	if rec := connectGet(h, "/oauth/connect/lin", "tok-nobody"); rec.Code != http.StatusUnauthorized {
		t.Fatalf("unknown token: %d", rec.Code)
	}
	if rec := connectGet(h, "/oauth/connect/up", "tok-alice"); rec.Code != http.StatusBadRequest {
		t.Fatalf("a shared upstream: %d", rec.Code)
	}
	rec := connectGet(h, "/oauth/connect/lin", "tok-alice")
	m := ticketRE.FindStringSubmatch(rec.Body.String())
	if rec.Code != http.StatusOK || m == nil || !strings.Contains(rec.Body.String(), "http://127.0.0.1:8931/oauth/connect/lin?ticket=") {
		t.Fatalf("link: %d %s", rec.Code, rec.Body)
	}
	ticket := m[1]
	for range 2 { // showing the page uses nothing
		page := connectGet(h, "/oauth/connect/lin?ticket="+ticket, "")
		if page.Code != http.StatusOK || !strings.Contains(page.Body.String(), "the static token token:") ||
			!strings.Contains(page.Body.String(), "upstream lin") || !strings.Contains(page.Body.String(), `method="post"`) {
			t.Fatalf("confirmation page: %d %s", page.Code, page.Body)
		}
		if page.Header().Get("Cache-Control") != "no-store" || page.Header().Get("X-Frame-Options") != "DENY" {
			t.Fatalf("confirmation page headers: %v", page.Header())
		}
	}
	if page := connectGet(h, "/oauth/connect/other?ticket="+ticket, ""); page.Code != http.StatusBadRequest {
		t.Fatalf("the ticket on another upstream's page: %d", page.Code)
	}
	if rec := connectPost(h, ticket, "https://evil.example"); rec.Code != http.StatusForbidden {
		t.Fatalf("the form from another origin: %d", rec.Code)
	}
	rec = connectPost(h, ticket, "http://127.0.0.1:8931")
	if rec.Code != http.StatusSeeOther || !strings.Contains(rec.Header().Get("Location"), "code_challenge_method=S256") {
		t.Fatalf("confirm: %d %v", rec.Code, rec.Header())
	}
	cookie := rec.Result().Cookies()
	if len(cookie) != 1 || !cookie[0].HttpOnly || cookie[0].SameSite != http.SameSiteLaxMode || cookie[0].Path != "/oauth/callback" {
		t.Fatalf("cookie: %+v", cookie)
	}
	if rec := connectPost(h, ticket, ""); rec.Code != http.StatusBadRequest {
		t.Fatalf("a used ticket: %d", rec.Code)
	}
	// The authorization server's answer, brought back without the cookie
	// (another browser), finishes nothing.
	loc, _ := url.Parse(rec.Header().Get("Location"))
	cb := connectGet(h, "/oauth/callback?state="+url.QueryEscape(loc.Query().Get("state"))+"&code=code:x", "")
	if cb.Code != http.StatusBadRequest || !strings.Contains(cb.Body.String(), "did not start it") {
		t.Fatalf("callback without the cookie: %d %s", cb.Code, cb.Body)
	}
}

// TestConnectLinkForOAuthToken: a caller with an [auth.oauth] access
// token (Ory Hydra's) gets a connect link for its subject; an expired
// or foreign token gets none.
func TestConnectLinkForOAuthToken(t *testing.T) {
	h := hydratest.Start(t, 0)
	id, secret := h.Client(t, "mcp:tools mcp:all", testAudience)
	tok := h.Token(t, id, secret, "mcp:all", testAudience)
	s, _ := perUserLinServer(t, discardHandler, `public_url = "http://127.0.0.1:8931"
`+oauthConfig(h.Issuer, oauthGrants))
	h2 := s.Handler()
	rec := connectGet(h2, "/oauth/connect/lin", tok)
	m := ticketRE.FindStringSubmatch(rec.Body.String())
	if rec.Code != http.StatusOK || m == nil {
		t.Fatalf("link for an OAuth token: %d %s", rec.Code, rec.Body)
	}
	if up, who, ok, _ := s.Aggregator().ConnectTicket(m[1]); !ok || up != "lin" || who != "oauth:"+id {
		t.Fatalf("the ticket is for %q %q %v, want oauth:%s", up, who, ok, id)
	}
	page := connectGet(h2, "/oauth/connect/lin?ticket="+m[1], "")
	if !strings.Contains(page.Body.String(), "the OAuth subject "+id) {
		t.Fatalf("confirmation page: %s", page.Body)
	}
	if rec := connectGet(h2, "/oauth/connect/lin", tok[:len(tok)-4]+"AAAA"); rec.Code != http.StatusUnauthorized {
		t.Fatalf("a forged token: %d", rec.Code)
	}
}
