package grant

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/glob"
	"github.com/viewmux/viewmux/internal/oauth"
)

// Sentinel errors of profile resolution. Each maps to one HTTP status.
var (
	ErrUnauthorized   = errors.New("missing or invalid bearer token")    // 401
	ErrForbidden      = errors.New("profile not allowed for this token") // 403
	ErrUnknownProfile = errors.New("unknown profile")                    // 404
	ErrBadNarrowing   = errors.New("invalid request narrowing")          // 400
	ErrUnknownPath    = errors.New("unknown path")                       // 404
)

// Request headers and query parameters that select or narrow a view.
const (
	HeaderProfile  = "Mcp-Profile"
	HeaderToolsets = "Mcp-Toolsets"
	HeaderReadOnly = "Mcp-Read-Only"
	HeaderTools    = "Mcp-Tools"

	// GitHub's remote MCP server's headers, accepted as aliases of ours, and
	// X-MCP-Exclude-Tools, which hides the tools it names. Their narrowing
	// is a stage of its own: it can only narrow what Mcp-* and the path
	// leave.
	HeaderXToolsets     = "X-MCP-Toolsets"
	HeaderXReadOnly     = "X-MCP-Readonly"
	HeaderXTools        = "X-MCP-Tools"
	HeaderXExcludeTools = "X-MCP-Exclude-Tools"
)

// The X-MCP-* headers' canonical keys, as net/http stores them: looking a
// header up by a key that is not canonical allocates its canonical form on
// every request.
const (
	keyXToolsets     = "X-Mcp-Toolsets"
	keyXReadOnly     = "X-Mcp-Readonly"
	keyXTools        = "X-Mcp-Tools"
	keyXExcludeTools = "X-Mcp-Exclude-Tools"
)

// Binding is what a request or session resolved to: a profile and the one
// shared Filter of its effective rules. It is immutable.
type Binding struct {
	Profile string // "" when no profile applies
	Filter  *filter.Filter
	// Explicit records whether the request named a profile or narrowing
	// itself, so that a bound session can tell "same as before" from
	// "nothing said".
	Explicit bool
	// Selection is what the binding was resolved from, without the token,
	// so that a reload can resolve it again against new rules.
	Selection Selection
	// Dynamic records that the profile had dynamic_toolsets when the
	// binding was resolved and the request chose no toolsets or tools
	// itself (sessions/dynamic.go). It is kept with the binding, not looked up in
	// the current config.
	Dynamic bool
	// Search records, likewise, that the profile had tool_search and the
	// request chose no toolsets or tools itself (sessions/search.go).
	Search bool

	// Caller, Authed, Local, Rate and Requested complete the grant a
	// session is bound with: what a reload re-derives it from
	// (Resolver.Regrant) and what it can only narrow.

	// Caller is the sha256 sum of the bearer token the resolver checked
	// (of an OAuth token's issuer and subject: oauthOwner); Authed
	// reports that it checked one. A binding resolved with no tokens
	// configured has neither.
	Caller [sha256.Size]byte
	Authed bool
	// Subject names the caller in audit lines, logs and traces: an OAuth
	// token's sub, or "token:" and 8 hex digits of a static token's
	// sha256; "" without auth.
	Subject string
	// Expiry is when the OAuth token the binding was resolved with
	// expires; zero for a static token. A stream door (/ws) ends its
	// session at the first message after it.
	Expiry time.Time
	// Claims are the OAuth token's claims, for Regrant; nil otherwise.
	Claims *oauth.Claims
	// Who names the caller for its shares of viewmux's pools (callerOf in
	// sessions/shares.go), set by the door that resolved the binding: its token,
	// or its client address without tokens; "" (the stdio door) counts
	// against no share. A reload keeps it (sessions.Server.regrant).
	Who string
	// Local reports a binding resolved with no token check at all, for
	// whoever holds the config file (ResolveLocal: the stdio door).
	Local bool
	// Rate is the profile's calls-per-minute limit when the binding was
	// granted, 0 for none. A reload only ever lowers it (Regrant).
	Rate int
	// Requested is the key of the filter the binding's own selection
	// resolved to: Filter's ceiling key until a reload narrowed Filter to
	// its intersection with the new rules. A later request on the session
	// that names a profile or narrowing is compared with it.
	Requested string
	// Granter is the resolver that granted or last re-derived the binding;
	// a session registered with a binding of an older resolver than the
	// current one is re-derived then (sessions.Server.onRegister).
	Granter *Resolver
}

// Selection is what one request asks for, before it is checked.
type Selection struct {
	// Profile is from the Mcp-Profile header, else the path
	// (/mcp/p/{profile}), else the profile query parameter; "" = none
	// named.
	Profile string
	// Toolsets, Tools and ReadOnly are the Mcp-* headers' narrowing (each
	// header wins over its query parameter).
	Toolsets []string
	Tools    []string
	ReadOnly bool
	// Alias is the narrowing of GitHub's X-MCP-* headers and Path that of
	// the URL path (/mcp/x/{toolsets}, /mcp/readonly). Each is a stage of
	// its own, as is the Mcp-* narrowing: a tool must pass every one the
	// request gives, so that none can undo another.
	Alias, Path Narrowing
	Narrowing   bool // any narrowing given, from any source
	Token       string
	HasToken    bool
}

// Over returns base with every part sel names put in its place: the
// profile, and each list and read-only flag sel gives. The path stays
// base's. It is what a message POSTed to an SSE stream's endpoint, whose
// URL carries neither the stream's path nor its query, is compared as.
func (sel Selection) Over(base Selection) Selection {
	out := base
	out.Token, out.HasToken = sel.Token, sel.HasToken
	if sel.Profile != "" {
		out.Profile = sel.Profile
	}
	replace := func(dst *[]string, src []string) {
		if src != nil {
			*dst = src
		}
	}
	replace(&out.Toolsets, sel.Toolsets)
	replace(&out.Tools, sel.Tools)
	replace(&out.Alias.Toolsets, sel.Alias.Toolsets)
	replace(&out.Alias.Tools, sel.Alias.Tools)
	replace(&out.Alias.ExcludeTools, sel.Alias.ExcludeTools)
	out.ReadOnly = out.ReadOnly || sel.ReadOnly
	out.Alias.ReadOnly = out.Alias.ReadOnly || sel.Alias.ReadOnly
	out.Narrowing = out.Narrowing || sel.Narrowing
	return out
}

// Narrowing is one source's narrowing of a request. Within it, Toolsets
// and Tools add up (a tool in a named toolset or named itself passes, as
// in a profile); ExcludeTools hides tools by exact name and ReadOnly hides
// every tool that is not read-only.
type Narrowing struct {
	Toolsets     []string
	Tools        []string
	ExcludeTools []string
	ReadOnly     bool
}

// given reports whether n narrows anything.
func (n Narrowing) given() bool {
	return len(n.Toolsets) > 0 || len(n.Tools) > 0 || len(n.ExcludeTools) > 0 || n.ReadOnly
}

// narrowings returns the stages sel's narrowing is made of, in a fixed
// order: Mcp-* (and the query), X-MCP-*, the path.
func (sel Selection) narrowings() []Narrowing {
	return []Narrowing{{Toolsets: sel.Toolsets, Tools: sel.Tools, ReadOnly: sel.ReadOnly}, sel.Alias, sel.Path}
}

// Bounds of a request's narrowing, in length and count, so that nothing a
// client sends grows viewmux without bound. No real client comes near them:
// an exposed name is at most server.max_name_length (≤ 128) bytes, and a
// request that names more tools than a catalog usually holds narrows
// nothing. They keep what one request can make viewmux compile and cache
// small; a request over them is refused with 400.
const (
	// MaxNarrowNames is the most names one Mcp-Tools / ?tools= or
	// Mcp-Toolsets / ?toolsets= list may hold.
	MaxNarrowNames = 256
	// MaxNarrowNameLength is the longest name, in bytes, such a list may
	// hold.
	MaxNarrowNameLength = 128
	// MaxProfileNameLength is the longest profile name a request may give.
	MaxProfileNameLength = 128
)

// SelectionFromRequest reads a request's profile, narrowing and bearer
// token: from the Mcp-* headers (each winning over its query parameter),
// from GitHub's X-MCP-* headers, and from the path (see PathForms). The
// profile is the Mcp-Profile header's, else the path's, else the query's.
// Tokens are read only from the Authorization header, never from the URL.
// A narrowing over MaxNarrowNames names or with a name over
// MaxNarrowNameLength bytes is refused with an error wrapping
// ErrBadNarrowing that names the header, parameter or path and the limit;
// a path under a front door that is none of PathForms, with ErrUnknownPath.
func SelectionFromRequest(r *http.Request) (Selection, error) {
	var q url.Values // most requests carry no query: none is parsed
	if r.URL.RawQuery != "" {
		q = r.URL.Query()
	}
	var sel Selection
	pathProfile, path, err := selectionFromPath(r.URL)
	if err != nil {
		return sel, err
	}
	sel.Path = path
	sel.Profile = firstNonEmpty(r.Header.Get(HeaderProfile), firstNonEmpty(pathProfile, q.Get("profile")))
	if len(sel.Profile) > MaxProfileNameLength {
		return sel, fmt.Errorf("%w: the profile name is %d bytes long; at most %d are allowed", ErrBadNarrowing, len(sel.Profile), MaxProfileNameLength)
	}
	if v, from := narrowing(r, q, HeaderToolsets, "toolsets"); v != "" {
		if sel.Toolsets, err = boundedList(v, from); err != nil {
			return sel, err
		}
		sel.Narrowing = true
	}
	if v, from := narrowing(r, q, HeaderTools, "tools"); v != "" {
		if sel.Tools, err = boundedList(v, from); err != nil {
			return sel, err
		}
		sel.Narrowing = true
	}
	ro := r.Header.Values(HeaderReadOnly)
	if strings.TrimSpace(strings.Join(ro, "")) == "" {
		ro = q["read_only"][:min(1, len(q["read_only"]))]
	}
	for _, v := range ro {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "true", "1", "yes":
			sel.ReadOnly = true
			sel.Narrowing = true
		case "false", "0", "no", "":
		default:
			return sel, fmt.Errorf("%w: read_only %q is not a boolean", ErrBadNarrowing, v)
		}
	}
	if sel.Alias, err = aliasNarrowing(r.Header); err != nil {
		return sel, err
	}
	sel.Narrowing = sel.Narrowing || sel.Alias.given() || sel.Path.given()
	if auth := r.Header.Get("Authorization"); auth != "" {
		scheme, tok, ok := strings.Cut(auth, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			sel.Token = strings.TrimSpace(tok)
		}
		sel.HasToken = true
	}
	return sel, nil
}

// aliasNarrowing reads GitHub's X-MCP-* headers, with GitHub's meaning:
// X-MCP-Readonly is false when empty or one of false, f, no, n, 0, off
// (case and surrounding space ignored) and true for any other value; the
// others are comma-separated lists. A header given on several lines is
// read as one list (RFC 9110), and X-MCP-Readonly is true if any line is.
func aliasNarrowing(h http.Header) (Narrowing, error) {
	var n Narrowing
	var err error
	for _, l := range []struct {
		header, key string
		into        *[]string
	}{
		{HeaderXToolsets, keyXToolsets, &n.Toolsets},
		{HeaderXTools, keyXTools, &n.Tools},
		{HeaderXExcludeTools, keyXExcludeTools, &n.ExcludeTools},
	} {
		if v := strings.Join(h.Values(l.key), ","); v != "" {
			if *l.into, err = boundedList(v, l.header+" header"); err != nil {
				return n, err
			}
		}
	}
	for _, v := range h.Values(keyXReadOnly) {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "", "false", "f", "no", "n", "0", "off":
		default:
			n.ReadOnly = true
		}
	}
	return n, nil
}

// selectionDoors are the front doors whose paths may carry a selection.
var selectionDoors = [...]string{"/mcp", "/sse", "/ws"}

// PathForms are the paths under each front door (/mcp, /sse, /ws) that
// select a profile or narrow the view, as GitHub's remote MCP server's
// paths do, for clients that cannot set headers or drop query strings;
// {door} stands for the door. {toolsets} is a comma-separated list of
// toolset selectors ("gh", "gh/issues"), read greedily up to an optional
// final "/readonly": /mcp/x/gh/issues,docs/readonly is the toolsets
// gh/issues and docs, read-only. A selector whose last part is "readonly" is
// written with its slash percent-encoded (/mcp/x/gh%2Freadonly). One
// trailing slash is ignored.
var PathForms = []string{
	"{door}/readonly",
	"{door}/x/{toolsets}",
	"{door}/x/{toolsets}/readonly",
	"{door}/p/{profile}",
	"{door}/p/{profile}/readonly",
	"{door}/p/{profile}/x/{toolsets}",
	"{door}/p/{profile}/x/{toolsets}/readonly",
}

// selectionFromPath reads the profile and narrowing of u's path when it
// is under a front door: one of PathForms, read from the escaped path so
// that a percent-encoded slash stays inside its selector. Any other path
// under a door is an error wrapping ErrUnknownPath, and a bad list one
// wrapping ErrBadNarrowing.
func selectionFromPath(u *url.URL) (profile string, n Narrowing, err error) {
	p := u.EscapedPath()
	var door, rest string
	for _, d := range selectionDoors {
		if r, ok := strings.CutPrefix(p, d+"/"); ok {
			door, rest = d, r
			break
		}
	}
	if door == "" {
		return "", n, nil
	}
	// GitHub's URL is https://api.githubcopilot.com/mcp/, with the slash.
	rest = strings.TrimSuffix(rest, "/")
	if rest == "p" {
		return "", n, fmt.Errorf("%w: %s/p/ names no profile", ErrBadNarrowing, door)
	}
	if seg, ok := strings.CutPrefix(rest, "p/"); ok {
		seg, rest, _ = strings.Cut(seg, "/")
		if profile, err = url.PathUnescape(seg); err != nil {
			return "", n, fmt.Errorf("%w: %s/p/{profile}: %v", ErrBadNarrowing, door, err)
		}
		if profile == "" {
			return "", n, fmt.Errorf("%w: %s/p/ names no profile", ErrBadNarrowing, door)
		}
	}
	switch {
	case rest == "":
	case rest == "readonly":
		n.ReadOnly = true
	case rest == "x":
		return "", n, fmt.Errorf("%w: %s/x/ names no toolset", ErrBadNarrowing, door)
	case strings.HasPrefix(rest, "x/"):
		list := rest[len("x/"):]
		if l, ok := strings.CutSuffix(list, "/readonly"); ok {
			list, n.ReadOnly = l, true
		}
		from := door + "/x/{toolsets} path"
		dec, err := url.PathUnescape(list)
		if err != nil {
			return "", n, fmt.Errorf("%w: %s: %v", ErrBadNarrowing, from, err)
		}
		if n.Toolsets, err = boundedList(dec, from); err != nil {
			return "", n, err
		}
		if len(n.Toolsets) == 0 {
			return "", n, fmt.Errorf("%w: %s/x/ names no toolset", ErrBadNarrowing, door)
		}
	default:
		shown := p
		if len(shown) > 96 {
			shown = shown[:96] + "…"
		}
		return "", n, fmt.Errorf("%w %q: under %s, a path selects by %s", ErrUnknownPath, shown, door,
			strings.ReplaceAll(strings.Join(PathForms, ", "), "{door}", door))
	}
	return profile, n, nil
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// narrowing returns the value of the header (every line of it, joined
// with commas as RFC 9110 reads a list header), else of the query
// parameter, and how to name where it came from in an error.
func narrowing(r *http.Request, q url.Values, header, param string) (string, string) {
	if v := strings.Join(r.Header.Values(header), ","); strings.Trim(v, ", \t") != "" {
		return v, header + " header"
	}
	if v := q.Get(param); v != "" {
		return v, "?" + param + "="
	}
	return "", ""
}

// boundedList splits a comma-separated narrowing list, refusing one over
// MaxNarrowNames names or with a name over MaxNarrowNameLength bytes
// before anything is allocated for it. from names the list in the error.
func boundedList(v, from string) ([]string, error) {
	if n := strings.Count(v, ",") + 1; n > MaxNarrowNames {
		// Counted before splitting; empty elements are few in practice
		// and count too, which only makes the bound stricter.
		return nil, fmt.Errorf("%w: %s lists %d names; at most %d are allowed", ErrBadNarrowing, from, n, MaxNarrowNames)
	}
	out := splitList(v)
	for _, name := range out {
		if len(name) > MaxNarrowNameLength {
			return nil, fmt.Errorf("%w: %s holds a name of %d bytes; at most %d are allowed", ErrBadNarrowing, from, len(name), MaxNarrowNameLength)
		}
	}
	return out, nil
}

func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Resolver turns selections into bindings. It holds the compiled rules of a
// config; build a new one on reload. It is safe for concurrent use.
type Resolver struct {
	cfg      *configs.Config
	registry *filter.Registry
	global   *filter.Rules
	profiles map[string][]*filter.Rules // profile → its rules and its ancestors'
	// base holds, for every profile and for none (""), the rule stages
	// of a selection without narrowing and their filter key, worked out
	// once: most requests name no narrowing.
	base     map[string]baseStages
	names    []string // known profile names, sorted
	tokens   []tokenEntry
	toolsets map[string]string // every valid toolset selector → its upstream's name
	oauth    *oauth.Validator  // nil without [auth.oauth]
}

// NewResolver compiles cfg's [filter] and profiles. cfg must be valid.
func NewResolver(cfg *configs.Config, registry *filter.Registry) (*Resolver, error) {
	r := &Resolver{cfg: cfg, registry: registry, profiles: make(map[string][]*filter.Rules), toolsets: make(map[string]string), oauth: newOAuth(cfg)}
	var err error
	if r.global, err = filter.Compile(cfg.Filter); err != nil {
		return nil, fmt.Errorf("[filter]: %w", err)
	}
	for name := range cfg.Profiles {
		r.names = append(r.names, name)
		for _, p := range cfg.Chain(name) {
			rules, err := filter.Compile(p.Rules)
			if err != nil {
				return nil, fmt.Errorf("profile %q: %w", p.Name, err)
			}
			r.profiles[name] = append(r.profiles[name], rules)
		}
	}
	slices.Sort(r.names)
	r.base = make(map[string]baseStages, len(r.names)+1)
	for _, name := range append([]string{""}, r.names...) {
		stages := append([]*filter.Rules{r.global}, r.profiles[name]...)
		stages = stages[:len(stages):len(stages)] // shared: an append copies
		r.base[name] = baseStages{stages: stages, key: registry.Key(stages...)}
	}
	for _, t := range cfg.Auth.Tokens {
		te := tokenEntry{profiles: t.Profiles, admin: t.Admin}
		if t.Token != "" {
			te.sum = sha256.Sum256([]byte(t.Token))
		} else {
			b, err := hex.DecodeString(t.SHA256)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("auth token at line %d: token_sha256 is not 64 hex digits", t.Line)
			}
			copy(te.sum[:], b)
		}
		te.subject = StaticSubject(te.sum)
		r.tokens = append(r.tokens, te)
	}
	for _, u := range cfg.Upstreams {
		r.toolsets[u.Name] = u.Name
		if u.Prefix != "" {
			r.toolsets[u.Prefix] = u.Name
		}
		for set := range u.Toolsets {
			r.toolsets[u.Name+"/"+set] = u.Name
			if u.Prefix != "" {
				r.toolsets[u.Prefix+"/"+set] = u.Name
			}
		}
	}
	return r, nil
}

// Profiles returns the known profile names, sorted. Do not modify.
func (r *Resolver) Profiles() []string { return r.names }

// AuthRequired reports whether requests must carry a bearer token: a
// static one or, with [auth.oauth], an OAuth access token.
func (r *Resolver) AuthRequired() bool { return len(r.tokens) > 0 || r.oauth != nil }

// token finds the token entry matching tok, comparing against every
// configured token in constant time.
func (r *Resolver) token(tok string) *tokenEntry {
	return r.tokenBySum(sha256.Sum256([]byte(tok)))
}

// tokenBySum finds the token entry whose token has sum, comparing against
// every configured token in constant time.
func (r *Resolver) tokenBySum(sum [sha256.Size]byte) *tokenEntry {
	var found *tokenEntry
	for i := range r.tokens {
		if subtle.ConstantTimeCompare(sum[:], r.tokens[i].sum[:]) == 1 {
			found = &r.tokens[i]
		}
	}
	return found
}

// Resolve checks sel against auth and the known profiles and returns the
// binding: the token's allowed profiles, then the named profile, then the
// token's default, then server.default_profile. Errors wrap one of the
// sentinels above and name the profile or toolset at fault.
func (r *Resolver) Resolve(sel Selection) (Binding, error) {
	return r.resolve(sel, true)
}

// ResolveLocal resolves sel without any token check, for commands run by
// whoever holds the config file (check, tools, the stdio front door).
func (r *Resolver) ResolveLocal(sel Selection) (Binding, error) {
	return r.resolve(sel, false)
}

// Probe checks sel exactly as Resolve does and returns the profile and the
// key of the filter Resolve would bind, without building or caching that
// filter: a request on an existing session is compared with the session's
// own binding before viewmux keeps anything for the request, so that a
// request that is refused costs nothing.
func (r *Resolver) Probe(sel Selection) (profile, key string, err error) {
	name, stages, _, err := r.stages(sel, true)
	if err != nil {
		return "", "", err
	}
	return name, r.registry.Key(stages...), nil
}

// Checked is one request's selection as one resolver checked it: its
// token, once, then its profile and narrowing. A door checks each request
// once (Check) and takes every later decision of the request from it, so
// that a reload in the middle of a request cannot mix two configs.
type Checked struct {
	r       *Resolver
	sel     Selection
	auth    bool
	profile string
	stages  []*filter.Rules
	caller  *tokenEntry // nil when no token was checked
}

// Check checks sel as Resolve does, without building its filter.
func (r *Resolver) Check(sel Selection) (*Checked, error) {
	name, stages, caller, err := r.stages(sel, true)
	if err != nil {
		return nil, err
	}
	return &Checked{r: r, sel: sel, auth: true, profile: name, stages: stages, caller: caller}, nil
}

// Resolver returns the resolver that checked c.
func (c *Checked) Resolver() *Resolver { return c.r }

// Ends is when what c checked stops being good: the OAuth access token's
// expiry, with the clock skew the resolver allows; zero for a static token
// or none, which do not expire.
func (c *Checked) Ends() time.Time {
	if c.caller == nil || c.caller.expiry.IsZero() {
		return time.Time{}
	}
	return c.caller.expiry.Add(c.r.ClockSkew())
}

// Profile returns the profile the selection resolves to.
func (c *Checked) Profile() string { return c.profile }

// Key returns the key of the filter Binding would bind, without building
// or caching that filter.
func (c *Checked) Key() string { return c.r.keyOf(c.profile, c.sel, c.stages) }

// keyOf is the filter key of stages, those of sel under profile.
func (r *Resolver) keyOf(profile string, sel Selection, stages []*filter.Rules) string {
	if !sel.Narrowing {
		return r.base[profile].key
	}
	return r.registry.Key(stages...)
}

// baseStages are the rule stages of a profile without narrowing, and
// their filter key.
type baseStages struct {
	stages []*filter.Rules
	key    string
}

// KeyUnder returns the key of the request's narrowing read under profile,
// the profile of the session it belongs to, instead of the one it
// resolves to (a token's default that a reload changed).
func (c *Checked) KeyUnder(profile string) (string, error) {
	stages, err := c.r.stagesOf(profile, c.sel)
	if err != nil {
		return "", err
	}
	return c.r.keyOf(profile, c.sel, stages), nil
}

// Allows checks that the request's token may use profile, the profile of
// the session it belongs to: one token cannot act through a session
// another token opened.
func (c *Checked) Allows(profile string) error {
	if !c.auth || !c.r.AuthRequired() {
		return nil
	}
	if c.caller == nil {
		return c.r.missingToken()
	}
	if profile != "" && !slices.Contains(c.caller.profiles, profile) {
		return c.r.forbiddenProfile(c.caller, profile, "this session uses %q (allowed: %s)", profile, strings.Join(c.caller.profiles, ", "))
	}
	return nil
}

// Owner is what a session remembers of the token that opened it: the
// token's sum when tokens are configured, else nothing, so that a
// client's stray Authorization header means nothing where no token is
// checked.
func (c *Checked) Owner() [32]byte {
	if c.caller == nil {
		return [32]byte{}
	}
	return c.caller.sum
}

// Binding builds the binding of the checked selection.
func (c *Checked) Binding() Binding {
	r, sel, name, stages, caller := c.r, c.sel, c.profile, c.stages, c.caller
	kept := sel
	kept.Token, kept.HasToken = "", false
	// A profile's filter is interned; one with the request's narrowing goes
	// to the registry's bounded cache, so distinct narrowings cannot grow
	// viewmux without bound.
	var f *filter.Filter
	if sel.Narrowing {
		f = r.registry.Narrowed(stages...)
	} else {
		f = r.registry.Filter(stages...)
	}
	dynamic := false
	if p := r.cfg.Profiles[name]; p != nil && p.DynamicToolsets {
		dynamic = !ChoosesTools(r, sel)
	}
	search := false
	if p := r.cfg.Profiles[name]; p != nil && p.ToolSearch {
		search = !ChoosesTools(r, sel)
	}
	b := Binding{Profile: name, Filter: f, Explicit: sel.Profile != "" || sel.Narrowing, Selection: kept, Dynamic: dynamic, Search: search,
		Local: !c.auth, Rate: r.RateFor(name), Requested: f.Key(), Granter: r}
	if caller != nil {
		b.Caller, b.Authed, b.Subject, b.Expiry, b.Claims = caller.sum, true, caller.subject, caller.expiry, caller.claims
	}
	return b
}

func (r *Resolver) resolve(sel Selection, auth bool) (Binding, error) {
	name, stages, caller, err := r.stages(sel, auth)
	if err != nil {
		return Binding{}, err
	}
	c := &Checked{r: r, sel: sel, auth: auth, profile: name, stages: stages, caller: caller}
	return c.Binding(), nil
}

// stages checks sel (its token when auth is set, its profile, its
// toolsets) and returns the profile it resolves to, the rule stages of its
// effective filter, the request's narrowing last, and the token entry it
// checked (nil when it checked none).
func (r *Resolver) stages(sel Selection, auth bool) (string, []*filter.Rules, *tokenEntry, error) {
	var allowed []string
	var te *tokenEntry
	if auth && r.AuthRequired() {
		if !sel.HasToken || sel.Token == "" {
			return "", nil, nil, r.missingToken()
		}
		var err error
		if te, err = r.caller(sel.Token); err != nil {
			return "", nil, nil, err
		}
		allowed = te.profiles
	}
	name := sel.Profile
	switch {
	case name != "":
	case len(allowed) > 0:
		name = allowed[0]
	default:
		name = r.cfg.Server.DefaultProfile
	}
	if name != "" {
		if _, ok := r.profiles[name]; !ok {
			// Only the profiles this caller may use are named: the rest
			// of the config is no business of a narrower token's.
			usable := r.names
			if allowed != nil {
				usable = slices.Sorted(slices.Values(allowed))
			}
			return "", nil, nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownProfile, name, strings.Join(usable, ", "))
		}
		if allowed != nil && !slices.Contains(allowed, name) {
			return "", nil, nil, r.forbiddenProfile(te, name, "%q (allowed: %s)", name, strings.Join(allowed, ", "))
		}
	}
	stages, err := r.stagesOf(name, sel)
	if err != nil {
		return "", nil, nil, err
	}
	return name, stages, te, nil
}

// stagesOf returns the rule stages of profile name ("" = none) with sel's
// narrowing, which it checks.
func (r *Resolver) stagesOf(name string, sel Selection) ([]*filter.Rules, error) {
	stages := r.base[name].stages
	if sel.Narrowing {
		for _, n := range sel.narrowings() {
			if !n.given() {
				continue
			}
			narrow, err := r.narrowingRules(n, stages)
			if err != nil {
				return nil, err
			}
			stages = append(stages, narrow)
		}
	}
	return stages, nil
}

// narrowingRules compiles one source's narrowing. Every toolset must be a
// known selector, except "all" and "default" (GitHub's names for every
// toolset and for its default ones), which, unless an upstream is named
// so, leave the toolsets and tools of n unnarrowed: in a profile's view,
// every toolset is the default. Excluded names are matched exactly.
//
// A toolset of an upstream that profile (the rule stages before n) hides
// by upstreams or deny_upstreams is refused exactly like one that does not
// exist, so that a request cannot tell a hidden upstream from a missing
// one by its toolsets.
func (r *Resolver) narrowingRules(n Narrowing, profile []*filter.Rules) (*filter.Rules, error) {
	rs := configs.RuleSet{Toolsets: n.Toolsets, Tools: n.Tools, ReadOnly: n.ReadOnly}
	everything := false
	for _, ts := range n.Toolsets {
		switch {
		case r.knownToolset(ts, profile):
		case ts == "all" || ts == "default":
			everything = true
		default:
			return nil, fmt.Errorf("%w: unknown toolset %q", ErrBadNarrowing, ts)
		}
	}
	if everything {
		rs.Toolsets, rs.Tools = nil, nil
	}
	for _, name := range n.ExcludeTools {
		rs.Deny = append(rs.Deny, glob.Quote(name))
	}
	narrow, err := filter.Compile(rs)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadNarrowing, err)
	}
	return narrow, nil
}

// knownToolset reports whether ts names a toolset of an upstream that
// every stage lets through.
func (r *Resolver) knownToolset(ts string, stages []*filter.Rules) bool {
	up, ok := r.toolsets[ts]
	if !ok {
		return false
	}
	for _, s := range stages {
		if !s.AdmitsUpstream(up) {
			return false
		}
	}
	return true
}

// RateFor returns the calls-per-minute limit of profile: the smallest
// non-zero limit along its extends chain (a child can only narrow), or 0.
func (r *Resolver) RateFor(profile string) int {
	limit := 0
	for _, p := range r.cfg.Chain(profile) {
		if n := p.Rate.CallsPerMinute; n > 0 && (limit == 0 || n < limit) {
			limit = n
		}
	}
	return limit
}

// StatusOf maps a resolution error to its HTTP status.
func StatusOf(err error) int {
	switch {
	case errors.Is(err, ErrUnauthorized):
		return http.StatusUnauthorized
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, ErrAuthUnavailable):
		return http.StatusServiceUnavailable
	case errors.Is(err, ErrUnknownProfile), errors.Is(err, ErrUnknownPath):
		return http.StatusNotFound
	default:
		return http.StatusBadRequest
	}
}

// ChoosesTools reports whether sel names toolsets or tools itself, as
// res reads them: GitHub's "all" and "default" name none (narrowingRules).
func ChoosesTools(res *Resolver, sel Selection) bool {
	for _, n := range sel.narrowings() {
		everything := slices.ContainsFunc(n.Toolsets, func(ts string) bool {
			_, known := res.toolsets[ts]
			return !known && (ts == "all" || ts == "default")
		})
		if !everything && (len(n.Toolsets) > 0 || len(n.Tools) > 0) {
			return true
		}
	}
	return false
}

// Regrant re-derives the grant of a live session bound with old under r's
// rules, for a reload: from old's own caller and profile, never
// from a token's default or server.default_profile that changed since.
// It fails, wrapping ErrUnauthorized, ErrForbidden or ErrUnknownProfile
// (or ErrBadNarrowing, for a narrowing the new rules refuse), when the
// session must end: its token is gone, or tokens are now required and it
// was opened without one, or its profile is gone or no longer allowed to
// its token. A Local binding (stdio) is checked for its profile only.
//
// Otherwise the binding returned is never wider than old. Its filter is
// the conjunction of old's rule stages and the new ones, and equal stages
// count once, so an edit that changed none of them (a comment) gives a
// filter of the same key as before; a narrowed profile narrows it. Its
// rate is the lower non-zero limit of the two. The filter has no dynamic
// stage: sessions.Server.regrant enables again what old had on.
func (r *Resolver) Regrant(old Binding) (Binding, error) {
	var allowed []string
	if !old.Local && r.AuthRequired() {
		if !old.Authed {
			return Binding{}, fmt.Errorf("%w: the session was opened without one", ErrUnauthorized)
		}
		te := r.tokenBySum(old.Caller)
		if old.Claims != nil {
			// An OAuth session: its claims are matched against the
			// new grants.
			var err error
			if te, err = r.regrantOAuth(old.Claims); err != nil {
				return Binding{}, err
			}
		}
		if te == nil {
			return Binding{}, fmt.Errorf("%w: the session's token was removed", ErrUnauthorized)
		}
		allowed = te.profiles
	}
	if old.Profile != "" {
		if _, ok := r.profiles[old.Profile]; !ok {
			return Binding{}, fmt.Errorf("%w %q: it was removed", ErrUnknownProfile, old.Profile)
		}
		if allowed != nil && !slices.Contains(allowed, old.Profile) {
			return Binding{}, fmt.Errorf("%w: %q", ErrForbidden, old.Profile)
		}
	}
	stages, err := r.stagesOf(old.Profile, old.Selection)
	if err != nil {
		return Binding{}, fmt.Errorf("profile %q: %w", old.Profile, err)
	}
	b := old
	b.Granter = r
	b.Requested = r.registry.Key(stages...)
	both := stages
	if old.Filter != nil {
		both = append(old.Filter.Ceiling(), stages...)
	}
	if r.registry.Key(both...) == b.Requested && !old.Selection.Narrowing {
		b.Filter = r.registry.Filter(stages...) // nothing of the old rules is left out: the profile's own, interned filter
	} else {
		b.Filter = r.registry.Narrowed(both...)
	}
	b.Dynamic = false
	if p := r.cfg.Profiles[old.Profile]; p != nil && p.DynamicToolsets {
		b.Dynamic = !ChoosesTools(r, old.Selection)
	}
	b.Search = false
	if p := r.cfg.Profiles[old.Profile]; p != nil && p.ToolSearch {
		b.Search = !ChoosesTools(r, old.Selection)
	}
	b.Rate = lowerRate(old.Rate, r.RateFor(old.Profile))
	return b, nil
}

// lowerRate is the stricter of two calls-per-minute limits, 0 meaning
// none.
func lowerRate(a, b int) int {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}

// Config is the config r was built from.
func (r *Resolver) Config() *configs.Config { return r.cfg }
