package ratelimit

import (
	"fmt"
	"testing"
	"time"
)

func TestLimiters(t *testing.T) {
	var l Limiters
	for i := range 3 {
		if !l.Allow("a", 3) {
			t.Fatalf("call %d within the limit refused", i)
		}
	}
	if l.Allow("a", 3) {
		t.Fatal("4th call in a minute allowed with a limit of 3")
	}
	if !l.Allow("b", 3) {
		t.Fatal("another key shares the first one's bucket")
	}
	if !l.Allow("a", 0) || !l.Allow("", 3) {
		t.Fatal("no limit (0) or no key must always allow")
	}
	l.Forget("a")
	if !l.Allow("a", 3) {
		t.Fatal("a forgotten key kept its empty bucket")
	}
	if !l.Allow("b", 10) || !l.Allow("b", 10) {
		t.Fatal("a changed limit did not make a new bucket")
	}
}

// TestIdleBucketsAreDropped: 100,000 keys that each called once, a minute
// apart from the next burst of keys, leave only the buckets that have not
// refilled yet; a bucket still draining keeps its count.
func TestIdleBucketsAreDropped(t *testing.T) {
	var l Limiters
	t0 := time.Unix(1_000_000, 0)
	for i := range 3 {
		if !l.AllowAt("busy", 3, t0) {
			t.Fatalf("call %d within the limit refused", i)
		}
	}
	for i := range 100_000 {
		// Keys of one minute are full again by the next minute.
		now := t0.Add(time.Duration(i/1000) * time.Minute)
		if !l.AllowAt(fmt.Sprint("k", i), 3, now) {
			t.Fatalf("first call of key %d refused", i)
		}
		if n := l.Len(); n > 4*1000+minSweep {
			t.Fatalf("after %d keys the limiter holds %d buckets", i+1, n)
		}
	}
	var m Limiters
	for range 3 {
		m.AllowAt("busy", 3, t0)
	}
	for i := range 1000 {
		m.AllowAt(fmt.Sprint("k", i), 3, t0.Add(time.Second))
	}
	if m.AllowAt("busy", 3, t0.Add(2*time.Second)) {
		t.Fatal("a draining bucket was dropped by a sweep: its limit was reset")
	}
}
