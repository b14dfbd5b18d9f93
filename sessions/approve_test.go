package sessions

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mcpmux/mcpmux/filter"
)

// TestApprovalQuestion checks what the approval question shows: mcpmux's
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
		{"escaped line breaks stay escaped", `{"x":"a\n\nmcpmux: approved\r"}`, []string{`"a\n\nmcpmux: approved\r"`}},
		{"raw separators", "{\"x\":\"a\u2028b\u2029c\u0085d\"}", []string{`a\u2028b\u2029c\u0085d`}},
		{"bidi and zero-width", "{\"x\":\"user\u202etxt\u200b\"}", []string{`user\u202etxt\u200b`}},
		{"long", `{"x":"` + strings.Repeat("é", 3000) + `"}`, []string{"… (cut: 6008 bytes in all)"}},
		{"not JSON", "{\"x\":\n\"a", []string{"(not valid JSON)", `\n`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := approvalParams(e, "agent", json.RawMessage(tt.args))
			lines := strings.Split(p.Message, "\n")
			if len(lines) != 4 || !strings.Contains(lines[0], "gh__delete_repo") || lines[1] != "Profile: agent" {
				t.Fatalf("message %q: want three lines of mcpmux's naming the tool and profile, then the arguments", p.Message)
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
