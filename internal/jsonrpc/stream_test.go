package jsonrpc

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// scanPieces runs a ValueScanner over b cut into pieces of size step (and
// a last one), the way a streamed result arrives, and reports whether b
// is one valid JSON value with optional surrounding whitespace.
func scanPieces(b []byte, step int) bool {
	var s ValueScanner
	rest := b
	for len(rest) > 0 {
		piece := rest[:min(step, len(rest))]
		n, done, err := s.Scan(piece)
		if err != nil {
			return false
		}
		rest = rest[n:]
		if done {
			return len(bytes.TrimLeft(rest, " \t\r\n")) == 0
		}
	}
	return s.Finish() == nil
}

// TestValueScannerMatchesValid: the scanner accepts exactly what Valid
// accepts, whatever the pieces it is given.
func TestValueScannerMatchesValid(t *testing.T) {
	cases := append(append([]string(nil), validCases...),
		`{"a":1}`, `[1,2 ,3]`, `{"a":-0.5e-3,"b":[]}`, ` 12 `, `1 2`, `"a"x`, `{"a":1`, `{"a":"b"}}`, `[1]]`,
		`{"a" : "b" , "c":{"d":[{"e":null}]}}`, `"\\\\\""`, `"a\u00e9b"`, `{"":0}`, `[-]`, `[0x1]`, `[01]`, `[1.e5]`, `{"a":tru}`)
	for _, c := range cases {
		want := Valid([]byte(c)) == nil
		for step := 1; step <= len(c)+1; step++ {
			if got := scanPieces([]byte(c), step); got != want {
				t.Errorf("pieces of %d of %q: scanner says %v, Valid says %v", step, c, got, want)
			}
		}
	}
	deep := strings.Repeat("[", maxValidDepth+1) + strings.Repeat("]", maxValidDepth+1)
	if scanPieces([]byte(deep), 4096) {
		t.Error("nesting past maxValidDepth was accepted")
	}
}

// TestValueScannerEnd: the scanner stops at the end of the value, leaving
// what follows it.
func TestValueScannerEnd(t *testing.T) {
	for _, c := range []struct{ in, rest string }{
		{`{"a":[1,"]"]},"b":2}`, `,"b":2}`},
		{`123}`, `}`},
		{`"x\"y" ,`, ` ,`},
		{`null]`, `]`},
	} {
		var s ValueScanner
		n, done, err := s.Scan([]byte(c.in))
		if err != nil || !done || c.in[n:] != c.rest {
			t.Errorf("Scan(%q) = %d, %v, %v; want the rest %q", c.in, n, done, err, c.rest)
		}
	}
}

func FuzzValueScanner(f *testing.F) {
	for _, c := range validCases {
		f.Add([]byte(c), uint8(3))
	}
	f.Fuzz(func(t *testing.T, b []byte, step uint8) {
		want := json.Valid(b)
		if want && bytes.Count(b, []byte("[")) > maxValidDepth {
			return
		}
		if got := scanPieces(b, int(step)+1); got != want {
			t.Fatalf("pieces of %d of %q: scanner says %v, encoding/json says %v", int(step)+1, b, got, want)
		}
	})
}
