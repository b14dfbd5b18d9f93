package sessions

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/viewmux/viewmux/internal/jsonrpc"
	"github.com/viewmux/viewmux/sessions/grant"
)

// fuzzProfile is FuzzDecide's profile: the call rules of integration's
// adversarial table, secret_tool hidden, echo without a rule.
const fuzzProfile = `
[profiles.agent]
deny = ["up__secret_tool"]

[[profiles.agent.call_rules]]
tool = "up__shell_run"
args = { command = ["git status", "git log *"] }

[[profiles.agent.call_rules]]
tool = "up__read_file"
args_regex = { path = ['^docs/[a-z0-9_/-]+\.md$'] }

[[profiles.agent.call_rules]]
tool = "up__tag"
args = { label = ["release-*"] }
other_args = true
`

// fuzzRuleArgs is the argument each ruled tool's rule names.
var fuzzRuleArgs = map[string]string{"up__shell_run": "command", "up__read_file": "path", "up__tag": "label"}

// fuzzUpstreamArgs is how a Go upstream declares those arguments:
// encoding/json binds keys to its fields case-insensitively.
type fuzzUpstreamArgs struct {
	Command string `json:"command"`
	Path    string `json:"path"`
	Label   string `json:"label"`
}

// fuzzMessages are tools/call messages from the adversarial table.
var fuzzMessages = []string{
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__shell_run","arguments":{"command":"git status"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__shell_run","arguments":{"command":"git log --oneline -5"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__shell_run","arguments":{"command":"git log ;x"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__shell_run","arguments":{"command":"git log $(x)"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__shell_run","arguments":{"command":"git log \nx"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__shell_run","arguments":{"command":"git status","Command":"rm -rf /tmp/x"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__shell_run","arguments":{"command":"rm -rf /tmp/x","command":"git status"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__shell_run","arguments":{"comm\u0061nd":"rm -rf /tmp/x","command":"git status"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__shell_run","arguments":{"COMMAND":"rm -rf /tmp/x"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__shell_run","arguments":{"command":"git status"},"Arguments":{"command":"rm -rf /tmp/x"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__shell_run","arguments":{"command":"git status"},"argument\u017f":{"command":"rm -rf /tmp/x"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__shell_run","arguments":{"command":"git status"},"arguments":{"command":"rm -rf /tmp/x"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__shell_run","Name":"secret_tool","arguments":{"command":"git status"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__secret_tool","name":"up__shell_run","arguments":{"command":"git status"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__secret\u005ftool","arguments":{}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"UP__SHELL_RUN","arguments":{"command":"git status"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":["up__shell_run"],"arguments":{"command":"git status"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__read_file","arguments":{"path":"docs/readme.md"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__read_file","arguments":{"path":"docs/a.md","Path":"/etc/passwd"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__tag","arguments":{"label":"release-1","LABEL":"x;rm"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__tag","arguments":{"label":"release-1","other":"x;rm"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__echo","arguments":{"x":"y","X":"z"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__echo","arguments":{"n":12345678901234567890,"s":"\u00e9"},"_meta":{"trace":"t"}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call","params":{"name":"up__secret_tool"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__shell_run","arguments":{"command":"git status"}},"params":{"name":"up__secret_tool"}}`,
	`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"up__secret_tool"}}]`,
}

// FuzzDecide fuzzes a tools/call message through parsing and the
// decision, as every door runs them (jsonrpc.Parse, then decide), against
// a catalog from a real mcp-go upstream on a loopback listener — which the
// fuzz body never calls. Whenever decide lets a call through, the params
// the upstream would be sent (jsonrpc.Rewrite of the checked params, as
// route does) must, decoded the way mcp-go decodes a tools/call, name the
// checked tool and carry the very arguments that were checked; for a tool
// with a call rule, the named argument, read by exact key or bound into a
// struct case-insensitively, is the checked value and the rule admits it.
func FuzzDecide(f *testing.F) {
	for _, m := range fuzzMessages {
		f.Add([]byte(m))
	}
	up := server.NewMCPServer("fuzz-upstream", "1.0.0")
	for _, tool := range []string{"shell_run", "read_file", "tag", "echo", "secret_tool"} {
		up.AddTool(mcp.NewTool(tool), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("ok"), nil
		})
	}
	h := httptest.NewServer(server.NewStreamableHTTPServer(up))
	f.Cleanup(h.Close)
	s := newServerWith(f, h.URL+"/mcp", fuzzProfile, Options{})
	b, err := s.Resolver().ResolveLocal(grant.Selection{Profile: "agent"})
	if err != nil {
		f.Fatal(err)
	}
	view := s.View(b)
	if view.Lookup("up__shell_run") == nil || view.Lookup("up__secret_tool") != nil {
		f.Fatalf("the fuzz profile's view is not the one meant: %v", view.Tools)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := jsonrpc.Parse(raw)
		if err != nil || !isRouted(m, true) || m.Method != string(mcp.MethodToolsCall) {
			return
		}
		e, refusal := s.decide("fuzz", b, view, m)
		if refusal != nil {
			return
		}
		if e == nil || e.Tool.Name != m.Name || view.Lookup(m.Name) != e {
			t.Fatalf("decide allowed %q with entry %v, not the view's entry for %q", raw, e, m.Name)
		}
		// What route sends: the checked params, the upstream's own name.
		out, err := jsonrpc.Rewrite(m.Params, map[string]any{"name": e.Original}, nil)
		if err != nil {
			return // route answers this with an error and sends nothing
		}
		var sent mcp.CallToolParams // mcp-go's own decoding of a tools/call
		if err := json.Unmarshal(out, &sent); err != nil {
			t.Fatalf("decide allowed %q, but the upstream could not decode the params it would get: %v: %s", raw, err, out)
		}
		if sent.Name != e.Original {
			t.Fatalf("decide allowed %q as %s, but the upstream would run %q: %s", raw, e.Tool.Name, sent.Name, out)
		}
		// Whatever the upstream binds as arguments is what decide checked,
		// for every tool: a lone other spelling of "arguments"
		// ("Arguments", "argument\u017f"), which mcp-go binds
		// case-insensitively, is refused as ambiguous by jsonrpc.Parse
		// (the committed seed b651399e0d93cfad found it).
		arg, ruled := fuzzRuleArgs[e.Tool.Name]
		if !bytes.Equal(sent.RawArguments, m.Arguments) {
			t.Fatalf("decide checked arguments %s of %q, but the upstream would get %s", m.Arguments, raw, sent.RawArguments)
		}
		if !ruled {
			return
		}
		var checked map[string]json.RawMessage
		var checkedValue string
		if json.Unmarshal(m.Arguments, &checked) != nil || json.Unmarshal(checked[arg], &checkedValue) != nil {
			t.Fatalf("decide allowed %q, whose %s is not a string", raw, arg)
		}
		var bound fuzzUpstreamArgs
		if err := json.Unmarshal(sent.RawArguments, &bound); err != nil {
			t.Fatalf("decide allowed %q, which a typed upstream could not bind: %v", raw, err)
		}
		got := map[string]string{"command": bound.Command, "path": bound.Path, "label": bound.Label}[arg]
		if byKey, _ := sent.Arguments.(map[string]any)[arg].(string); got != checkedValue || byKey != checkedValue {
			t.Fatalf("decide checked %s = %q in %q, but a typed upstream binds %q and reads %q by key", arg, checkedValue, raw, got, byKey)
		}
		if !fuzzRuleAdmits(e.Tool.Name, checkedValue) {
			t.Fatalf("decide allowed %s = %q in %q, which the rule does not mean", arg, checkedValue, raw)
		}
	})
}

// fuzzRuleAdmits is the oracle for fuzzProfile's rules, written from what a
// call rule's glob means: the literal text, then a wildcard that matches no
// control character and no shell metacharacter.
func fuzzRuleAdmits(tool, v string) bool {
	wild := func(s string) bool {
		return !strings.ContainsFunc(s, func(r rune) bool {
			return r < 0x20 || r >= 0x7f && r <= 0x9f || strings.ContainsRune(";&|`$()<>\\'\"", r)
		})
	}
	switch tool {
	case "up__shell_run":
		rest, ok := strings.CutPrefix(v, "git log ")
		return v == "git status" || ok && wild(rest)
	case "up__read_file":
		rest, ok := strings.CutPrefix(v, "docs/")
		body, md := strings.CutSuffix(rest, ".md")
		return ok && md && body != "" && !strings.ContainsFunc(body, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '/' || r == '-')
		})
	case "up__tag":
		rest, ok := strings.CutPrefix(v, "release-")
		return ok && wild(rest)
	}
	return false
}
