//go:build unix

package gateway

import (
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
	"github.com/viewmux/viewmux/upstream/oauth/oauthtest"
)

// A browser of the fleet: it knows one origin, server.public_url, and a
// load balancer sends each of its requests to the replica the test names
// for that step, keeping the Host, as nginx would.

// fleetStatePublic is the host of the fleet's server.public_url: only the
// balancer reaches it.
const fleetStatePublic = "127.0.0.2:9" // loopback (no https needed), and nothing listens there

// fleetStateLB routes requests to fleetStatePublic to the replica of the
// moment; every other request goes where it was going.
type fleetStateLB struct {
	mu sync.Mutex
	to string
}

func (lb *fleetStateLB) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host != fleetStatePublic {
		return http.DefaultTransport.RoundTrip(req)
	}
	lb.mu.Lock()
	to := lb.to
	lb.mu.Unlock()
	out := req.Clone(req.Context())
	out.URL.Host, out.Host = to, fleetStatePublic
	return http.DefaultTransport.RoundTrip(out)
}

// fleetStateBrowser keeps cookies (of the public origin), shows
// redirects without following them, and goes through the balancer.
type fleetStateBrowser struct {
	c  *http.Client
	lb *fleetStateLB
}

func newFleetStateBrowser(t *testing.T) *fleetStateBrowser {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	lb := &fleetStateLB{}
	return &fleetStateBrowser{lb: lb, c: &http.Client{Jar: jar, Timeout: 20 * time.Second, Transport: lb,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// via sends the browser's next requests to r.
func (b *fleetStateBrowser) via(r *fleetStateReplica) {
	b.lb.mu.Lock()
	b.lb.to = r.Addr
	b.lb.mu.Unlock()
}

func (b *fleetStateBrowser) do(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

func (b *fleetStateBrowser) get(t *testing.T, u string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b.do(t, req)
}

// fleetStateLink is a connect link of the upstream rug.
var fleetStateLink = regexp.MustCompile(`https?://\S+/oauth/connect/rug\?ticket=[A-Za-z0-9_-]+`)

// link asks replica r for the agent's connect link of rug.
func (r *fleetStateReplica) link(t *testing.T) string {
	t.Helper()
	resp, body := puGet(t, &http.Client{Timeout: 10 * time.Second}, "http://"+r.Addr+"/oauth/connect/rug", map[string]string{"Authorization": "Bearer " + fleetStateAgent})
	link := fleetStateLink.FindString(body)
	if resp.StatusCode != http.StatusOK || link == "" {
		t.Fatalf("%s: connect link of rug: %d %s", r.ID, resp.StatusCode, body)
	}
	return link
}

// connect takes the browser through link as sub: the confirmation page
// on open, its form on confirm, the authorization server, and the
// callback on callback. It returns the callback URL.
func (b *fleetStateBrowser) connect(t *testing.T, link, sub string, open, confirm, callback *fleetStateReplica) string {
	t.Helper()
	b.via(open)
	resp, page := b.get(t, link)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "upstream rug") {
		t.Fatalf("confirmation page on %s: %d\n%s", open.ID, resp.StatusCode, page)
	}
	lu, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	b.via(confirm)
	req, _ := http.NewRequest(http.MethodPost, "http://"+fleetStatePublic+"/oauth/connect/rug",
		strings.NewReader(url.Values{"ticket": {lu.Query().Get("ticket")}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://"+fleetStatePublic)
	resp, body := b.do(t, req)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("confirm on %s: %d %s\n%s", confirm.ID, resp.StatusCode, body, confirm.Stderr())
	}
	au, err := resp.Location()
	if err != nil {
		t.Fatal(err)
	}
	if q := au.Query(); q.Get("redirect_uri") != "http://"+fleetStatePublic+"/oauth/callback" {
		t.Fatalf("authorization URL from %s: %s", confirm.ID, au)
	}
	q := au.Query()
	q.Set(oauthtest.LoginAsParam, sub)
	au.RawQuery = q.Encode()
	resp, _ = b.get(t, au.String())
	cb, err := resp.Location()
	if err != nil {
		t.Fatalf("authorization server: %d", resp.StatusCode)
	}
	b.via(callback)
	resp, page = b.get(t, cb.String())
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "Connected") {
		t.Fatalf("callback on %s: %d\n%s\n%s", callback.ID, resp.StatusCode, page, callback.Stderr())
	}
	return cb.String()
}

// fleetStateIssued returns every token the authorization server issued
// or was shown: the access tokens calls carried, and the codes and
// refresh tokens of its token requests.
func fleetStateIssued(as *oauthtest.Server) []string {
	as.Lock()
	defer as.Unlock()
	var out []string
	for _, c := range as.Calls {
		out = append(out, c.Token)
	}
	for _, f := range as.TokenForms {
		for _, k := range []string{"refresh_token", "code"} {
			if v := f.Get(k); v != "" {
				out = append(out, v)
			}
		}
	}
	return out
}

// fleetStateEncoded matches runs that may be base64 or hex of something.
var fleetStateEncoded = regexp.MustCompile(`[A-Za-z0-9+/_-]{16,}={0,2}`)

// fleetStateReveals returns which of secrets text contains, as it is or
// inside a run of base64 or hex: a token stored merely encoded is a
// token stored.
func fleetStateReveals(text string, secrets []string) []string {
	views := []string{text}
	for _, run := range fleetStateEncoded.FindAllString(text, -1) {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
			if b, err := enc.DecodeString(run); err == nil {
				views = append(views, string(b))
			}
		}
		if b, err := hex.DecodeString(run); err == nil {
			views = append(views, string(b))
		}
	}
	var found []string
	for _, s := range secrets {
		for _, v := range views {
			if strings.Contains(v, s) {
				found = append(found, s)
				break
			}
		}
	}
	return found
}

// operatorLogin runs `viewmux auth login --no-browser rug` with r's
// config, as the operator, and approves its URL at the authorization
// server (which needs no person: it redirects to the command's loopback
// callback at once).
func (r *fleetStateReplica) operatorLogin(t *testing.T) {
	t.Helper()
	itest.AuthLogin(t, itest.MuxBinary(t), r.Dir, r.CfgPath, "rug")
}
