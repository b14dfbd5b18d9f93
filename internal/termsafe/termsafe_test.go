package termsafe

import (
	"strings"
	"testing"
)

func TestEscape(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"plain", "hello, wörld ✓", "hello, wörld ✓"},
		{"newline and tab kept", "a\tb\nc", "a\tb\nc"},
		{"OSC 52 clipboard write", "\x1b]52;c;ZWNobyBwd25lZA==\x07", `\x1b]52;c;ZWNobyBwd25lZA==\x07`},
		{"clear screen", "\x1b[2J\x1b[H", `\x1b[2J\x1b[H`},
		{"carriage return", "ok\rFAKE", `ok\rFAKE`},
		{"DEL and NUL", "a\x7fb\x00", `a\x7fb\x00`},
		{"C1 CSI", "a\u009b2Jb", `a\u009b2Jb`},
		{"bidi override", "user\u202etxt.exe", `user\u202etxt.exe`},
		{"invalid UTF-8", "a\xffb\xc2", `a\xffb\xc2`},
		{"backslash kept", `C:\path`, `C:\path`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Escape(tt.in)
			if got != tt.want {
				t.Errorf("Escape(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if strings.ContainsAny(got, "\x1b\x07\r\x00\x7f\u009b\u202e") {
				t.Errorf("Escape(%q) = %q still holds a control character", tt.in, got)
			}
		})
	}
}

func FuzzEscape(f *testing.F) {
	f.Add("\x1b]52;c;x\x07\u009b\xff")
	f.Fuzz(func(t *testing.T, s string) {
		for _, r := range Escape(s) {
			if unsafe(r) || r == '\r' {
				t.Fatalf("Escape(%q) holds %U", s, r)
			}
		}
	})
}
