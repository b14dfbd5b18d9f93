package filter

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/viewmux/viewmux/configs"
)

// upEntry is a tool of upstream up, named "<up>__<name>".
func upEntry(up, name string, readOnly bool) *Entry {
	return &Entry{Tool: mcp.Tool{Name: up + "__" + name}, Upstream: up, Original: name, ReadOnly: readOnly, Toolsets: []string{up}}
}

// visibilityCatalog has three upstreams: a and b serve tools, prompts,
// resources and templates; c serves a prompt and a resource but no tool.
func visibilityCatalog(version uint64) ([]*Entry, *Catalog) {
	entries := []*Entry{upEntry("a", "read", true), upEntry("a", "write", false), upEntry("b", "read", true)}
	var prompts []Served[mcp.Prompt]
	var resources []Served[mcp.Resource]
	var templates []Served[mcp.ResourceTemplate]
	for _, up := range []string{"c", "b", "a"} { // NewCatalog sorts by name
		prompts = append(prompts, Served[mcp.Prompt]{Item: mcp.Prompt{Name: up + "__greet"}, Upstream: up})
		resources = append(resources, Served[mcp.Resource]{Item: mcp.Resource{Name: up + " notes", URI: "file:///" + up + "/notes"}, Upstream: up})
		if up != "c" {
			templates = append(templates, Served[mcp.ResourceTemplate]{Item: mcp.NewResourceTemplate("file:///"+up+"/{path}", up+" files"), Upstream: up})
		}
	}
	return entries, NewCatalog(version, prompts, resources, templates, []string{"a", "b"})
}

// shownUpstreams returns, sorted, the upstreams among a, b and c whose
// prompts the listing shows.
func shownUpstreams(l *Listing) string {
	var out []string
	for _, up := range []string{"a", "b", "c"} {
		if l.Shows(up) {
			out = append(out, up)
		}
	}
	return strings.Join(out, ",")
}

func TestUpstreamVisibility(t *testing.T) {
	tests := []struct {
		name   string
		stages []configs.RuleSet
		shown  string // upstreams whose prompts and resources are shown
		tools  string // the view's tools
	}{
		{"no rules show everything", nil, "a,b,c", "a__read,a__write,b__read"},
		{"deny all tools hides the upstreams that serve tools",
			[]configs.RuleSet{{Deny: []string{"*"}}}, "c", ""},
		{"an upstream with one tool in view is shown",
			[]configs.RuleSet{{Tools: []string{"b__read"}}}, "b,c", "b__read"},
		{"read_only keeps a upstream with a read-only tool",
			[]configs.RuleSet{{ReadOnly: true}}, "a,b,c", "a__read,b__read"},
		{"named upstreams only, whatever their tools",
			[]configs.RuleSet{{Upstreams: []string{"a"}, Deny: []string{"*"}}}, "a", ""},
		{"named upstreams narrow tools",
			[]configs.RuleSet{{Upstreams: []string{"b"}}}, "b", "b__read"},
		{"an upstream serving no tools is hidden when unnamed",
			[]configs.RuleSet{{Upstreams: []string{"a", "b"}}}, "a,b", "a__read,a__write,b__read"},
		{"deny_upstreams hides prompts and tools",
			[]configs.RuleSet{{DenyUpstreams: []string{"a", "c"}}}, "b", "b__read"},
		{"deny wins over naming, in the same stage",
			[]configs.RuleSet{{Upstreams: []string{"a", "b"}, DenyUpstreams: []string{"a"}}}, "b", "b__read"},
		{"deny wins over naming, across stages",
			[]configs.RuleSet{{Upstreams: []string{"a", "b"}}, {DenyUpstreams: []string{"b"}}}, "a", "a__read,a__write"},
		{"extends chain intersects named upstreams",
			[]configs.RuleSet{{Upstreams: []string{"a", "b"}}, {Upstreams: []string{"b", "c"}}}, "b", "b__read"},
		{"a stage naming upstreams decides for the stages that do not",
			[]configs.RuleSet{{Upstreams: []string{"a", "c"}}, {Deny: []string{"a__*"}}}, "a,c", ""},
		{"a narrowing stage hides the upstreams it leaves no tool of",
			[]configs.RuleSet{{ReadOnly: true}, {Tools: []string{"a__read", "a__write"}}}, "a,c", "a__read"},
		{"an unknown named upstream shows nothing else",
			[]configs.RuleSet{{Upstreams: []string{"zz"}}}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRegistry()
			var stages []*Rules
			for _, rs := range tt.stages {
				stages = append(stages, MustCompile(rs))
			}
			f := r.Filter(stages...)
			entries, cat := visibilityCatalog(1)
			v := r.View(1, entries, f)
			l := v.Listing(cat)
			if got := shownUpstreams(l); got != tt.shown {
				t.Errorf("shown upstreams = %q, want %q", got, tt.shown)
			}
			if got := names(v); got != tt.tools {
				t.Errorf("tools = %q, want %q", got, tt.tools)
			}
			// The listings hold exactly the shown upstreams' items.
			var prompts, resources, templates []string
			for _, p := range l.Prompts {
				prompts = append(prompts, strings.TrimSuffix(p.Name, "__greet"))
			}
			for _, res := range l.Resources {
				resources = append(resources, strings.TrimSuffix(res.Name, " notes"))
			}
			for _, tp := range l.Templates {
				templates = append(templates, strings.TrimSuffix(tp.Name, " files"))
			}
			want := strings.Split(tt.shown, ",")
			if tt.shown == "" {
				want = nil
			}
			if !slices.Equal(prompts, want) || !slices.Equal(resources, want) {
				t.Errorf("listed prompts %v, resources %v; want %v", prompts, resources, want)
			}
			wantT := slices.DeleteFunc(slices.Clone(want), func(s string) bool { return s == "c" })
			if !slices.Equal(templates, wantT) {
				t.Errorf("listed templates %v, want %v", templates, wantT)
			}
			// Tools and upstream visibility come from one decision: an
			// upstream's tool is in the view only if its stages admit it.
			for _, e := range entries {
				if f.Allows(e) && !stagesAdmit(stages, e.Upstream) {
					t.Errorf("tool %s allowed though its upstream is not admitted", e.Tool.Name)
				}
			}
		})
	}
}

func stagesAdmit(stages []*Rules, up string) bool {
	for _, s := range stages {
		if !s.AdmitsUpstream(up) {
			return false
		}
	}
	return true
}

func TestListingIsCachedPerView(t *testing.T) {
	r := NewRegistry()
	f := r.Filter(MustCompile(configs.RuleSet{Deny: []string{"a__*"}}))
	entries, cat := visibilityCatalog(3)
	v := r.View(3, entries, f)
	l := v.Listing(cat)
	if v.Listing(cat) != l || r.View(3, entries, f).Listing(cat) != l {
		t.Fatal("the listing of one view and catalog version must be computed once")
	}
	_, other := visibilityCatalog(4)
	if got := v.Listing(other); got == l || got.Version != 4 {
		t.Fatal("a catalog of another version must not be served from the view's cache")
	}
	if nl := v.Listing(nil); len(nl.Prompts)+len(nl.Resources)+len(nl.Templates) != 0 || nl.Version != v.Version {
		t.Fatalf("a nil catalog lists nothing: %+v", nl)
	}
}

func TestListingEncodedAndKeep(t *testing.T) {
	r := NewRegistry()
	f := r.Filter(MustCompile(configs.RuleSet{Upstreams: []string{"b"}}))
	entries, cat := visibilityCatalog(1)
	l := r.View(1, entries, f).Listing(cat)

	for method, want := range map[string]string{
		"prompts/list":             `{"prompts":[{"name":"b__greet"}]}`,
		"resources/list":           `{"resources":[{"uri":"file:///b/notes","name":"b notes"}]}`,
		"resources/templates/list": `{"resourceTemplates":[{"uriTemplate":"file:///b/{path}","name":"b files"}]}`,
	} {
		if got := string(l.Encoded(method)); got != want {
			t.Errorf("%s: encoded %s, want %s", method, got, want)
		}
	}
	if l.Encoded("tools/list") != nil {
		t.Error("Encoded must be nil for a method it does not list")
	}

	var decoded mcp.ListPromptsResult
	if err := json.Unmarshal(l.Encoded("prompts/list"), &decoded); err != nil || len(decoded.Prompts) != 1 {
		t.Errorf("encoded listing does not decode: %v", err)
	}
}

func TestListingFingerprints(t *testing.T) {
	r := NewRegistry()
	entries, cat := visibilityCatalog(1)
	onlyA := r.View(1, entries, r.Filter(MustCompile(configs.RuleSet{Upstreams: []string{"a"}}))).Listing(cat)
	onlyB := r.View(1, entries, r.Filter(MustCompile(configs.RuleSet{Upstreams: []string{"b"}}))).Listing(cat)
	pa, ra := onlyA.Fingerprints()
	pb, rb := onlyB.Fingerprints()
	if pa == pb || ra == rb {
		t.Fatal("listings of different upstreams must have different fingerprints")
	}
	// The same listing in a new catalog version (b's items changed) keeps
	// a's fingerprints: a session that only sees a is not told.
	entries2, cat2 := visibilityCatalog(2)
	cat2.Prompts = slices.DeleteFunc(cat2.Prompts, func(p Served[mcp.Prompt]) bool { return p.Upstream == "b" })
	cat2 = NewCatalog(2, cat2.Prompts, cat2.Resources, cat2.Templates, []string{"a", "b"})
	onlyA2 := r.View(2, entries2, r.Filter(MustCompile(configs.RuleSet{Upstreams: []string{"a"}}))).Listing(cat2)
	onlyB2 := r.View(2, entries2, r.Filter(MustCompile(configs.RuleSet{Upstreams: []string{"b"}}))).Listing(cat2)
	if p, res := onlyA2.Fingerprints(); p != pa || res != ra {
		t.Error("a view whose listing did not change must keep its fingerprints")
	}
	if p, res := onlyB2.Fingerprints(); p == pb || res != rb {
		t.Error("a view that lost a prompt must get a new prompts fingerprint, and keep its resources one")
	}
}

func TestUpstreamKeys(t *testing.T) {
	key := func(rs configs.RuleSet) string { return MustCompile(rs).Key() }
	if key(configs.RuleSet{Upstreams: []string{"b", "a", "a"}}) != key(configs.RuleSet{Upstreams: []string{"a", "b"}}) {
		t.Error("equal upstream lists must share a key")
	}
	distinct := []configs.RuleSet{
		{},
		{Upstreams: []string{"a"}},
		{DenyUpstreams: []string{"a"}},
		{Upstreams: []string{"a"}, DenyUpstreams: []string{"a"}},
		{Toolsets: []string{"a"}},
		{Upstreams: []string{"b"}},
	}
	seen := map[string]int{}
	for i, rs := range distinct {
		k := key(rs)
		if j, dup := seen[k]; dup {
			t.Errorf("rule sets %d and %d share the key %q", j, i, k)
		}
		seen[k] = i
	}
	r := NewRegistry()
	if r.Filter(MustCompile(configs.RuleSet{DenyUpstreams: []string{"x", "y"}})) != r.Filter(MustCompile(configs.RuleSet{DenyUpstreams: []string{"y", "x"}})) {
		t.Error("equal rule sets must share one filter")
	}
}

func TestListingsShareTheCatalogWhenShowingAll(t *testing.T) {
	r := NewRegistry()
	entries, cat := visibilityCatalog(1)
	l1 := r.View(1, entries, r.Filter(MustCompile(configs.RuleSet{ReadOnly: true}))).Listing(cat)
	l2 := r.View(1, entries, r.Filter(MustCompile(configs.RuleSet{Deny: []string{"a__write"}}))).Listing(cat)
	if len(l1.Prompts) != 3 || &l1.Prompts[0] != &l2.Prompts[0] || &l1.Resources[0] != &l2.Resources[0] {
		t.Error("views that show every upstream must share the catalog's listings, not copy them")
	}
	l3 := r.View(1, entries, r.Filter(MustCompile(configs.RuleSet{Upstreams: []string{"a"}}))).Listing(cat)
	if len(l3.Prompts) != 1 || &l3.Prompts[0] == &l1.Prompts[0] {
		t.Error("a narrower listing must be its own slice")
	}
}

// BenchmarkListing measures building one view's Listing (once per snapshot
// version and filter) over 10 upstreams with 100 prompts, 100 resources and
// 10 templates each, half of them hidden.
func BenchmarkListing(b *testing.B) {
	var entries []*Entry
	var prompts []Served[mcp.Prompt]
	var resources []Served[mcp.Resource]
	var templates []Served[mcp.ResourceTemplate]
	var ups, withTools []string
	for u := range 10 {
		up := fmt.Sprintf("up%d", u)
		ups = append(ups, up)
		withTools = append(withTools, up)
		entries = append(entries, upEntry(up, "read", u%2 == 0))
		for i := range 100 {
			prompts = append(prompts, Served[mcp.Prompt]{Item: mcp.Prompt{Name: fmt.Sprintf("%s__p%03d", up, i)}, Upstream: up})
			resources = append(resources, Served[mcp.Resource]{Item: mcp.Resource{Name: fmt.Sprintf("r%03d", i), URI: fmt.Sprintf("file:///%s/%d", up, i)}, Upstream: up})
		}
		for i := range 10 {
			templates = append(templates, Served[mcp.ResourceTemplate]{Item: mcp.NewResourceTemplate(fmt.Sprintf("file:///%s/t%d/{x}", up, i), "t"), Upstream: up})
		}
	}
	slices.SortFunc(entries, func(x, y *Entry) int { return strings.Compare(x.Tool.Name, y.Tool.Name) })
	cat := NewCatalog(1, prompts, resources, templates, withTools)
	f := NewRegistry().Filter(MustCompile(configs.RuleSet{ReadOnly: true}))
	v := NewRegistry().View(1, entries, f)
	b.ReportAllocs()
	for b.Loop() {
		l := newListing(v, cat)
		if len(l.Prompts) != 500 {
			b.Fatalf("%d prompts shown, want 500", len(l.Prompts))
		}
	}
}

// BenchmarkListingShows measures the check a get, read or completion
// makes of its target's upstream, on a listing already built.
func BenchmarkListingShows(b *testing.B) {
	r := NewRegistry()
	entries, cat := visibilityCatalog(1)
	l := r.View(1, entries, r.Filter(MustCompile(configs.RuleSet{Deny: []string{"*"}}))).Listing(cat)
	b.ReportAllocs()
	for b.Loop() {
		if l.Shows("a") {
			b.Fatal("a must be hidden")
		}
	}
}
