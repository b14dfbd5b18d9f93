package aggregator

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
)

// Prompt is one exposed prompt: namespaced like tools.
type Prompt struct {
	Prompt   mcp.Prompt      // as exposed
	Raw      json.RawMessage // the exposed definition's bytes; nil = encode Prompt
	Upstream string
	Original string
}

// Resource is one exposed resource. Its URI is the upstream's, unless two
// upstreams claim the same URI: then the later upstream's is rewritten
// reversibly (see rewriteURI).
type Resource struct {
	Resource    mcp.Resource    // as exposed
	Raw         json.RawMessage // the exposed definition's bytes; nil = encode Resource
	Upstream    string
	OriginalURI string
}

// Template is one exposed resource template, rewritten like resources.
type Template struct {
	Template         mcp.ResourceTemplate // as exposed
	Raw              json.RawMessage      // the exposed definition's bytes; nil = encode Template
	Upstream         string
	OriginalTemplate string
}

// Rewrite records a resource URI or template of one upstream that collided
// with another upstream's and was rewritten.
type Rewrite struct {
	Upstream, Original, Exposed string
	Owner                       string // the upstream that kept the original
}

func (r Rewrite) String() string {
	return fmt.Sprintf("resource %q of upstream %q is also claimed by upstream %q; exposed as %q", r.Original, r.Upstream, r.Owner, r.Exposed)
}

// uriScheme returns the scheme prefix that marks a rewritten URI of the
// named upstream: "viewmux-<name>+", with characters a URI scheme cannot hold
// replaced by '-'.
func uriScheme(upstream string) string {
	b := []byte("viewmux-" + upstream)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			b[i] = '-'
		}
	}
	return string(b) + "+"
}

// rewriteURI makes upstream's claim on uri distinct and reversible.
func rewriteURI(upstream, uri string) string { return uriScheme(upstream) + uri }

// buildResources merges prompts, resources and templates of every source
// into s. Sources are in upstream-name order, so the earlier upstream keeps
// a contested URI. A prompt of an unprefixed upstream inside another's
// namespace is refused like a tool (see build).
func (s *Snapshot) buildResources(namer Namer, ns namespaces, sources []*source) {
	s.prompts = make(map[string]*Prompt)
	s.resources = make(map[string]*Resource)
	s.templates = make(map[string]*Template)
	owner := map[string]string{} // URI or template → upstream
	claim := func(up, uri string) string {
		if o, taken := owner[uri]; taken && o != up {
			exposed := rewriteURI(up, uri)
			s.Rewrites = append(s.Rewrites, Rewrite{Upstream: up, Original: uri, Exposed: exposed, Owner: o})
			return exposed
		}
		owner[uri] = up
		return uri
	}
	resourceUpstreams := 0
	for _, src := range sources {
		cat := src.catalog
		if cat == nil {
			continue
		}
		name := src.cfg.Name
		if cat.Capabilities.Resources != nil {
			resourceUpstreams++
			s.soleResourceUpstream = name
		}
		for i, p := range cat.Prompts {
			e := &Prompt{Prompt: p, Upstream: name, Original: p.Name}
			e.Prompt.Name = namer.Expose(src.cfg.Prefix, p.Name)
			e.Raw = exposedRaw(rawAt(cat.RawPrompts, i), "name", e.Prompt.Name, nil)
			if c, refused := src.shadowing(ns, "prompt", p.Name, e.Prompt.Name); refused {
				s.Conflicts = append(s.Conflicts, c)
				continue
			}
			if _, dup := s.prompts[e.Prompt.Name]; dup {
				continue // same rule as tools: the earlier upstream keeps it
			}
			s.prompts[e.Prompt.Name] = e
			s.Prompts = append(s.Prompts, e)
		}
		for i, r := range cat.Resources {
			e := &Resource{Resource: r, Upstream: name, OriginalURI: r.URI, Raw: rawAt(cat.RawResources, i)}
			e.Resource.URI = claim(name, r.URI)
			if e.Resource.URI != r.URI {
				e.Raw = exposedRaw(e.Raw, "uri", e.Resource.URI, nil)
			}
			s.resources[e.Resource.URI] = e
			s.Resources = append(s.Resources, e)
		}
		for i, t := range cat.ResourceTemplates {
			raw := templateString(t)
			e := &Template{Template: t, Upstream: name, OriginalTemplate: raw, Raw: rawAt(cat.RawTemplates, i)}
			if exposed := claim(name, raw); exposed != raw {
				e.Template.URITemplate = mustTemplate(exposed)
				e.Raw = exposedRaw(e.Raw, "uriTemplate", exposed, nil)
			}
			s.templates[templateString(e.Template)] = e
			s.Templates = append(s.Templates, e)
		}
	}
	if resourceUpstreams != 1 {
		s.soleResourceUpstream = ""
	}
	slices.SortFunc(s.Prompts, func(a, b *Prompt) int { return strings.Compare(a.Prompt.Name, b.Prompt.Name) })
}

func templateString(t mcp.ResourceTemplate) string {
	if t.URITemplate == nil || t.URITemplate.Template == nil {
		return ""
	}
	return t.URITemplate.Raw()
}

func mustTemplate(raw string) *mcp.URITemplate {
	tpl := mcp.NewResourceTemplate(raw, "")
	return tpl.URITemplate
}

// Prompt returns the exposed prompt named name, or nil.
func (s *Snapshot) Prompt(name string) *Prompt { return s.prompts[name] }

// Resource returns the exposed resource with the exposed URI, or nil.
func (s *Snapshot) Resource(uri string) *Resource { return s.resources[uri] }

// Template returns the exposed template with the exposed template string,
// or nil.
func (s *Snapshot) Template(raw string) *Template { return s.templates[raw] }

// RouteURI finds the upstream and its original URI for an exposed resource
// URI: a listed resource, a URI under a rewritten scheme, or a URI one
// upstream's template matches, or one it returned as a resource link. ok is
// false when no upstream claims it.
func (s *Snapshot) RouteURI(uri string, links map[string]string) (upstream, original string, ok bool) {
	if r := s.resources[uri]; r != nil {
		return r.Upstream, r.OriginalURI, true
	}
	for _, t := range s.Templates {
		if t.Template.URITemplate == nil {
			continue
		}
		if t.Template.URITemplate.Regexp().MatchString(uri) {
			return t.Upstream, unrewrite(t.Upstream, uri), true
		}
	}
	if up, ok := links[uri]; ok {
		return up, uri, true
	}
	if s.soleResourceUpstream != "" {
		// Only one upstream serves resources at all: an unlisted URI
		// (a dynamic or subscribe-only resource) can only be its.
		return s.soleResourceUpstream, unrewrite(s.soleResourceUpstream, uri), true
	}
	return "", "", false
}

// unrewrite undoes rewriteURI for upstream, when uri carries its scheme.
func unrewrite(upstream, uri string) string {
	return strings.TrimPrefix(uri, uriScheme(upstream))
}

// listFingerprint summarizes the listed prompts, resources and templates
// so a change can be detected between snapshots: digests of what is
// listed, the exposed bytes included.
func (s *Snapshot) listFingerprint() (prompts, resources string) {
	p, r := sha256.New(), sha256.New()
	for _, e := range s.Prompts {
		fmt.Fprintf(p, "%s\x00%s\x00%s\x00%d\x00%d:%s\n", e.Prompt.Name, e.Upstream, e.Prompt.Description, len(e.Prompt.Arguments), len(e.Raw), e.Raw)
	}
	for _, e := range s.Resources {
		fmt.Fprintf(r, "%s\x00%s\x00%s\x00%s\x00%d:%s\n", e.Resource.URI, e.Upstream, e.Resource.Name, e.Resource.Description, len(e.Raw), e.Raw)
	}
	for _, e := range s.Templates {
		fmt.Fprintf(r, "T%s\x00%s\x00%s\x00%d:%s\n", templateString(e.Template), e.Upstream, e.Template.Name, len(e.Raw), e.Raw)
	}
	return hex.EncodeToString(p.Sum(nil)), hex.EncodeToString(r.Sum(nil))
}
