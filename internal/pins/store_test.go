package pins

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/internal/state/statetest"
)

// TestFleetOnRedis: replicas on one Redis store share one set of pins.
// The first sight is decided once for the fleet, so a replica whose
// upstream has changed since does not make a baseline of its own; an
// approval made through any handle reaches every replica; a replica
// started on an empty disk keeps the pins; and nothing of the pins is
// written to a state directory.
func TestFleetOnRedis(t *testing.T) {
	srv := statetest.StartRedis(t, statetest.Options{})
	open := func() state.Store { return srv.Open(t, state.RedisOptions{}) }
	a, b := NewOn(open()), NewOn(open())
	if !strings.Contains(a.Path(), "redis state store at "+srv.Addr()) {
		t.Errorf("Path() = %q; want it to name the store", a.Path())
	}
	// A sees the upstream first; B's upstream already serves v2.
	if hidden, evs := round(t, a, true, map[string]upstreamTools{"u": {"t": def("v1")}}); len(hidden) != 0 || kinds(evs) != "pinned:u/" {
		t.Fatalf("A's first sight: hidden %v, events %q", hidden, kinds(evs))
	}
	hidden, evs := round(t, b, true, map[string]upstreamTools{"u": {"t": def("v2")}})
	if !hidden["u__t"] || kinds(evs) != "changed:u/t" {
		t.Fatalf("B after A's first sight: hidden %v, events %q; want t quarantined as changed", hidden, kinds(evs))
	}

	// Approve through a third handle (`viewmux pins approve` on the store).
	if got, err := NewOn(open()).Approve(Selector{Tool: "u/t"}); err != nil || kinds(got) != "approved:u/t" {
		t.Fatalf("approve: %q, %v", kinds(got), err)
	}
	approved, changed, err := b.Refresh()
	if err != nil || !changed || kinds(approved) != "approved:u/t" {
		t.Fatalf("B's refresh = %q, %v, %v; want the approval", kinds(approved), changed, err)
	}
	if hidden, evs := round(t, b, true, map[string]upstreamTools{"u": {"t": def("v2")}}); len(hidden) != 0 || len(evs) != 0 {
		t.Errorf("B after the approval: hidden %v, events %q", hidden, kinds(evs))
	}

	// A new replica (nothing on disk) serves v1 and v2 and quarantines v3.
	c := NewOn(open())
	for _, v := range []string{"v1", "v2"} {
		if hidden, _ := round(t, c, true, map[string]upstreamTools{"u": {"t": def(v)}}); len(hidden) != 0 {
			t.Errorf("a new replica hides the approved %s", v)
		}
	}
	if hidden, _ := round(t, c, true, map[string]upstreamTools{"u": {"t": def("v3")}}); !hidden["u__t"] {
		t.Error("a new replica serves an unapproved v3")
	}
	// What the store holds is the pins document, under the prefix.
	dump, err := srv.Dump(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := dump["viewmux:doc:"+FileName]; !ok {
		t.Errorf("the store holds %v; want viewmux:doc:%s", keysOf(dump), FileName)
	}
}

// TestStoreDownKeepsVerified: with the store down, definitions already
// verified are still served, one that cannot be checked is not, and a
// replica that starts during the outage serves nothing pinned.
func TestStoreDownKeepsVerified(t *testing.T) {
	srv := statetest.StartRedis(t, statetest.Options{})
	st := srv.Open(t, state.RedisOptions{})
	a := NewOn(st)
	round(t, a, true, map[string]upstreamTools{"u": {"t": def("v1")}})
	srv.Stop()
	r := a.Round(true)
	ch := r.Upstream("u")
	if ch.Hide("t", "u__t", []byte(def("v1"))) {
		t.Error("during the outage, the verified v1 is hidden")
	}
	if !ch.Hide("t", "u__t", []byte(def("v9"))) {
		t.Error("during the outage, an unverified v9 is served")
	}
	if _, err := r.Commit(); err == nil || !state.IsDown(err) {
		t.Errorf("Commit during the outage = %v; want the store's outage", err)
	}
	// A refresh during the outage (the watcher's, the status page's)
	// keeps what was verified, and decides nothing new.
	if _, _, err := a.Refresh(); !state.IsDown(err) {
		t.Errorf("Refresh during the outage = %v; want the store's outage", err)
	}
	r = a.Round(true)
	if r.Upstream("u").Hide("t", "u__t", []byte(def("v1"))) {
		t.Error("after a refresh during the outage, the verified v1 is hidden")
	}
	if !r.Upstream("w").Hide("x", "w__x", []byte(def("w1"))) {
		t.Error("during the outage, the first sight of an upstream is served: it cannot be decided for the fleet")
	}
	r.Commit()

	fresh := NewOn(st)
	rf := fresh.Round(true)
	if !rf.Upstream("u").Hide("t", "u__t", []byte(def("v1"))) {
		t.Error("a replica that starts during the outage serves a definition it could not check")
	}
	rf.Commit()

	srv.Start()
	// The store is back. The replica that started during the outage
	// reads the pins (here its status page does, Pending) and its next
	// refresh reports a change, so that its catalog is built again.
	waitUp(t, st)
	if _, err := fresh.Pending(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Store{a, fresh} {
		if _, changed, err := s.Refresh(); err != nil || !changed {
			t.Errorf("the first Refresh after the outage = changed %v, %v; want a change, for the catalog to be built again", changed, err)
		}
	}
	rf = fresh.Round(true)
	if rf.Upstream("u").Hide("t", "u__t", []byte(def("v1"))) {
		t.Error("after the outage, the replica that started during it hides the verified v1")
	}
	rf.Commit()
	r = a.Round(true)
	if r.Upstream("w").Hide("x", "w__x", []byte(def("w1"))) {
		t.Error("after the outage, the first sight of an upstream is still hidden")
	}
	if _, err := r.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, changed, _ := a.Refresh(); changed {
		// The commit wrote w's pins; the round after them is built on them.
		a.Round(true).Commit()
	}
	if _, changed, err := a.Refresh(); changed || err != nil {
		t.Errorf("a Refresh with nothing new = changed %v, %v; want no change (no rebuild loop)", changed, err)
	}
}

// waitUp waits for the store to answer again.
func waitUp(t *testing.T, st state.Store) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !st.Health().Up {
		if time.Now().After(deadline) {
			t.Fatal("the store did not come back up")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func keysOf(m map[string][]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
