package aggregator

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

func hashOf(prefix, original string) string {
	sum := sha256.Sum256([]byte(prefix + "\x00" + original))
	return hex.EncodeToString(sum[:4])
}

func TestExpose(t *testing.T) {
	n := Namer{Separator: "__", MaxLength: 64}
	long := strings.Repeat("x", 80)
	tests := []struct {
		name, prefix, original, want string
	}{
		{"plain", "github", "create_issue", "github__create_issue"},
		{"dash kept", "gh", "get-sum", "gh__get-sum"},
		{"unprefixed", "", "echo", "echo"},
		{"dot sanitized", "fs", "read.file", "fs__read_file_" + hashOf("fs", "read.file")},
		{"slash sanitized", "fs", "a/b", "fs__a_b_" + hashOf("fs", "a/b")},
		{"space sanitized", "x", "do it", "x__do_it_" + hashOf("x", "do it")},
		{"non-ascii one underscore per rune", "x", "héllo", "x__h_llo_" + hashOf("x", "héllo")},
		{"exactly max length kept", "p", strings.Repeat("a", 61), "p__" + strings.Repeat("a", 61)},
		{"too long truncated", "p", long, ("p__" + long)[:55] + "_" + hashOf("p", long)},
		{"unprefixed sanitized", "", "a.b", "a_b_" + hashOf("", "a.b")},
		{"empty original", "p", "", "p___" + hashOf("p", "")},
	}
	valid := regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := n.Expose(tt.prefix, tt.original)
			if got != tt.want {
				t.Errorf("Expose(%q, %q) = %q, want %q", tt.prefix, tt.original, got, tt.want)
			}
			if !valid.MatchString(got) {
				t.Errorf("Expose(%q, %q) = %q, not a valid exposed name", tt.prefix, tt.original, got)
			}
		})
	}
}

func TestExposeStableAndIndependent(t *testing.T) {
	n := Namer{Separator: "__", MaxLength: 32}
	a := n.Expose("p", "some.tool.with.a.really.long.name")
	// The same (prefix, original) always gives the same name, whatever else
	// was named before.
	n.Expose("p", "other.tool")
	if b := n.Expose("p", "some.tool.with.a.really.long.name"); a != b {
		t.Fatalf("names differ across calls: %q vs %q", a, b)
	}
	// Two originals that sanitize and truncate to the same stem still
	// differ by their hash.
	x, y := n.Expose("p", "same.stem.but.different.end.one"), n.Expose("p", "same.stem.but.different.end.two")
	if x == y {
		t.Fatalf("distinct originals collided: %q", x)
	}
	// The hash covers the prefix: with an empty and a non-empty prefix
	// whose full names sanitize alike, the names still differ.
	if a, b := n.Expose("", "p__a.b"), n.Expose("p", "a.b"); a == b {
		t.Fatalf("hash ignores the prefix: both %q", a)
	}
}

func TestSeparatorAndMaxLength(t *testing.T) {
	n := Namer{Separator: "-", MaxLength: 20}
	if got := n.Expose("gh", "get"); got != "gh-get" {
		t.Fatalf("got %q", got)
	}
	got := n.Expose("gh", "a_very_long_tool_name_indeed")
	if len(got) != 20 {
		t.Fatalf("len(%q) = %d, want 20", got, len(got))
	}
}

func FuzzExpose(f *testing.F) {
	for _, s := range []string{"create_issue", "a.b", "héllo wörld", "", strings.Repeat("z", 200), "\x00\xff", "tab\there"} {
		f.Add("gh", s, 64)
	}
	valid := regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	f.Fuzz(func(t *testing.T, prefix, original string, max int) {
		if max < 16 || max > 128 {
			max = 16 + (max%113+113)%113
		}
		if prefix != "" && !ValidName(prefix, 128) {
			prefix = "p" // config validation guarantees a clean prefix
		}
		n := Namer{Separator: "__", MaxLength: max}
		got := n.Expose(prefix, original)
		if len(got) == 0 || len(got) > max {
			t.Fatalf("Expose(%q, %q) = %q: length %d outside 1..%d", prefix, original, got, len(got), max)
		}
		if !valid.MatchString(got) || !utf8.ValidString(got) {
			t.Fatalf("Expose(%q, %q) = %q: invalid characters", prefix, original, got)
		}
		if got != n.Expose(prefix, original) {
			t.Fatal("not deterministic")
		}
		clean := original != "" && valid.MatchString(original)
		full := original
		if prefix != "" {
			full = prefix + "__" + original
		}
		if clean && len(full) <= max && got != full {
			t.Fatalf("clean name %q rewritten to %q", full, got)
		}
		if (!clean || len(full) > max) && !strings.HasSuffix(got, "_"+hashOf(prefix, original)) {
			t.Fatalf("rewritten name %q lacks the hash suffix", got)
		}
	})
}
