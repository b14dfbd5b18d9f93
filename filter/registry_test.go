package filter

import (
	"fmt"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/configs"
)

// TestNarrowedFiltersAreBounded sends the registry 20,000 distinct
// narrowings, as a client looping over ?tools= values would: the interned
// profile filter stays, the narrowings never hold more than NarrowedCap
// filters (and views), and the ones still cached are shared.
func TestNarrowedFiltersAreBounded(t *testing.T) {
	reg := NewRegistry()
	profile := MustCompile(configs.RuleSet{Deny: []string{"x"}})
	base := reg.Filter(profile)
	entries := []*Entry{entry("a", true), entry("t1", false)}
	var last *Filter
	for i := range 20000 {
		narrow := MustCompile(configs.RuleSet{Tools: []string{fmt.Sprintf("t%d", i)}})
		last = reg.Narrowed(profile, narrow)
		reg.View(1, entries, last)
		if n := reg.Instances(); n > NarrowedCap+1 {
			t.Fatalf("after %d narrowings Instances() = %d, want at most %d", i+1, n, NarrowedCap+1)
		}
	}
	if n := reg.Instances(); n != NarrowedCap+1 {
		t.Fatalf("Instances() = %d, want the profile's filter plus %d cached narrowings", n, NarrowedCap)
	}
	if reg.Filter(profile) != base {
		t.Fatal("the profile's interned filter was pushed out by narrowings")
	}
	again := reg.Narrowed(profile, MustCompile(configs.RuleSet{Tools: []string{"t19999"}}))
	if again != last {
		t.Fatal("an equal narrowing still in the cache got a new instance")
	}
	if reg.View(1, entries, again) != reg.View(1, entries, last) {
		t.Fatal("a cached narrowing's view was computed twice")
	}
	first := reg.Narrowed(profile, MustCompile(configs.RuleSet{Tools: []string{"t0"}}))
	if names(reg.View(1, entries, first)) != "" {
		t.Fatal("a narrowing re-made after eviction shows the wrong tools")
	}
	if reg.Narrowed(profile) != base {
		t.Fatal("a narrowing equal to an interned filter must return the interned one")
	}
}

// TestNarrowedBudget caps the cache by the bytes of its keys: long
// narrowings push older ones out before NarrowedCap is reached.
func TestNarrowedBudget(t *testing.T) {
	reg := NewRegistry()
	name := strings.Repeat("n", 120)
	perFilter := 0
	for i := range 200 {
		var tools []string
		for j := range 256 {
			tools = append(tools, fmt.Sprintf("%s%d_%d", name, i, j))
		}
		f := reg.Narrowed(MustCompile(configs.RuleSet{Tools: tools}))
		perFilter = len(f.Key())
	}
	want := NarrowedBudget / perFilter
	if n := reg.Instances(); n > want || n == 0 {
		t.Fatalf("Instances() = %d with %d-byte keys, want at most %d (NarrowedBudget)", n, perFilter, want)
	}
}

// TestViewOfEvictedFilter: a session keeps the narrowed filter it was bound
// to after the cache dropped it; asking for its view puts it back, within
// the bound, and the forgotten registry starts empty.
func TestViewOfEvictedFilter(t *testing.T) {
	reg := NewRegistry()
	entries := []*Entry{entry("a", true), entry("b", false)}
	held := reg.Narrowed(MustCompile(configs.RuleSet{Tools: []string{"a"}}))
	for i := range NarrowedCap {
		reg.Narrowed(MustCompile(configs.RuleSet{Tools: []string{fmt.Sprint("x", i)}}))
	}
	if names(reg.View(1, entries, held)) != "a" {
		t.Fatal("an evicted filter's view is wrong")
	}
	if n := reg.Instances(); n != NarrowedCap {
		t.Fatalf("Instances() = %d after re-caching an evicted filter, want %d", n, NarrowedCap)
	}
	if reg.View(1, entries, held) != reg.View(1, entries, held) {
		t.Fatal("the re-cached filter's view is not shared")
	}
	reg.Forget()
	if n := reg.Instances(); n != 0 {
		t.Fatalf("Instances() = %d after Forget, want 0", n)
	}
}
