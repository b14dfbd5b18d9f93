// Package glob owns mcpmux's glob patterns: the `*`, `?`, `[…]` syntax used by
// filter rules, toolsets, read-only overrides and call rules.
//
// A pattern always matches the whole name, case-sensitively. Unlike shell or
// path globs there is no separator: `*` and `?` match any rune, including `/`
// and `.`. Patterns are translated to anchored RE2 regular expressions, so
// matching is linear in the length of the name.
package glob

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// ErrBadPattern is wrapped by every error Compile returns; check it with
// errors.Is.
var ErrBadPattern = errors.New("invalid glob")

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
// and wraps ErrBadPattern.
func Compile(pattern string) (*Glob, error) {
	if !utf8.ValidString(pattern) {
		return nil, badPattern(pattern, "not valid UTF-8")
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
			re.WriteString(".*")
			continue
		case '?':
			literal = false
			re.WriteString(".")
		case '[':
			literal = false
			class, n, err := compileClass(pattern, i)
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
// into an RE2 class and reports how many bytes of pattern it used.
func compileClass(pattern string, start int) (string, int, error) {
	var b strings.Builder
	b.WriteByte('[')
	i := start + 1
	if i < len(pattern) && (pattern[i] == '!' || pattern[i] == '^') {
		b.WriteByte('^')
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
		b.WriteString(classLiteral(lo))
		if hi != lo {
			b.WriteByte('-')
			b.WriteString(classLiteral(hi))
		}
		items++
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
