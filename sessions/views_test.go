package sessions

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestOperationalViewsByGrant: /, /status.json, /metrics and /readyz show
// a token what its profiles see (its upstreams and profiles, its
// sessions, no config path), an admin token and a gateway without tokens
// all of it; /readyz names a down upstream only to an admin; an unknown
// profile's 404 names only the caller's own profiles.
func TestOperationalViewsByGrant(t *testing.T) {
	mine, theirs := newUpstreamServer(t, 2), newUpstreamServer(t, 2)
	s := newBenchServer(t, mine.http.URL, fmt.Sprintf(`
[upstreams.secretive]
url = %q
required = true
[profiles.mine]
deny_upstreams = ["secretive"]
[profiles.theirs]
upstreams = ["secretive"]
[[auth.tokens]]
token = "tok-mine"
profiles = ["mine"]
[[auth.tokens]]
token = "tok-theirs"
profiles = ["theirs"]
[[auth.tokens]]
token = "tok-admin"
profiles = ["mine"]
admin = true
`, theirs.http.URL))
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	get := func(path, token string) (int, string) {
		t.Helper()
		code, _, body := getStatus(t, hs.URL+path, http.Header{"Authorization": {"Bearer " + token}})
		return code, body
	}
	// A session of each profile.
	for _, tok := range []string{"tok-mine", "tok-theirs"} {
		req := newRequest("", "", initializeBody)
		req.Header.Set("Authorization", "Bearer "+tok)
		if rec := httpDo(s.Handler(), req); rec.Code != http.StatusOK {
			t.Fatalf("initialize with %s: %d %s", tok, rec.Code, rec.Body)
		}
	}

	code, body := get("/status.json", "tok-mine")
	if code != http.StatusOK || !strings.Contains(body, `"name": "up"`) || strings.Contains(body, "secretive") ||
		strings.Contains(body, `"theirs"`) || strings.Contains(body, "bench.toml") || !strings.Contains(body, `"bound_sessions": 1`) {
		t.Errorf("status.json for tok-mine (%d) shows another profile's upstream, profile, sessions or the config path:\n%s", code, body)
	}
	if code, body := get("/", "tok-mine"); code != http.StatusOK || strings.Contains(body, "secretive") || strings.Contains(body, "theirs") {
		t.Errorf("status page for tok-mine (%d) shows another profile's upstream or profile", code)
	}
	code, body = get("/status.json", "tok-admin")
	if code != http.StatusOK || !strings.Contains(body, "secretive") || !strings.Contains(body, `"theirs"`) || !strings.Contains(body, `"bound_sessions": 2`) {
		t.Errorf("status.json for the admin (%d) hides something:\n%.600s", code, body)
	}
	if code, body := get("/metrics", "tok-mine"); code != http.StatusOK || strings.Contains(body, `upstream="secretive"`) ||
		!strings.Contains(body, `upstream="up"`) || strings.Contains(body, "viewmux_sessions ") {
		t.Errorf("metrics for tok-mine (%d) show another profile's upstream or the gateway's session count", code)
	}
	if code, body := get("/metrics", "tok-admin"); code != http.StatusOK || !strings.Contains(body, `upstream="secretive"`) || !strings.Contains(body, "viewmux_sessions ") {
		t.Errorf("metrics for the admin (%d) hide something", code)
	}
	if code, _ := get("/metrics", "nope"); code != http.StatusUnauthorized {
		t.Errorf("metrics with an unknown token: %d, want 401", code)
	}

	// The required upstream goes down: its listener first, then the
	// connections viewmux holds (Close alone would wait for its GET stream).
	theirs.http.Listener.Close()
	theirs.http.CloseClientConnections()
	waitFor(t, func() bool {
		code, _ := get("/readyz", "tok-admin")
		return code == http.StatusServiceUnavailable
	}, "readyz to see the required upstream down")
	if code, body := get("/readyz", "tok-admin"); code != http.StatusServiceUnavailable || !strings.Contains(body, "secretive") {
		t.Errorf("readyz for the admin: %d %q, want the down upstream named", code, body)
	}
	for _, tok := range []string{"tok-mine", ""} {
		if code, body := get("/readyz", tok); code != http.StatusServiceUnavailable || strings.Contains(body, "secretive") {
			t.Errorf("readyz for %q: %d %q, want 503 without names", tok, code, body)
		}
	}

	req := newRequest("?profile=nope", "", initializeBody)
	req.Header.Set("Authorization", "Bearer tok-mine")
	if rec := httpDo(s.Handler(), req); rec.Code != http.StatusNotFound || strings.Contains(rec.Body.String(), "theirs") || !strings.Contains(rec.Body.String(), "known: mine") {
		t.Errorf("unknown profile with tok-mine: %d %s, want 404 naming only its profiles", rec.Code, rec.Body)
	}
}
