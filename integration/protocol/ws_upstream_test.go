//go:build unix

package protocol

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// TestWebsocketUpstream mounts the reference server-everything over
// WebSocket and drives viewmux with the official TypeScript SDK client.
func TestWebsocketUpstream(t *testing.T) {
	url := itest.StartEverythingWS(t)
	if !strings.HasPrefix(url, "ws://127.0.0.1:") {
		t.Fatalf("everything-ws URL = %q, want ws://127.0.0.1:PORT/", url)
	}
	mux := itest.StartMux(t, fmt.Sprintf("[upstreams.wsev]\nurl = %s\nrequired = true\n", itest.TomlString(url)))
	const text = "héllo wörld ✓ 日本語 🚀 \u2028"

	steps := itest.Drive(t, itest.Script{URL: mux.URL(), Steps: []itest.Op{
		itest.OpList(),
		itest.OpCall("wsev__echo", map[string]any{"message": text}),
		itest.OpCall("wsev__get-sum", map[string]any{"a": 2, "b": 40}),
	}}).Steps(t)

	var listed []string
	for _, name := range steps[0].Names {
		if orig, ok := strings.CutPrefix(name, "wsev__"); ok {
			listed = append(listed, orig)
		}
	}
	for _, tool := range itest.EverythingTools {
		if !slices.Contains(listed, tool) {
			t.Errorf("wsev__%s is not listed; wsev tools: %v", tool, listed)
		}
	}
	if tool := steps[0].Tool("wsev__echo"); tool == nil || tool.Title != "Echo Tool" {
		t.Errorf("wsev__echo = %+v, want title %q", tool, "Echo Tool")
	}
	r := steps[1].Call(t)
	if got, want := r.Text(), "Echo: "+text; got != want || r.IsError {
		t.Errorf("wsev__echo = %q (isError %v), want %q", got, r.IsError, want)
	}
	if got, want := steps[2].Call(t).Text(), "The sum of 2 and 40 is 42."; got != want {
		t.Errorf("wsev__get-sum = %q, want %q", got, want)
	}

	t.Run("concurrent clients", func(t *testing.T) {
		const n = 4
		res := itest.Drive(t, itest.Script{URL: mux.URL(), Clients: n, Terminate: true, Steps: []itest.Op{
			itest.OpCall("wsev__echo", map[string]any{"message": "client {{client}} " + text}),
			itest.OpCall("wsev__get-sum", map[string]any{"a": 1, "b": 2}),
		}})
		if len(res.Clients) != n {
			t.Fatalf("got %d clients, want %d", len(res.Clients), n)
		}
		for i, c := range res.Clients {
			if got, want := c.Steps[0].Call(t).Text(), fmt.Sprintf("Echo: client %d %s", i, text); got != want {
				t.Errorf("client %d: wsev__echo = %q, want %q", i, got, want)
			}
			if got, want := c.Steps[1].Call(t).Text(), "The sum of 1 and 2 is 3."; got != want {
				t.Errorf("client %d: wsev__get-sum = %q, want %q", i, got, want)
			}
		}
	})
}
