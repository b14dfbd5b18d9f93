// Package toolsearch owns the ranking behind mcpmux__search_tools: a BM25
// index over tool definitions and the tokenizer that feeds it.
//
// A document is one tool. Its fields are weighted (a word of the name
// counts more than one of a description) and summed into one bag of
// terms per tool, a simplified BM25F. Terms are lower-cased words, split on
// anything that is not a letter or digit and on camelCase and letter/digit
// boundaries, with English stop words dropped and a light suffix stemmer
// applied, so that "reading files" finds read_text_file.
//
// An Index is immutable once built and safe for concurrent use.
package toolsearch

import (
	"container/heap"
	"math"
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

// Field weights: how much one occurrence of a term in each field counts.
const (
	weightName     = 3.0
	weightTitle    = 2.0
	weightUpstream = 1.0
	weightDesc     = 1.0
	weightArgName  = 1.0
	weightArgDesc  = 0.5
)

// BM25 parameters, the usual ones.
const (
	k1 = 1.2
	b  = 0.75
)

// maxFieldBytes bounds how much of one field is read: a description of
// megabytes costs no more than one of this size.
const maxFieldBytes = 8 << 10

// posting is one document's weighted frequency of a term.
type posting struct {
	doc int32
	tf  float32
}

// Index is a BM25 index over a fixed list of documents, numbered in the
// order New was given them. It is immutable and safe for concurrent use.
type Index struct {
	n        int
	postings map[string][]posting // sorted by doc
	norm     []float32            // per doc: k1 * (1 - b + b*len/avgLen)
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
	ix := &Index{n: len(docs), postings: make(map[string][]posting), norm: make([]float32, len(docs))}
	ix.scores.New = func() any { return &accumulator{score: make([]float64, len(docs))} }
	lens := make([]float64, len(docs))
	total := 0.0
	tf := make(map[string]float64)
	stems := make(map[string]string) // word → its term ("" for a stop word), as Terms makes it
	add := func(text string, w float64) {
		if len(text) > maxFieldBytes {
			text = text[:maxFieldBytes]
		}
		for _, word := range Words(text) {
			t, ok := stems[word]
			if !ok {
				t = ""
				if !stopWords[word] {
					t = Stem(word)
				}
				stems[word] = t
			}
			if t != "" {
				tf[t] += w
			}
		}
	}
	for i, d := range docs {
		clear(tf)
		add(d.Name, weightName)
		add(d.Title, weightTitle)
		add(d.Upstream, weightUpstream)
		add(d.Description, weightDesc)
		for _, a := range d.Args {
			add(a.Name, weightArgName)
			add(a.Description, weightArgDesc)
		}
		l := 0.0
		for t, f := range tf {
			ix.postings[t] = append(ix.postings[t], posting{doc: int32(i), tf: float32(f)})
			l += f
		}
		lens[i] = l
		total += l
	}
	avg := 1.0
	if len(docs) > 0 && total > 0 {
		avg = total / float64(len(docs))
	}
	for i, l := range lens {
		ix.norm[i] = float32(k1 * (1 - b + b*l/avg))
	}
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
	for t, w := range queryTerms(query) {
		ps := ix.postings[t]
		if len(ps) == 0 {
			continue
		}
		df := float64(len(ps))
		idf := w * math.Log(1+(float64(ix.n)-df+0.5)/(df+0.5))
		for _, p := range ps {
			f := float64(p.tf)
			acc.add(p.doc, idf*f*(k1+1)/(f+float64(ix.norm[p.doc])))
		}
	}
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
	acc.reset()
	out := make([]Hit, len(h))
	for i := len(h) - 1; i >= 0; i-- {
		out[i] = heap.Pop(&h).(Hit)
	}
	return out
}

// synonymWeight is how much a term found through a synonym counts
// against one the query spelled out.
const synonymWeight = 0.5

// queryTerms returns the terms of query with their weights: each term
// once, 1; each synonym of one (synonyms) that the query does not spell
// out, synonymWeight.
func queryTerms(query string) map[string]float64 {
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
	return out
}

// synonyms maps the stem of a word people use for a task to the stems
// tool definitions tend to use for it. It is general vocabulary of files,
// data and actions, not names of particular tools.
var synonyms = func() map[string][]string {
	m := map[string][]string{}
	for _, line := range strings.Split(`folder: directory
		remove erase forget drop: delete
		save store: write
		rename: move
		open view display: read
		show: list read
		see look: read list search
		find locate lookup query: search
		modify change update alter: edit write
		make new: create
		remember: create memory store
		plus total: sum add
		relationship link connect: relation
		fact: observation
		info detail metadata: information
		size: information
		picture photo: image
		zip compress: gzip`, "\n") {
		words, targets, _ := strings.Cut(line, ":")
		for _, w := range strings.Fields(words) {
			for _, t := range strings.Fields(targets) {
				m[Stem(w)] = append(m[Stem(w)], Stem(t))
			}
		}
	}
	return m
}()

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
		if stopWords[w] {
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

// Stem strips a common English inflection from a lower-case word, so that
// a word and its plural or verb forms meet: files → file; directories →
// directory; listed, listing, lists → list; matches → match; writing,
// write → writ; moving, move → move. It is a few of the Porter stemmer's
// rules, not all of them. Words of three letters or fewer stay.
func Stem(w string) string {
	if len(w) <= 3 {
		return w
	}
	switch {
	case strings.HasSuffix(w, "ies"):
		w = w[:len(w)-3] + "y"
	case strings.HasSuffix(w, "sses"), strings.HasSuffix(w, "shes"), strings.HasSuffix(w, "ches"), strings.HasSuffix(w, "xes"), strings.HasSuffix(w, "zes"):
		w = w[:len(w)-2]
	case strings.HasSuffix(w, "ss"), strings.HasSuffix(w, "us"), strings.HasSuffix(w, "is"):
	case strings.HasSuffix(w, "s"):
		w = w[:len(w)-1]
	case strings.HasSuffix(w, "ied"):
		w = w[:len(w)-3] + "y"
	case strings.HasSuffix(w, "ing") && len(w) >= 6 && hasVowel(w[:len(w)-3]):
		w = verbStem(w[:len(w)-3])
	case strings.HasSuffix(w, "ed") && len(w) >= 5 && hasVowel(w[:len(w)-2]):
		w = verbStem(w[:len(w)-2])
	}
	if len(w) >= 5 && w[len(w)-1] == 'e' {
		w = w[:len(w)-1]
	}
	return w
}

// verbStem mends the stem left by stripping -ing or -ed: "gett" → get,
// "mov" → move.
func verbStem(stem string) string {
	n := len(stem)
	if n >= 4 && stem[n-1] == stem[n-2] && !isVowel(stem[n-1]) && !strings.ContainsRune("lsz", rune(stem[n-1])) {
		return stem[:n-1]
	}
	if n == 3 && !isVowel(stem[0]) && isVowel(stem[1]) && !isVowel(stem[2]) && !strings.ContainsRune("wxy", rune(stem[2])) {
		return stem + "e"
	}
	return stem
}

func isVowel(c byte) bool { return strings.IndexByte("aeiou", c) >= 0 }

// hasVowel reports whether s holds a vowel: "string" is not "str" + ing.
func hasVowel(s string) bool { return strings.ContainsAny(s, "aeiouy") }

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
