package toolsearch

import "strings"

// Stem reduces a lower-case English word to its stem with the Porter
// stemmer (M.F. Porter, "An algorithm for suffix stripping", 1980), so
// that a word's inflections and derivations meet: files → file;
// directories → directori; listed, listing, lists → list; writing →
// write; configuration → configur; compression, compressed → compress.
// One departure: a three-letter stem keeps its double consonant
// (added → add, like add). Words of three letters or fewer, and words
// with anything but ASCII letters, stay as they are.
func Stem(w string) string {
	if len(w) <= 3 {
		return w
	}
	for i := 0; i < len(w); i++ {
		if w[i] < 'a' || w[i] > 'z' {
			return w
		}
	}
	b := []byte(w)
	b = step1a(b)
	b = step1b(b)
	b = step1c(b)
	b = replaceSuffix(b, step2, 0)
	b = replaceSuffix(b, step3, 0)
	b = step4(b)
	b = step5(b)
	return string(b)
}

// consonant reports whether b[i] is a consonant: a letter other than a,
// e, i, o, u, and other than a y that follows a consonant.
func consonant(b []byte, i int) bool {
	switch b[i] {
	case 'a', 'e', 'i', 'o', 'u':
		return false
	case 'y':
		return i == 0 || !consonant(b, i-1)
	}
	return true
}

// measure returns m, the number of vowel-consonant sequences in b:
// b is [C](VC){m}[V].
func measure(b []byte) int {
	m, i := 0, 0
	for i < len(b) && consonant(b, i) {
		i++
	}
	for i < len(b) {
		for i < len(b) && !consonant(b, i) {
			i++
		}
		if i == len(b) {
			break
		}
		for i < len(b) && consonant(b, i) {
			i++
		}
		m++
	}
	return m
}

// hasVowel reports whether b holds a vowel (*v*).
func hasVowel(b []byte) bool {
	for i := range b {
		if !consonant(b, i) {
			return true
		}
	}
	return false
}

// doubleConsonant reports whether b ends with two equal consonants (*d).
func doubleConsonant(b []byte) bool {
	n := len(b)
	return n >= 2 && b[n-1] == b[n-2] && consonant(b, n-1)
}

// cvc reports whether b ends consonant, vowel, consonant, the last not w,
// x or y (*o): hop, but not snow or box.
func cvc(b []byte) bool {
	n := len(b)
	if n < 3 || !consonant(b, n-1) || consonant(b, n-2) || !consonant(b, n-3) {
		return false
	}
	c := b[n-1]
	return c != 'w' && c != 'x' && c != 'y'
}

func hasSuffix(b []byte, s string) bool {
	return len(b) >= len(s) && string(b[len(b)-len(s):]) == s
}

func step1a(b []byte) []byte {
	switch {
	case hasSuffix(b, "sses"), hasSuffix(b, "ies"):
		return b[:len(b)-2]
	case hasSuffix(b, "ss"):
		return b
	case hasSuffix(b, "s"):
		return b[:len(b)-1]
	}
	return b
}

func step1b(b []byte) []byte {
	if hasSuffix(b, "eed") {
		if measure(b[:len(b)-3]) > 0 {
			return b[:len(b)-1]
		}
		return b
	}
	var stem []byte
	switch {
	case hasSuffix(b, "ed") && hasVowel(b[:len(b)-2]):
		stem = b[:len(b)-2]
	case hasSuffix(b, "ing") && hasVowel(b[:len(b)-3]):
		stem = b[:len(b)-3]
	default:
		return b
	}
	switch {
	case hasSuffix(stem, "at"), hasSuffix(stem, "bl"), hasSuffix(stem, "iz"):
		return append(stem, 'e')
	case doubleConsonant(stem) && len(stem) > 3 && !strings.ContainsRune("lsz", rune(stem[len(stem)-1])):
		return stem[:len(stem)-1]
	case measure(stem) == 1 && cvc(stem):
		return append(stem, 'e')
	}
	return stem
}

func step1c(b []byte) []byte {
	if hasSuffix(b, "y") && hasVowel(b[:len(b)-1]) {
		b[len(b)-1] = 'i'
	}
	return b
}

// suffixRule replaces suffix from with to.
type suffixRule struct{ from, to string }

// Steps 2 and 3, a longer suffix before any suffix of it.
var step2 = []suffixRule{
	{"ational", "ate"}, {"tional", "tion"}, {"enci", "ence"}, {"anci", "ance"},
	{"izer", "ize"}, {"bli", "ble"}, {"alli", "al"}, {"entli", "ent"},
	{"eli", "e"}, {"ousli", "ous"}, {"ization", "ize"}, {"ation", "ate"},
	{"ator", "ate"}, {"alism", "al"}, {"iveness", "ive"}, {"fulness", "ful"},
	{"ousness", "ous"}, {"aliti", "al"}, {"iviti", "ive"}, {"biliti", "ble"},
	{"logi", "log"},
}

var step3 = []suffixRule{
	{"icate", "ic"}, {"ative", ""}, {"alize", "al"}, {"iciti", "ic"},
	{"ical", "ic"}, {"ful", ""}, {"ness", ""},
}

// replaceSuffix applies the first rule whose suffix b has, if the stem
// before it has a measure above min. Only that rule is tried: a
// matching suffix whose stem is too short stops the step.
func replaceSuffix(b []byte, rules []suffixRule, min int) []byte {
	for _, r := range rules {
		if hasSuffix(b, r.from) {
			stem := b[:len(b)-len(r.from)]
			if measure(stem) > min {
				return append(stem, r.to...)
			}
			return b
		}
	}
	return b
}

var step4Suffixes = []string{
	"al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment",
	"ent", "ion", "ou", "ism", "ate", "iti", "ous", "ive", "ize",
}

func step4(b []byte) []byte {
	// The longest suffix that matches decides.
	best := ""
	for _, s := range step4Suffixes {
		if len(s) > len(best) && hasSuffix(b, s) {
			best = s
		}
	}
	if best == "" {
		return b
	}
	stem := b[:len(b)-len(best)]
	if measure(stem) <= 1 {
		return b
	}
	if best == "ion" && !hasSuffix(stem, "s") && !hasSuffix(stem, "t") {
		return b
	}
	return stem
}

func step5(b []byte) []byte {
	if hasSuffix(b, "e") {
		stem := b[:len(b)-1]
		if m := measure(stem); m > 1 || m == 1 && !cvc(stem) {
			b = stem
		}
	}
	if measure(b) > 1 && hasSuffix(b, "ll") {
		b = b[:len(b)-1]
	}
	return b
}
