// Package glob owns viewmux's glob patterns: the `*`, `?`, `[…]` syntax used by
// filter rules, toolsets, read-only overrides and call rules.
//
// A pattern always matches the whole name, case-sensitively. Unlike shell or
// path globs there is no separator: `*` and `?` match any rune, including `/`
// and `.`. Patterns are translated to anchored RE2 regular expressions, so
// matching is linear in the length of the name.
//
// Call rules compile their argument patterns with the Guarded option, under
// which no wildcard matches a control character or a shell metacharacter;
// every other use keeps the plain semantics.
package glob

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrBadPattern is wrapped by every error Compile returns; check it with
// errors.Is.
var ErrBadPattern = errors.New("invalid glob")

// Metacharacters are the runes, besides every control character, that a
// wildcard never matches under Guarded: the characters with which a shell
// (or a program that hands a string to one) chains, substitutes, redirects,
// quotes or escapes.
const Metacharacters = ";&|`$()<>\\'\""

// IsGuarded reports whether r is a rune that wildcards never match under
// Guarded: a control character (Unicode category Cc: U+0000–U+001F,
// U+007F–U+009F, so newline and carriage return too) or one of Metacharacters.
func IsGuarded(r rune) bool {
	return unicode.IsControl(r) || r < utf8.RuneSelf && strings.ContainsRune(Metacharacters, r)
}

// guardedClass is the RE2 class body of the runes IsGuarded reports; the two
// are kept equal by TestGuardedClass.
const guardedClass = `\p{Cc};&|\x60$()<>\\'"`

// guardedRanges are the runes of guardedClass as sorted, disjoint ranges, for
// cutting them out of a class range.
var guardedRanges = [][2]rune{
	{0x00, 0x1f}, {'"', '"'}, {'$', '$'}, {'&', ')'}, {';', ';'}, {'<', '<'},
	{'>', '>'}, {'\\', '\\'}, {'`', '`'}, {'|', '|'}, {0x7f, 0x9f},
}

// Option changes how Compile reads a pattern.
type Option func(*options)

type options struct {
	guarded bool
}

// Guarded makes the wildcards of a pattern refuse control characters and
// Metacharacters: `*`, `?` and negated classes such as `[!a]` never match
// one, and a range such as `[ -~]` matches one only at an end it spells out.
// A value containing such a rune therefore matches only a pattern that spells
// that rune out: literally, escaped (`\;`), or as an item of a class (`[;]`).
// So `git log *` matches "git log --oneline -5" and not "git log; rm -rf /",
// "git log $(x)" or "git log\nrm".
//
// It is meant for call-rule argument values, which upstream tools may pass
// to a shell; it is not a shell parser, and it does not make an argument
// safe to interpolate: it only keeps wildcards from admitting the characters
// that would change what a spelled-out prefix means.
func Guarded() Option { return func(o *options) { o.guarded = true } }

// Glob is a compiled pattern. It is immutable and safe for concurrent use.
type Glob struct {
	pattern string
	literal bool           // pattern has no metacharacters: Match is string equality
	text    string         // the unescaped literal when literal is true
	re      *regexp.Regexp // nil when literal is true
}

// Compile compiles pattern. The syntax is:
//
//	a*b     * matches any run of runes, including the empty one
//	a?c     ? matches exactly one rune
//	[abc]   one rune from the class; ranges such as [a-z] are allowed
//	[!abc]  one rune not in the class ([^abc] is the same)
//	\*      a backslash makes the next rune literal (also inside a class)
//
// Any other rune matches itself. The error for an unterminated or empty class,
// a reversed range, a trailing backslash or invalid UTF-8 names the pattern
// and wraps ErrBadPattern. Options (see Guarded) change what wildcards match,
// never which patterns are valid.
func Compile(pattern string, opts ...Option) (*Glob, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if !utf8.ValidString(pattern) {
		return nil, badPattern(pattern, "not valid UTF-8")
	}
	wild := "."
	if o.guarded {
		wild = "[^" + guardedClass + "]"
	}
	var (
		re      strings.Builder // the body of the regexp
		lit     strings.Builder // the unescaped text, while the pattern stays literal
		literal = true
	)
	for i := 0; i < len(pattern); {
		r, size := utf8.DecodeRuneInString(pattern[i:])
		switch r {
		case '*':
			literal = false
			// A run of stars means the same as one.
			for i < len(pattern) && pattern[i] == '*' {
				i++
			}
			re.WriteString(wild + "*")
			continue
		case '?':
			literal = false
			re.WriteString(wild)
		case '[':
			literal = false
			class, n, err := compileClass(pattern, i, o.guarded)
			if err != nil {
				return nil, err
			}
			re.WriteString(class)
			i += n
			continue
		case '\\':
			if i+size >= len(pattern) {
				return nil, badPattern(pattern, "trailing backslash")
			}
			i += size
			r, size = utf8.DecodeRuneInString(pattern[i:])
			re.WriteString(regexp.QuoteMeta(string(r)))
			lit.WriteRune(r)
		default:
			re.WriteString(regexp.QuoteMeta(string(r)))
			lit.WriteRune(r)
		}
		i += size
	}
	g := &Glob{pattern: pattern}
	if literal {
		g.literal, g.text = true, lit.String()
		return g, nil
	}
	compiled, err := regexp.Compile(`^(?s:` + re.String() + `)$`)
	if err != nil {
		// The translation only produces valid syntax; this guards against a
		// bug in it rather than against user input.
		return nil, badPattern(pattern, err.Error())
	}
	g.re = compiled
	return g, nil
}

// compileClass translates the class that starts at pattern[start] (a '[')
// into an RE2 class and reports how many bytes of pattern it used. When
// guarded, a negated class also excludes every guarded rune, and a range
// keeps a guarded rune only at an end that spells it out.
func compileClass(pattern string, start int, guarded bool) (string, int, error) {
	var b strings.Builder
	b.WriteByte('[')
	i := start + 1
	negated := false
	if i < len(pattern) && (pattern[i] == '!' || pattern[i] == '^') {
		b.WriteByte('^')
		negated = true
		i++
	}
	items := 0
	for {
		if i >= len(pattern) {
			return "", 0, badPattern(pattern, fmt.Sprintf("unterminated [ at offset %d", start))
		}
		if pattern[i] == ']' {
			if items == 0 {
				return "", 0, badPattern(pattern, fmt.Sprintf("empty class at offset %d", start))
			}
			if guarded && negated {
				b.WriteString(guardedClass)
			}
			b.WriteByte(']')
			return b.String(), i + 1 - start, nil
		}
		lo, n, err := classRune(pattern, i)
		if err != nil {
			return "", 0, err
		}
		i += n
		hi := lo
		// A '-' between two runes makes a range; a '-' before ']' is literal.
		if i+1 < len(pattern) && pattern[i] == '-' && pattern[i+1] != ']' {
			hi, n, err = classRune(pattern, i+1)
			if err != nil {
				return "", 0, err
			}
			if hi < lo {
				return "", 0, badPattern(pattern, fmt.Sprintf("range %c-%c is reversed", lo, hi))
			}
			i += 1 + n
		}
		if guarded && !negated && hi != lo {
			writeUnguarded(&b, lo, hi)
		} else {
			writeRange(&b, lo, hi)
		}
		items++
	}
}

// writeRange writes the class item lo-hi (or lo alone).
func writeRange(b *strings.Builder, lo, hi rune) {
	b.WriteString(classLiteral(lo))
	if hi != lo {
		b.WriteByte('-')
		b.WriteString(classLiteral(hi))
	}
}

// writeUnguarded writes the range lo-hi without the guarded runes strictly
// inside it; its ends, which the pattern spells out, stay.
func writeUnguarded(b *strings.Builder, lo, hi rune) {
	writeRange(b, lo, lo)
	writeRange(b, hi, hi)
	next := lo + 1 // the first rune of lo+1..hi-1 not yet written or cut
	for _, g := range guardedRanges {
		if g[1] < next {
			continue
		}
		if g[0] >= hi {
			break
		}
		if g[0] > next {
			writeRange(b, next, g[0]-1)
		}
		next = g[1] + 1
	}
	if next < hi {
		writeRange(b, next, hi-1)
	}
}

// classRune reads one (possibly backslash-escaped) rune of a class.
func classRune(pattern string, i int) (rune, int, error) {
	if pattern[i] == '\\' {
		if i+1 >= len(pattern) {
			return 0, 0, badPattern(pattern, "trailing backslash")
		}
		r, size := utf8.DecodeRuneInString(pattern[i+1:])
		return r, 1 + size, nil
	}
	r, size := utf8.DecodeRuneInString(pattern[i:])
	return r, size, nil
}

// classLiteral writes r so that RE2 reads it literally inside a class. RE2
// accepts a backslash before any ASCII punctuation; letters and digits must not
// be escaped (\d, \w mean something else).
func classLiteral(r rune) string {
	if r < utf8.RuneSelf && strings.ContainsRune("\\]-[^:", r) {
		return `\` + string(r)
	}
	return string(r)
}

func badPattern(pattern, msg string) error {
	return fmt.Errorf("%w %q: %s", ErrBadPattern, pattern, msg)
}

// Match reports whether name matches the whole pattern.
func (g *Glob) Match(name string) bool {
	if g.literal {
		return name == g.text
	}
	return g.re.MatchString(name)
}

// String returns the pattern as given to Compile.
func (g *Glob) String() string { return g.pattern }

// Quote returns the pattern that matches exactly s: its wildcard, class and
// escape characters (`*`, `?`, `[`, `]`, `\`) escaped with a backslash. It
// is for names taken literally where a pattern is expected, such as a
// request's X-MCP-Exclude-Tools or an imported tool filter.
func Quote(s string) string {
	const special = `*?[]\`
	if !strings.ContainsAny(s, special) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(special, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
