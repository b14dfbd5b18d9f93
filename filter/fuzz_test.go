package filter

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/glob"
	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// fuzzRules are the call rules of integration's adversarial table
// (integration/adversarial/adversarial_test.go), one per tool, plus one with
// other_args = true.
var fuzzRules = configs.RuleSet{CallRules: []configs.CallRule{
	{Tool: "up__shell_run", Args: map[string][]string{"command": {"git status", "git log *"}}},
	{Tool: "up__read_file", ArgsRegex: map[string][]string{"path": {`^docs/[a-z0-9_/-]+\.md$`}}},
	{Tool: "up__open_link", Args: map[string][]string{"link": {"https://docs.example.com/*"}}},
	{Tool: "up__tag", Args: map[string][]string{"label": {"release-*"}}, OtherArgs: true},
}}

// fuzzPath is read_file's pattern, for the oracle.
var fuzzPath = regexp.MustCompile(`^docs/[a-z0-9_/-]+\.md$`)

// fuzzAllowed is the oracle: whether v is a value a profile author who
// wrote fuzzRules meant to admit for tool's argument arg. It is written
// from the documented rule, not from the glob package's translation.
func fuzzAllowed(tool, v string) bool {
	guardedFree := func(s string) bool {
		return !strings.ContainsFunc(s, func(r rune) bool {
			return r < 0x20 || r >= 0x7f && r <= 0x9f || strings.ContainsRune(";&|`$()<>\\'\"", r)
		})
	}
	switch tool {
	case "up__shell_run":
		rest, ok := strings.CutPrefix(v, "git log ")
		return v == "git status" || ok && guardedFree(rest)
	case "up__read_file":
		return fuzzPath.MatchString(v)
	case "up__open_link":
		rest, ok := strings.CutPrefix(v, "https://docs.example.com/")
		return ok && guardedFree(rest)
	case "up__tag":
		rest, ok := strings.CutPrefix(v, "release-")
		return ok && guardedFree(rest)
	}
	return false
}

// fuzzArgs are how a Go upstream declares the arguments of fuzzRules'
// tools; encoding/json matches their keys case-insensitively.
type fuzzArgs struct {
	Command string `json:"command"`
	Path    string `json:"path"`
	Link    string `json:"link"`
	Label   string `json:"label"`
}

func (a fuzzArgs) value(arg string) string {
	return map[string]string{"command": a.Command, "path": a.Path, "link": a.Link, "label": a.Label}[arg]
}

// fuzzSeeds are argument objects from the adversarial table.
var fuzzSeeds = []string{
	`{"command":"git status"}`,
	`{"command":"git log --oneline -5"}`,
	`{"command":"git log ;x"}`,
	`{"command":"git log &&x"}`,
	`{"command":"git log |x"}`,
	"{\"command\":\"git log `x`\"}",
	`{"command":"git log $(x)"}`,
	`{"command":"git log <x"}`,
	`{"command":"git log >x"}`,
	`{"command":"git log \\x"}`,
	`{"command":"git log 'x'"}`,
	`{"command":"git log \"x\""}`,
	`{"command":"git log \nx"}`,
	`{"command":"git log \rx"}`,
	`{"command":"git log \tx"}`,
	`{"command":"git log \u0000x"}`,
	`{"command":"git log \u0085x"}`,
	`{"command":"git log \u2028x"}`,
	`{"command":"git log \u003bx"}`,
	`{"command":"git status","Command":"rm -rf /tmp/x"}`,
	`{"Command":"rm -rf /tmp/x","command":"git status"}`,
	`{"command":"git status","command":"rm -rf /tmp/x"}`,
	`{"command":"rm -rf /tmp/x","command":"git status"}`,
	`{"comm\u0061nd":"rm -rf /tmp/x","command":"git status"}`,
	`{"COMMAND":"rm -rf /tmp/x"}`,
	`{"command":["git status"]}`,
	`{"command":null}`,
	`{"command":"git status","cwd":"/"}`,
	`{}`,
	`null`,
	`"git status"`,
	`{"path":"docs/readme.md"}`,
	`{"path":"docs/a.md\n"}`,
	`{"path":"docs/../etc/passwd.md"}`,
	`{"link":"https://docs.example.com/a","lin\u212a":"https://evil.example/"}`,
	`{"lin\u212a":"https://evil.example/"}`,
	`{"label":"release-1","LABEL":"x;rm"}`,
	`{"label":"release-1","labe\u017f":"x"}`,
	`{"label":"release-1","other":"x;rm"}`,
}

// FuzzCallRules checks that a call rule admits, for every argument it
// names, only values its patterns mean — whichever way a Go upstream
// decodes the arguments it was sent: encoding/json into map[string]any
// (mcp-go's GetString), or into a struct whose fields match keys
// case-insensitively (mcp-go's BindArguments). With other_args = false the
// rule alone must hold; with other_args = true the arguments also pass
// viewmux's ambiguity check, as every tools/call does.
func FuzzCallRules(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	rules := MustCompile(fuzzRules)
	flt := NewRegistry().Filter(rules)
	entries := map[string]*Entry{}
	for _, cr := range fuzzRules.CallRules {
		entries[cr.Tool] = &Entry{Tool: mcp.Tool{Name: cr.Tool}}
	}
	f.Fuzz(func(t *testing.T, args []byte) {
		for _, cr := range fuzzRules.CallRules {
			if flt.CheckCall(entries[cr.Tool], args) != nil {
				continue
			}
			if cr.OtherArgs {
				params := append(append([]byte(`{"name":"x","arguments":`), args...), '}')
				if !json.Valid(args) || jsonrpc.CheckUnambiguous(params) != nil {
					continue
				}
			}
			var asMap map[string]any
			if err := json.Unmarshal(args, &asMap); err != nil {
				t.Fatalf("%s: CheckCall allowed arguments encoding/json cannot read as an object: %v: %q", cr.Tool, err, args)
			}
			var asStruct fuzzArgs
			if err := json.Unmarshal(args, &asStruct); err != nil {
				t.Fatalf("%s: CheckCall allowed arguments encoding/json cannot bind: %v: %q", cr.Tool, err, args)
			}
			for arg := range cr.Args {
				fuzzCheckValue(t, cr.Tool, arg, args, asMap, asStruct)
			}
			for arg := range cr.ArgsRegex {
				fuzzCheckValue(t, cr.Tool, arg, args, asMap, asStruct)
			}
		}
	})
}

// fuzzCheckValue fails unless both decodings of the allowed arguments give
// arg the same value, and the oracle admits it.
func fuzzCheckValue(t *testing.T, tool, arg string, args []byte, asMap map[string]any, asStruct fuzzArgs) {
	t.Helper()
	v, ok := asMap[arg].(string)
	if !ok {
		t.Fatalf("%s: CheckCall allowed %q whose %s is %#v, not a string", tool, args, arg, asMap[arg])
	}
	if bound := asStruct.value(arg); bound != v {
		t.Fatalf("%s: CheckCall allowed %q: a struct binds %s = %q, the map reads %q", tool, args, arg, bound, v)
	}
	if !fuzzAllowed(tool, v) {
		t.Fatalf("%s: CheckCall allowed %s = %q (from %q), which its patterns do not mean", tool, arg, v, args)
	}
	for _, r := range v {
		if glob.IsGuarded(r) && tool != "up__read_file" {
			t.Fatalf("%s: CheckCall allowed %s = %q with guarded rune %q through a wildcard", tool, arg, v, r)
		}
	}
}
