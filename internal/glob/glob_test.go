package glob

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestMatch(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
		match   []string
		noMatch []string
	}{
		{"literal", "get_issue", []string{"get_issue"}, []string{"get_issues", "Get_issue", "xget_issue", ""}},
		{"empty pattern", "", []string{""}, []string{"a"}},
		{"star matches empty", "get_*", []string{"get_", "get_issue", "get_a/b.c"}, []string{"get", "list_get_x"}},
		{"star alone", "*", []string{"", "anything", "a\nb", "ü"}, nil},
		{"star in middle", "*__delete_*", []string{"gh__delete_repo", "__delete_"}, []string{"gh__remove_repo", "gh_delete_x"}},
		{"stars collapse", "a**b", []string{"ab", "axxb"}, []string{"a", "ba"}},
		{"question is one rune", "a?c", []string{"abc", "a/c", "a.c", "aüc"}, []string{"ac", "abbc"}},
		{"star crosses slash and dot", "repo*md", []string{"repo/docs/readme.md"}, []string{"repo/readme.mdx"}},
		{"class", "[abc]x", []string{"ax", "cx"}, []string{"dx", "x", "abx"}},
		{"range", "v[0-9]", []string{"v0", "v9"}, []string{"va", "v10"}},
		{"negated bang", "[!a-c]", []string{"d", "/"}, []string{"a", "b", ""}},
		{"negated caret", "[^a-c]", []string{"d"}, []string{"c"}},
		{"class with literal dash at end", "[a-]", []string{"a", "-"}, []string{"b"}},
		{"class with escaped bracket", `[\]]`, []string{"]"}, []string{`\`}},
		{"class with special chars", `[\\^.*]`, []string{`\`, "^", ".", "*"}, []string{"a"}},
		{"class with open bracket and colon", "[[:]", []string{"[", ":"}, []string{"a"}},
		{"escaped star", `a\*`, []string{"a*"}, []string{"ab", `a\*`}},
		{"escaped question", `\?`, []string{"?"}, []string{"a"}},
		{"regexp metachars are literal", "a.b+(c)|d$", []string{"a.b+(c)|d$"}, []string{"axb+(c)|d$", "abbc"}},
		{"unmatched close bracket is literal", "a]", []string{"a]"}, []string{"a"}},
		{"case sensitive", "Get*", []string{"Get_x"}, []string{"get_x"}},
		{"unicode class", "[ä-ü]", []string{"ö"}, []string{"a"}},
		{"newline in name", "a*", []string{"a\nb"}, []string{"\na"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := Compile(tt.pattern)
			if err != nil {
				t.Fatalf("Compile(%q): %v", tt.pattern, err)
			}
			if g.String() != tt.pattern {
				t.Errorf("String() = %q, want %q", g.String(), tt.pattern)
			}
			for _, s := range tt.match {
				if !g.Match(s) {
					t.Errorf("%q should match %q", tt.pattern, s)
				}
			}
			for _, s := range tt.noMatch {
				if g.Match(s) {
					t.Errorf("%q should not match %q", tt.pattern, s)
				}
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
		want    string
	}{
		{"unterminated class", "get_[abc", "unterminated ["},
		{"unterminated after negation", "[!", "unterminated ["},
		{"unterminated with escaped close", `[a\]`, "unterminated ["},
		{"empty class", "a[]b", "empty class"},
		{"empty negated class", "[!]", "empty class"},
		{"trailing backslash", `abc\`, "trailing backslash"},
		{"trailing backslash in class", `[a\`, "trailing backslash"},
		{"reversed range", "[z-a]", "reversed"},
		{"invalid utf8", "a\xffb", "UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := Compile(tt.pattern)
			if err == nil {
				t.Fatalf("Compile(%q) = %v, want error", tt.pattern, g)
			}
			if !errors.Is(err, ErrBadPattern) {
				t.Errorf("error %v does not wrap ErrBadPattern", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if !strings.Contains(err.Error(), strconv.Quote(tt.pattern)) {
				t.Errorf("error %q does not name the pattern %q", err, tt.pattern)
			}
		})
	}
}

func FuzzCompile(f *testing.F) {
	for _, seed := range []string{"", "*", "get_*", "a?c", "[a-z]", "[!x]", `\*`, "[", "[]", `\`, "a.b", "ü[ä-ü]*"} {
		f.Add(seed, "get_issue")
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		g, err := Compile(pattern)
		if err != nil {
			return
		}
		_ = g.Match(name) // must not panic
		if utf8.ValidString(name) {
			// Each rune of name as a one-rune class goes through the regexp
			// translation and must match exactly name.
			var b strings.Builder
			for _, r := range name {
				b.WriteString(`[\` + string(r) + `]`)
			}
			c, err := Compile(b.String())
			if err != nil {
				t.Fatalf("Compile(%q): %v", b.String(), err)
			}
			if !c.Match(name) || c.Match(name+"x") || (name != "" && c.Match(name[1:])) {
				t.Fatalf("class-quoted %q does not match exactly %q", b.String(), name)
			}
		}
		if strings.ContainsAny(pattern, `*?[\`) {
			return
		}
		// A pattern without metacharacters is a literal: it matches exactly itself.
		if !g.Match(pattern) {
			t.Fatalf("literal %q does not match itself", pattern)
		}
		if g.Match(pattern+"x") || (pattern != "" && g.Match(pattern[1:])) {
			t.Fatalf("literal %q matches more than itself", pattern)
		}
		if g.Match(name) != (name == pattern) {
			t.Fatalf("literal %q: Match(%q) = %v", pattern, name, g.Match(name))
		}
	})
}

func BenchmarkMatch(b *testing.B) {
	g, err := Compile("*__delete_*")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		g.Match("github__delete_repository")
	}
}
