//go:build linux

package bounds

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// TestHostileCallRunsAtMostOnce: a stdio child that reads a call, counts
// it and exits without answering costs its client one error saying that
// the call may or may not have run, at once; viewmux restarts the child
// and never sends it the call again. An answer nested 200,000 deep ends
// its call at once with the reason.
func TestHostileCallRunsAtMostOnce(t *testing.T) {
	t.Parallel()
	charges := filepath.Join(t.TempDir(), "charges")
	mux := itest.StartMux(t, `[server]
shutdown_grace = "5s"
`+hostileUpstream(t, "pay", []string{"-charges", charges}, "required = true"))
	hc := openHostileClient(t, mux)
	// Every call below ends at once or not at all: this only bounds a
	// failure.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var req mcp.CallToolRequest
	req.Params.Name = "pay__vanish"
	_, err := hc.c.CallTool(ctx, req)
	if want := `upstream "pay" closed the connection after receiving the call; it may or may not have run`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("tools/call of a vanishing upstream: %v; want %q", err, want)
	}
	waitStatus(t, mux, "pay", 20*time.Second, func(r statusRow) bool { return r.State == "up" && r.Restarts >= 1 })
	hc.call(t, "pay__echo", map[string]any{"text": "after"})
	if n := startsIn(t, charges); n != 1 {
		t.Errorf("the upstream read the call %d times, want once", n)
	}

	req.Params.Name = "pay__deep"
	_, err = hc.c.CallTool(ctx, req)
	if want := `upstream "pay" sent an answer viewmux cannot read: JSON nested deeper than 10000 levels`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("tools/call answered 200,000 deep: %v; want %q", err, want)
	}
	hc.call(t, "pay__echo", map[string]any{"text": "still up"})
}
