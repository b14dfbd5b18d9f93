//go:build unix

package protocol

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// listChangedConfig mounts only the demo server, so that nothing but the
// test's own add_tool calls changes the catalog (server-everything, for
// one, may announce tools of its own after it starts).
func listChangedConfig(t *testing.T) string {
	return fmt.Sprintf(`[server]
shutdown_grace = "5s"

[upstreams.demo]
command = %s
args = ["demo-server", "--name", "demo"]
required = true

[profiles.readonly]
read_only = true
`, itest.TomlString(itest.MuxBinary(t)))
}

// TestListChanged checks that a catalog change notifies exactly the
// sessions whose view changed. Three sessions run at once in one
// drive.mjs, lined up by barriers:
//
//	A: no profile (sees everything) — adds the tools
//	B: ?profile=readonly            — sees only read-only tools
//	C: ?tools=demo__echo            — its view never changes
//
// A adds extra_rw (not read-only): only A is told. Then A adds extra_ro
// (read-only): A and B are told. C is never told.
func TestListChanged(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	mux := itest.StartMux(t, listChangedConfig(t))
	url := mux.URL()
	const (
		notifyWait = 10 * time.Second        // for a notification that must come
		quietWait  = 1500 * time.Millisecond // for one that must not
		settle     = 300 * time.Millisecond  // lets each client open its GET stream before anything changes
	)
	res := itest.Drive(t, itest.Script{URL: url, Sessions: []itest.SessionScript{
		{Steps: []itest.Op{ // A
			itest.OpList(), // 0
			itest.OpSleep(settle),
			itest.OpBarrier("ready"),
			itest.OpCall("demo__add_tool", map[string]any{"name": "extra_rw", "read_only": false}), // 3
			itest.OpWaitNotification(itest.MethodToolsListChanged, notifyWait),
			itest.OpList(), // 5
			itest.OpBarrier("rw-seen"),
			itest.OpBarrier("rw-checked"),
			itest.OpCall("demo__add_tool", map[string]any{"name": "extra_ro", "read_only": true}), // 8
			itest.OpWaitNotification(itest.MethodToolsListChanged, notifyWait),
			itest.OpList(), // 10
			itest.OpBarrier("ro-seen"),
			itest.OpExpectNoNotification(itest.MethodToolsListChanged, quietWait),
		}},
		{URL: url + "?profile=readonly", Steps: []itest.Op{ // B
			itest.OpList(), // 0
			itest.OpSleep(settle),
			itest.OpBarrier("ready"),
			itest.OpBarrier("rw-seen"),
			itest.OpExpectNoNotification(itest.MethodToolsListChanged, quietWait),
			itest.OpList(), // 5
			itest.OpBarrier("rw-checked"),
			itest.OpWaitNotification(itest.MethodToolsListChanged, notifyWait),
			itest.OpList(), // 8
			itest.OpBarrier("ro-seen"),
			itest.OpExpectNoNotification(itest.MethodToolsListChanged, quietWait),
		}},
		{URL: url + "?tools=demo__echo", Steps: []itest.Op{ // C
			itest.OpList(), // 0
			itest.OpSleep(settle),
			itest.OpBarrier("ready"),
			itest.OpBarrier("rw-seen"),
			itest.OpBarrier("rw-checked"),
			itest.OpBarrier("ro-seen"),
			itest.OpExpectNoNotification(itest.MethodToolsListChanged, quietWait),
			itest.OpList(), // 7
		}},
	}})
	a, b, c := res.Clients[0], res.Clients[1], res.Clients[2]
	if a.SessionID == b.SessionID || b.SessionID == c.SessionID || a.SessionID == c.SessionID {
		t.Fatalf("the clients share sessions: %q %q %q", a.SessionID, b.SessionID, c.SessionID)
	}
	with := func(list []string, names ...string) []string {
		return slices.Sorted(slices.Values(append(slices.Clone(list), names...)))
	}
	aFirst, bFirst, cFirst := a.Steps[0].Names, b.Steps[0].Names, c.Steps[0].Names
	if !slices.Contains(aFirst, "demo__add_tool") || slices.Contains(aFirst, "demo__extra_rw") || slices.Contains(aFirst, "demo__extra_ro") {
		t.Fatalf("A's first listing %v: want demo__add_tool and no extra tools", aFirst)
	}
	itest.CheckNames(t, "B's first listing (readonly)", bFirst, itest.Prefixed([]string{"demo"}, itest.DemoReadOnly))
	itest.CheckNames(t, "C's first listing (?tools=demo__echo)", cFirst, []string{"demo__echo"})
	for i, step := range []int{3, 8} {
		if r := a.Steps[step].Call(t); r.IsError {
			t.Fatalf("A's add_tool #%d: isError %q", i+1, r.Text())
		}
	}

	t.Run("not read-only tool added", func(t *testing.T) {
		itest.CheckNames(t, "A's listing after its notification", a.Steps[5].Names, with(aFirst, "demo__extra_rw"))
		itest.CheckNames(t, "B's listing after A's notification", b.Steps[5].Names, bFirst)
	})
	t.Run("read-only tool added", func(t *testing.T) {
		itest.CheckNames(t, "A's listing after its second notification", a.Steps[10].Names, with(aFirst, "demo__extra_rw", "demo__extra_ro"))
		itest.CheckNames(t, "B's listing after its notification", b.Steps[8].Names, with(bFirst, "demo__extra_ro"))
		itest.CheckNames(t, "C's last listing", c.Steps[7].Names, cFirst)
	})
	t.Run("notification counts", func(t *testing.T) {
		for _, x := range []struct {
			name   string
			client itest.ClientResult
			want   int
		}{{"A (two view changes)", a, 2}, {"B (one view change)", b, 1}, {"C (no view change)", c, 0}} {
			if got := itest.CountNotifications(x.client, itest.MethodToolsListChanged); got != x.want {
				t.Errorf("%s got %d %s, want %d; all its notifications: %+v", x.name, got, itest.MethodToolsListChanged, x.want, x.client.Notifications)
			}
		}
	})
}
