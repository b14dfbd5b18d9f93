package grant

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/glob"
)

// How a request's selection is read from its path, headers and query.

// listOf makes n comma-separated names of size bytes each.
func listOf(n, size int) string {
	var out []string
	for i := range n {
		s := fmt.Sprintf("n%d_", i)
		out = append(out, s+strings.Repeat("x", max(0, size-len(s))))
	}
	return strings.Join(out, ",")
}

func TestSelectionFromPath(t *testing.T) {
	tests := []struct {
		path     string
		profile  string
		toolsets []string
		readOnly bool
		err      error  // nil = accepted
		msg      string // substring of the error
	}{
		{path: "/mcp"},
		{path: "/mcp/"},
		{path: "/message?sessionId=x"},
		{path: "/metrics"},
		{path: "/mcpx/readonly"}, // not a door
		{path: "/mcp/readonly", readOnly: true},
		{path: "/mcp/readonly/", readOnly: true},
		{path: "/sse/readonly", readOnly: true},
		{path: "/ws/readonly", readOnly: true},
		{path: "/mcp/x/gh", toolsets: []string{"gh"}},
		{path: "/mcp/x/gh/", toolsets: []string{"gh"}},
		{path: "/mcp/x/gh/issues", toolsets: []string{"gh/issues"}},
		{path: "/mcp/x/gh/issues,docs/readonly", toolsets: []string{"gh/issues", "docs"}, readOnly: true},
		{path: "/mcp/x/gh%2Fissues,%20docs", toolsets: []string{"gh/issues", "docs"}},
		{path: "/mcp/x/gh%2Creadonly", toolsets: []string{"gh", "readonly"}},
		{path: "/mcp/x/gh%2Freadonly", toolsets: []string{"gh/readonly"}},
		{path: "/mcp/x/readonly", toolsets: []string{"readonly"}},                                // a toolset named readonly
		{path: "/mcp/x/gh/readonly/readonly", toolsets: []string{"gh/readonly"}, readOnly: true}, // the last one only is the flag
		{path: "/mcp/x/..%2F..%2Fp%2Fadmin", toolsets: []string{"../../p/admin"}},                // a name, never a path
		{path: "/mcp/x/a,,b,", toolsets: []string{"a", "b"}},
		{path: "/sse/x/gh/issues/readonly", toolsets: []string{"gh/issues"}, readOnly: true},
		{path: "/ws/x/gh", toolsets: []string{"gh"}},
		{path: "/mcp/p/ro", profile: "ro"},
		{path: "/mcp/p/ro/", profile: "ro"},
		{path: "/mcp/p/readonly", profile: "readonly"},
		{path: "/mcp/p/x", profile: "x"},
		{path: "/mcp/p/r%20o", profile: "r o"},
		{path: "/mcp/p/ro/readonly", profile: "ro", readOnly: true},
		{path: "/mcp/p/ro/x/gh/readonly", profile: "ro", toolsets: []string{"gh"}, readOnly: true},
		{path: "/ws/p/ro/x/a,b", profile: "ro", toolsets: []string{"a", "b"}},
		{path: "/mcp/x/" + listOf(256, 128), toolsets: strings.Split(listOf(256, 128), ",")},

		{path: "/mcp/nope", err: ErrUnknownPath, msg: "/mcp/x/{toolsets}/readonly"},
		{path: "/sse/nope", err: ErrUnknownPath, msg: "/sse/p/{profile}"},
		{path: "/ws/nope/x/a", err: ErrUnknownPath, msg: "/ws/readonly"},
		{path: "/mcp/Readonly", err: ErrUnknownPath},
		{path: "/mcp/readonly/readonly", err: ErrUnknownPath},
		{path: "/mcp/readonly/x/gh", err: ErrUnknownPath},
		{path: "/mcp/readonly%2F", err: ErrUnknownPath},
		{path: "/mcp/p/ro/p/admin", err: ErrUnknownPath},
		{path: "/mcp/p/ro/nope", err: ErrUnknownPath},
		{path: "/mcp/x/", err: ErrBadNarrowing, msg: "/mcp/x/ names no toolset"},
		{path: "/mcp/x", err: ErrBadNarrowing, msg: "names no toolset"},
		{path: "/mcp/x/%2C,", err: ErrBadNarrowing, msg: "names no toolset"},
		{path: "/mcp/x/%2Freadonly", toolsets: []string{"/readonly"}},
		{path: "/mcp/p/", err: ErrBadNarrowing, msg: "/mcp/p/ names no profile"},
		{path: "/mcp/p/%2F", profile: "/"},
		{path: "/mcp/x/a%25ZZ", toolsets: []string{"a%ZZ"}}, // a bad escape never gets past net/http
		{path: "/mcp/x/" + listOf(300, 4), err: ErrBadNarrowing, msg: "/mcp/x/{toolsets} path lists 300 names; at most 256"},
		{path: "/sse/x/" + strings.Repeat("y", 200), err: ErrBadNarrowing, msg: "/sse/x/{toolsets} path holds a name of 200 bytes; at most 128"},
		{path: "/mcp/x/a/" + strings.Repeat("b/", 100), err: ErrBadNarrowing, msg: "holds a name of 201 bytes"},
		{path: "/mcp/p/" + strings.Repeat("p", 200), err: ErrBadNarrowing, msg: "the profile name is 200 bytes long"},
	}
	for _, tt := range tests {
		name := tt.path
		if len(name) > 60 {
			name = name[:60]
		}
		t.Run(name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1"+tt.path, nil)
			sel, err := SelectionFromRequest(r)
			if tt.err != nil {
				if !errors.Is(err, tt.err) || !strings.Contains(err.Error(), tt.msg) {
					t.Fatalf("err = %v, want %v containing %q", err, tt.err, tt.msg)
				}
				want := map[error]int{ErrUnknownPath: http.StatusNotFound, ErrBadNarrowing: http.StatusBadRequest}[tt.err]
				if StatusOf(err) != want {
					t.Fatalf("status %d, want %d", StatusOf(err), want)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if sel.Profile != tt.profile || !slices.Equal(sel.Path.Toolsets, tt.toolsets) || sel.Path.ReadOnly != tt.readOnly {
				t.Fatalf("profile %q toolsets %q read-only %v; want %q %q %v", sel.Profile, sel.Path.Toolsets, sel.Path.ReadOnly, tt.profile, tt.toolsets, tt.readOnly)
			}
			if sel.Narrowing != (tt.readOnly || len(tt.toolsets) > 0) {
				t.Fatalf("Narrowing = %v", sel.Narrowing)
			}
			if sel.Toolsets != nil || sel.ReadOnly || sel.Alias.given() {
				t.Fatalf("the path leaked into another source: %+v", sel)
			}
		})
	}
}

func TestSelectionFromHeaders(t *testing.T) {
	tests := []struct {
		name   string
		target string
		header http.Header
		check  func(Selection) bool
		err    string
	}{
		{"X-MCP-Toolsets", "/mcp", http.Header{"X-Mcp-Toolsets": {" repos , issues "}},
			func(s Selection) bool {
				return slices.Equal(s.Alias.Toolsets, []string{"repos", "issues"}) && s.Toolsets == nil && s.Narrowing
			}, ""},
		{"X-MCP-Toolsets on two lines is one list", "/mcp", http.Header{"X-Mcp-Toolsets": {"a", "b"}},
			func(s Selection) bool { return slices.Equal(s.Alias.Toolsets, []string{"a", "b"}) }, ""},
		{"Mcp-Toolsets on two lines is one list", "/mcp?toolsets=c", http.Header{"Mcp-Toolsets": {"a", "b"}},
			func(s Selection) bool { return slices.Equal(s.Toolsets, []string{"a", "b"}) }, ""},
		{"empty X-MCP-Toolsets narrows nothing", "/mcp", http.Header{"X-Mcp-Toolsets": {" , "}},
			func(s Selection) bool { return !s.Narrowing }, ""},
		{"X-MCP-Tools", "/mcp", http.Header{"X-Mcp-Tools": {"a,b"}},
			func(s Selection) bool { return slices.Equal(s.Alias.Tools, []string{"a", "b"}) && s.Narrowing }, ""},
		{"X-MCP-Exclude-Tools", "/mcp", http.Header{"X-Mcp-Exclude-Tools": {"a,b*"}},
			func(s Selection) bool { return slices.Equal(s.Alias.ExcludeTools, []string{"a", "b*"}) && s.Narrowing }, ""},
		{"X-MCP-Exclude-Tools over the count", "/mcp", http.Header{"X-Mcp-Exclude-Tools": {listOf(300, 4)}}, nil, "X-MCP-Exclude-Tools header lists 300 names"},
		{"X-MCP-Tools name too long", "/mcp", http.Header{"X-Mcp-Tools": {strings.Repeat("t", 200)}}, nil, "X-MCP-Tools header holds a name of 200 bytes"},
		{"X-MCP-Toolsets over the count on many lines", "/mcp", http.Header{"X-Mcp-Toolsets": strings.Split(listOf(257, 4), ",")}, nil, "X-MCP-Toolsets header lists 257 names"},
		{"header profile beats the path", "/mcp/p/a?profile=c", http.Header{"Mcp-Profile": {"b"}},
			func(s Selection) bool { return s.Profile == "b" }, ""},
		{"path profile beats the query", "/mcp/p/a?profile=c", nil,
			func(s Selection) bool { return s.Profile == "a" }, ""},
		{"query profile when the path names none", "/mcp/readonly?profile=c", nil,
			func(s Selection) bool { return s.Profile == "c" && s.Path.ReadOnly }, ""},
		{"Mcp-Read-Only false does not undo ?read_only", "/mcp?read_only=true", http.Header{"Mcp-Read-Only": {""}},
			func(s Selection) bool { return s.ReadOnly }, ""},
		{"Mcp-Read-Only on two lines, one true", "/mcp", http.Header{"Mcp-Read-Only": {"false", "true"}},
			func(s Selection) bool { return s.ReadOnly }, ""},
		{"Mcp-Read-Only not a boolean", "/mcp", http.Header{"Mcp-Read-Only": {"maybe"}}, nil, `read_only "maybe" is not a boolean`},
		{"all three sources at once", "/mcp/x/p1/readonly?toolsets=q", http.Header{"X-Mcp-Toolsets": {"x1"}, "Mcp-Tools": {"t"}},
			func(s Selection) bool {
				return slices.Equal(s.Toolsets, []string{"q"}) && slices.Equal(s.Tools, []string{"t"}) &&
					slices.Equal(s.Alias.Toolsets, []string{"x1"}) && slices.Equal(s.Path.Toolsets, []string{"p1"}) && s.Path.ReadOnly && !s.ReadOnly && !s.Alias.ReadOnly
			}, ""},
	}
	for _, v := range []string{"true", "TRUE", " 1 ", "yes", "on", "y", "anything", "readonly"} {
		tests = append(tests, struct {
			name   string
			target string
			header http.Header
			check  func(Selection) bool
			err    string
		}{"X-MCP-Readonly " + v, "/mcp", http.Header{"X-Mcp-Readonly": {v}}, func(s Selection) bool { return s.Alias.ReadOnly && s.Narrowing }, ""})
	}
	for _, v := range []string{"", "false", "FALSE", " f ", "no", "n", "0", "off", "Off"} {
		tests = append(tests, struct {
			name   string
			target string
			header http.Header
			check  func(Selection) bool
			err    string
		}{"X-MCP-Readonly " + v, "/mcp", http.Header{"X-Mcp-Readonly": {v}}, func(s Selection) bool { return !s.Alias.ReadOnly && !s.Narrowing }, ""})
	}
	tests = append(tests, struct {
		name   string
		target string
		header http.Header
		check  func(Selection) bool
		err    string
	}{"X-MCP-Readonly false then true", "/mcp", http.Header{"X-Mcp-Readonly": {"false", "true"}}, func(s Selection) bool { return s.Alias.ReadOnly }, ""})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1"+tt.target, nil)
			for k, v := range tt.header {
				r.Header[k] = v
			}
			sel, err := SelectionFromRequest(r)
			if tt.err != "" {
				if !errors.Is(err, ErrBadNarrowing) || !strings.Contains(err.Error(), tt.err) || StatusOf(err) != http.StatusBadRequest {
					t.Fatalf("err = %v, want ErrBadNarrowing (400) containing %q", err, tt.err)
				}
				return
			}
			if err != nil || !tt.check(sel) {
				t.Fatalf("err = %v, selection %+v", err, sel)
			}
		})
	}
}

func TestLiteralGlob(t *testing.T) {
	names := []string{"plain_name-1", "a*", "*", "a?c", "[ab]", `back\slash`, "a]b", "[!x]", "ab", "abc", "a", "b", "x"}
	for _, name := range names {
		rules, err := filter.Compile(configs.RuleSet{Deny: []string{glob.Quote(name)}})
		if err != nil {
			t.Fatalf("glob.Quote(%q) = %q: %v", name, glob.Quote(name), err)
		}
		for _, other := range names {
			if hidden := !rules.Match(other, true, nil); hidden != (other == name) {
				t.Errorf("excluding %q (as %q): %q hidden = %v", name, glob.Quote(name), other, hidden)
			}
		}
	}
}

// TestHeaderKeysAreCanonical checks that the keys viewmux looks request
// headers up by are net/http's canonical forms of the headers' names.
func TestHeaderKeysAreCanonical(t *testing.T) {
	for name, key := range map[string]string{
		HeaderXToolsets: keyXToolsets, HeaderXReadOnly: keyXReadOnly,
		HeaderXTools: keyXTools, HeaderXExcludeTools: keyXExcludeTools,
		HeaderProfile: HeaderProfile, HeaderToolsets: HeaderToolsets,
		HeaderReadOnly: HeaderReadOnly, HeaderTools: HeaderTools,
	} {
		if c := http.CanonicalHeaderKey(name); c != key {
			t.Errorf("%s is looked up as %q; its canonical key is %q", name, key, c)
		}
	}
}
