// Package termsafe owns how text from children and upstreams is made safe
// to show on a terminal: a stderr line, an error an upstream wrote, a tool
// description. Such text may hold escape sequences that write the
// clipboard (OSC 52), clear the screen, retitle the window or hide what
// follows; Escape shows them as visible escapes instead.
package termsafe

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Escape returns s with every byte or character a terminal would act on
// written as a visible escape: C0 controls other than newline and tab
// (ESC becomes \x1b, CR \r), DEL, the C1 controls U+0080–U+009F (which
// some terminals take as CSI, OSC, …), Unicode's bidirectional and
// zero-width format controls (which reorder or hide text), and bytes that
// are not UTF-8 (\xNN). Everything else, backslashes included, is kept as
// it is, so Escape is not reversible: it is for showing, not for storing.
// A string with nothing to escape is returned as it is.
func Escape(s string) string {
	i := strings.IndexFunc(s, unsafe)
	if i < 0 && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80 && unsafe(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafe(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[:size])
		}
		s = s[size:]
	}
	return b.String()
}

// unsafe reports whether r is a character Escape writes as an escape.
func unsafe(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r < 0x20 || r == 0x7f:
		return true // C0 controls, ESC among them, and DEL
	case r >= 0x80 && r <= 0x9f:
		return true // C1 controls
	case r >= 0x200b && r <= 0x200f, // zero-width space … right-to-left mark
		r >= 0x202a && r <= 0x202e, // bidi embeddings and overrides
		r >= 0x2066 && r <= 0x2069, // bidi isolates
		r == 0x061c, r == 0xfeff:   // Arabic letter mark, zero-width no-break space
		return true
	}
	return false
}
