package aggregator

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/internal/jsonrpc"
)

// TestFinishResultKeepsBytes: finishing a result changes its envelope
// members only. The content keeps its bytes and place (no re-encoding:
// "<", ">" and "&" stay as the upstream wrote them, members keep their
// order), the hop's reserved _meta keys go, and a 2026-07-28 client gets
// resultType, serverInfo and, on a cacheable result, the fail-closed
// caching hints.
func TestFinishResultKeepsBytes(t *testing.T) {
	a := &Aggregator{opts: Options{ServerInfo: mcp.Implementation{Name: "viewmux", Version: "test"}}}
	content := `"content":[{"type":"text","text":"<b>a & b</b> \u00e9"}]`
	finish := func(res string, modern, cacheable bool) string {
		raw := json.RawMessage(res)
		return string(a.finishResult(nil, raw, jsonrpc.Fields(raw, "resultType", "_meta"), modern, cacheable))
	}

	got := finish(`{"zeta":1,`+content+`,"resultType":"complete","_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t"},"mine":true}}`, false, false)
	if want := `{"zeta":1,` + content + `,"_meta":{"mine":true}}`; got != want {
		t.Errorf("legacy:\n got %s\nwant %s", got, want)
	}

	got = finish(`{`+content+`}`, true, true)
	if !strings.HasPrefix(got, `{`+content+`,`) {
		t.Errorf("modern: content moved or re-encoded: %s", got)
	}
	var m struct {
		ResultType string                     `json:"resultType"`
		TTL        *int                       `json:"ttlMs"`
		Scope      string                     `json:"cacheScope"`
		Meta       map[string]json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal([]byte(got), &m); err != nil {
		t.Fatalf("modern: not JSON: %v: %s", err, got)
	}
	if m.ResultType != "complete" || m.TTL == nil || *m.TTL != 0 || m.Scope != "private" || m.Meta[mcp.MetaKeyServerInfo] == nil {
		t.Errorf("modern cacheable: %s", got)
	}

	got = finish(`{`+content+`,"ttlMs":5000,"cacheScope":"public","resultType":"complete"}`, true, true)
	if strings.Count(got, `"ttlMs"`) != 1 || strings.Count(got, `"cacheScope"`) != 1 || !strings.Contains(got, `"ttlMs":5000,"cacheScope":"public","resultType":"complete"`) {
		t.Errorf("modern, hints given: %s", got)
	}

	in := `{` + content + `}`
	if got := finish(in, false, false); got != in {
		t.Errorf("legacy, nothing to change: %s", got)
	}
}
