package sessions

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/aggregator"
	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/internal/state/statetest"
)

// TestStateStoreHealthShows: the state store's condition is on
// /status.json (its address for admins only) and in the gauge
// viewmux_state_store_up, and follows an outage of the Redis server both
// ways without a restart.
func TestStateStoreHealthShows(t *testing.T) {
	t.Parallel()
	srv := statetest.StartRedis(t, statetest.Options{})
	st := srv.Open(t, state.RedisOptions{Timeout: 300 * time.Millisecond})
	up := newUpstreamServer(t, 1)
	s := newServerWith(t, up.http.URL, `[profiles.all]
[[auth.tokens]]
token = "tok-admin"
profiles = ["all"]
admin = true
[[auth.tokens]]
token = "tok-user"
profiles = ["all"]
`, Options{Aggregator: aggregator.Options{State: st}})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	admin := map[string]string{"Authorization": "Bearer tok-admin"}
	user := map[string]string{"Authorization": "Bearer tok-user"}

	// waitShown polls what an admin sees until every want is in it.
	waitShown := func(what string, wants ...string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			_, status := fetchStatus(t, hs, http.MethodGet, "/status.json", admin)
			_, metrics := fetchStatus(t, hs, http.MethodGet, "/metrics", admin)
			missing := ""
			for _, w := range wants {
				if !strings.Contains(status+metrics, w) {
					missing = w
				}
			}
			if missing == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %q is not shown:\n%s", what, missing, status)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitShown("store up", `"engine": "redis"`, `"where": "`+srv.Addr()+`"`, `"up": true`, "viewmux_state_store_up 1")
	_, page := fetchStatus(t, hs, http.MethodGet, "/", admin)
	if !strings.Contains(page, `id="state-store"`) || !strings.Contains(page, srv.Addr()) {
		t.Errorf("the status page does not show the store")
	}
	_, mine := fetchStatus(t, hs, http.MethodGet, "/status.json", user)
	if strings.Contains(mine, srv.Addr()) || !strings.Contains(mine, `"up": true`) {
		t.Errorf("a token without admin sees the store's address, or not its condition:\n%s", mine)
	}

	srv.Stop()
	waitShown("store down", `"up": false`, `"error": "`, "viewmux_state_store_up 0")
	srv.Start()
	waitShown("store back", `"up": true`, "viewmux_state_store_up 1")
}
