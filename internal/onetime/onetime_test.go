package onetime

import (
	"errors"
	"testing"
	"time"
)

func TestSingleUse(t *testing.T) {
	var s Store[string]
	k, err := s.Put("alice", "v")
	if err != nil {
		t.Fatal(err)
	}
	if v, who, ok := s.Peek(k); !ok || v != "v" || who != "alice" {
		t.Fatalf("Peek = %q %q %v", v, who, ok)
	}
	if v, who, ok := s.Take(k); !ok || v != "v" || who != "alice" {
		t.Fatalf("Take = %q %q %v", v, who, ok)
	}
	if _, _, ok := s.Take(k); ok {
		t.Fatal("a key was good twice")
	}
	if _, _, ok := s.Take("made-up"); ok {
		t.Fatal("an unknown key was good")
	}
}

func TestExpires(t *testing.T) {
	now := time.Unix(1000, 0)
	s := Store[int]{TTL: time.Minute, Now: func() time.Time { return now }}
	k, _ := s.Put("a", 1)
	now = now.Add(time.Minute)
	if _, _, ok := s.Peek(k); ok {
		t.Fatal("Peek of an expired key")
	}
	if _, _, ok := s.Take(k); ok {
		t.Fatal("Take of an expired key")
	}
	k2, _ := s.Put("a", 2)
	now = now.Add(2 * time.Minute)
	s.Put("b", 3) // sweeps
	if _, _, ok := s.Peek(k2); ok || s.Len() != 1 {
		t.Fatalf("after the sweep Len = %d", s.Len())
	}
}

// TestBounded is the attacker repeating a request 100,000 times: one
// owner keeps at most PerOwner values, and many owners at most Max, past
// which Put refuses; memory does not grow with the repetitions.
func TestBounded(t *testing.T) {
	s := Store[[]byte]{Max: 100, PerOwner: 3}
	var last string
	for i := range 100_000 {
		k, err := s.Put("mallory", make([]byte, 16))
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		last = k
	}
	if n := s.Len(); n != 3 {
		t.Fatalf("one owner holds %d values, want 3", n)
	}
	if len(s.order) > 2*s.Len()+64+1 {
		t.Fatalf("order grew to %d", len(s.order))
	}
	if _, _, ok := s.Peek(last); !ok {
		t.Fatal("the newest value was dropped")
	}
	full := false
	for i := range 100_000 {
		if _, err := s.Put(string(rune('a'+i%26))+string(rune(i)), nil); errors.Is(err, ErrFull) {
			full = true
		}
	}
	if !full || s.Len() != 100 {
		t.Fatalf("full = %v, Len = %d, want ErrFull and 100", full, s.Len())
	}
}
