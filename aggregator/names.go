package aggregator

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/viewmux/viewmux/configs"
)

// Namer turns an upstream's original tool or prompt name into the name viewmux
// exposes, <prefix><separator><original> made safe and short enough
// (Expose). The zero value is not usable; build one with the server's
// separator and max_name_length. A Namer is immutable and safe for
// concurrent use.
type Namer struct {
	Separator string // between prefix and name; never empty
	MaxLength int    // longest exposed name; at least 16
}

// hashLen is the length of the "_<8 hex>" suffix added to names that had to
// be sanitized or truncated.
const hashLen = 9

// Expose returns the exposed name of original under prefix. An empty prefix
// mounts the name unprefixed, without separator.
//
// Characters outside [A-Za-z0-9_-] become '_'. When that changed anything, or
// the result is longer than MaxLength, the name is cut to MaxLength-9 bytes
// and "_" plus 8 hex digits of sha256(prefix, NUL, original) are appended, so
// the name is stable across restarts and depends on nothing but (prefix,
// original).
func (n Namer) Expose(prefix, original string) string {
	full := original
	if prefix != "" {
		full = prefix + n.Separator + original
	}
	clean, changed := sanitize(full)
	if !changed && len(clean) <= n.MaxLength && original != "" {
		return clean
	}
	sum := sha256.Sum256([]byte(prefix + "\x00" + original))
	keep := n.MaxLength - hashLen
	if len(clean) > keep {
		clean = clean[:keep]
	}
	return clean + "_" + hex.EncodeToString(sum[:4])
}

// sanitize maps every byte outside [A-Za-z0-9_-] to '_'. A multi-byte rune
// becomes a single '_'. It reports whether anything changed.
func sanitize(s string) (string, bool) {
	ok := true
	for i := 0; i < len(s); i++ {
		if !nameByte(s[i]) {
			ok = false
			break
		}
	}
	if ok {
		return s, false
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r < 0x80 && nameByte(byte(r)) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String(), true
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// ValidName reports whether s could be an exposed name of at most max bytes.
func ValidName(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	_, changed := sanitize(s)
	return !changed
}

// namespaces is the exposed-name space that prefixes own: every name that
// starts with "<prefix><separator>" belongs to the upstream of that prefix,
// whether or not it is up, and the prefix reserved for viewmux's own tools
// belongs to viewmux. An unprefixed upstream may not put a tool or prompt
// there: the name would shadow, or wait to shadow, its owner's.
type namespaces []namespace

type namespace struct {
	lead  string // "<prefix><separator>"
	owner string // upstream name, or "" for viewmux itself
}

// namespacesOf returns the namespaces of the sources' non-empty prefixes
// and of the reserved prefix.
func namespacesOf(namer Namer, sources []*source) namespaces {
	ns := namespaces{{lead: configs.ReservedPrefix + namer.Separator}}
	for _, src := range sources {
		if p := src.cfg.Prefix; p != "" {
			ns = append(ns, namespace{lead: p + namer.Separator, owner: src.cfg.Name})
		}
	}
	return ns
}

// owner returns the namespace an unprefixed upstream's name falls in, by
// its original or its exposed (sanitized, possibly truncated) form, and
// whether there is one.
func (ns namespaces) owner(original, exposed string) (namespace, bool) {
	for _, n := range ns {
		if strings.HasPrefix(exposed, n.lead) || strings.HasPrefix(original, n.lead) {
			return n, true
		}
	}
	return namespace{}, false
}
