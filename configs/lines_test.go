package configs

import (
	"strings"
	"testing"
)

func TestScanLines(t *testing.T) {
	text := `# comment [not.a.table]
title = "x" # trailing [comment]
a.b."c.d" = 1
'lit' = 'v'

[server]
listen = "127.0.0.1:1"
multi = """
[fake]
key = "\"""
"""
raw = '''
[also.fake]
'''
after = 2

[[auth.tokens]]
token = "a"
[[auth.tokens]]
token = "b"
profiles = [
  "p", # comment, with ] bracket
  "q",
]

[ upstreams . "my server" ]
env = { A = "}", B = { C = 1 } , "D.E" = 2 }
nested = [[1, 2], [
  3]]

[[profiles.ci.call_rules]]
tool = "t"
[profiles.ci.call_rules.args]
command = ["x"]
`
	ix := scanLines(text)
	tests := []struct {
		path keyPath
		line int
	}{
		{keyPath{"title"}, 2},
		{keyPath{"a"}, 3},
		{keyPath{"a", "b", "c.d"}, 3},
		{keyPath{"lit"}, 4},
		{keyPath{"server"}, 6},
		{keyPath{"server", "listen"}, 7},
		{keyPath{"server", "multi"}, 8},
		{keyPath{"server", "raw"}, 12},
		{keyPath{"server", "after"}, 15},
		{keyPath{"auth"}, 17},
		{keyPath{"auth", "tokens"}.at(0), 17},
		{keyPath{"auth", "tokens"}.at(0).key("token"), 18},
		{keyPath{"auth", "tokens"}.at(1), 19},
		{keyPath{"auth", "tokens"}.at(1).key("token"), 20},
		{keyPath{"auth", "tokens"}.at(1).key("profiles"), 21},
		{keyPath{"auth", "tokens"}.at(1).key("profiles").at(0), 22},
		{keyPath{"auth", "tokens"}.at(1).key("profiles").at(1), 23},
		{keyPath{"upstreams", "my server"}, 26},
		{keyPath{"upstreams", "my server", "env", "A"}, 27},
		{keyPath{"upstreams", "my server", "env", "B", "C"}, 27},
		{keyPath{"upstreams", "my server", "env", "D.E"}, 27},
		{keyPath{"upstreams", "my server", "nested"}.at(1).at(0), 29},
		{keyPath{"profiles", "ci", "call_rules"}.at(0), 31},
		{keyPath{"profiles", "ci", "call_rules"}.at(0).key("tool"), 32},
		{keyPath{"profiles", "ci", "call_rules"}.at(0).key("args"), 33},
		{keyPath{"profiles", "ci", "call_rules"}.at(0).key("args", "command").at(0), 34},
		// Undefined keys fall back to their nearest defined ancestor.
		{keyPath{"server", "missing"}, 6},
		{keyPath{"auth", "tokens"}.at(1).key("profiles").at(5), 21},
		{keyPath{"nowhere"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.path.String(), func(t *testing.T) {
			if got := ix.line(tt.path); got != tt.line {
				t.Errorf("line(%s) = %d, want %d", tt.path, got, tt.line)
			}
		})
	}
	for _, fake := range []string{"fake", "also", "fake.key"} {
		if _, ok := ix.lines[fake]; ok {
			t.Errorf("scanner indexed %q from inside a string", fake)
		}
	}
	if got := ix.occurrences(keyPath{"auth", "tokens", "token"}); len(got) != 2 || got[1].String() != "auth.tokens[1].token" {
		t.Errorf("occurrences(auth.tokens.token) = %v", got)
	}
}

func TestKeyPathString(t *testing.T) {
	p := keyPath{"upstreams", "my.server", "args"}.at(2)
	if got, want := p.String(), `upstreams."my.server".args[2]`; got != want {
		t.Errorf("String() = %s, want %s", got, want)
	}
	if got, want := p.bare().String(), `upstreams."my.server".args`; got != want {
		t.Errorf("bare() = %s, want %s", got, want)
	}
}

func FuzzScanLines(f *testing.F) {
	f.Add("[a]\nb = [1,\n2]\nc = { d = \"}\" }\n")
	f.Add("x = \"\"\"\n\\\"\"\"\"\n[[y]]\n'z' = '''a'''''\n")
	f.Add("[\"unterminated\n= = ]] [[ { , }")
	f.Fuzz(func(t *testing.T, text string) {
		ix := scanLines(text) // must terminate without panicking
		for p, line := range ix.lines {
			if line < 1 || line > strings.Count(text, "\n")+1 {
				t.Fatalf("line(%s) = %d out of range", p, line)
			}
		}
	})
}
