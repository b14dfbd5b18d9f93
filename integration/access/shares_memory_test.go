//go:build linux

package access

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// TestSharesMemoryFigure measures viewmux's RSS on the default config (a
// share of 2500 of max_sessions = 10000) idle, with the guest token
// holding its whole share as idle websockets or SSE streams, and after the
// guest tried 500 more. The admin token must still get a session, and the
// refused attempts must not grow viewmux past twice its idle RSS plus what
// the guest's own share costs.
func TestSharesMemoryFigure(t *testing.T) {
	itest.RequireProc(t)
	cfg := fmt.Sprintf(`[upstreams.demo]
command = %s
args = ["demo-server", "--name", "demo"]
required = true
`, itest.TomlString(itest.MuxBinary(t))) + sharesTokens
	for _, kind := range []string{"ws", "sse"} {
		t.Run(kind, func(t *testing.T) {
			mux := itest.StartMux(t, cfg)
			// A first session warms what every session uses.
			itest.DeleteSession(t, itest.OpenRawSession(t, mux.URL(), bearer(shareAdmin)))
			idle := itest.ProcBytes(t, mux.PID(), "VmRSS")
			var closers []func()
			defer func() {
				for _, c := range closers {
					c()
				}
			}()
			open := func() (bool, int, string, func()) {
				status, body, end := shareStream(t, mux, kind, shareGuest, "")
				return status == http.StatusSwitchingProtocols || status == http.StatusOK, status, body, end
			}
			const share = 2500
			for i := 0; i < share; i++ {
				ok, status, body, end := open()
				if !ok {
					t.Fatalf("guest %s %d of its share: %d %s", kind, i+1, status, body)
				}
				closers = append(closers, end)
			}
			full := itest.ProcBytes(t, mux.PID(), "VmRSS")
			refused := 0
			for i := range 500 {
				ok, status, _, end := open()
				if !ok {
					refused++
					continue
				}
				closers = append(closers, end)
				if refused == i { // the first accepted: say what ended meanwhile
					t.Logf("attempt %d past the share was accepted (%d); what ended meanwhile:", i+1, status)
					for _, l := range strings.Split(mux.Stderr(), "\n") {
						if strings.Contains(l, "ended") && !strings.Contains(l, "closed by its client") {
							t.Log(l)
						}
					}
				}
			}
			after := itest.ProcBytes(t, mux.PID(), "VmRSS")
			admin := itest.OpenRawSession(t, mux.URL(), bearer(shareAdmin))
			itest.DeleteSession(t, admin)
			mb := func(n int64) float64 { return float64(n) / (1 << 20) }
			t.Logf("%s: RSS idle %.1f MB; guest holding its share of %d idle streams %.1f MB (%.1f KB each); after %d refused attempts %.1f MB",
				kind, mb(idle), share, mb(full), float64(full-idle)/share/1024, refused, mb(after))
			if refused != 500 {
				t.Errorf("%d of 500 streams past the guest's share were refused", refused)
			}
			if own := full - idle; after > 2*idle+own {
				t.Errorf("RSS after the refused attempts %.1f MB: past twice idle (%.1f MB) plus the guest's own share (%.1f MB)", mb(after), mb(2*idle), mb(own))
			}
		})
	}
}
