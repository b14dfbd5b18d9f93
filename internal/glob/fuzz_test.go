package glob

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzGuardedCount is a stronger form of FuzzGuarded: under Guarded, a
// wildcard never matches a control character or a shell metacharacter,
// so a value matches only if the pattern spells out each such
// rune it holds, as many times as it holds it. Every atom of a pattern
// matches one rune except `*`, so each occurrence of a guarded rune in the
// value needs an atom of its own that names it: the pattern's text holds
// that rune at least as many times as the value does.
func FuzzGuardedCount(f *testing.F) {
	for _, s := range [][2]string{
		{"git log *", "git log --oneline -5"},
		{"git log *", "git log ;x"},
		{"git log *", "git log $(x)"},
		{"git log *", "git log \nx"},
		{"git log *", "git log \u0085x"},
		{"git log ?x", "git log `x"},
		{"a[!b]c", "a;c"},
		{"a[ -~]c", "a|c"},
		{"a[$-/]c", "a&c"},
		{"a[!a-z]*", "a\\\\"},
		{`a\;*`, "a;;"},
		{"[;]*", ";;"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, value string) {
		g, err := Compile(pattern, Guarded())
		if err != nil || !g.Match(value) {
			return
		}
		if !utf8.ValidString(value) {
			return // a value from JSON is always valid UTF-8
		}
		seen := map[rune]bool{}
		for _, r := range value {
			if !IsGuarded(r) || seen[r] {
				continue
			}
			seen[r] = true
			if n, p := strings.Count(value, string(r)), strings.Count(pattern, string(r)); n > p {
				t.Fatalf("Guarded %q matches %q: %d × %q in the value, %d in the pattern", pattern, value, n, r, p)
			}
		}
	})
}
