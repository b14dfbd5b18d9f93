package glob

import (
	"errors"
	"regexp"
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

func TestGuarded(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
		match   []string
		noMatch []string
	}{
		{"star admits plain arguments", "git log *",
			[]string{"git log ", "git log --oneline -5", "git log main..HEAD -- docs/", "git log --format=%h@{u}", "git log ünïcødé"},
			[]string{"git log; rm -rf /", "git log -5; rm -rf /", "git log && x", "git log -5 && x", "git log -1\nrm", "git log || x", "git log | sh", "git log $(x)", "git log ${x}", "git log `x`",
				"git log\nrm", "git log \nrm", "git log\rrm", "git log\x00", "git log \x1b[2J", "git log \u0085x", "git log > f", "git log < f",
				"git log 'x'", `git log "x"`, `git log \x`, "git log & x", "git log (x)", "git log \x7f"}},
		{"literal spelled-out metacharacters", "git status; git log",
			[]string{"git status; git log"}, []string{"git status; git lo", "git status& git log"}},
		{"escaped metacharacter", `echo \$HOME*`, []string{"echo $HOME", "echo $HOME/x"}, []string{"echo $HOME; x", "echo x"}},
		{"metacharacter in class", "a[;]*", []string{"a;", "a;b"}, []string{"a&", "a;;"}},
		{"question refuses metacharacters", "a?c", []string{"abc", "a/c", "aüc"}, []string{"a;c", "a\nc", "a$c", "a\tc"}},
		{"negated class refuses metacharacters", "[!a]", []string{"b", "/"}, []string{"a", ";", "\n", "$", `\`}},
		{"negated class naming a metacharacter", "[!;]", []string{"b"}, []string{";", "&", "\n"}},
		{"range refuses unnamed metacharacters inside it", "[ -~]*", []string{"git log -5", "a=b{c}[d]~"},
			[]string{";", "&", "|", "`", "$", "(", ")", "<", ">", `\`, "'", `"`, "\n"}},
		{"range keeps the metacharacters at its ends", "[$-&]", []string{"$", "%", "&"}, []string{"'", "#", "\x25\x25"}},
		{"range across control characters", "[\x00-a]", []string{"\x00", "0", "a", "!"}, []string{"\n", "\x01", ";"}},
		{"range above ASCII", "[~-\u00ff]", []string{"~", "\u00a0", "\u00ff"}, []string{"\x7f", "\u0085", "\u009f"}},
		{"star alone", "*", []string{"", "anything at all", "ü"}, []string{"a\nb", ";", "\t"}},
		{"literal newline", "a\nb", []string{"a\nb"}, []string{"a b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := Compile(tt.pattern, Guarded())
			if err != nil {
				t.Fatalf("Compile(%q, Guarded()): %v", tt.pattern, err)
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

// TestGuardedIsAnOption checks that only Guarded changes what wildcards
// match: the same pattern compiled plainly keeps admitting metacharacters.
func TestGuardedIsAnOption(t *testing.T) {
	plain, err := Compile("git log *")
	if err != nil {
		t.Fatal(err)
	}
	if !plain.Match("git log -5; rm -rf /") || !plain.Match("git log \nrm") {
		t.Fatal("a plain glob no longer matches metacharacters with *")
	}
	for _, pat := range []string{"[", "a\\", "[z-a]", "a\xff"} {
		_, perr := Compile(pat)
		_, gerr := Compile(pat, Guarded())
		if (perr == nil) != (gerr == nil) {
			t.Errorf("%q: plain error %v, guarded error %v: Guarded must not change validity", pat, perr, gerr)
		}
	}
}

// TestGuardedClass checks that the three spellings of the guarded runes —
// IsGuarded, guardedClass and guardedRanges — agree on every rune up to
// U+0800 and on the runes where they could plausibly drift.
func TestGuardedClass(t *testing.T) {
	re := regexp.MustCompile(`^[` + guardedClass + `]$`)
	inRanges := func(r rune) bool {
		for _, g := range guardedRanges {
			if g[0] <= r && r <= g[1] {
				return true
			}
		}
		return false
	}
	for i := 1; i < len(guardedRanges); i++ {
		if guardedRanges[i-1][1] >= guardedRanges[i][0] {
			t.Fatalf("guardedRanges not sorted and disjoint at %d", i)
		}
	}
	runes := []rune{0x2028, 0x2029, 0xfeff, 0xfffd, 0x10ffff}
	for r := rune(0); r < 0x800; r++ {
		runes = append(runes, r)
	}
	for _, r := range runes {
		want := IsGuarded(r)
		if got := re.MatchString(string(r)); got != want {
			t.Errorf("U+%04X: guardedClass %v, IsGuarded %v", r, got, want)
		}
		if got := inRanges(r); got != want {
			t.Errorf("U+%04X: guardedRanges %v, IsGuarded %v", r, got, want)
		}
	}
	for _, r := range Metacharacters {
		if !IsGuarded(r) {
			t.Errorf("%q is in Metacharacters but not guarded", r)
		}
	}
}

// FuzzGuarded checks the promise of Guarded: a name that contains a guarded
// rune matches only a pattern that contains that rune.
func FuzzGuarded(f *testing.F) {
	for _, seed := range [][2]string{
		{"git log *", "git log; rm -rf /"}, {"*", "a\nb"}, {"[!a]", ";"}, {"[ -~]", "$"},
		{"a?c", "a|c"}, {`\\*`, `\x`}, {"[$-&]", "%"}, {"git status", "git status"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		g, err := Compile(pattern, Guarded())
		if err != nil || !g.Match(name) {
			return
		}
		for _, r := range name {
			if IsGuarded(r) && !strings.ContainsRune(pattern, r) {
				t.Fatalf("%q matches %q, which holds %q that the pattern does not spell out", pattern, name, r)
			}
		}
		// Guarded only narrows: what it matches, the plain glob matches too.
		if p, err := Compile(pattern); err != nil || !p.Match(name) {
			t.Fatalf("%q matches %q guarded but not plain (%v)", pattern, name, err)
		}
	})
}

// TestQuote checks that a quoted name, compiled plain or guarded, matches
// that name and nothing else, whatever pattern characters it holds.
func TestQuote(t *testing.T) {
	names := []string{"plain_tool", "gh__*", "a?b", "[x]", `back\slash`, "*", `\*`, "ü*[?]"}
	for _, name := range names {
		for _, opts := range [][]Option{nil, {Guarded()}} {
			g, err := Compile(Quote(name), opts...)
			if err != nil {
				t.Fatalf("Quote(%q) = %q does not compile: %v", name, Quote(name), err)
			}
			for _, other := range names {
				if got := g.Match(other); got != (other == name) {
					t.Errorf("Quote(%q) = %q matches %q: %v", name, Quote(name), other, got)
				}
			}
		}
	}
}
