package status

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/aggregator"
	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/sessions/grant"
)

// resolverSource is a Source of a config's real resolver and filter
// registry, with no server around them: enough for the per-profile part
// of the page, which reads nothing else. A reload is setting res.
type resolverSource struct {
	res      *grant.Resolver
	registry *filter.Registry
}

func newResolverSource(tb testing.TB, toml string) *resolverSource {
	tb.Helper()
	src := &resolverSource{registry: filter.NewRegistry()}
	src.load(tb, toml)
	return src
}

func (s *resolverSource) load(tb testing.TB, toml string) {
	tb.Helper()
	cfg, err := configs.Parse("status.toml", []byte("[upstreams.up]\nurl = \"http://127.0.0.1:1/mcp\"\n"+toml), nil)
	if err != nil {
		tb.Fatal(err)
	}
	if s.res, err = grant.NewResolver(cfg, s.registry); err != nil {
		tb.Fatal(err)
	}
}

func (s *resolverSource) Aggregator() *aggregator.Aggregator { return nil }
func (s *resolverSource) Resolver() *grant.Resolver          { return s.res }
func (s *resolverSource) Registry() *filter.Registry         { return s.registry }
func (s *resolverSource) Config() *configs.Config            { return s.res.Config() }
func (s *resolverSource) Version() string                    { return "test" }
func (s *resolverSource) Log() *slog.Logger                  { return slog.New(slog.DiscardHandler) }
func (s *resolverSource) OpenSessions() int                  { return 0 }
func (s *resolverSource) Sessions(func(Session))             {}
func (s *resolverSource) InitialFilter(*grant.Resolver, grant.Binding) (*filter.Filter, bool) {
	return nil, false
}
func (s *resolverSource) Latency(string) (time.Duration, time.Duration, int) { return 0, 0, 0 }
func (s *resolverSource) RetainLatency(map[string]bool)                      {}

// snapshotOf is a catalog of n tools of the upstream "up", as version v.
func snapshotOf(v uint64, n int) *aggregator.Snapshot {
	snap := &aggregator.Snapshot{Version: v}
	for i := range n {
		name := fmt.Sprintf("tool_%04d", i)
		t := mcp.NewTool("up__"+name, mcp.WithDescription("tool number "+name))
		snap.Tools = append(snap.Tools, &filter.Entry{Tool: t, Upstream: "up", Original: name, ReadOnly: i%2 == 0, Toolsets: []string{"up"}})
	}
	return snap
}

// TestStatusProfilesAreCached checks that the per-profile part (which
// encodes every view to estimate tokens) is computed once per snapshot
// version and resolver, not once per request.
func TestStatusProfilesAreCached(t *testing.T) {
	src := newResolverSource(t, "[profiles.a]\n[profiles.b]\nread_only = true\n")
	p := New(src)
	snap := snapshotOf(1, 3)
	first := p.profiles(snap)
	if len(first.profiles) != 2 || first.profiles[0].Tools != 3 || first.profiles[1].Tools != 2 {
		t.Fatalf("profiles: %+v, want a with 3 tools and b with 2", first.profiles)
	}
	for range 100 {
		if p.profiles(snap) != first {
			t.Fatal("the profiles were computed again for the same snapshot and resolver")
		}
	}
	if p.profiles(snapshotOf(2, 3)) == first {
		t.Error("a new snapshot version was served from the cache")
	}
	src.load(t, "[profiles.a]\n[profiles.c]\n")
	after := p.profiles(snapshotOf(2, 3))
	if len(after.profiles) != 2 || after.profiles[1].Name != "c" {
		t.Fatalf("after a reload: %+v, want profiles a and c", after.profiles)
	}
}

// BenchmarkProfiles is what each request for the page would cost if the
// per-profile part (token estimates of every view) were not cached per
// snapshot: 1,000 tools, three profiles. Compare with the sessions
// package's BenchmarkStatusPage, the whole cached page.
func BenchmarkProfiles(b *testing.B) {
	src := newResolverSource(b, "[profiles.a]\n[profiles.b]\nread_only = true\n[profiles.c]\ndeny = [\"up__tool_00*\"]\n")
	p := New(src)
	snap := snapshotOf(1, 1000)
	b.ReportAllocs()
	for b.Loop() {
		p.cached = nil
		if ps := p.profiles(snap); len(ps.profiles) != 3 {
			b.Fatalf("profiles: %+v", ps.profiles)
		}
	}
}

// TestStatusTarget is issue 18, item 5: four upstreams run by node showed
// the same target, "node". The target names the script or package the
// first argument names, and never a secret an argument may carry.
func TestStatusTarget(t *testing.T) {
	for _, tc := range []struct {
		name    string
		command string
		args    []string
		want    string
	}{
		{"node script", "node", []string{"/srv/mcp/server-filesystem/dist/index.js", "/tmp"}, "node /srv/mcp/server-filesystem/dist/index.js"},
		{"npx package", "npx", []string{"-y", "@modelcontextprotocol/server-everything"}, "npx @modelcontextprotocol/server-everything"},
		{"python module", "python3", []string{"-m", "mcp_server_time", "--local-timezone", "UTC"}, "python3 mcp_server_time"},
		{"uvx", "uvx", []string{"mcp-server-fetch"}, "uvx mcp-server-fetch"},
		{"flags with values are skipped", "node", []string{"--api-key=sk-live-0123456789abcdef0123", "server.js"}, "node server.js"},
		{"long path keeps its end", "node", []string{"/home/someone/projects/mcp/servers/very-long-directory-name/packages/filesystem/dist/index.js"}, "node …s/very-long-directory-name/packages/filesystem/dist/index.js"},
		{"shell script text", "sh", []string{"-c", "echo hi; exec server --token abc"}, "sh"},
		{"token-like argument", "npx", []string{"ghp_16C7e42F292c6912E7710c838347Ae178B4a"}, "npx"},
		{"URL argument", "mcp-remote", []string{"https://user:pw@example.com/mcp?key=k"}, "mcp-remote"},
		{"assignment", "env", []string{"TOKEN=abc", "server"}, "env"},
		{"no arguments", "/usr/local/bin/mcp-server", nil, "/usr/local/bin/mcp-server"},
		{"url upstream", "", nil, "https://mcp.example.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &configs.Upstream{Command: tc.command, Args: tc.args}
			if tc.command == "" {
				cfg.URL = "https://user:pw@mcp.example.com/sk-path-key/mcp?key=q"
			}
			if got := target(cfg); got != tc.want {
				t.Errorf("target = %q, want %q", got, tc.want)
			}
		})
	}
}
