package configs

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// The TOML library reports no positions for keys, so error messages get their
// line numbers from this scanner. It reads only the structure of a TOML
// document — table headers, keys, array elements, inline tables — and skips
// over the contents of strings and comments. It runs only on text the TOML
// library has already accepted, so it need not diagnose anything; on odd input
// it must merely never panic or loop.

// keyPath is a key in a decoded document: table keys, with array positions as
// index components (see at). Its String form is what error messages show,
// e.g. `profiles.ci.call_rules[0].args.command[1]`.
type keyPath []string

// indexMark starts an index component. TOML keys cannot contain a raw NUL, and
// an escaped one renders quoted, so the two kinds never collide.
const indexMark = "\x00"

func (p keyPath) key(k ...string) keyPath {
	return append(p[:len(p):len(p)], k...)
}

func (p keyPath) at(i int) keyPath {
	return append(p[:len(p):len(p)], indexMark+strconv.Itoa(i))
}

// bare returns p without its index components, the form toml.Key uses.
func (p keyPath) bare() keyPath {
	out := make(keyPath, 0, len(p))
	for _, c := range p {
		if !strings.HasPrefix(c, indexMark) {
			out = append(out, c)
		}
	}
	return out
}

func (p keyPath) String() string {
	var b strings.Builder
	for i, c := range p {
		if n, ok := strings.CutPrefix(c, indexMark); ok {
			b.WriteString("[" + n + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(displayKey(c))
	}
	return b.String()
}

// displayKey writes k as TOML would: bare when it can be, else quoted.
func displayKey(k string) string {
	if isBareKey(k) {
		return k
	}
	return strconv.Quote(k)
}

func isBareKey(k string) bool {
	if k == "" {
		return false
	}
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// lineIndex maps key paths to the line where they are defined.
type lineIndex struct {
	lines map[string]int       // keyPath.String() → line
	bare  map[string][]keyPath // keyPath.bare().String() → every full path, in document order
}

// line returns the line of p, or of its nearest defined ancestor, or 0.
func (ix *lineIndex) line(p keyPath) int {
	for ; len(p) > 0; p = p[:len(p)-1] {
		if n, ok := ix.lines[p.String()]; ok {
			return n
		}
	}
	return 0
}

// occurrences returns the full paths (with array indexes) of a key path as the
// TOML library names it (without them).
func (ix *lineIndex) occurrences(bare keyPath) []keyPath {
	return ix.bare[bare.String()]
}

func (ix *lineIndex) record(p keyPath, line int) {
	s := p.String()
	if _, ok := ix.lines[s]; ok {
		return
	}
	ix.lines[s] = line
	b := p.bare().String()
	ix.bare[b] = append(ix.bare[b], p)
}

// scanLines builds the line index of a TOML document.
func scanLines(src string) *lineIndex {
	s := &lineScanner{
		src:    src,
		line:   1,
		ix:     &lineIndex{lines: map[string]int{}, bare: map[string][]keyPath{}},
		arrays: map[string]int{},
	}
	s.document()
	return s.ix
}

type lineScanner struct {
	src    string
	pos    int
	line   int
	ix     *lineIndex
	arrays map[string]int // array-of-tables path → entries seen so far
}

func (s *lineScanner) eof() bool { return s.pos >= len(s.src) }

func (s *lineScanner) peek() byte {
	if s.eof() {
		return 0
	}
	return s.src[s.pos]
}

func (s *lineScanner) hasPrefix(p string) bool { return strings.HasPrefix(s.src[s.pos:], p) }

// next consumes one byte, counting lines.
func (s *lineScanner) next() byte {
	c := s.src[s.pos]
	s.pos++
	if c == '\n' {
		s.line++
	}
	return c
}

// skipSpace skips blanks and, when newlines is set, newlines and comments.
func (s *lineScanner) skipSpace(newlines bool) {
	for !s.eof() {
		switch c := s.peek(); {
		case c == ' ' || c == '\t' || c == '\r':
			s.next()
		case newlines && c == '\n':
			s.next()
		case newlines && c == '#':
			s.skipLine()
		default:
			return
		}
	}
}

// skipLine skips to the start of the next line.
func (s *lineScanner) skipLine() {
	for !s.eof() && s.next() != '\n' {
	}
}

func (s *lineScanner) document() {
	var table keyPath
	for {
		s.skipSpace(true)
		if s.eof() {
			return
		}
		line := s.line
		switch {
		case s.hasPrefix("[["):
			s.pos += 2
			table = s.header(s.keys(), line, true)
		case s.peek() == '[':
			s.pos++
			table = s.header(s.keys(), line, false)
		default:
			start := s.pos
			s.keyValue(table)
			if s.pos == start {
				s.next() // never stall on input the grammar above does not expect
			}
		}
		s.skipLine()
	}
}

// header resolves a [table] or [[array]] header to a full path and records it.
// Like TOML, a header that goes through an array of tables refers to its last
// entry.
func (s *lineScanner) header(keys []string, line int, array bool) keyPath {
	var p keyPath
	for i, k := range keys {
		p = p.key(k)
		s.ix.record(p, line)
		last := i == len(keys)-1
		if n := s.arrays[p.String()]; n > 0 && !last {
			p = p.at(n - 1)
		}
		if last && array {
			n := s.arrays[p.String()]
			s.arrays[p.String()] = n + 1
			p = p.at(n)
			s.ix.record(p, line)
		}
	}
	return p
}

// keyValue reads `key = value` inside table and records the key and, for
// arrays and inline tables, what is inside the value.
func (s *lineScanner) keyValue(table keyPath) {
	line := s.line
	keys := s.keys()
	if len(keys) == 0 {
		return
	}
	p := table
	for _, k := range keys {
		p = p.key(k)
		s.ix.record(p, line)
	}
	s.skipSpace(false)
	if s.peek() != '=' {
		return
	}
	s.next()
	s.skipSpace(false)
	s.value(p)
}

// keys reads a dotted key (bare, "basic" or 'literal' parts) and the closing
// ] or ]] of a header if there is one.
func (s *lineScanner) keys() []string {
	var keys []string
	for {
		s.skipSpace(false)
		switch c := s.peek(); c {
		case '"':
			keys = append(keys, s.basicString())
		case '\'':
			keys = append(keys, s.literalString())
		default:
			start := s.pos
			for !s.eof() && !strings.ContainsRune(" \t\r\n=.[]#,{}\"'", rune(s.peek())) {
				s.pos++
			}
			if s.pos == start {
				return keys
			}
			keys = append(keys, s.src[start:s.pos])
		}
		s.skipSpace(false)
		switch {
		case s.peek() == '.':
			s.pos++
		case s.hasPrefix("]]"):
			s.pos += 2
			return keys
		case s.peek() == ']':
			s.pos++
			return keys
		default:
			return keys
		}
	}
}

// value skips one value, recording array elements as p[i] and inline table
// keys as p.key.
func (s *lineScanner) value(p keyPath) {
	switch {
	case s.hasPrefix(`"""`):
		s.multiline(`"""`)
	case s.hasPrefix(`'''`):
		s.multiline(`'''`)
	case s.peek() == '"':
		s.basicString()
	case s.peek() == '\'':
		s.literalString()
	case s.peek() == '[':
		s.next()
		for i := 0; ; {
			s.skipSpace(true)
			if s.eof() {
				return
			}
			switch s.peek() {
			case ']':
				s.next()
				return
			case ',':
				s.next()
			default:
				start := s.pos
				s.ix.record(p.at(i), s.line)
				s.value(p.at(i))
				i++
				if s.pos == start {
					s.next()
				}
			}
		}
	case s.peek() == '{':
		s.next()
		for {
			s.skipSpace(true)
			if s.eof() {
				return
			}
			switch s.peek() {
			case '}':
				s.next()
				return
			case ',':
				s.next()
			default:
				start := s.pos
				s.keyValue(p)
				if s.pos == start {
					s.next()
				}
			}
		}
	default: // number, bool, date: up to the next delimiter
		for !s.eof() && !strings.ContainsRune(",]}#\n", rune(s.peek())) {
			s.pos++
		}
	}
}

// basicString reads a "…" string and returns its (roughly) unescaped content;
// the content matters only for quoted keys.
func (s *lineScanner) basicString() string {
	s.pos++ // opening quote
	var b strings.Builder
	for !s.eof() {
		c := s.peek()
		switch {
		case c == '"':
			s.pos++
			return b.String()
		case c == '\n':
			return b.String()
		case c == '\\' && s.pos+1 < len(s.src):
			s.pos++
			b.WriteString(s.escape())
		default:
			b.WriteByte(c)
			s.pos++
		}
	}
	return b.String()
}

// escape decodes the escape sequence after a backslash.
func (s *lineScanner) escape() string {
	c := s.src[s.pos]
	s.pos++
	simple := map[byte]string{'b': "\b", 't': "\t", 'n': "\n", 'f': "\f", 'r': "\r", 'e': "\x1b", '"': `"`, '\\': `\`}
	if r, ok := simple[c]; ok {
		return r
	}
	digits := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
	if digits == 0 || s.pos+digits > len(s.src) {
		return string(c)
	}
	n, err := strconv.ParseUint(s.src[s.pos:s.pos+digits], 16, 32)
	if err != nil || !utf8.ValidRune(rune(n)) {
		return string(c)
	}
	s.pos += digits
	return string(rune(n))
}

func (s *lineScanner) literalString() string {
	s.pos++
	start := s.pos
	for !s.eof() && s.peek() != '\'' && s.peek() != '\n' {
		s.pos++
	}
	out := s.src[start:s.pos]
	if s.peek() == '\'' {
		s.pos++
	}
	return out
}

// multiline skips a """…""" or ”'…”' string, which may end with up to two
// extra quote characters.
func (s *lineScanner) multiline(delim string) {
	s.pos += len(delim)
	for !s.eof() {
		if s.hasPrefix(delim) {
			s.pos += len(delim)
			for i := 0; i < 2 && s.peek() == delim[0]; i++ {
				s.pos++
			}
			return
		}
		if delim == `"""` && s.peek() == '\\' && s.pos+1 < len(s.src) {
			s.next()
		}
		s.next()
	}
}
