package filter

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/glob"
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
		{"bad args_regex", configs.RuleSet{CallRules: []configs.CallRule{{Tool: "t", ArgsRegex: map[string][]string{"path": {"("}}}}}, `call_rules "t" args_regex.path: invalid regex "("`},
		{"args_regex valid only once anchored", configs.RuleSet{CallRules: []configs.CallRule{{Tool: "t", ArgsRegex: map[string][]string{"path": {"a)(b"}}}}}, `invalid regex "a)(b"`},
		{"call rule without tool", configs.RuleSet{CallRules: []configs.CallRule{{Args: map[string][]string{"a": {"b"}}}}}, "tool is empty"},
		{"call rule without argument", configs.RuleSet{CallRules: []configs.CallRule{{Tool: "t", OtherArgs: true}}}, `call_rules "t": names no argument`},
		{"call rule argument without pattern", configs.RuleSet{CallRules: []configs.CallRule{{Tool: "t", Args: map[string][]string{"a": {}}}}}, `argument "a" has no pattern`},
		{"two call rules for one tool", configs.RuleSet{CallRules: []configs.CallRule{gitRule, gitRule}}, `call_rules "shell__run": more than one rule`},
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

// gitRule is the call rule of docs/configuration.md without its path argument.
var gitRule = configs.CallRule{Tool: "shell__run", Args: map[string][]string{"command": {"git status", "git log *"}}}

func TestCheckCall(t *testing.T) {
	spec := configs.CallRule{Tool: "shell__run",
		Args:      map[string][]string{"command": {"git status", "git log *"}},
		ArgsRegex: map[string][]string{"path": {`^docs/[a-z0-9_/-]+\.md$`}}}
	prefixRule := configs.CallRule{Tool: "shell__run", Args: map[string][]string{"command": {"git status*"}}}
	withOthers := gitRule
	withOthers.OtherArgs = true
	tests := []struct {
		name string
		rule configs.CallRule
		args string
		ok   bool
		why  string // substring of the refusal
	}{
		// `git log *` admits git log --oneline -5 and refuses
		// git log; rm -rf /.
		{"exact glob", gitRule, `{"command":"git status"}`, true, ""},
		{"star glob", gitRule, `{"command":"git log --oneline -5"}`, true, ""},
		{"star glob with ranges and paths", gitRule, `{"command":"git log main..HEAD -- docs/a_b.md"}`, true, ""},
		{"no match", gitRule, `{"command":"rm -rf /"}`, false, `argument "command" matches none`},
		{"star needs its space", gitRule, `{"command":"git log"}`, false, "matches none"},
		{"semicolon", gitRule, `{"command":"git log; rm -rf /"}`, false, "matches none"},
		{"semicolon after an option", gitRule, `{"command":"git log -5; rm -rf /"}`, false, "matches none"},
		{"semicolon after an exact command", gitRule, `{"command":"git status; rm -rf /"}`, false, "matches none"},
		// This was allowed before call-rule globs were guarded.
		{"prefix glob refuses a semicolon", prefixRule, `{"command":"git status; rm -rf /"}`, false, "matches none"},
		{"prefix glob refuses a newline", prefixRule, `{"command":"git status\nrm -rf /"}`, false, "matches none"},
		{"prefix glob admits options", prefixRule, `{"command":"git status --short -b"}`, true, ""},
		{"and", gitRule, `{"command":"git log && x"}`, false, "matches none"},
		{"or", gitRule, `{"command":"git log || x"}`, false, "matches none"},
		{"pipe", gitRule, `{"command":"git log | sh"}`, false, "matches none"},
		{"background", gitRule, `{"command":"git log & x"}`, false, "matches none"},
		{"command substitution", gitRule, `{"command":"git log $(x)"}`, false, "matches none"},
		{"variable", gitRule, `{"command":"git log ${IFS}x"}`, false, "matches none"},
		{"backticks", gitRule, "{\"command\":\"git log `x`\"}", false, "matches none"},
		{"newline", gitRule, `{"command":"git log\nrm"}`, false, "matches none"},
		{"newline after an option", gitRule, `{"command":"git log -1\nrm -rf /"}`, false, "matches none"},
		{"carriage return", gitRule, `{"command":"git log -1\rrm"}`, false, "matches none"},
		{"NUL", gitRule, `{"command":"git log -1\u0000rm"}`, false, "matches none"},
		{"C1 next line", gitRule, `{"command":"git log -1\u0085rm"}`, false, "matches none"},
		{"redirect", gitRule, `{"command":"git log > /etc/passwd"}`, false, "matches none"},
		{"input redirect", gitRule, `{"command":"git log < x"}`, false, "matches none"},
		{"quotes", gitRule, `{"command":"git log 'x'"}`, false, "matches none"},
		{"double quotes", gitRule, `{"command":"git log \"x\""}`, false, "matches none"},
		{"backslash", gitRule, `{"command":"git log \\x"}`, false, "matches none"},
		{"subshell", gitRule, `{"command":"git log (x)"}`, false, "matches none"},
		{"metacharacter spelled as a JSON escape", gitRule, `{"command":"git log -1\u003b rm"}`, false, "matches none"},

		// other_args.
		// This was allowed before other_args: an argument the rule does not
		// name is refused unless other_args is true.
		{"other argument refused by default", gitRule, `{"command":"git log --oneline","cwd":"/"}`, false, `argument "cwd" is not named`},
		{"the smallest other argument is named", gitRule, `{"command":"git status","z":1,"b":2,"x":3}`, false, `argument "b" is not named`},
		{"other argument allowed by other_args", withOthers, `{"command":"git log --oneline","cwd":"/"}`, true, ""},
		{"other_args does not loosen named arguments", withOthers, `{"command":"rm -rf /","cwd":"/"}`, false, "matches none"},
		{"other_args does not make a named argument optional", withOthers, `{"cwd":"/"}`, false, `argument "command" is missing`},

		// Every named argument is present, and a string.
		{"missing", gitRule, `{}`, false, `argument "command" is missing`},
		{"absent arguments", gitRule, ``, false, "is missing"},
		{"null arguments", gitRule, `null`, false, "is missing"},
		{"case differs", gitRule, `{"Command":"git status"}`, false, `argument "command" is missing`},
		{"array", gitRule, `{"command":["git status"]}`, false, `argument "command" is not a string`},
		{"number", gitRule, `{"command":7}`, false, "is not a string"},
		{"null", gitRule, `{"command":null}`, false, "is not a string"},
		{"boolean", gitRule, `{"command":true}`, false, "is not a string"},
		{"object", gitRule, `{"command":{"git status":true}}`, false, "is not a string"},
		{"not json", gitRule, `not json`, false, "not a JSON object"},
		{"not an object", gitRule, `["command","git status"]`, false, "not a JSON object"},
		{"a string, not an object", gitRule, `"git status"`, false, "not a JSON object"},

		// The reference rule: args and args_regex, each argument required.
		{"spec rule", spec, `{"command":"git status","path":"docs/guide/intro.md"}`, true, ""},
		{"spec rule without path", spec, `{"command":"git status"}`, false, `argument "path" is missing`},
		{"spec rule without command", spec, `{"path":"docs/a.md"}`, false, `argument "command" is missing`},
		{"spec rule path traversal", spec, `{"command":"git status","path":"docs/../../etc/passwd.md"}`, false, `argument "path" matches none`},
		{"spec rule path with newline", spec, `{"command":"git status","path":"docs/a.md\n"}`, false, "matches none"},
		{"spec rule other argument", spec, `{"command":"git status","path":"docs/a.md","mode":"w"}`, false, `argument "mode" is not named`},

		// args_regex matches the whole value.
		{"regex anchored at both ends", configs.CallRule{Tool: "shell__run", ArgsRegex: map[string][]string{"path": {"docs/.*"}}},
			`{"path":"docs/a"}`, true, ""},
		{"regex does not match inside", configs.CallRule{Tool: "shell__run", ArgsRegex: map[string][]string{"path": {"docs/.*"}}},
			`{"path":"x/docs/a"}`, false, "matches none"},
		{"regex dot is not newline", configs.CallRule{Tool: "shell__run", ArgsRegex: map[string][]string{"path": {"docs/.*"}}},
			`{"path":"docs/a\nrm"}`, false, "matches none"},
		{"regex alternation is anchored as a whole", configs.CallRule{Tool: "shell__run", ArgsRegex: map[string][]string{"mode": {"r|w"}}},
			`{"mode":"rw"}`, false, "matches none"},
		{"regex alternation", configs.CallRule{Tool: "shell__run", ArgsRegex: map[string][]string{"mode": {"r|w"}}},
			`{"mode":"w"}`, true, ""},
		{"regex may spell out metacharacters", configs.CallRule{Tool: "shell__run", ArgsRegex: map[string][]string{"command": {`ls [a-z]+ \| wc -l`}}},
			`{"command":"ls docs | wc -l"}`, true, ""},

		// One argument in args and in args_regex: either may match.
		{"both maps, glob matches", configs.CallRule{Tool: "shell__run", Args: map[string][]string{"command": {"git status"}}, ArgsRegex: map[string][]string{"command": {`git diff [0-9a-f]{7,40}`}}},
			`{"command":"git status"}`, true, ""},
		{"both maps, regex matches", configs.CallRule{Tool: "shell__run", Args: map[string][]string{"command": {"git status"}}, ArgsRegex: map[string][]string{"command": {`git diff [0-9a-f]{7,40}`}}},
			`{"command":"git diff abcdef1"}`, true, ""},
		{"both maps, neither matches", configs.CallRule{Tool: "shell__run", Args: map[string][]string{"command": {"git status"}}, ArgsRegex: map[string][]string{"command": {`git diff [0-9a-f]{7,40}`}}},
			`{"command":"git diff abcdef1; rm -rf /"}`, false, "matches none"},

		// A metacharacter the pattern spells out.
		{"spelled-out pipe", configs.CallRule{Tool: "shell__run", Args: map[string][]string{"command": {"ls * | wc -l"}}},
			`{"command":"ls docs | wc -l"}`, true, ""},
		{"spelled-out pipe, another one through the star", configs.CallRule{Tool: "shell__run", Args: map[string][]string{"command": {"ls * | wc -l"}}},
			`{"command":"ls x | sh | wc -l"}`, false, "matches none"},
		{"escaped dollar", configs.CallRule{Tool: "shell__run", Args: map[string][]string{"command": {`echo \$HOME*`}}},
			`{"command":"echo $HOME/x"}`, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Compile(configs.RuleSet{CallRules: []configs.CallRule{tt.rule}})
			if err != nil {
				t.Fatal(err)
			}
			err = NewRegistry().Filter(r).CheckCall(entry("shell__run", false), json.RawMessage(tt.args))
			if (err == nil) != tt.ok {
				t.Fatalf("CheckCall(%s) = %v, want ok=%v", tt.args, err, tt.ok)
			}
			if err == nil {
				return
			}
			if !errors.Is(err, ErrArgumentsNotAllowed) {
				t.Errorf("error %v does not wrap ErrArgumentsNotAllowed", err)
			}
			if !strings.Contains(err.Error(), tt.why) {
				t.Errorf("error %q does not contain %q", err, tt.why)
			}
			for _, secret := range []string{"rm", "passwd", "git status"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q carries the argument's value (%q)", err, secret)
				}
			}
		})
	}
}

func TestCheckCallStages(t *testing.T) {
	onlyStatus := MustCompile(configs.RuleSet{CallRules: []configs.CallRule{{Tool: "shell__run", Args: map[string][]string{"command": {"git status"}}, OtherArgs: true}}})
	git := MustCompile(configs.RuleSet{CallRules: []configs.CallRule{gitRule}})
	f := NewRegistry().Filter(git, onlyStatus)
	tests := []struct {
		name, tool, args string
		ok               bool
	}{
		{"both stages pass", "shell__run", `{"command":"git status"}`, true},
		{"one stage refuses", "shell__run", `{"command":"git log -5"}`, false},
		{"other_args of one stage does not loosen the other", "shell__run", `{"command":"git status","cwd":"/"}`, false},
		{"a tool without a rule", "shell__other", `{"command":"rm -rf /"}`, true},
		{"a tool without a rule, arguments not an object", "shell__other", `not json`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := f.CheckCall(entry(tt.tool, false), json.RawMessage(tt.args))
			if (err == nil) != tt.ok {
				t.Fatalf("CheckCall(%s, %s) = %v, want ok=%v", tt.tool, tt.args, err, tt.ok)
			}
		})
	}
}

// TestCallRuleKeys checks that the canonical key of a rule set covers every
// field of its call rules: equal rules share a filter, different ones never.
func TestCallRuleKeys(t *testing.T) {
	rule := func(mod func(*configs.CallRule)) configs.RuleSet {
		cr := configs.CallRule{Tool: "shell__run",
			Args:      map[string][]string{"command": {"git status", "git log *"}},
			ArgsRegex: map[string][]string{"path": {`^docs/.*\.md$`}}}
		if mod != nil {
			mod(&cr)
		}
		return configs.RuleSet{CallRules: []configs.CallRule{cr}}
	}
	base := rule(nil)
	same := []struct {
		name string
		a, b configs.RuleSet
	}{
		{"patterns reordered and repeated", base, rule(func(cr *configs.CallRule) {
			cr.Args = map[string][]string{"command": {"git log *", "git status", "git log *"}}
		})},
		{"other_args spelled false", base, rule(func(cr *configs.CallRule) { cr.OtherArgs = false })},
		{"rules reordered",
			configs.RuleSet{CallRules: []configs.CallRule{{Tool: "a", ArgsRegex: map[string][]string{"x": {"y"}}}, {Tool: "b", Args: map[string][]string{"x": {"y"}}}}},
			configs.RuleSet{CallRules: []configs.CallRule{{Tool: "b", Args: map[string][]string{"x": {"y"}}}, {Tool: "a", ArgsRegex: map[string][]string{"x": {"y"}}}}}},
	}
	for _, tt := range same {
		t.Run("same/"+tt.name, func(t *testing.T) {
			a, b := MustCompile(tt.a), MustCompile(tt.b)
			if a.Key() != b.Key() {
				t.Fatalf("equal rule sets have different keys:\n%s\n%s", a.Key(), b.Key())
			}
			reg := NewRegistry()
			if reg.Filter(a) != reg.Filter(b) {
				t.Fatal("equal rule sets got different filters")
			}
		})
	}
	t.Run("same/nil and empty maps", func(t *testing.T) {
		a := MustCompile(configs.RuleSet{CallRules: []configs.CallRule{gitRule}})
		for _, empty := range []map[string][]string{{}, {"command": {}}} {
			withEmpty := gitRule
			withEmpty.ArgsRegex = empty
			if b := MustCompile(configs.RuleSet{CallRules: []configs.CallRule{withEmpty}}); a.Key() != b.Key() {
				t.Fatalf("args_regex nil and %v have different keys:\n%s\n%s", empty, a.Key(), b.Key())
			}
		}
	})
	different := []struct {
		name string
		rs   configs.RuleSet
	}{
		{"other_args", rule(func(cr *configs.CallRule) { cr.OtherArgs = true })},
		{"a glob as a regex", rule(func(cr *configs.CallRule) {
			cr.Args = map[string][]string{"command": {"git status"}}
			cr.ArgsRegex = map[string][]string{"path": {`^docs/.*\.md$`}, "command": {"git log *"}}
		})},
		{"a regex as a glob", rule(func(cr *configs.CallRule) {
			cr.Args["path"] = cr.ArgsRegex["path"]
			cr.ArgsRegex = nil
		})},
		{"patterns swapped between arguments", rule(func(cr *configs.CallRule) {
			cr.Args = map[string][]string{"command": {"git status"}, "path": {"git log *"}}
		})},
		{"another argument name", rule(func(cr *configs.CallRule) {
			cr.ArgsRegex = map[string][]string{"file": {`^docs/.*\.md$`}}
		})},
		{"a pattern fewer", rule(func(cr *configs.CallRule) { cr.Args["command"] = []string{"git status"} })},
		{"another regex", rule(func(cr *configs.CallRule) { cr.ArgsRegex["path"] = []string{`^docs/.*\.txt$`} })},
		{"another tool", rule(func(cr *configs.CallRule) { cr.Tool = "shell__exec" })},
		{"no call rule", configs.RuleSet{}},
	}
	keys := map[string]string{MustCompile(base).Key(): "base"}
	for _, tt := range different {
		t.Run("different/"+tt.name, func(t *testing.T) {
			a, b := MustCompile(base), MustCompile(tt.rs)
			if prev, dup := keys[b.Key()]; dup {
				t.Fatalf("rule set shares its key with %q: %s", prev, b.Key())
			}
			keys[b.Key()] = tt.name
			reg := NewRegistry()
			if reg.Filter(a) == reg.Filter(b) {
				t.Fatal("different rule sets share a filter")
			}
		})
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

// FuzzCallRuleMetacharacters checks guarded call-rule globs through the decision function:
// a call whose argument holds a control character or a shell metacharacter
// passes a call-rule glob only if the glob spells that character out.
func FuzzCallRuleMetacharacters(f *testing.F) {
	for _, seed := range [][2]string{
		{"git log *", "git log --oneline -5"}, {"git log *", "git log; rm -rf /"}, {"git log *", "git log -1\nrm"},
		{"git status*", "git status && x"}, {"*", "$(x)"}, {"?", "`"}, {"[!a]", "|"}, {"[ -~]*", "a>b"},
		{"ls * | wc -l", "ls x | sh | wc -l"}, {`echo \$*`, "echo $HOME"}, {"[$-&]", "%"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, pattern, value string) {
		r, err := Compile(configs.RuleSet{CallRules: []configs.CallRule{{Tool: "t", Args: map[string][]string{"a": {pattern}}}}})
		if err != nil {
			return
		}
		args, err := json.Marshal(map[string]string{"a": value})
		if err != nil {
			t.Fatal(err)
		}
		var sent struct{ A string } // what the rule saw: invalid UTF-8 became U+FFFD
		if err := json.Unmarshal(args, &sent); err != nil {
			t.Fatal(err)
		}
		if NewRegistry().Filter(r).CheckCall(entry("t", false), args) != nil {
			return
		}
		for _, c := range sent.A {
			if glob.IsGuarded(c) && !strings.ContainsRune(pattern, c) {
				t.Fatalf("glob %q admitted %q, whose %q it does not spell out", pattern, sent.A, c)
			}
		}
	})
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

// BenchmarkCheckCall measures the call-rule part of a tools/call decision,
// allowed and refused, for the reference rule.
func BenchmarkCheckCall(b *testing.B) {
	f := NewRegistry().Filter(MustCompile(configs.RuleSet{CallRules: []configs.CallRule{{Tool: "shell__run",
		Args:      map[string][]string{"command": {"git status", "git log *"}},
		ArgsRegex: map[string][]string{"path": {`^docs/[a-z0-9_/-]+\.md$`}}}}}))
	e := entry("shell__run", false)
	for _, c := range []struct{ name, args string }{
		{"allowed", `{"command":"git log --oneline -5","path":"docs/guide/intro.md"}`},
		{"refused", `{"command":"git log --oneline -5; rm -rf /","path":"docs/guide/intro.md"}`},
	} {
		args := json.RawMessage(c.args)
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				_ = f.CheckCall(e, args)
			}
		})
	}
}
