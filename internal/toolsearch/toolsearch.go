// Package toolsearch owns the ranking behind viewmux__search_tools: a BM25F
// index over tool definitions and the tokenizer that feeds it.
//
// A document is one tool, in fields (name, title, upstream, description,
// argument names and descriptions). Each field's term counts are
// normalised by the field's length and weighted (a word of the name
// counts more than one of a description), then summed into one term
// frequency per tool and term: BM25F. Terms are lower-cased words, split
// on anything that is not a letter or digit and on camelCase and
// letter/digit boundaries, with English stop words dropped and the Porter
// stemmer applied, so that "reading files" finds read_text_file.
//
// A query finds, besides its own terms, at lower weight: their synonyms
// in a thesaurus of general software vocabulary ("folder" finds
// directory, "rm" delete), and the index's terms that a query word of
// three letters or more begins ("env" finds environment). Then the best
// match's most telling terms join the query at lower weight still, and
// the search runs again (pseudo relevance feedback), so tools like the
// best one rank after it.
//
// An Index is immutable once built and safe for concurrent use.
package toolsearch

import (
	"container/heap"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Arg is one argument of a tool's input schema.
type Arg struct {
	Name        string
	Description string
}

// Doc is one tool as the index reads it.
type Doc struct {
	Name        string // as exposed, prefix included
	Title       string
	Description string
	Args        []Arg
	// Upstream is the name of the upstream serving the tool (its prefix
	// is already part of Name).
	Upstream string
}

// The fields of a document.
const (
	fieldName     = iota // the name without the upstream's prefix
	fieldTitle           // the title
	fieldUpstream        // the upstream's name (the prefix)
	fieldDesc            // the description
	fieldArgName         // the arguments' names
	fieldArgDesc         // the arguments' descriptions
	numFields
)

// fields holds each field's weight (how much one occurrence of a term
// counts, a word of the name more than one of a description) and its
// length normalisation b (BM25F: 0, a long field counts as much as a
// short one; 1, a field twice the average length counts half).
var fields = [numFields]struct{ weight, b float64 }{
	fieldName:     {1.0, 0},
	fieldTitle:    {0.5, 0},
	fieldUpstream: {1.0, 0},
	fieldDesc:     {0.5, 0.3},
	fieldArgName:  {0.25, 0.5},
	fieldArgDesc:  {0.125, 0.75},
}

// k1 is BM25's saturation of term frequency, the usual value.
const k1 = 1.2

// maxFieldBytes bounds how much of one field is read: a description of
// megabytes costs no more than one of this size.
const maxFieldBytes = 8 << 10

// posting is one document's term frequency: its weighted sum over the
// fields, each field's count normalised by the field's length (BM25F).
type posting struct {
	doc int32
	tf  float32
}

// Index is a BM25F index over a fixed list of documents, numbered in the
// order New was given them. It is immutable and safe for concurrent use.
type Index struct {
	n        int
	postings map[string][]posting // sorted by doc
	vocab    []string             // the terms, sorted, for prefix matching
	forward  [][]termFreq         // per doc: its terms, for relevance feedback
	// scores holds *accumulator, one per search in flight.
	scores sync.Pool
}

// accumulator sums one search's scores: score per document, touched the
// documents with a score, in the order first scored.
type accumulator struct {
	score   []float64
	touched []int32
}

func (a *accumulator) add(doc int32, s float64) {
	if a.score[doc] == 0 {
		a.touched = append(a.touched, doc)
	}
	a.score[doc] += s
}

// reset zeroes what the search scored, for the next one.
func (a *accumulator) reset() {
	for _, d := range a.touched {
		a.score[d] = 0
	}
	a.touched = a.touched[:0]
}

// New builds the index of docs. It keeps nothing of docs but the terms.
func New(docs []Doc) *Index {
	ix := &Index{n: len(docs), postings: make(map[string][]posting)}
	ix.scores.New = func() any { return &accumulator{score: make([]float64, len(docs))} }
	// First pass: each document's terms, counted per field, and each
	// field's length; the second weighs the counts by the lengths.
	type count struct {
		term  string
		field int32
		n     float32
	}
	counts := make([][]count, len(docs))
	lens := make([][numFields]float32, len(docs))
	var total [numFields]float64
	stems := make(map[string]string) // word → its term ("" for a stop word), as Terms makes it
	type key struct {
		term  string
		field int32
	}
	seen := make(map[key]int) // the document's (term, field) → its index in counts
	for i, d := range docs {
		var cs []count
		clear(seen)
		add := func(text string, f int) {
			if len(text) > maxFieldBytes {
				text = text[:maxFieldBytes]
			}
			for _, word := range Words(text) {
				t, ok := stems[word]
				if !ok {
					t = ""
					if !stop(word) {
						t = Stem(word)
					}
					stems[word] = t
				}
				if t == "" {
					continue
				}
				lens[i][f]++
				if k, ok := seen[key{t, int32(f)}]; ok {
					cs[k].n++
				} else {
					seen[key{t, int32(f)}] = len(cs)
					cs = append(cs, count{term: t, field: int32(f), n: 1})
				}
			}
		}
		add(strings.TrimPrefix(d.Name, d.Upstream+"__"), fieldName)
		add(d.Title, fieldTitle)
		add(d.Upstream, fieldUpstream)
		add(d.Description, fieldDesc)
		for _, a := range d.Args {
			add(a.Name, fieldArgName)
			add(a.Description, fieldArgDesc)
		}
		counts[i] = cs
		for f := range numFields {
			total[f] += float64(lens[i][f])
		}
	}
	var avg [numFields]float64
	for f := range numFields {
		avg[f] = 1
		if total[f] > 0 {
			avg[f] = total[f] / float64(len(docs))
		}
	}
	tf := make(map[string]float64)
	for i, cs := range counts {
		clear(tf)
		for _, c := range cs {
			p := fields[c.field]
			norm := 1 - p.b + p.b*float64(lens[i][c.field])/avg[c.field]
			tf[c.term] += p.weight * float64(c.n) / norm
		}
		var fw []termFreq
		for t, f := range tf {
			ix.postings[t] = append(ix.postings[t], posting{doc: int32(i), tf: float32(f)})
			fw = append(fw, termFreq{t, float32(f)})
		}
		ix.forward = append(ix.forward, fw)
	}
	ix.vocab = slices.Sorted(maps.Keys(ix.postings))
	return ix
}

// Len returns the number of documents.
func (ix *Index) Len() int { return ix.n }

// Hit is one ranked document.
type Hit struct {
	Doc   int // its position in the list New was given
	Score float64
}

// Search returns at most limit documents that share a term with query,
// best first; ties go to the earlier document. A query with no term (or a
// limit below 1) finds nothing. The returned slice is new.
func (ix *Index) Search(query string, limit int) []Hit {
	if limit < 1 || ix.n == 0 {
		return nil
	}
	acc := ix.scores.Get().(*accumulator)
	defer ix.scores.Put(acc)
	qt := ix.queryTerms(query)
	ix.score(acc, qt)
	if len(acc.touched) > 0 {
		// Pseudo relevance feedback: the best document's most telling
		// terms join the query, and their scores are added.
		best := ix.top(acc, 1)[0].Doc
		fb := make([]termFreq, 0, len(ix.forward[best]))
		for _, tf := range ix.forward[best] {
			// A term of more than half the documents tells too little
			// to be worth a pass over its postings.
			if _, ok := qt[tf.term]; !ok && len(ix.postings[tf.term])*2 <= ix.n {
				fb = append(fb, termFreq{tf.term, tf.tf * float32(ix.idf(tf.term))})
			}
		}
		slices.SortFunc(fb, func(a, c termFreq) int {
			if a.tf != c.tf {
				if a.tf > c.tf {
					return -1
				}
				return 1
			}
			return strings.Compare(a.term, c.term)
		})
		more := make(map[string]float64, feedbackTerms)
		for _, tf := range fb[:min(len(fb), feedbackTerms)] {
			more[tf.term] = feedbackWeight
		}
		ix.score(acc, more) // the query's own terms are scored already
	}
	out := ix.top(acc, limit)
	acc.reset()
	return out
}

// feedbackTerms is how many terms of the best document pseudo relevance
// feedback adds to a query, and feedbackWeight how much each counts.
const (
	feedbackTerms  = 5
	feedbackWeight = 0.3
)

// termFreq is one term of a document and its frequency (BM25F's).
type termFreq struct {
	term string
	tf   float32
}

// idf is the inverse document frequency of term t.
func (ix *Index) idf(t string) float64 {
	df := float64(len(ix.postings[t]))
	return math.Log(1 + (float64(ix.n)-df+0.5)/(df+0.5))
}

// score adds to acc the BM25F score of each document for the weighted
// query terms qt, in the terms' order: floating-point sums in a map's
// random order could break a tie one way or the other from one search
// to the next.
func (ix *Index) score(acc *accumulator, qt map[string]float64) {
	for _, t := range slices.Sorted(maps.Keys(qt)) {
		w := qt[t]
		ps := ix.postings[t]
		if len(ps) == 0 {
			continue
		}
		idf := w * ix.idf(t)
		for _, p := range ps {
			f := float64(p.tf)
			acc.add(p.doc, idf*f*(k1+1)/(f+k1))
		}
	}
}

// top returns the limit best documents acc scored, best first.
func (ix *Index) top(acc *accumulator, limit int) []Hit {
	h := make(hitHeap, 0, limit)
	for _, doc := range acc.touched {
		hit := Hit{Doc: int(doc), Score: acc.score[doc]}
		if len(h) < limit {
			heap.Push(&h, hit)
		} else if worse(h[0], hit) {
			h[0] = hit
			heap.Fix(&h, 0)
		}
	}
	out := make([]Hit, len(h))
	for i := len(h) - 1; i >= 0; i-- {
		out[i] = heap.Pop(&h).(Hit)
	}
	return out
}

// synonymWeight is how much a term found through a synonym counts
// against one the query spelled out.
const synonymWeight = 0.5

// prefixWeight is how much a term found by completing a partial word of
// the query counts ("env" finds environ, "dir" directori); minPrefix is
// the shortest partial word completed, maxCompletions how many terms one
// partial word finds at most (the first in sorted order).
const (
	prefixWeight   = 0.5
	minPrefix      = 3
	maxCompletions = 8
)

// queryTerms returns the terms of query with their weights: each term
// once, 1; each synonym of one (synonyms) and each term of the index that
// one is a prefix of, that the query does not spell out, synonymWeight
// and prefixWeight.
func (ix *Index) queryTerms(query string) map[string]float64 {
	out := make(map[string]float64)
	terms := Terms(query)
	for _, t := range terms {
		out[t] = 1
	}
	for _, t := range terms {
		for _, syn := range synonyms[t] {
			if _, ok := out[syn]; !ok {
				out[syn] = synonymWeight
			}
		}
	}
	for _, t := range terms {
		if len(t) < minPrefix {
			continue
		}
		i, _ := slices.BinarySearch(ix.vocab, t)
		for n := 0; i < len(ix.vocab) && n < maxCompletions && strings.HasPrefix(ix.vocab[i], t); i++ {
			if _, ok := out[ix.vocab[i]]; !ok {
				out[ix.vocab[i]] = prefixWeight
				n++
			}
		}
	}
	return out
}

// synonyms maps a term to the terms of the same meaning (thesaurus):
// each line of thesaurus is a group of words used for one thing in
// software, and each word of a group finds the others. It is general
// vocabulary of actions, files, data and the Unix commands for them,
// not names of particular tools; a word may be in several groups.
var synonyms = func() map[string][]string {
	m := map[string][]string{}
	for _, line := range strings.Split(thesaurus, "\n") {
		var group []string
		for _, t := range Terms(line) {
			if !slices.Contains(group, t) {
				group = append(group, t)
			}
		}
		for _, t := range group {
			for _, u := range group {
				if u != t && !slices.Contains(m[t], u) {
					m[t] = append(m[t], u)
				}
			}
		}
	}
	return m
}()

const thesaurus = `create make new add generate register insert mkdir
	read get fetch retrieve load open view show display print cat see look inspect examine
	write save store put persist overwrite record
	edit modify change update alter patch replace fix amend rewrite
	delete remove erase drop destroy purge wipe clear forget discard rm unlink rmdir
	list ls enumerate browse show
	search find locate lookup query grep glob seek
	move rename mv relocate
	copy duplicate cp clone
	compress zip gzip archive pack deflate
	count tally
	sum add plus total addition calculate compute arithmetic
	echo repeat reply
	toggle switch enable disable turn
	start trigger run launch begin invoke execute
	stop end cancel halt
	ask request prompt
	simulate fake mock emulate demonstrate
	relation relationship link connect connection associate association
	note memo
	remember memory memorize
	fact observation detail attribute
	entity node person people thing
	directory folder dir subdirectory subfolder mkdir rmdir
	whole entire complete full
	file document
	size byte space disk usage big large du
	metadata info information stat attribute permission timestamp modified
	image picture photo png jpg jpeg gif icon logo screenshot
	audio sound mp3 wav recording
	media image audio video
	environment env variable configuration config setting
	log logging
	progress status
	notification notify alert event
	tree hierarchy structure recursive nested
	sampling completion llm model
	elicitation form input
	research investigate study analyze
	resource uri url
	subscription subscribe subscriber watch
	root workspace
	tool function command
	text string content message`

// worse reports whether a ranks below c.
func worse(a, c Hit) bool {
	if a.Score != c.Score {
		return a.Score < c.Score
	}
	return a.Doc > c.Doc
}

// hitHeap is a min-heap of hits, the worst on top.
type hitHeap []Hit

func (h hitHeap) Len() int           { return len(h) }
func (h hitHeap) Less(i, j int) bool { return worse(h[i], h[j]) }
func (h hitHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *hitHeap) Push(x any)        { *h = append(*h, x.(Hit)) }
func (h *hitHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Terms returns the index terms of text, in order, repeats kept: its words
// (Words) without stop words, each stemmed (Stem).
func Terms(text string) []string {
	words := Words(text)
	out := words[:0]
	for _, w := range words {
		if stop(w) {
			continue
		}
		out = append(out, Stem(w))
	}
	return out
}

// Words splits text into lower-case words: at every rune that is not a
// letter or digit (so at "_", "-", "/" and spaces), between a lower-case
// letter or digit and an upper-case one ("readFile"), before the last of a
// run of capitals that starts a word ("HTTPServer" → http, server), and
// between letters and digits ("utf8" → utf, 8).
func Words(text string) []string {
	var out []string
	start := -1 // byte offset of the word being read; -1: none
	var prev rune
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			if start >= 0 {
				out = append(out, strings.ToLower(text[start:i]))
				start = -1
			}
			i += size
			continue
		}
		if start >= 0 {
			split := false
			switch {
			case unicode.IsUpper(r) && (unicode.IsLower(prev) || unicode.IsDigit(prev)):
				split = true
			case unicode.IsUpper(r) && unicode.IsUpper(prev):
				next, _ := utf8.DecodeRuneInString(text[i+size:])
				split = unicode.IsLower(next)
			case unicode.IsDigit(r) != unicode.IsDigit(prev):
				split = true
			}
			if split {
				out = append(out, strings.ToLower(text[start:i]))
				start = i
			}
		} else {
			start = i
		}
		prev = r
		i += size
	}
	if start >= 0 {
		out = append(out, strings.ToLower(text[start:]))
	}
	return out
}

// stop reports whether word w is left out of the terms: a stop word, or
// a single letter ("a/b/c", "project X") that tells nothing apart.
func stop(w string) bool {
	return stopWords[w] || len(w) == 1 && w[0] >= 'a' && w[0] <= 'z'
}

// stopWords are words too common in tool descriptions and queries to
// tell tools apart.
var stopWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a about all an and any are as at be been by can could do does
		for from give has have how i if in into is it its me my of on or our please should so some
		that the their them then there these this those to use used uses using want was we what when
		where which will with would you your`) {
		m[w] = true
	}
	return m
}()
