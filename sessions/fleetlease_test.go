package sessions

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/viewmux/viewmux/internal/state"
	"github.com/viewmux/viewmux/internal/state/statetest"
)

// countingStore counts the takes that reach the store.
type countingStore struct {
	state.Store
	takes atomic.Int64
}

func (c *countingStore) Take(ctx context.Context, key string, perMinute int) (bool, error) {
	c.takes.Add(1)
	return c.Store.Take(ctx, key, perMinute)
}

func (c *countingStore) TakeUpTo(ctx context.Context, key string, perMinute, n int) (int, error) {
	c.takes.Add(1)
	return c.Store.TakeUpTo(ctx, key, perMinute, n)
}

// TestFleetRateLeases: a caller with a high limit spends a lease of the
// fleet's bucket, so that most of its calls do not reach the store; the
// fleet still never allows more than the limit, whichever replica takes
// the calls; and a low limit takes every call from the store.
func TestFleetRateLeases(t *testing.T) {
	t.Parallel()
	srv := statetest.StartRedis(t, statetest.Options{})
	ctx := context.Background()
	sa := &countingStore{Store: srv.Open(t, state.RedisOptions{})}
	sb := &countingStore{Store: srv.Open(t, state.RedisOptions{})}
	a, b := newFleetRate(sa, "a"), newFleetRate(sb, "b")

	// 60000 a minute: leases of 100 calls.
	for i := range 200 {
		if v := a.allow(ctx, "high", 60000); !v.ok || v.down != nil {
			t.Fatalf("call %d of a high limit refused: %+v", i, v)
		}
	}
	if n := sa.takes.Load(); n > 4 {
		t.Errorf("200 calls at 60000 a minute reached the store %d times; want about 2 (leases of 100)", n)
	}

	// 1200 a minute (leases of 2), two replicas taking in turn as fast as
	// they can: at most the bucket's 1200, and the calls refilled while
	// they ran (20 a second).
	allowed := 0
	for i := range 3000 {
		r := a
		if i%2 == 1 {
			r = b
		}
		if r.allow(ctx, "mid", 1200).ok {
			allowed++
		}
	}
	if allowed > 1200+100 || allowed < 1200 {
		t.Errorf("two replicas allowed %d of 3000 calls at 1200 a minute; want 1200 and what refilled meanwhile", allowed)
	}

	// Below leaseMin per tenth of a second, every call is the store's.
	before := sa.takes.Load()
	for range 10 {
		a.allow(ctx, "low", 60)
	}
	if n := sa.takes.Load() - before; n != 10 {
		t.Errorf("10 calls at 60 a minute reached the store %d times; want every one", n)
	}
}
