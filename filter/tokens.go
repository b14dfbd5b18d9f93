package filter

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
)

// bytesPerToken is the rule of thumb behind every token estimate: about
// four bytes of JSON per token for English text and JSON with common
// tokenizers.
const bytesPerToken = 4

// tokensOf is the estimate for n bytes of JSON, rounded up.
func tokensOf(n int) int { return (n + bytesPerToken - 1) / bytesPerToken }

// EstimateTokens approximates the model tokens a tools/list result listing
// tools costs: the size of its JSON over four. It is what `viewmux check`
// and the status page print. An error names the tool that
// cannot be encoded.
func EstimateTokens(tools []mcp.Tool) (int, error) {
	b, err := json.Marshal(mcp.ListToolsResult{Tools: tools})
	if err != nil {
		for _, t := range tools {
			if _, terr := json.Marshal(t); terr != nil {
				return 0, fmt.Errorf("tool %q: %w", t.Name, terr)
			}
		}
		return 0, err
	}
	return tokensOf(len(b)), nil
}

// UpstreamTokens is the share of one upstream's tools in a view's
// tools/list.
type UpstreamTokens struct {
	Upstream string `json:"upstream"`
	Tools    int    `json:"tools"`
	Tokens   int    `json:"tokens"` // EstimateTokens of this upstream's tools alone
}

// Tokens returns the estimate of the view's whole tools/list (the size of
// its cached encoding, so it costs nothing after the first call) and its
// breakdown by upstream, sorted by upstream name. The breakdown encodes
// the view's tools again: callers that show it often should cache it per
// view. The parts add up to about the total (each part is a listing of its
// own). An error names the upstream and tool that cannot be encoded; the
// returned slice is the caller's.
func (v *View) Tokens() (total int, by []UpstreamTokens, err error) {
	groups := make(map[string][]mcp.Tool)
	for _, t := range v.Tools {
		up := ""
		if e := v.byName[t.Name]; e != nil {
			up = e.Upstream
		}
		groups[up] = append(groups[up], t)
	}
	for up, tools := range groups {
		n, err := EstimateTokens(tools)
		if err != nil {
			return 0, nil, fmt.Errorf("upstream %q: %w", up, err)
		}
		by = append(by, UpstreamTokens{Upstream: up, Tools: len(tools), Tokens: n})
	}
	slices.SortFunc(by, func(a, b UpstreamTokens) int { return strings.Compare(a.Upstream, b.Upstream) })
	return tokensOf(len(v.Encoded())), by, nil
}
