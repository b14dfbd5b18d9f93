package status

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/viewmux/viewmux/aggregator"
	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/filter"
	"github.com/viewmux/viewmux/internal/pins"
	"github.com/viewmux/viewmux/sessions/grant"
	"github.com/viewmux/viewmux/upstream"
)

// statusRefresh is how often the status page reloads itself, in seconds.
const statusRefresh = 5

// maxKeyShown bounds how much of a filter's canonical key the page shows;
// a key spells out every name its rules list.
const maxKeyShown = 160

// MaxErrorShown bounds the summary of an upstream's last error in the
// page's narrow "last error" cell; the whole text is in the cell's title,
// under it when opened, and in /status.json.
const MaxErrorShown = 160

// maxArgShown bounds the script or package argument the target column
// shows after a command; a longer one keeps its end ("…/dist/index.js").
const maxArgShown = 60

// idleShown is how long a /mcp session goes without a request before the
// page counts it idle.
const idleShown = time.Minute

// Page renders the status of one server. Rendering reads the
// upstreams' Health, the recent call latencies and the live sessions on
// every request; the per-profile part (filters, tool counts and token
// estimates, which encode the views' tools) is computed once per
// (resolver, snapshot version) and cached, so a client reloading the page
// in a loop costs one template execution per request, not one encoding of
// every catalog. It is safe for concurrent use.
type Page struct {
	src   Source
	start time.Time

	mu     sync.Mutex // guards the cache; held while it is recomputed
	cached *profileStatus
}

// profileStatus is the cached per-profile part of the page.
type profileStatus struct {
	resolver *grant.Resolver
	version  uint64
	profiles []ProfileRow
	filters  []FilterRow
	byFilter map[*filter.Filter]int // → index in filters
}

// Data is everything the page shows; GET /status.json returns it.
type Data struct {
	Version  string `json:"version"`
	Replica  string `json:"replica_id"`
	Config   string `json:"config"`
	Started  string `json:"started"`
	Uptime   string `json:"uptime"`
	Snapshot uint64 `json:"snapshot_version"`
	// Sessions counts the live sessions bound to a view, by door ("mcp",
	// "ws", "sse", "stdio"), and Bound is their sum; Open is every live
	// session and stream counted against max_sessions. A /mcp session
	// lives until its client sends DELETE or it has been idle for
	// IdleTimeout ("" = no timeout), so a client that exits without DELETE
	// leaves it open until then: Idle counts the /mcp sessions with no
	// request for idleShown or longer, and NextExpiry is how soon the one
	// idle longest expires.
	Sessions    map[string]int `json:"sessions"`
	Bound       int            `json:"bound_sessions"`
	Open        int            `json:"open_sessions"`
	MaxSessions int            `json:"max_sessions"`
	IdleTimeout string         `json:"session_idle_timeout,omitempty"`
	Idle        int            `json:"idle_sessions"`
	NextExpiry  string         `json:"next_idle_expiry,omitempty"`
	// BySubject counts the bound sessions by who opened them (an OAuth
	// token's sub, or token:<8 hex> of a static token's sha256), shown
	// only to a viewer that sees all; never a token.
	BySubject map[string]int `json:"sessions_by_subject,omitempty"`
	Upstreams []UpstreamRow  `json:"upstreams"`
	// Profiles and Filters count the same Bound sessions: by the profile
	// each selected, and by the filter its view is built from. A session
	// whose profile has no row (no profile while profiles exist, or one a
	// reload removed) is counted in OtherProfileSessions; one whose view
	// has a filter no profile resolves to (a request narrowing, a token's
	// own rules, a dynamic session's toolsets) in OtherFilterSessions.
	Profiles             []ProfileRow `json:"profiles"`
	OtherProfileSessions int          `json:"other_profile_sessions"`
	// FilterCount is every filter instance the registry holds: the
	// Filters rows and OtherFilters more (request narrowings, tokens' own
	// rules, dynamic toolset views, cached up to filter.NarrowedCap).
	FilterCount         int         `json:"filter_instances"`
	Filters             []FilterRow `json:"profile_filters"`
	OtherFilters        int         `json:"other_filter_instances"`
	OtherFilterSessions int         `json:"other_filter_sessions"`
	RefreshSecond       int         `json:"-"`

	// Pin is server.pin, and PendingPins the changes to pinned tool
	// definitions waiting for `viewmux pins approve`, with their diffs;
	// PinsError is why the state file cannot be read. Admins only.
	Pin         string         `json:"pin,omitempty"`
	PendingPins []pins.Pending `json:"pending_pins,omitempty"`
	PinsError   string         `json:"pins_error,omitempty"`

	// Store is where the gateway keeps its shared state ([state]), and
	// whether it answers.
	Store StoreRow `json:"state_store"`
}

// StoreRow is the condition of the state store. Where and Error are for
// admins only: an address of the operator's network.
type StoreRow struct {
	Engine string `json:"engine"` // files or redis
	Where  string `json:"where,omitempty"`
	Up     bool   `json:"up"`
	Since  string `json:"since,omitempty"` // when it went up or down
	Error  string `json:"error,omitempty"` // why it is down
}

// UpstreamRow is one row of the upstreams table.
type UpstreamRow struct {
	Name      string `json:"name"`
	Prefix    string `json:"prefix"`
	Transport string `json:"transport"`
	// Target is the URL's scheme://host[:port] (its userinfo, path and
	// query may carry secrets), or the command and its first argument when
	// that names a script or package (see scriptArg).
	Target   string `json:"target"`
	Required bool   `json:"required"`
	Scope    string `json:"scope"`
	State    string `json:"state"` // up, starting, restarting, down, needs login, per-user, closed
	// MoreScope, for an oauth upstream, are the scopes it refused a
	// request for (403 insufficient_scope) that its login was not
	// granted: the next `viewmux auth login` asks for them. nil = none.
	MoreScope []string `json:"more_scope,omitempty"`
	// Credentials is "per-user" or "exchange" for an upstream each user
	// reaches with their own login; omitted for the gateway's one login.
	Credentials string `json:"credentials,omitempty"`
	Protocol    string `json:"protocol,omitempty"`
	Tools       int    `json:"tools"`           // exposed, after its own rules
	Hidden      int    `json:"hidden_by_rules"` // removed by its own rules
	Prompts     int    `json:"prompts"`
	Resources   int    `json:"resources"`
	Templates   int    `json:"resource_templates"`
	Connects    int    `json:"connects"`
	Restarts    int    `json:"restarts"`
	LastError   string `json:"last_error,omitempty"`
	// LastErrorAt is RFC 3339, UTC.
	LastErrorAt string   `json:"last_error_at,omitempty"`
	Stderr      []string `json:"stderr,omitempty"`
	// Calls is how many recent tools/call (at most latencyWindow) P50 and
	// P99 are computed from.
	Calls int    `json:"recent_calls"`
	P50   string `json:"p50,omitempty"`
	P99   string `json:"p99,omitempty"`

	// Quarantined counts its tools hidden by server.pin = "quarantine"
	// until approved; shown to admins only.
	Quarantined int `json:"quarantined,omitempty"`

	stateText string // State as the page says it, with MoreScope
	ago       string // how long before the page LastErrorAt was
	summary   string // LastError for the narrow cell (errorSummary)
	detail    string // LastError without the stderr lines shown apart; "" = summary says it all
}

// ProfileRow is one row of the profiles table.
type ProfileRow struct {
	Name       string                  `json:"name"` // "" = no profile applies
	Tools      int                     `json:"tools"`
	Tokens     int                     `json:"estimated_tokens"`
	ByUpstream []filter.UpstreamTokens `json:"estimated_tokens_by_upstream"`
	Sessions   int                     `json:"sessions"`
	Filter     int                     `json:"filter"` // its filter instance, 1-based index in Data.Filters
	// Dynamic is set for a profile with dynamic_toolsets; a new session's
	// tools/list then starts with InitialTools (~InitialTokens), as
	// `viewmux check` reports.
	Dynamic bool `json:"dynamic,omitempty"`
	// Search is set, likewise, for a profile with tool_search.
	Search        bool   `json:"tool_search,omitempty"`
	InitialTools  int    `json:"initial_tools,omitempty"`
	InitialTokens int    `json:"initial_estimated_tokens,omitempty"`
	Error         string `json:"error,omitempty"`
}

// FilterRow is one distinct filter instance that profiles resolve to.
type FilterRow struct {
	ID       string   `json:"id"`  // a short digest of Key
	Key      string   `json:"key"` // the canonical key, cut to maxKeyShown bytes
	Profiles []string `json:"profiles"`
	Sessions int      `json:"sessions"` // live sessions bound to it
}

func (p *Page) ServeHTML(w http.ResponseWriter, r *http.Request, v Viewer) {
	st := p.Status(v)
	var b bytes.Buffer
	if err := statusTemplate.Execute(&b, st); err != nil {
		p.src.Log().Error("status page not rendered", "error", err)
		http.Error(w, "status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	statusHeaders(h)
	w.Write(b.Bytes())
}

func (p *Page) ServeJSON(w http.ResponseWriter, r *http.Request, v Viewer) {
	b, err := json.MarshalIndent(p.Status(v), "", "  ")
	if err != nil {
		http.Error(w, "status: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	statusHeaders(h)
	w.Write(append(b, '\n'))
}

// statusHeaders keep the page to itself: no script, no external load, no
// framing, no caching of what it shows.
func statusHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
}

// Status gathers what the page shows v, now.
func (p *Page) Status(v Viewer) *Data {
	src := p.src
	cfg := src.Config()
	now := time.Now()
	snap := src.Aggregator().Snapshot()
	st := &Data{
		Version:       src.Version(),
		Replica:       cfg.Server.ReplicaID,
		Config:        cfg.Source,
		Started:       p.start.UTC().Format(time.RFC3339),
		Uptime:        roundDuration(now.Sub(p.start)).String(),
		Snapshot:      snap.Version,
		Open:          src.OpenSessions(),
		MaxSessions:   cfg.Server.MaxSessions,
		RefreshSecond: statusRefresh,
	}
	if d := cfg.Server.SessionIdleTimeout; d > 0 {
		st.IdleTimeout = d.String()
	}
	st.Upstreams = p.upstreams(snap, now)

	ps := p.profiles(snap)
	st.Profiles = slices.Clone(ps.profiles)
	st.Filters = slices.Clone(ps.filters)
	st.FilterCount = src.Registry().Instances()
	st.OtherFilters = max(0, st.FilterCount-len(st.Filters))
	byProfile := make(map[string]int)
	byFilter := make(map[*filter.Filter]int)
	st.Sessions = make(map[string]int)
	var longest time.Duration // the longest idle /mcp session's idle time
	src.Sessions(func(sess Session) {
		if !v.SeesProfile(sess.Profile) {
			return // another caller's
		}
		st.Sessions[sess.Door]++
		st.Bound++
		if sess.Subject != "" {
			if st.BySubject == nil {
				st.BySubject = make(map[string]int)
			}
			st.BySubject[sess.Subject]++
		}
		byProfile[sess.Profile]++
		byFilter[sess.Filter]++
		if sess.Idle >= idleShown {
			st.Idle++
			longest = max(longest, sess.Idle)
		}
	})
	if ttl := cfg.Server.SessionIdleTimeout; ttl > 0 && st.Idle > 0 {
		st.NextExpiry = roundDuration(max(ttl-longest, 0)).String()
	}
	st.OtherProfileSessions = st.Bound
	for i := range st.Profiles {
		st.Profiles[i].Sessions = byProfile[st.Profiles[i].Name]
		st.OtherProfileSessions -= st.Profiles[i].Sessions
	}
	st.OtherFilterSessions = st.Bound
	for f, i := range ps.byFilter {
		st.Filters[i].Sessions = byFilter[f]
		st.OtherFilterSessions -= byFilter[f]
	}
	st.Store = p.store()
	if v.All {
		p.pins(st)
	}
	st.restrict(v)
	return st
}

// pins fills in the pending changes to pinned definitions, for admins.
func (p *Page) pins(st *Data) {
	agg, cfg := p.src.Aggregator(), p.src.Config()
	store := agg.Pins()
	if store == nil || cfg.Server.Pin == configs.PinOff {
		return
	}
	st.Pin = cfg.Server.Pin
	pending, err := store.Pending()
	if err != nil {
		st.PinsError = agg.Redact(err.Error())
		return
	}
	st.PendingPins = pending
}

// store reports the state store's condition. It does no I/O: the store
// tracks its own health.
func (p *Page) store() StoreRow {
	agg := p.src.Aggregator()
	st := agg.State()
	h := st.Health()
	row := StoreRow{Engine: st.Engine(), Where: st.Where(), Up: h.Up, Error: agg.Redact(h.Err)}
	if !h.Since.IsZero() {
		row.Since = h.Since.UTC().Format(time.RFC3339)
	}
	return row
}

// upstreams builds the upstreams table.
func (p *Page) upstreams(snap *aggregator.Snapshot, now time.Time) []UpstreamRow {
	agg := p.src.Aggregator()
	exposed := make(map[string]aggregator.UpstreamStatus, len(snap.Upstreams))
	for _, us := range snap.Upstreams {
		exposed[us.Name] = us
	}
	ups := agg.Upstreams()
	names := make(map[string]bool, len(ups))
	rows := make([]UpstreamRow, 0, len(ups))
	for _, u := range ups {
		cfg := u.Config()
		h := u.Health()
		names[cfg.Name] = true
		row := UpstreamRow{
			Name: cfg.Name, Prefix: cfg.Prefix, Transport: cfg.Transport, Target: agg.Redact(target(cfg)),
			Required: cfg.Required, Scope: cfg.Scope, State: stateName(h), Protocol: h.Protocol,
			Tools: exposed[cfg.Name].Tools, Hidden: exposed[cfg.Name].Dropped,
			Connects: h.Connects, Restarts: h.Restarts, Quarantined: exposed[cfg.Name].Quarantined,
		}
		if row.Scope == "" {
			row.Scope = configs.ScopeShared
		}
		if cfg.PerUser() {
			row.Credentials = cfg.Credentials
			if row.State == "needs login" {
				// Users connect themselves: the shared connection, with no
				// operator login, only lacks the tool list, which a
				// connected user's connection gives.
				row.State = "per-user"
				h.LastError = nil
			}
		}
		if c := u.OAuth(); c != nil {
			row.MoreScope = c.MoreScopes()
		}
		if row.State == "needs login" && len(row.MoreScope) == 0 && !errors.Is(h.LastError, upstream.ErrNeedsLogin) {
			// Refused for a scope the login has: logging in again would
			// not help (its last error says so).
			row.State = upstream.StateDown.String()
		}
		row.stateText = stateText(row.State, row.MoreScope)
		if h.Transport != "" && h.Transport != cfg.Transport {
			row.Transport = cfg.Transport + " → " + h.Transport
		}
		if cat := u.Catalog(); cat != nil {
			row.Prompts, row.Resources, row.Templates = len(cat.Prompts), len(cat.Resources), len(cat.ResourceTemplates)
		}
		if h.LastError != nil {
			row.LastError = agg.Redact(h.LastError.Error()) // every configured secret, whoever's
			row.LastErrorAt = h.LastErrorAt.UTC().Format(time.RFC3339)
			row.ago = roundDuration(now.Sub(h.LastErrorAt)).String()
			for _, l := range h.Stderr {
				row.Stderr = append(row.Stderr, agg.Redact(l))
			}
			row.summary = errorSummary(row.LastError)
			if d := withoutStderr(row.LastError, len(row.Stderr) > 0); d != row.summary {
				row.detail = d
			}
		}
		if p50, p99, n := p.src.Latency(cfg.Name); n > 0 {
			row.Calls, row.P50, row.P99 = n, roundLatency(p50).String(), roundLatency(p99).String()
		}
		rows = append(rows, row)
	}
	p.src.RetainLatency(names) // a reload may have removed some
	return rows
}

// profiles returns the per-profile part of the page, from the cache when
// neither the resolver (a reload) nor the snapshot changed.
func (p *Page) profiles(snap *aggregator.Snapshot) *profileStatus {
	res, registry := p.src.Resolver(), p.src.Registry()
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.cached; c != nil && c.resolver == res && c.version == snap.Version {
		return c
	}
	c := &profileStatus{resolver: res, version: snap.Version, byFilter: make(map[*filter.Filter]int)}
	names := res.Profiles()
	if len(names) == 0 {
		names = []string{""}
	}
	for _, name := range names {
		row := ProfileRow{Name: name}
		b, err := res.ResolveLocal(grant.Selection{Profile: name})
		if err != nil {
			row.Error = err.Error()
			c.profiles = append(c.profiles, row)
			continue
		}
		v := registry.View(snap.Version, snap.Tools, b.Filter)
		row.Tools = v.Len()
		if row.Tokens, row.ByUpstream, err = v.Tokens(); err != nil {
			row.Error = fmt.Sprintf("profile %q: estimating tokens: %v", name, err)
		}
		f, dynamic := p.src.InitialFilter(res, b)
		row.Dynamic = f != nil && dynamic
		row.Search = f != nil && !dynamic
		if f != nil {
			dv := registry.View(snap.Version, snap.Tools, f)
			row.InitialTools = dv.Len()
			if row.InitialTokens, err = filter.EstimateTokens(dv.Tools); err != nil {
				row.Error = fmt.Sprintf("profile %q: estimating its initial tokens: %v", name, err)
			}
		}
		i, seen := c.byFilter[b.Filter]
		if !seen {
			i = len(c.filters)
			c.byFilter[b.Filter] = i
			c.filters = append(c.filters, FilterRow{ID: keyDigest(b.Filter.Key()), Key: cut(b.Filter.Key(), maxKeyShown)})
		}
		c.filters[i].Profiles = append(c.filters[i].Profiles, name)
		row.Filter = i + 1
		c.profiles = append(c.profiles, row)
	}
	p.cached = c
	return c
}

// stateName is what the page calls an upstream's state: a connection
// attempt is "starting" before the first and "restarting" after it; an
// oauth upstream without a usable token is "needs login" (its last error
// names the command to run) until it comes up.
func stateName(h upstream.Health) string {
	if (h.State == upstream.StateDown || h.State == upstream.StateConnecting) &&
		(errors.Is(h.LastError, upstream.ErrNeedsLogin) || errors.Is(h.LastError, upstream.ErrInsufficientScope)) {
		return "needs login"
	}
	if h.State == upstream.StateConnecting {
		if h.Restarts > 0 || h.Connects > 0 {
			return "restarting"
		}
		return "starting"
	}
	return h.State.String()
}

// stateText is what the page shows of state: with the scopes a new
// login must add, "needs login (more scope: a b)", after the state when
// the upstream is up meanwhile (its other calls work).
func stateText(state string, more []string) string {
	if len(more) == 0 {
		return state
	}
	need := "needs login (more scope: " + strings.Join(more, " ") + ")"
	if state == "needs login" {
		return need
	}
	return state + "; " + need
}

// target is what the page says an upstream connects to, without secrets:
// the URL's scheme, host and port only (its userinfo, path and query may
// all carry keys), or the command and the script or package its first
// argument names (scriptArg): four upstreams run by node differ there.
func target(cfg *configs.Upstream) string {
	if cfg.URL == "" {
		if a := scriptArg(cfg.Args); a != "" {
			return cfg.Command + " " + a
		}
		return cfg.Command
	}
	if u, err := url.Parse(cfg.URL); err == nil && u.Scheme != "" && u.Host != "" {
		return (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
	}
	return "(unparsable url)" // Parse validated it; nothing of it is shown
}

// scriptArg returns the first argument that is not a flag when it reads
// as a script path or a package name (node dist/index.js, npx -y
// @scope/server, uvx mcp-server-fetch), its end kept when long; "" when
// there is none, or when it could be anything else: text with spaces or
// quotes (sh -c '…'), an assignment, a URL (which may carry credentials),
// or a run of letters and digits long enough to be a key. Flags and
// their values are skipped, never shown.
func scriptArg(args []string) string {
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			continue
		}
		if !namesScript(a) {
			return ""
		}
		if len(a) > maxArgShown {
			a = "…" + strings.ToValidUTF8(a[len(a)-maxArgShown:], "")
		}
		return a
	}
	return ""
}

// namesScript reports whether a is made only of characters of paths and
// package names, holds no URL, and no run of letters and digits of 20 or
// more with both in it (how API keys and tokens look).
func namesScript(a string) bool {
	if a == "" || strings.Contains(a, "://") {
		return false
	}
	run, letters, digits := 0, false, false
	for _, c := range a {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
			run, letters = run+1, true
		case c >= '0' && c <= '9':
			run, digits = run+1, true
		case strings.ContainsRune("@._/+~:-_", c):
			run, letters, digits = 0, false, false
		default:
			return false // spaces, quotes, '=' (key=…), …
		}
		if run >= 20 && letters && digits {
			return false
		}
	}
	return true
}

// errorSummary returns an upstream's error for the narrow "last error"
// cell: its first line, with markup tags dropped (an HTML error page a
// server answered with), whitespace collapsed, cut to maxErrorShown bytes.
// The page escapes what is left like every value.
func errorSummary(text string) string {
	line, _, _ := strings.Cut(text, "\n")
	line = markupTag.ReplaceAllString(line, " ")
	return cut(strings.Join(strings.Fields(line), " "), MaxErrorShown)
}

// markupTag matches an HTML tag, comment or doctype.
var markupTag = regexp.MustCompile(`<(?:!--.*?--|[!/]?[A-Za-z][^<>]*)>`)

// withoutStderr returns text without the stderr lines a StderrError
// appends ("\n  stderr| …") when the page shows them apart.
func withoutStderr(text string, apart bool) string {
	if i := strings.Index(text, "\n  stderr| "); apart && i >= 0 {
		return text[:i]
	}
	return text
}

func keyDigest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:4])
}

// cut returns s cut to at most n bytes, on a rune boundary, marked "…".
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = strings.ToValidUTF8(s[:n], "")
	return s + "…"
}

// roundDuration rounds d to a second for people.
func roundDuration(d time.Duration) time.Duration { return d.Round(time.Second) }

// roundLatency keeps three significant digits or so.
func roundLatency(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// statusTemplate is the page: plain HTML, inline CSS, no script and no
// external asset; it reloads itself with a meta refresh. html/template
// escapes every value by context, so an upstream's name, error or stderr
// line (which a child controls) is text, never markup.
var statusTemplate = template.Must(template.New("status").Funcs(template.FuncMap{
	"join":      func(s []string) string { return strings.Join(s, ", ") },
	"label":     func(s string) string { return cmp.Or(s, "(none)") },
	"inc":       func(i int) int { return i + 1 },
	"ago":       func(u UpstreamRow) string { return u.ago },
	"summary":   func(u UpstreamRow) string { return u.summary },
	"detail":    func(u UpstreamRow) string { return u.detail },
	"statetext": func(u UpstreamRow) string { return u.stateText },
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="{{.RefreshSecond}}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>viewmux status</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fff}
h1{font-size:1.4em;margin:0 0 .3em}h2{font-size:1.1em;margin:1.5em 0 .4em}
table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #ddd;padding:.3em .5em;text-align:left;vertical-align:top}
th{background:#f4f4f4;font-weight:600}
td.n{text-align:right;font-variant-numeric:tabular-nums}td.nw,td.state{white-space:nowrap}td.lasterror{max-width:28em}
.up{color:#07600f;font-weight:600}.down,.closed{color:#a00;font-weight:600}.starting,.restarting{color:#955f00;font-weight:600}
.meta{color:#555}code,pre{font:12px/1.3 ui-monospace,monospace}
pre{background:#f7f7f7;padding:.4em;margin:.3em 0;white-space:pre-wrap;word-break:break-all;max-width:60em}
details summary{cursor:pointer}.err{color:#a00;word-break:break-word}
</style>
</head>
<body>
<h1>viewmux</h1>
<p class="meta" id="server">version <b>{{.Version}}</b> · replica <b>{{.Replica}}</b> · up <b>{{.Uptime}}</b> (since {{.Started}}) · config <code>{{.Config}}</code> · snapshot <b>{{.Snapshot}}</b> · refreshes every {{.RefreshSecond}}s</p>

<h2>Upstreams</h2>
<table id="upstreams">
<thead><tr><th>name</th><th>prefix</th><th>transport</th><th>target</th><th>state</th><th>protocol</th><th>tools</th><th>prompts</th><th>resources</th><th>restarts</th><th>calls p50 / p99</th><th>last error</th></tr></thead>
<tbody>
{{range .Upstreams}}<tr class="upstream" data-name="{{.Name}}">
<td class="name"><b>{{.Name}}</b>{{if .Required}} <span class="meta">required</span>{{end}}{{if eq .Scope "session"}} <span class="meta">per session</span>{{end}}{{if .Credentials}} <span class="meta">{{.Credentials}} credentials</span>{{end}}</td>
<td>{{.Prefix}}</td>
<td>{{.Transport}}</td>
<td><code>{{.Target}}</code></td>
<td class="state {{.State}}">{{statetext .}}</td>
<td class="nw">{{.Protocol}}</td>
<td class="n tools">{{.Tools}}{{if .Hidden}} <span class="meta">(+{{.Hidden}} hidden)</span>{{end}}{{if .Quarantined}} <span class="meta quarantined">(+{{.Quarantined}} quarantined)</span>{{end}}</td>
<td class="n">{{.Prompts}}</td>
<td class="n">{{.Resources}}{{if .Templates}} <span class="meta">+{{.Templates}} templates</span>{{end}}</td>
<td class="n restarts">{{.Restarts}}</td>
<td class="n">{{if .Calls}}{{.P50}} / {{.P99}} <span class="meta">({{.Calls}} calls)</span>{{else}}<span class="meta">no calls</span>{{end}}</td>
<td class="lasterror">{{if .LastError}}<details><summary class="err" title="{{.LastError}}">{{summary .}}</summary>{{with detail .}}<pre class="error">{{.}}</pre>{{end}}<div class="meta">{{.LastErrorAt}} ({{ago .}} ago){{if not .Stderr}}; no stderr lines{{end}}</div>{{if .Stderr}}<pre class="stderr">{{range .Stderr}}{{.}}
{{end}}</pre>{{end}}</details>{{else}}<span class="meta">none</span>{{end}}</td>
</tr>
{{else}}<tr><td colspan="12" class="meta">no upstreams configured</td></tr>
{{end}}</tbody>
</table>

<h2>Profiles</h2>
<table id="profiles">
<thead><tr><th>profile</th><th>tools</th><th>~tokens</th><th>~tokens by upstream</th><th>sessions</th><th>filter</th></tr></thead>
<tbody>
{{range .Profiles}}<tr class="profile" data-name="{{.Name}}">
<td class="name"><b>{{label .Name}}</b>{{if .Dynamic}}<br><span class="meta dynamic">dynamic: a session starts with {{.InitialTools}} tools, ~{{.InitialTokens}} tokens</span>{{end}}{{if .Search}}<br><span class="meta dynamic">tool search: a session starts with {{.InitialTools}} tools, ~{{.InitialTokens}} tokens</span>{{end}}</td>
<td class="n tools">{{.Tools}}</td>
<td class="n">{{.Tokens}}</td>
<td>{{range $i, $u := .ByUpstream}}{{if $i}}, {{end}}{{$u.Upstream}} {{$u.Tokens}} <span class="meta">({{$u.Tools}} tools)</span>{{else}}<span class="meta">none</span>{{end}}{{if .Error}} <span class="err">{{.Error}}</span>{{end}}</td>
<td class="n sessions">{{.Sessions}}</td>
<td>{{if .Filter}}#{{.Filter}}{{end}}</td>
</tr>
{{end}}{{if .OtherProfileSessions}}<tr class="profile" data-name="(other)"><td class="name meta">other: no profile, or one a reload removed</td><td></td><td></td><td></td><td class="n sessions">{{.OtherProfileSessions}}</td><td></td></tr>
{{end}}</tbody>
</table>
<p class="meta">~tokens is the size of the tools/list JSON / 4, the estimate <code>viewmux check</code> prints. sessions: the live sessions that selected the profile, whatever they narrowed.</p>

<h2>Filter instances</h2>
<p id="filters">{{.FilterCount}} held: the {{len .Filters}} that profiles resolve to, one row each, and {{.OtherFilters}} other{{if ne .OtherFilters 1}}s{{end}} (request narrowings, tokens' own rules, dynamic sessions' toolsets; a bounded cache).</p>
<table>
<thead><tr><th>filter</th><th>profiles</th><th>sessions</th><th>key</th></tr></thead>
<tbody>
{{range $i, $f := .Filters}}<tr class="filter"><td>#{{inc $i}} <span class="meta">{{$f.ID}}</span></td><td>{{range $j, $p := $f.Profiles}}{{if $j}}, {{end}}{{label $p}}{{end}}</td><td class="n sessions">{{$f.Sessions}}</td><td><code>{{or $f.Key "(no rules)"}}</code></td></tr>
{{end}}<tr class="filter other"><td class="meta">other ({{.OtherFilters}})</td><td class="meta">sessions that narrowed their view</td><td class="n sessions">{{.OtherFilterSessions}}</td><td></td></tr>
</tbody>
</table>
<p class="meta">sessions: the live sessions whose view is built from exactly that filter. Both tables count the same {{.Bound}} bound sessions.</p>

<p class="meta" id="state-store">state store: <b>{{.Store.Engine}}</b>{{if .Store.Where}} at <code>{{.Store.Where}}</code>{{end}} · {{if .Store.Up}}<b>up</b>{{else}}<span class="err">down{{if .Store.Error}}: {{.Store.Error}}{{end}}</span>{{end}}{{if .Store.Since}} since {{.Store.Since}}{{end}}</p>

{{if .Pin}}<h2>Pinned tool definitions</h2>
<p class="meta" id="pins">server.pin = <b>{{.Pin}}</b>. Changes waiting for <code>viewmux pins approve</code>: <b>{{len .PendingPins}}</b>{{if eq .Pin "quarantine"}} (hidden from every view until approved){{end}}.{{if .PinsError}} <span class="err">{{.PinsError}}</span>{{end}}</p>
{{if .PendingPins}}<table id="pending-pins">
<thead><tr><th>tool</th><th>upstream</th><th>change</th><th>seen</th><th>diff</th></tr></thead>
<tbody>
{{range .PendingPins}}<tr class="pending-pin" data-tool="{{.Exposed}}"><td><b>{{.Exposed}}</b></td><td>{{.Upstream}}</td><td>{{.Kind}}</td><td class="nw">{{.Seen}}</td><td><pre class="diff">{{.Diff}}</pre></td></tr>
{{end}}</tbody>
</table>{{end}}
{{end}}
<h2>Sessions</h2>
<p id="sessions">{{.Open}} open of at most {{.MaxSessions}} (every door; GET streams and sessions not yet initialized included). Bound to a view, by door:
{{range $door, $n := .Sessions}} {{$door}} <b>{{$n}}</b>{{else}} none{{end}}</p>
{{if .BySubject}}<p id="subjects">By caller:{{range $sub, $n := .BySubject}} <span class="name">{{$sub}}</span> <b>{{$n}}</b>{{end}}</p>
{{end}}<p class="meta" id="idle">A /mcp session stays open until its client ends it with DELETE or it has been idle for server.session_idle_timeout ({{or .IdleTimeout "none: never"}}): a client that exits without DELETE leaves its session counted until then. Idle for a minute or more: <b>{{.Idle}}</b>{{if .NextExpiry}}; the longest idle expires in {{.NextExpiry}}{{end}}.</p>
</body>
</html>
`))
