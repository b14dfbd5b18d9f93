package ratelimit

import "testing"

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
