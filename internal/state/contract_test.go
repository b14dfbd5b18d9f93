package state_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/internal/state/statetest"
)

// engine opens stores of one engine that share what the engine shares: for
// files, documents through one directory (Once values and buckets live in
// one process, so "another replica" is the same store); for Redis,
// everything through one server.
type engine struct {
	name string
	// open returns a new handle, as another process or replica would
	// hold.
	open func(t *testing.T) state.Store
	// fleet reports whether Once values and buckets are shared between
	// handles.
	fleet bool
}

// sharing returns two handles that share Once values and buckets: two
// replicas' on an engine that shares them, else one store twice.
func (e engine) sharing(t *testing.T) (a, b state.Store) {
	a = e.open(t)
	if !e.fleet {
		return a, a
	}
	return a, e.open(t)
}

func engines(t *testing.T) []engine {
	dir := t.TempDir()
	var files state.Store = state.OpenFiles(dir)
	srv := statetest.StartRedis(t, statetest.Options{})
	prefix := "test" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	return []engine{
		{name: "files", open: func(t *testing.T) state.Store {
			return files
		}},
		{name: "files-second-process", open: func(t *testing.T) state.Store {
			return state.OpenFiles(dir)
		}},
		{name: "redis", fleet: true, open: func(t *testing.T) state.Store {
			return srv.Open(t, state.RedisOptions{Prefix: prefix})
		}},
	}
}

// TestContract runs one suite against both engines: what the gateway
// relies on of any store.
func TestContract(t *testing.T) {
	for _, e := range engines(t) {
		t.Run(e.name, func(t *testing.T) {
			t.Run("docs", func(t *testing.T) { testDocs(t, e) })
			t.Run("update-atomic", func(t *testing.T) { testUpdateAtomic(t, e) })
			t.Run("watch", func(t *testing.T) { testWatch(t, e) })
			t.Run("once", func(t *testing.T) { testOnce(t, e) })
			t.Run("once-bounds", func(t *testing.T) { testOnceBounds(t, e) })
			t.Run("once-ttl", func(t *testing.T) { testOnceTTL(t, e) })
			t.Run("buckets", func(t *testing.T) { testBuckets(t, e) })
			t.Run("lock", func(t *testing.T) { testLock(t, e) })
			t.Run("keys", func(t *testing.T) { testKeys(t, e) })
		})
	}
}

func unique(t *testing.T, what string) string {
	return fmt.Sprintf("%s-%d", what, time.Now().UnixNano())
}

func testDocs(t *testing.T, e engine) {
	ctx := context.Background()
	a, b := e.open(t), e.open(t)
	key := unique(t, "doc.json")
	if got, err := a.Get(ctx, key); err != nil || got != nil {
		t.Fatalf("Get of a missing document = %q, %v; want nil, nil", got, err)
	}
	var seen [][]byte
	if err := a.Update(ctx, key, func(cur []byte) ([]byte, error) {
		seen = append(seen, cur)
		return []byte("one"), nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0] != nil {
		t.Errorf("fn saw %q; want one call with nil", seen)
	}
	if got, err := b.Get(ctx, key); err != nil || string(got) != "one" {
		t.Fatalf("Get from another handle = %q, %v; want one", got, err)
	}
	err := b.Update(ctx, key, func(cur []byte) ([]byte, error) {
		if string(cur) != "one" {
			return nil, fmt.Errorf("cur = %q", cur)
		}
		return nil, state.ErrUnchanged
	})
	if err != nil {
		t.Fatalf("Update that returns ErrUnchanged: %v", err)
	}
	if got, _ := a.Get(ctx, key); string(got) != "one" {
		t.Errorf("after ErrUnchanged the document is %q; want one", got)
	}
	boom := errors.New("boom")
	if err := b.Update(ctx, key, func([]byte) ([]byte, error) { return []byte("two"), boom }); !errors.Is(err, boom) {
		t.Errorf("Update's fn error = %v; want it returned", err)
	}
	if got, _ := a.Get(ctx, key); string(got) != "one" {
		t.Errorf("after a failed fn the document is %q; want one", got)
	}

	// List: newest first, by prefix.
	p := unique(t, "list")
	for _, k := range []string{p + ".a", p + ".b", p + ".c"} {
		if err := a.Update(ctx, k, func([]byte) ([]byte, error) { return []byte(k), nil }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(15 * time.Millisecond) // distinct modification times, to order by
	}
	list, err := b.List(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, en := range list {
		keys = append(keys, en.Key)
	}
	if fmt.Sprint(keys) != fmt.Sprint([]string{p + ".c", p + ".b", p + ".a"}) {
		t.Errorf("List(%q) = %v; want newest first", p, keys)
	}

	if removed, err := b.Delete(ctx, key); err != nil || !removed {
		t.Errorf("Delete = %v, %v; want true", removed, err)
	}
	if removed, err := a.Delete(ctx, key); err != nil || removed {
		t.Errorf("second Delete = %v, %v; want false", removed, err)
	}
	if got, err := a.Get(ctx, key); err != nil || got != nil {
		t.Errorf("Get after Delete = %q, %v", got, err)
	}
}

// testUpdateAtomic has handles increment one counter at once: no
// increment may be lost, as two replicas deciding one pin must not.
func testUpdateAtomic(t *testing.T, e engine) {
	ctx := context.Background()
	key := unique(t, "counter")
	const writers, each = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		s := e.open(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				err := s.Update(ctx, key, func(cur []byte) ([]byte, error) {
					n, _ := strconv.Atoi(string(cur))
					return []byte(strconv.Itoa(n + 1)), nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got, _ := e.open(t).Get(ctx, key)
	if string(got) != strconv.Itoa(writers*each) {
		t.Errorf("counter = %s; want %d", got, writers*each)
	}

	// Set-if-absent: of many first sights, one wins.
	first := unique(t, "first")
	var won sync.Map
	for w := 0; w < writers; w++ {
		s := e.open(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			me := []byte("writer-" + strconv.Itoa(w))
			s.Update(ctx, first, func(cur []byte) ([]byte, error) {
				if cur != nil {
					return nil, state.ErrUnchanged
				}
				return me, nil
			})
			got, _ := s.Get(ctx, first)
			won.Store(string(got), true)
		}()
	}
	wg.Wait()
	n := 0
	won.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Errorf("handles read %d different first sights; want 1", n)
	}
}

func testWatch(t *testing.T, e engine) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := e.open(t), e.open(t)
	ch := b.Watch(ctx)
	key := unique(t, "watched")
	// The watcher may need a moment to subscribe; write until it sees
	// the key (each write is a change), for at most 10 s.
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		a.Update(ctx, key, func([]byte) ([]byte, error) { return []byte(strconv.Itoa(i)), nil })
		select {
		case k, ok := <-ch:
			if !ok {
				t.Fatal("watch closed early")
			}
			if k == key {
				goto seen
			}
		case <-tick.C:
		case <-deadline:
			t.Fatalf("no change of %q within 10s", key)
		}
	}
seen:
	cancel()
	for range ch { // closed at ctx's end
	}
}

func testOnce(t *testing.T, e engine) {
	ctx := context.Background()
	a, b := e.sharing(t)
	ns := unique(t, "tickets")
	key := state.NewKey()
	if err := a.PutOnce(ctx, ns, "alice", key, []byte("v1"), state.Limits{}); err != nil {
		t.Fatal(err)
	}
	if err := a.PutOnce(ctx, ns, "bob", key, []byte("v2"), state.Limits{}); !errors.Is(err, state.ErrKeyInUse) {
		t.Errorf("PutOnce on a key in use = %v; want ErrKeyInUse", err)
	}
	if v, owner, ok, err := b.PeekOnce(ctx, ns, key); err != nil || !ok || string(v) != "v1" || owner != "alice" {
		t.Errorf("PeekOnce = %q, %q, %v, %v", v, owner, ok, err)
	}
	// Many takers, one winner.
	const takers = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for i := 0; i < takers; i++ {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, owner, ok, err := s.TakeOnce(ctx, ns, key)
			if err != nil {
				t.Error(err)
			}
			if ok {
				if string(v) != "v1" || owner != "alice" {
					t.Errorf("TakeOnce = %q, %q", v, owner)
				}
				mu.Lock()
				wins++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Errorf("%d takers got the value; want exactly 1", wins)
	}
	if _, _, ok, _ := b.PeekOnce(ctx, ns, key); ok {
		t.Error("PeekOnce finds a taken value")
	}
	if _, _, ok, err := a.TakeOnce(ctx, ns, "never-put"); ok || err != nil {
		t.Errorf("TakeOnce of an unknown key = %v, %v", ok, err)
	}
}

func testOnceBounds(t *testing.T, e engine) {
	ctx := context.Background()
	a, b := e.sharing(t)
	ns := unique(t, "bounded")
	lim := state.Limits{Max: 6, PerOwner: 2}
	// A take before the first put must not fix the namespace's limits.
	if _, _, ok, err := b.TakeOnce(ctx, ns, state.NewKey()); ok || err != nil {
		t.Fatalf("TakeOnce in an empty namespace = %v, %v", ok, err)
	}
	// One owner's third value replaces its oldest, on any handle.
	k1, k2, k3 := state.NewKey(), state.NewKey(), state.NewKey()
	for i, k := range []string{k1, k2, k3} {
		s := a
		if i == 1 {
			s = b
		}
		if err := s.PutOnce(ctx, ns, "alice", k, []byte(k), lim); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, ok, _ := a.PeekOnce(ctx, ns, k1); ok {
		t.Error("the owner's oldest value survived a third")
	}
	for _, k := range []string{k2, k3} {
		if _, _, ok, _ := b.PeekOnce(ctx, ns, k); !ok {
			t.Errorf("value %s of the owner's newest two is gone", k[:6])
		}
	}
	// The namespace's bound holds over owners and handles.
	for i := 0; i < 4; i++ {
		s := a
		if i%2 == 1 {
			s = b
		}
		if err := s.PutOnce(ctx, ns, "owner-"+strconv.Itoa(i/2), state.NewKey(), nil, lim); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.PutOnce(ctx, ns, "mallory", state.NewKey(), nil, lim); !errors.Is(err, state.ErrFull) {
		t.Errorf("PutOnce past Max = %v; want ErrFull", err)
	}
	// Taking one makes room.
	if _, _, ok, _ := a.TakeOnce(ctx, ns, k2); !ok {
		t.Fatal("TakeOnce of a held value failed")
	}
	if err := b.PutOnce(ctx, ns, "mallory", state.NewKey(), nil, lim); err != nil {
		t.Errorf("PutOnce after a take = %v; want room", err)
	}
}

func testOnceTTL(t *testing.T, e engine) {
	ctx := context.Background()
	a := e.open(t)
	ns := unique(t, "short")
	key := state.NewKey()
	start := time.Now()
	if err := a.PutOnce(ctx, ns, "alice", key, []byte("x"), state.Limits{TTL: 150 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	for {
		_, _, ok, err := a.PeekOnce(ctx, ns, key)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("a value with a 150ms TTL is still there after 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if time.Since(start) < 150*time.Millisecond {
		t.Errorf("the value went after %v, before its TTL", time.Since(start))
	}
	if _, _, ok, _ := a.TakeOnce(ctx, ns, key); ok {
		t.Error("an expired value was taken")
	}
}

func testBuckets(t *testing.T, e engine) {
	ctx := context.Background()
	a, b := e.sharing(t)
	key := unique(t, "caller|profile")
	got := 0
	for i := 0; i < 10; i++ {
		s := a
		if i%2 == 1 {
			s = b
		}
		ok, err := s.Take(ctx, key, 4)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got++
		}
	}
	// 10 takes within well under a second: the 4 the bucket holds, and at
	// most 1 refilled (4 a minute is one per 15 s).
	if got < 4 || got > 5 {
		t.Errorf("%d of 10 takes passed at 4 a minute; want 4 (one bucket for every handle)", got)
	}
	if ok, err := a.Take(ctx, key, 0); !ok || err != nil {
		t.Errorf("Take with no limit = %v, %v", ok, err)
	}

	// TakeUpTo takes what the bucket holds, at most n, from the same
	// bucket whichever handle asks.
	key = unique(t, "lease|profile")
	if got, err := a.TakeUpTo(ctx, key, 10, 4); got != 4 || err != nil {
		t.Errorf("TakeUpTo 4 of a full bucket of 10 = %d, %v", got, err)
	}
	if got, err := b.TakeUpTo(ctx, key, 10, 100); got != 6 || err != nil {
		t.Errorf("TakeUpTo 100 of the 6 left = %d, %v; want 6", got, err)
	}
	if got, err := a.TakeUpTo(ctx, key, 10, 3); got != 0 || err != nil {
		t.Errorf("TakeUpTo of an empty bucket = %d, %v; want 0", got, err)
	}
	if ok, _ := b.Take(ctx, key, 10); ok {
		t.Errorf("Take of an emptied bucket passed")
	}
	if got, err := a.TakeUpTo(ctx, key, 0, 7); got != 7 || err != nil {
		t.Errorf("TakeUpTo with no limit = %d, %v; want 7", got, err)
	}
}

func testLock(t *testing.T, e engine) {
	ctx := context.Background()
	a, b := e.open(t), e.open(t)
	name := unique(t, "refresh")
	unlock, err := a.Lock(ctx, name, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if u, err := b.Lock(short, name, 10*time.Second); err == nil {
		u()
		t.Fatal("a second holder took a held lock")
	}
	unlock()
	u, err := b.Lock(ctx, name, 10*time.Second)
	if err != nil {
		t.Fatalf("Lock after unlock: %v", err)
	}
	u()
	unlock() // late and twice: harmless
}

func testKeys(t *testing.T, e engine) {
	ctx := context.Background()
	s := e.open(t)
	for _, bad := range []string{"", "../pins.json", "a/b", ".hidden", "sp ace", "nul\x00"} {
		if _, err := s.Get(ctx, bad); err == nil {
			t.Errorf("Get(%q) succeeded; want the key refused", bad)
		}
		if err := s.Update(ctx, bad, func([]byte) ([]byte, error) { return []byte("x"), nil }); err == nil {
			t.Errorf("Update(%q) succeeded; want the key refused", bad)
		}
	}
}
