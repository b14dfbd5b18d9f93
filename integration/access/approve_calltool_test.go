//go:build unix

package access

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/integration/internal/itest"
)

// TestApproveThroughCallTool: viewmux__call_tool re-enters the one
// decision, so a tool that needs approval asks for it when called through
// call_tool too, on every door: declined, nothing reaches the upstream;
// accepted, exactly that call does.
func TestApproveThroughCallTool(t *testing.T) {
	t.Parallel()
	itest.RequireNode(t)
	rec := itest.StartRecorder(t, "rec", false)
	dir := t.TempDir()
	cfg := approveConfig(rec, filepath.Join(dir, "audit.jsonl"), "1s") + "tool_search = true\n"
	mux := itest.StartMuxWith(t, itest.MuxOptions{Config: cfg, Dir: dir})
	for name, script := range approveDoors(mux, filepath.Join(dir, "viewmux.toml")) {
		t.Run(name, func(t *testing.T) {
			mark := rec.Mark()
			c := driveApprove(t, approveScript{
				DoorScript: script([]itest.Op{
					itest.OpCall("viewmux__call_tool", map[string]any{"name": "rec__echo", "arguments": map[string]any{"n": 1}}),
					itest.OpCall("viewmux__call_tool", map[string]any{"name": "rec__echo", "arguments": map[string]any{"n": 2}}),
				}),
				Elicitation: map[string]any{"answers": []map[string]any{
					{"action": "decline"},
					{"action": "accept", "content": map[string]any{"allow": true}},
				}},
			})
			r0, r1 := c.Steps[0].Call(t), c.Steps[1].Call(t)
			if !r0.IsError || !strings.Contains(r0.Text(), "declined by the user") || r1.IsError || len(c.Elicitations) != 2 {
				t.Errorf("call_tool skipped approval: %d questions; declined call: error %v %q; accepted call: error %v %q",
					len(c.Elicitations), r0.IsError, r0.Text(), r1.IsError, r1.Text())
			}
			got := rec.Since(mark)
			if len(got) != 1 || !strings.Contains(string(got[0].Body), `"n":2`) {
				t.Errorf("upstream got %d calls", len(got))
			}
		})
	}
}
