package filter

import (
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
)

// TestApproval checks how approve and approve_timeout combine across
// stages: any stage's glob makes a tool need approval (a stage adds it,
// never removes it), the shortest timeout any stage sets applies, the
// default applies when none does, and viewmux's own tools never need it.
func TestApproval(t *testing.T) {
	reg := NewRegistry()
	global := MustCompile(configs.RuleSet{Approve: []string{"*__delete_*"}})
	profile := MustCompile(configs.RuleSet{Approve: []string{"gh__merge_*"}, ApproveTimeout: 30 * time.Second})
	child := MustCompile(configs.RuleSet{ReadOnly: true, ApproveTimeout: time.Minute}) // narrows; approves nothing itself
	up := func(name string) *Entry {
		return &Entry{Tool: mcp.Tool{Name: name}, Upstream: "gh", ReadOnly: true}
	}
	for _, tt := range []struct {
		name    string
		stages  []*Rules
		tool    *Entry
		need    bool
		timeout time.Duration
	}{
		{"global only, default timeout", []*Rules{global}, up("gh__delete_repo"), true, configs.DefaultApproveTimeout},
		{"not matched", []*Rules{global, profile}, up("gh__get_issue"), false, 0},
		{"profile's glob", []*Rules{global, profile}, up("gh__merge_pr"), true, 30 * time.Second},
		{"global's glob under the profile", []*Rules{global, profile}, up("gh__delete_repo"), true, 30 * time.Second},
		{"a narrowing child keeps both, shortest timeout", []*Rules{global, profile, child}, up("gh__merge_pr"), true, 30 * time.Second},
		{"a child's timeout alone", []*Rules{global, child}, up("gh__delete_repo"), true, time.Minute},
		{"viewmux's own tool", []*Rules{MustCompile(configs.RuleSet{Approve: []string{"*"}})},
			&Entry{Tool: mcp.Tool{Name: "viewmux__enable_toolset"}}, false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			need, timeout := reg.Filter(tt.stages...).Approval(tt.tool)
			if need != tt.need || timeout != tt.timeout {
				t.Errorf("Approval(%s) = %v, %v; want %v, %v", tt.tool.Tool.Name, need, timeout, tt.need, tt.timeout)
			}
		})
	}

	// Approval is part of the rules: it separates keys, so profiles that
	// differ only in it never share a filter.
	plain := MustCompile(configs.RuleSet{ReadOnly: true})
	if child.Key() == plain.Key() {
		t.Error("approve_timeout does not change the key")
	}
	withApprove := MustCompile(configs.RuleSet{ReadOnly: true, Approve: []string{"x"}})
	if withApprove.Key() == plain.Key() || withApprove.Empty() || MustCompile(configs.RuleSet{Approve: []string{"x"}}).Empty() {
		t.Error("approve does not change the key, or a stage with only approve counts as empty")
	}
	if reg.Filter(plain) == reg.Filter(withApprove) {
		t.Error("rules that differ in approve share a filter")
	}
	if _, err := Compile(configs.RuleSet{Approve: []string{"gh__["}}); err == nil {
		t.Error("an invalid approve glob compiled")
	}
}
