package filter

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpmux/mcpmux/configs"
)

func entry(name string, readOnly bool, toolsets ...string) *Entry {
	return &Entry{Tool: mcp.Tool{Name: name}, ReadOnly: readOnly, Toolsets: toolsets}
}

func TestRulesMatch(t *testing.T) {
	tests := []struct {
		name  string
		rules configs.RuleSet
		pass  []string
		fail  []string
	}{
		{"empty allows everything", configs.RuleSet{}, []string{"a", "files_write"}, nil},
		{"deny wins over allow-all", configs.RuleSet{Allow: []string{"*"}, Deny: []string{"files_delete"}},
			[]string{"files_read"}, []string{"files_delete"}},
		{"empty allow with deny", configs.RuleSet{Deny: []string{"*_write"}},
			[]string{"files_read", "web_fetch"}, []string{"files_write"}},
		{"exact tools", configs.RuleSet{Tools: []string{"files_read"}},
			[]string{"files_read"}, []string{"files_read_secret", "files_reader", "Files_read"}},
		{"regex allow with regex deny", configs.RuleSet{AllowRegex: []string{`^(files|web)_.*`}, DenyRegex: []string{`_(write|edit|delete)$`}},
			[]string{"files_read", "web_fetch", "files_write_log"}, []string{"files_write", "web_edit", "files_delete", "shell_run"}},
		{"anchored regex", configs.RuleSet{AllowRegex: []string{`^files_read$`}},
			[]string{"files_read"}, []string{"files_read_secret", "files_reader", "xfiles_read"}},
		{"unanchored regex matches inside", configs.RuleSet{AllowRegex: []string{`read`}},
			[]string{"files_read", "reader"}, []string{"write"}},
		{"glob matches whole name", configs.RuleSet{Allow: []string{"files_*"}},
			[]string{"files_", "files_read"}, []string{"xfiles_read", "web_files_read"}},
		{"case sensitive", configs.RuleSet{Tools: []string{"Files_Read"}, Allow: []string{"web_*"}},
			[]string{"Files_Read", "web_x"}, []string{"files_read", "FILES_READ", "Web_x"}},
		{"whitespace and newlines never match", configs.RuleSet{Tools: []string{"files_read"}, Allow: []string{"web_*"}},
			[]string{"files_read", "web_a"}, []string{" files_read", "files_read ", "files_read\n", "files\nread", "\tfiles_read"}},
		{"look-alike characters", configs.RuleSet{Tools: []string{"files_read"}},
			[]string{"files_read"}, []string{"fіles_read" /* Cyrillic і */, "files_reаd" /* Cyrillic а */, "files\u200b_read"}},
		{"deny glob over exact tool", configs.RuleSet{Tools: []string{"a_delete"}, Deny: []string{"*_delete"}},
			nil, []string{"a_delete"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Compile(tt.rules)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range tt.pass {
				if !r.Match(n, false, nil) {
					t.Errorf("%q should pass", n)
				}
			}
			for _, n := range tt.fail {
				if r.Match(n, false, nil) {
					t.Errorf("%q should not pass", n)
				}
			}
		})
	}
}

func TestReadOnlyAndToolsets(t *testing.T) {
	ro := MustCompile(configs.RuleSet{ReadOnly: true})
	if ro.Match("x", false, nil) || !ro.Match("x", true, nil) {
		t.Fatal("read_only must pass only read-only tools")
	}
	ts := MustCompile(configs.RuleSet{Toolsets: []string{"github/issues"}})
	if !ts.Match("gh__list_issues", false, []string{"github", "github/issues"}) {
		t.Error("toolset member should pass")
	}
	if ts.Match("gh__get_file", false, []string{"github", "github/repos"}) {
		t.Error("non-member should not pass")
	}
	// A toolset selector combined with read_only: both must hold.
	both := MustCompile(configs.RuleSet{Toolsets: []string{"github"}, ReadOnly: true})
	if both.Match("gh__create_issue", false, []string{"github"}) {
		t.Error("read_only must still apply inside a toolset")
	}
}

func TestInvalidPatternsAreErrors(t *testing.T) {
	tests := []struct {
		name  string
		rules configs.RuleSet
		want  string
	}{
		{"bad regex", configs.RuleSet{AllowRegex: []string{"(unclosed"}}, `allow_regex: invalid regex "(unclosed"`},
		{"bad deny regex", configs.RuleSet{DenyRegex: []string{"a**"}}, `deny_regex: invalid regex "a**"`},
		{"bad glob", configs.RuleSet{Deny: []string{"[abc"}}, "deny:"},
		{"bad call rule glob", configs.RuleSet{CallRules: []configs.CallRule{{Tool: "t", Args: map[string][]string{"cmd": {"[x"}}}}}, `call_rules "t" args.cmd`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Compile(tt.rules)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Compile error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestCanonicalKeysAndInterning(t *testing.T) {
	a := MustCompile(configs.RuleSet{Allow: []string{"b_*", "a_*", "a_*"}, Deny: []string{"x"}})
	b := MustCompile(configs.RuleSet{Deny: []string{"x", "x"}, Allow: []string{"a_*", "b_*"}})
	if a.Key() != b.Key() {
		t.Fatalf("equal rule sets have different keys:\n%s\n%s", a.Key(), b.Key())
	}
	if c := MustCompile(configs.RuleSet{Allow: []string{"a_*"}, Deny: []string{"x"}}); c.Key() == a.Key() {
		t.Fatal("different rule sets share a key")
	}
	reg := NewRegistry()
	empty := MustCompile(configs.RuleSet{})
	f1 := reg.Filter(a, empty, nil)
	f2 := reg.Filter(empty, b, b)
	if f1 != f2 {
		t.Fatal("equal effective rules got different filter instances")
	}
	ro := MustCompile(configs.RuleSet{ReadOnly: true})
	if reg.Filter(a, ro) != reg.Filter(ro, b) {
		t.Fatal("stage order must not matter")
	}
	if reg.Filter(a, ro) == f1 {
		t.Fatal("narrower rules share the wider filter")
	}
	if n := reg.Instances(); n != 2 {
		t.Fatalf("Instances() = %d, want 2", n)
	}
}

func TestCheckCall(t *testing.T) {
	r := MustCompile(configs.RuleSet{CallRules: []configs.CallRule{
		{Tool: "shell__run", Args: map[string][]string{"command": {"git status*", "git log*"}}},
	}})
	f := NewRegistry().Filter(r)
	e := entry("shell__run", false)
	tests := []struct {
		args string
		ok   bool
	}{
		{`{"command":"git status"}`, true},
		{`{"command":"git log --oneline","cwd":"/"}`, true},
		{`{"command":"rm -rf /"}`, false},
		{`{"command":"git status; rm -rf /"}`, true}, // the glob's trailing * allows it: rules are the user's
		{`{"command":["git status"]}`, false},
		{`{"command":7}`, false},
		{`{}`, false},
		{``, false},
		{`not json`, false},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			err := f.CheckCall(e, json.RawMessage(tt.args))
			if (err == nil) != tt.ok {
				t.Fatalf("CheckCall(%s) = %v, want ok=%v", tt.args, err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrArgumentsNotAllowed) {
				t.Fatalf("error %v does not wrap ErrArgumentsNotAllowed", err)
			}
		})
	}
	if err := f.CheckCall(entry("other", false), json.RawMessage(`{"command":"rm"}`)); err != nil {
		t.Fatalf("call_rules of another tool applied: %v", err)
	}
}

func TestViewsAreSharedPerVersion(t *testing.T) {
	reg := NewRegistry()
	f := reg.Filter(MustCompile(configs.RuleSet{ReadOnly: true}))
	entries := []*Entry{entry("a", true), entry("b", false), entry("c", true)}
	v1 := reg.View(1, entries, f)
	if got := names(v1); got != "a,c" {
		t.Fatalf("view = %s, want a,c", got)
	}
	if reg.View(1, entries, f) != v1 {
		t.Fatal("same (version, key) computed twice")
	}
	if v1.Lookup("b") != nil || v1.Lookup("a") == nil {
		t.Fatal("Lookup disagrees with the listing")
	}
	entries2 := append(entries, entry("d", true))
	v2 := reg.View(2, entries2, f)
	if v2 == v1 || names(v2) != "a,c,d" {
		t.Fatalf("new version view = %s", names(v2))
	}
	if v1.Fingerprint() == v2.Fingerprint() {
		t.Fatal("different listings share a fingerprint")
	}
	if reg.View(3, entries, f).Fingerprint() != v1.Fingerprint() {
		t.Fatal("equal listings have different fingerprints")
	}
	if empty := reg.View(3, nil, f); empty.Tools == nil {
		t.Fatal("an empty view must list [] not null")
	}
}

func names(v *View) string {
	var out []string
	for _, t := range v.Tools {
		out = append(out, t.Name)
	}
	return strings.Join(out, ",")
}

func FuzzCompile(f *testing.F) {
	for _, s := range []string{"*", "a_*", "[a-z]*", "(files|web)_.*", "^x$", "[", "(", `\`, "a**"} {
		f.Add(s, "files_read")
	}
	f.Fuzz(func(t *testing.T, pat, name string) {
		for _, rs := range []configs.RuleSet{{Allow: []string{pat}}, {AllowRegex: []string{pat}}, {Deny: []string{pat}}, {DenyRegex: []string{pat}}} {
			r, err := Compile(rs)
			if err != nil {
				if r != nil {
					t.Fatal("error with non-nil rules")
				}
				continue
			}
			r.Match(name, false, nil) // must not panic
		}
		// A regex that compiles in RE2 must compile here too: no silent
		// non-match, and no pattern rejected that RE2 accepts.
		if _, err := regexp.Compile(pat); err == nil {
			if _, err := Compile(configs.RuleSet{AllowRegex: []string{pat}}); err != nil {
				t.Fatalf("valid RE2 %q rejected: %v", pat, err)
			}
		}
	})
}

// FuzzAllows checks the decision function's invariants on arbitrary names:
// deny always wins, the empty filter passes everything, and Allows agrees
// with the view built from it.
func FuzzAllows(f *testing.F) {
	f.Add("files_read", "files_*", "*_delete", true)
	f.Add("files_delete", "*", "*_delete", false)
	f.Add(" files_read", "files_read", "", false)
	f.Fuzz(func(t *testing.T, name, allow, deny string, ro bool) {
		rs := configs.RuleSet{Allow: []string{allow}, ReadOnly: ro}
		if deny != "" {
			rs.Deny = []string{deny}
		}
		r, err := Compile(rs)
		if err != nil {
			return
		}
		reg := NewRegistry()
		fl := reg.Filter(r)
		e := entry(name, true)
		got := fl.Allows(e)
		if deny != "" {
			if d := MustCompile(configs.RuleSet{Deny: []string{deny}}); !d.Match(name, true, nil) && got {
				t.Fatalf("%q denied by %q but allowed", name, deny)
			}
		}
		if !reg.Filter().Allows(e) {
			t.Fatal("the empty filter refused a tool")
		}
		v := reg.View(1, []*Entry{e}, fl)
		if (v.Lookup(name) != nil) != got {
			t.Fatalf("view and Allows disagree on %q", name)
		}
	})
}
