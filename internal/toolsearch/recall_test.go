package toolsearch

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// testdata/catalog.json is the real tools/list catalog viewmux exposes for
// server-everything (prefix every), server-memory (memory),
// server-filesystem (fs) at the versions integration/package-lock.json
// pins, and the demo server (demo). testdata/capture.sh regenerates it
// with `viewmux tools --json`.
//
// testdata/queries.json holds labelled queries written as a user would
// phrase a task, each naming the tool that serves it: the development set.
// testdata/heldout.json and testdata/heldout2.json are held out: written
// without running them, never tuned on, reported only in aggregate.

type labelled struct {
	Query string `json:"query"`
	Tool  string `json:"tool"`
}

// catalog returns the captured catalog's definitions and Docs.
func catalog(t testing.TB) ([]json.RawMessage, []Doc) {
	t.Helper()
	raw, err := os.ReadFile("testdata/catalog.json")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	docs := make([]Doc, len(c.Tools))
	for i, def := range c.Tools {
		var meta struct {
			Meta map[string]string `json:"_meta"`
		}
		json.Unmarshal(def, &meta)
		docs[i] = FromDefinition(def, meta.Meta["viewmux/upstream"])
	}
	return c.Tools, docs
}

func queries(t testing.TB) []labelled { return readQueries(t, "testdata/queries.json") }

func readQueries(t testing.TB, path string) []labelled {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var q struct {
		Queries []labelled `json:"queries"`
	}
	if err := json.Unmarshal(raw, &q); err != nil {
		t.Fatal(err)
	}
	return q.Queries
}

// recallFloors holds each query set's floors, recall@1 and recall@5, a
// little below what the ranking reaches so that a tie cannot flake. The
// issue's goal is recall@5 >= 0.9 on queries a user would write; the
// held-out sets are the honest measure of it, the development set
// (queries.json, tuned on) flatters.
var recallFloors = []struct {
	path     string
	at1, at5 float64
}{
	{"testdata/queries.json", 0.72, 0.94},
	{"testdata/heldout.json", 0.52, 0.84},
	{"testdata/heldout2.json", 0.36, 0.78},
}

// TestRecall runs the labelled query sets against the real catalog and
// fails below the recall floors. `go test -run TestRecall -v` prints
// recall@1 and recall@5 of each set, and each miss of the development
// set. The held-out sets are never tuned on: only their aggregate recall
// is reported, never which of their queries miss.
func TestRecall(t *testing.T) {
	_, docs := catalog(t)
	ix := New(docs)
	for _, f := range recallFloors {
		qs := readQueries(t, f.path)
		dev := f.path == "testdata/queries.json"
		if dev && len(qs) < 60 {
			t.Fatalf("the query set has %d queries, want at least 60", len(qs))
		}
		r1, r5 := recall(t, ix, docs, qs, dev)
		t.Logf("%s, %d queries over %d tools: recall@1 %.3f, recall@5 %.3f", f.path, len(qs), len(docs), r1, r5)
		if r1 < f.at1 || r5 < f.at5 {
			t.Errorf("%s: recall@1 %.3f (floor %.2f), recall@5 %.3f (floor %.2f)", f.path, r1, f.at1, r5, f.at5)
		}
	}
}

// recall runs qs against ix (over docs) and returns recall@1 and
// recall@5; verbose logs every query whose tool is not first.
func recall(t *testing.T, ix *Index, docs []Doc, qs []labelled, verbose bool) (at1, at5 float64) {
	t.Helper()
	names := make([]string, len(docs))
	for i, d := range docs {
		names[i] = d.Name
	}
	n1, n5 := 0, 0
	for _, q := range qs {
		if !slices.Contains(names, q.Tool) {
			t.Fatalf("query %q names %s, which the catalog does not have", q.Query, q.Tool)
		}
		var got []string
		for _, h := range ix.Search(q.Query, 5) {
			got = append(got, docs[h.Doc].Name)
		}
		switch i := slices.Index(got, q.Tool); {
		case i == 0:
			n1++
			n5++
		case i > 0:
			n5++
			if verbose {
				t.Logf("rank %d: %q → %s", i+1, q.Query, strings.Join(got, ", "))
			}
		case verbose:
			t.Logf("miss:   %q (want %s) → %s", q.Query, q.Tool, strings.Join(got, ", "))
		}
	}
	return float64(n1) / float64(len(qs)), float64(n5) / float64(len(qs))
}

// bigCatalog returns n Docs: the real catalog's tools repeated under
// distinct prefixes (up0__, up1__, …), so that the vocabulary and lengths
// are those of real tools.
func bigCatalog(t testing.TB, n int) []Doc {
	_, docs := catalog(t)
	out := make([]Doc, 0, n)
	for i := 0; len(out) < n; i++ {
		for _, d := range docs {
			if len(out) == n {
				break
			}
			_, rest, _ := strings.Cut(d.Name, "__")
			d.Upstream = fmt.Sprintf("up%d", i)
			d.Name = d.Upstream + "__" + rest
			out = append(out, d)
		}
	}
	return out
}

// BenchmarkSearch10k searches an index of 10,000 tools with the labelled
// queries in turn (the bar: ≤ 1 ms p50 in process). It reports the p50
// and p99 of single searches besides the mean.
func BenchmarkSearch10k(b *testing.B) {
	ix := New(bigCatalog(b, 10000))
	qs := queries(b)
	times := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		ix.Search(qs[i%len(qs)].Query, 5)
		times = append(times, time.Since(start))
	}
	b.StopTimer()
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(times[len(times)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(times[len(times)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkBuild10k builds the index of 10,000 tools: what the first
// search of a new snapshot and view pays once.
func BenchmarkBuild10k(b *testing.B) {
	docs := bigCatalog(b, 10000)
	b.ReportAllocs()
	for b.Loop() {
		New(docs)
	}
}

// TestSearchDeterministic: the same search gives the same hits and
// scores every time, so that a tie always breaks the same way.
func TestSearchDeterministic(t *testing.T) {
	_, docs := catalog(t)
	ix := New(docs)
	for _, q := range queries(t) {
		first := ix.Search(q.Query, 5)
		for range 20 {
			if again := ix.Search(q.Query, 5); !slices.Equal(first, again) {
				t.Fatalf("Search(%q) = %v, then %v", q.Query, first, again)
			}
		}
	}
}

// TestRecallWithoutHeldOutWords measures what the thesaurus owes to
// knowing the held-out queries. Their author also wrote the thesaurus,
// so it drops every word of a held-out query that neither a development
// query nor the catalog uses, and holds floors on the held-out sets
// without them: the recall that does not come from that knowledge.
func TestRecallWithoutHeldOutWords(t *testing.T) {
	_, docs := catalog(t)
	known := map[string]bool{}
	for _, q := range queries(t) {
		for _, w := range Terms(q.Query) {
			known[w] = true
		}
	}
	for _, d := range docs {
		text := []string{d.Name, d.Title, d.Description, d.Upstream}
		for _, a := range d.Args {
			text = append(text, a.Name, a.Description)
		}
		for _, w := range Terms(strings.Join(text, " ")) {
			known[w] = true
		}
	}
	only := map[string]bool{} // in held-out queries alone
	for _, f := range recallFloors[1:] {
		for _, q := range readQueries(t, f.path) {
			for _, w := range Terms(q.Query) {
				only[w] = !known[w]
			}
		}
	}
	kept := map[string][]string{}
	dropped := 0
	for t, syns := range synonyms {
		if only[t] {
			dropped++
			continue
		}
		for _, s := range syns {
			if !only[s] {
				kept[t] = append(kept[t], s)
			}
		}
	}
	saved := synonyms
	synonyms = kept
	defer func() { synonyms = saved }()
	ix := New(docs)
	for _, f := range []struct {
		path     string
		at1, at5 float64
	}{
		{"testdata/heldout.json", 0.52, 0.76},
		{"testdata/heldout2.json", 0.26, 0.64},
	} {
		qs := readQueries(t, f.path)
		r1, r5 := recall(t, ix, docs, qs, false)
		t.Logf("%s without the %d thesaurus words only held-out queries use: recall@1 %.3f, recall@5 %.3f", f.path, dropped, r1, r5)
		if r1 < f.at1 || r5 < f.at5 {
			t.Errorf("%s: recall@1 %.3f (floor %.2f), recall@5 %.3f (floor %.2f)", f.path, r1, f.at1, r5, f.at5)
		}
	}
}
