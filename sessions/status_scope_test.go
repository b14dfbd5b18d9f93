package sessions

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/sessions/status"
)

// TestStatusPageMoreScope: an oauth upstream a call was refused for scope
// says which scope the next login adds: more_scope in /status.json, and
// "needs login (more scope: …)" on the page, after its state while it is
// up (its other calls work).
func TestStatusPageMoreScope(t *testing.T) {
	c, _, serve := loggedInLin(t)
	// What the upstream's 403 insufficient_scope records.
	if err := c.WantScopes([]string{"mcp:tools", "mcp:write"}); err != nil {
		t.Fatal(err)
	}
	_, hs := serve()
	_, body := fetchStatus(t, hs, http.MethodGet, "/status.json", nil)
	var st status.Data
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(st.Upstreams, func(r status.UpstreamRow) bool { return r.Name == "lin" })
	if i < 0 {
		t.Fatalf("no row for lin:\n%s", body)
	}
	// mcp:tools is granted already: only mcp:write is more.
	if r := st.Upstreams[i]; r.State != "up" || !slices.Equal(r.MoreScope, []string{"mcp:write"}) {
		t.Errorf("lin = %+v, want up with more_scope [mcp:write]", r)
	}
	_, page := fetchStatus(t, hs, http.MethodGet, "/", nil)
	if row := rowOf(t, page, "upstream", "lin"); !strings.Contains(row, "up; needs login (more scope: mcp:write)") {
		t.Errorf("GET / row for lin does not say needs login (more scope: mcp:write):\n%s", row)
	}
}
