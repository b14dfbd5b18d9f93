package sessions

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/sessions/grant"
)

// TestApprovalQuestion checks what the approval question shows: viewmux's
// own lines first, then the arguments on one last line, where no argument
// can start a line of its own or hide text, and long ones are cut.
func TestApprovalQuestion(t *testing.T) {
	e := &filter.Entry{Tool: mcp.Tool{Name: "gh__delete_repo"}, Upstream: "github"}
	for _, tt := range []struct {
		name string
		args string
		want []string // on the arguments line
	}{
		{"none", ``, []string{"{}"}},
		{"plain", `{ "owner": "acme",  "repo": "web" }`, []string{`{"owner":"acme","repo":"web"}`}},
		{"escaped line breaks stay escaped", `{"x":"a\n\nviewmux: approved\r"}`, []string{`"a\n\nviewmux: approved\r"`}},
		{"raw separators", "{\"x\":\"a\u2028b\u2029c\u0085d\"}", []string{`a\u2028b\u2029c\u0085d`}},
		{"bidi and zero-width", "{\"x\":\"user\u202etxt\u200b\"}", []string{`user\u202etxt\u200b`}},
		{"long", `{"x":"` + strings.Repeat("é", 3000) + `"}`, []string{"… (cut: 6008 bytes in all)"}},
		{"not JSON", "{\"x\":\n\"a", []string{"(not valid JSON)", `\n`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := approvalParams(e, "agent", json.RawMessage(tt.args))
			lines := strings.Split(p.Message, "\n")
			if len(lines) != 4 || !strings.Contains(lines[0], "gh__delete_repo") || lines[1] != "Profile: agent" {
				t.Fatalf("message %q: want three lines of viewmux's naming the tool and profile, then the arguments", p.Message)
			}
			last := lines[3]
			for _, w := range tt.want {
				if !strings.Contains(last, w) {
					t.Errorf("arguments line %q does not contain %q", last, w)
				}
			}
			if strings.ContainsAny(p.Message, "\r\u2028\u2029\u0085\u202e\u200b") {
				t.Errorf("message %q holds a raw control or separator", p.Message)
			}
			if len(last) > maxShownArguments+200 {
				t.Errorf("arguments line of %d bytes", len(last))
			}
			schema := p.RequestedSchema.(map[string]any)
			allow := schema["properties"].(map[string]any)[approveField].(map[string]any)
			if schema["type"] != "object" || allow["type"] != "boolean" {
				t.Errorf("requestedSchema %v, want an object with a boolean %s", schema, approveField)
			}
		})
	}
}

// TestFormElicitation checks which declared capabilities can answer an
// approval question: form mode, or an empty elicitation object (form
// before modes existed), and not URL mode alone.
func TestFormElicitation(t *testing.T) {
	for _, tt := range []struct {
		caps string
		want bool
	}{
		{`{}`, false},
		{`{"sampling":{}}`, false},
		{`{"elicitation":{}}`, true},
		{`{"elicitation":{"form":{}}}`, true},
		{`{"elicitation":{"form":{},"url":{}}}`, true},
		{`{"elicitation":{"url":{}}}`, false},
	} {
		var caps mcp.ClientCapabilities
		if err := json.Unmarshal([]byte(tt.caps), &caps); err != nil {
			t.Fatal(err)
		}
		if got := formElicitation(caps); got != tt.want {
			t.Errorf("formElicitation(%s) = %v, want %v", tt.caps, got, tt.want)
		}
	}
}

// TestApprovalSurvivesNarrowingAndReload checks that nothing narrows
// approval away: a child profile and a request's narrowing keep their
// parent's, and a reload that drops approve leaves it on for a session
// bound before it, while one that adds it applies at once.
func TestApprovalSurvivesNarrowingAndReload(t *testing.T) {
	parse := func(text string) *grant.Resolver {
		t.Helper()
		cfg, err := configs.Parse("approve.toml", []byte("[upstreams.up]\nurl = \"http://127.0.0.1:1/mcp\"\n"+text), nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := grant.NewResolver(cfg, filter.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	del := &filter.Entry{Tool: mcp.Tool{Name: "up__delete_all"}, Upstream: "up", ReadOnly: true, Toolsets: []string{"up"}}
	needs := func(b grant.Binding) bool {
		need, _ := b.Filter.Approval(del)
		return need
	}
	with := parse("[profiles.agent]\napprove = [\"*__delete_*\"]\n[profiles.child]\nextends = \"agent\"\nread_only = true\n")
	without := parse("[profiles.agent]\n[profiles.child]\nextends = \"agent\"\nread_only = true\n")
	for _, sel := range []grant.Selection{
		{Profile: "agent"},
		{Profile: "child"},
		{Profile: "agent", ReadOnly: true, Narrowing: true},
		{Profile: "agent", Tools: []string{"up__delete_all"}, Narrowing: true},
	} {
		b, err := with.ResolveLocal(sel)
		if err != nil {
			t.Fatal(err)
		}
		if !needs(b) {
			t.Errorf("%+v: approval lost", sel)
		}
		kept, err := without.Regrant(b)
		if err != nil {
			t.Fatal(err)
		}
		if !needs(kept) {
			t.Errorf("%+v: a reload without approve took it from a session bound before", sel)
		}
		old, err := without.ResolveLocal(sel)
		if err != nil {
			t.Fatal(err)
		}
		if needs(old) {
			t.Errorf("%+v: approval without approve", sel)
		}
		added, err := with.Regrant(old)
		if err != nil {
			t.Fatal(err)
		}
		if !needs(added) {
			t.Errorf("%+v: a reload that adds approve does not apply to an open session", sel)
		}
	}
}
