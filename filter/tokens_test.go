package filter

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
)

func TestEstimateTokens(t *testing.T) {
	tool := mcp.NewTool("echo", mcp.WithDescription(strings.Repeat("says it back ", 40)))
	b, err := json.Marshal(mcp.ListToolsResult{Tools: []mcp.Tool{tool}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		tools []mcp.Tool
		want  int
	}{
		{"one tool: its listing's bytes over four, rounded up", []mcp.Tool{tool}, (len(b) + 3) / 4},
		{"nothing", []mcp.Tool{}, (len(`{"tools":[]}`) + 3) / 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EstimateTokens(tc.tools)
			if err != nil || got != tc.want {
				t.Errorf("EstimateTokens = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
	t.Run("a tool that cannot be encoded is named", func(t *testing.T) {
		bad := mcp.Tool{Name: "broken", RawInputSchema: json.RawMessage(`{"type":`)}
		if _, err := EstimateTokens([]mcp.Tool{tool, bad}); err == nil || !strings.Contains(err.Error(), `tool "broken"`) {
			t.Errorf("error = %v, want it to name the tool", err)
		}
	})
}

func TestViewTokens(t *testing.T) {
	mk := func(up, name, desc string) *Entry {
		return &Entry{Tool: mcp.NewTool(name, mcp.WithDescription(desc)), Upstream: up, Original: name}
	}
	entries := []*Entry{ // sorted by name, as a snapshot's are
		mk("zeta", "a_small", "x"),
		mk("alpha", "b_large", strings.Repeat("long words ", 100)),
		mk("zeta", "c_hidden", "denied"),
		mk("alpha", "d_other", "y"),
	}
	reg := NewRegistry()
	v := reg.View(1, entries, reg.Filter(MustCompile(configs.RuleSet{Deny: []string{"c_hidden"}})))
	total, by, err := v.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := EstimateTokens(v.Tools); total != want {
		t.Errorf("total = %d, want EstimateTokens of the view's tools, %d", total, want)
	}
	if len(by) != 2 || by[0].Upstream != "alpha" || by[1].Upstream != "zeta" {
		t.Fatalf("breakdown = %+v, want alpha then zeta", by)
	}
	if by[0].Tools != 2 || by[1].Tools != 1 {
		t.Errorf("tool counts = %d, %d; want 2 (alpha) and 1 (zeta: its hidden tool is not counted)", by[0].Tools, by[1].Tools)
	}
	wantZeta, _ := EstimateTokens([]mcp.Tool{entries[0].Tool})
	if by[1].Tokens != wantZeta {
		t.Errorf("zeta = %d tokens, want %d (its one visible tool)", by[1].Tokens, wantZeta)
	}
	if by[0].Tokens <= by[1].Tokens || by[0].Tokens+by[1].Tokens < total {
		t.Errorf("alpha %d, zeta %d, total %d: want alpha larger and the parts to cover the total", by[0].Tokens, by[1].Tokens, total)
	}
}
