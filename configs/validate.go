package configs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/viewmux/viewmux/internal/glob"
	"github.com/viewmux/viewmux/internal/statedir"
)

// Defaults, as documented on the Config types.
const (
	defaultListen        = "127.0.0.1:8931"
	defaultSeparator     = "__"
	defaultMaxNameLength = 64
	defaultMaxBodyBytes  = 4 << 20
	defaultMaxPending    = 8 << 20
	defaultShutdownGrace = 10 * time.Second
	defaultMaxSessions   = 10000
	// defaultMaxChildrenPerCaller bounds one caller's scope = "session"
	// children: a child costs megabytes (a Node server ~15 MB), a
	// session kilobytes.
	defaultMaxChildrenPerCaller = 16
	defaultSessionIdle          = 30 * time.Minute
	defaultReadTimeout          = 30 * time.Second
	defaultConnectTimeout       = 10 * time.Second
	defaultCallTimeout          = 60 * time.Second
	defaultMaxMessageBytes      = 16 << 20
	defaultMaxCatalogItems      = 10000
	defaultMaxCatalogBytes      = 8 << 20
	defaultProfileName          = "default"
)

// ReservedPrefix is the prefix of viewmux's own tools: no upstream
// may have it, and an unprefixed upstream's tools may not start with it.
const ReservedPrefix = "viewmux"

func defaultAllowedOrigins() []string {
	return []string{"http://localhost:*", "http://127.0.0.1:*"}
}

var (
	prefixRE    = regexp.MustCompile(`^[A-Za-z0-9-]+$`)
	separatorRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	// nameRE constrains upstream, profile and toolset names, which appear in
	// "<upstream>/<set>" references, comma-separated request headers and URLs.
	nameRE     = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
	protocolRE = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`)
	sha256RE   = regexp.MustCompile(`^[0-9a-f]{64}$`)
	headerRE   = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$") // RFC 9110 token
)

// config builds the Config, recording every problem on the way.
func (v *validator) config(raw *rawConfig) *Config {
	cfg := &Config{Source: v.source}
	cfg.Server = v.server(&raw.Server)
	cfg.Audit = Audit{Path: raw.Audit.Path, IncludeArguments: raw.Audit.IncludeArguments}
	cfg.Upstreams = v.upstreams(raw.Upstreams, cfg.Server.Separator, cfg.Server.MaxNameLength)
	cfg.State = v.state(&raw.State, cfg.Upstreams)
	if cfg.Server.Pin != PinOff && cfg.Server.StateDir == "" && raw.Server.StateDir == nil && cfg.State.URL == "" {
		v.errorf(keyPath{"server", "pin"}, "pin %q needs a state directory to keep pins in: set server.state_dir (neither XDG_STATE_HOME nor HOME is set), or state.url", cfg.Server.Pin)
	}
	cfg.Filter = v.rules(keyPath{"filter"}, &raw.Filter, cfg)
	cfg.Profiles = v.profiles(raw.Profiles, cfg)
	cfg.Server.DefaultProfile = v.defaultProfile(raw.Server.DefaultProfile, cfg.Profiles)
	cfg.Auth = v.auth(raw.Auth.Tokens, cfg.Profiles)
	cfg.Auth.OAuth = v.oauth(raw.Auth.OAuth, cfg.Server.Listen, cfg.Profiles)
	for _, u := range cfg.Upstreams {
		if u.OAuth != nil {
			u.OAuth.StateDir = cfg.Server.StateDir
		}
		v.credentialsNeeds(u, cfg)
	}
	return cfg
}

func (v *validator) server(r *rawServer) Server {
	p := keyPath{"server"}
	s := Server{
		Listen:               defaultListen,
		Separator:            defaultSeparator,
		MaxNameLength:        defaultMaxNameLength,
		AllowedOrigins:       defaultAllowedOrigins(),
		AllowUnauthenticated: r.AllowUnauthenticated,
		MaxBodyBytes:         v.size(p.key("max_body_bytes"), r.MaxBodyBytes, defaultMaxBodyBytes),
		MaxPendingBytes:      v.size(p.key("max_pending_bytes"), r.MaxPendingBytes, defaultMaxPending),
		ShutdownGrace:        v.duration(p.key("shutdown_grace"), r.ShutdownGrace, defaultShutdownGrace),
		MaxSessions:          defaultMaxSessions,
		SessionIdleTimeout:   v.duration(p.key("session_idle_timeout"), r.SessionIdleTimeout, defaultSessionIdle),
		ReadTimeout:          v.duration(p.key("read_timeout"), r.ReadTimeout, defaultReadTimeout),
		LogFormat:            "text",
	}
	v.slowReaders(p, r, &s)
	if r.MaxSessions != nil {
		s.MaxSessions = *r.MaxSessions
		if s.MaxSessions < 1 {
			v.errorf(p.key("max_sessions"), "must be at least 1, got %d", s.MaxSessions)
		}
	}
	s.MaxSessionsPerCaller = max(1, s.MaxSessions/4)
	if r.MaxSessionsPerCaller != nil {
		s.MaxSessionsPerCaller = *r.MaxSessionsPerCaller
		if s.MaxSessionsPerCaller < 1 {
			v.errorf(p.key("max_sessions_per_caller"), "must be at least 1, got %d", s.MaxSessionsPerCaller)
		}
	}
	s.MaxChildrenPerCaller = min(defaultMaxChildrenPerCaller, s.MaxSessionsPerCaller)
	if r.MaxChildrenPerCaller != nil {
		s.MaxChildrenPerCaller = *r.MaxChildrenPerCaller
		if s.MaxChildrenPerCaller < 1 {
			v.errorf(p.key("max_children_per_caller"), "must be at least 1, got %d", s.MaxChildrenPerCaller)
		}
	}
	if r.LogFormat != nil {
		s.LogFormat = *r.LogFormat
		if s.LogFormat != "text" && s.LogFormat != "json" {
			v.errorf(p.key("log_format"), "log_format %q: want \"text\" or \"json\"", s.LogFormat)
		}
	}
	if r.Listen != nil {
		s.Listen = *r.Listen
		if err := checkListen(s.Listen); err != nil {
			v.errorf(p.key("listen"), "%v", err)
		}
	}
	if r.Separator != nil {
		s.Separator = *r.Separator
		if !separatorRE.MatchString(s.Separator) {
			v.errorf(p.key("separator"), "separator %q must be non-empty and use only A-Z a-z 0-9 _ -", s.Separator)
		}
	}
	if r.MaxNameLength != nil {
		s.MaxNameLength = *r.MaxNameLength
		if s.MaxNameLength < 16 || s.MaxNameLength > 128 {
			v.errorf(p.key("max_name_length"), "must be between 16 and 128, got %d", s.MaxNameLength)
		}
	}
	if r.AllowedOrigins != nil {
		s.AllowedOrigins = v.globs(p.key("allowed_origins"), *r.AllowedOrigins)
	}
	if r.ReplicaID != nil {
		if id, ok := v.expand(p.key("replica_id"), *r.ReplicaID); ok {
			s.ReplicaID = id
			if !replicaIDRE.MatchString(id) {
				v.errorf(p.key("replica_id"), "replica_id %q must be 1 to 32 of a-z 0-9 and -, starting and ending with a letter or digit: it starts every session id, and load balancers route on it", id)
			}
		}
	} else {
		host, _ := v.hostname()
		s.ReplicaID = DefaultReplicaID(host)
	}
	s.Pin, s.StateDir = v.pins(p, r)
	if r.PublicURL != nil {
		if u, ok := v.expand(p.key("public_url"), *r.PublicURL); ok {
			if msg := checkPublicURL(u); msg != "" {
				v.errorf(p.key("public_url"), "%s", msg)
			} else {
				s.PublicURL = strings.TrimSuffix(u, "/")
			}
		}
	}
	return s
}

// pins checks server.pin and server.state_dir (pinned definitions),
// and applies their defaults. That pins have somewhere to live is checked
// by config, which knows [state] too.
func (v *validator) pins(p keyPath, r *rawServer) (pin, stateDir string) {
	pin = PinOff
	if r.Pin != nil {
		pin = *r.Pin
		if pin != PinOff && pin != PinWarn && pin != PinQuarantine {
			v.errorf(p.key("pin"), "pin %q: want \"off\", \"warn\" or \"quarantine\"", pin)
		}
	}
	if r.StateDir == nil {
		// Without a directory, pins need state.url: config checks that
		// once [state] is read.
		stateDir, _ = statedir.Default(v.lookupEnv)
		return pin, stateDir
	}
	dir, ok := v.expand(p.key("state_dir"), *r.StateDir)
	if !ok {
		return pin, ""
	}
	dir, err := statedir.Expand(dir, v.lookupEnv)
	switch {
	case err != nil:
		v.errorf(p.key("state_dir"), "%v", err)
	case !filepath.IsAbs(dir):
		v.errorf(p.key("state_dir"), "state_dir %q must be an absolute path (or start with ~/)", dir)
	}
	return pin, filepath.Clean(dir)
}

// replicaIDRE is what server.replica_id may be: a DNS label of at most 32
// characters, lowercase, so that it has no dot (the separator in session
// ids) and needs no escaping in URLs, headers or an nginx map.
var replicaIDRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)

// DefaultReplicaID derives a replica id from a hostname: its first label,
// lowercased, with every character outside a-z 0-9 - replaced by -. A
// label longer than 32 characters keeps its first 23 and appends 8 hex
// digits of a hash of the whole hostname; an empty result is "viewmux". In
// a Kubernetes StatefulSet the hostname is the pod's name, so the default
// is "<statefulset>-<ordinal>", stable across restarts.
func DefaultReplicaID(hostname string) string {
	label, _, _ := strings.Cut(strings.ToLower(hostname), ".")
	b := []byte(label)
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '-'
		}
	}
	id := strings.Trim(string(b), "-")
	if len(id) > 32 {
		sum := sha256.Sum256([]byte(hostname))
		id = strings.TrimRight(id[:23], "-") + "-" + hex.EncodeToString(sum[:4])
	}
	if id == "" {
		return "viewmux"
	}
	return id
}

func checkListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen %q: want host:port, e.g. %q", addr, defaultListen)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n > 65535 {
		return fmt.Errorf("listen %q: port %q is not a number from 0 to 65535", addr, port)
	}
	return nil
}

func (v *validator) upstreams(raw map[string]*rawUpstream, sep string, maxLen int) []*Upstream {
	var out []*Upstream
	byPrefix := map[string]*Upstream{}
	for _, name := range slices.Sorted(maps.Keys(raw)) {
		u := v.upstream(name, raw[name], sep)
		u.Overrides = v.overrides(keyPath{"upstreams", name, "overrides"}, raw[name].Overrides, u, sep, maxLen)
		out = append(out, u)
		if u.Prefix == "" {
			continue // unprefixed upstreams may share the flat namespace; tool collisions are caught when catalogs merge
		}
		if other, ok := byPrefix[u.Prefix]; ok {
			v.errorf(v.prefixKey(u, raw[name]), "prefix %q is also the prefix of upstream %q (line %d); set a distinct prefix", u.Prefix, other.Name, v.lines.line(v.prefixKey(other, raw[other.Name])))
			continue
		}
		byPrefix[u.Prefix] = u
	}
	v.overrideCollisions(out, sep)
	return out
}

// prefixKey is where u's prefix comes from: its prefix key, or its header.
func (v *validator) prefixKey(u *Upstream, r *rawUpstream) keyPath {
	p := keyPath{"upstreams", u.Name}
	if r.Prefix != nil {
		return p.key("prefix")
	}
	return p
}

func (v *validator) upstream(name string, r *rawUpstream, sep string) *Upstream {
	p := keyPath{"upstreams", name}
	u := &Upstream{
		Name:            name,
		Required:        r.Required,
		Protocol:        r.Protocol,
		ConnectTimeout:  v.duration(p.key("connect_timeout"), r.ConnectTimeout, defaultConnectTimeout),
		CallTimeout:     v.duration(p.key("call_timeout"), r.CallTimeout, defaultCallTimeout),
		MaxMessageBytes: v.size(p.key("max_message_bytes"), r.MaxMessageBytes, defaultMaxMessageBytes),
		MaxCatalogItems: defaultMaxCatalogItems,
		MaxCatalogBytes: v.size(p.key("max_catalog_bytes"), r.MaxCatalogBytes, defaultMaxCatalogBytes),
		Scope:           ScopeShared,
		Line:            v.lines.line(p),
	}
	if r.MaxCatalogItems != nil {
		u.MaxCatalogItems = *r.MaxCatalogItems
		if u.MaxCatalogItems < 1 {
			v.errorf(p.key("max_catalog_items"), "must be at least 1, got %d", u.MaxCatalogItems)
		}
	}
	if r.Scope != nil {
		u.Scope = *r.Scope
		if u.Scope != ScopeShared && u.Scope != ScopeSession {
			v.errorf(p.key("scope"), "scope %q: want %q (one connection for all sessions) or %q (one per client session)", u.Scope, ScopeShared, ScopeSession)
		}
	}
	if !nameRE.MatchString(name) {
		v.errorf(p, "upstream name %q may use only A-Z a-z 0-9 _ . -", name)
	}
	if r.Protocol != "" && !protocolRE.MatchString(r.Protocol) {
		v.errorf(p.key("protocol"), "protocol %q is not an MCP protocol version such as \"2025-11-25\"", r.Protocol)
	}

	u.Prefix = name
	if r.Prefix != nil {
		u.Prefix = *r.Prefix
	}
	switch {
	case u.Prefix == "":
	case !prefixRE.MatchString(u.Prefix) && r.Prefix == nil:
		v.errorf(p, "upstream name %q is not a valid prefix (A-Z a-z 0-9 -); set prefix explicitly", name)
	case !prefixRE.MatchString(u.Prefix):
		v.errorf(p.key("prefix"), "prefix %q may use only A-Z a-z 0-9 - (or be \"\" to mount unprefixed)", u.Prefix)
	case u.Prefix == ReservedPrefix:
		v.errorf(v.prefixKey(u, r), "prefix %q is reserved for viewmux's own tools; set another prefix", u.Prefix)
	case sep != "" && strings.Contains(u.Prefix, sep):
		v.errorf(v.prefixKey(u, r), "prefix %q contains the separator %q, which makes exposed names ambiguous", u.Prefix, sep)
	}

	v.endpoint(p, r, u)

	u.Rules = RuleSet{
		Tools:      v.names(p.key("tools"), r.Tools),
		Allow:      v.globs(p.key("allow"), r.Allow),
		AllowRegex: v.regexps(p.key("allow_regex"), r.AllowRegex),
		Deny:       v.globs(p.key("deny"), r.Deny),
		DenyRegex:  v.regexps(p.key("deny_regex"), r.DenyRegex),
	}
	u.ReadOnlyTools = v.globs(p.key("read_only_tools"), r.ReadOnlyTools)
	if r.Toolsets != nil {
		u.Toolsets = make(map[string][]string, len(r.Toolsets))
		for _, set := range slices.Sorted(maps.Keys(r.Toolsets)) {
			sp := p.key("toolsets", set)
			if !nameRE.MatchString(set) {
				v.errorf(sp, "toolset name %q may use only A-Z a-z 0-9 _ . -", set)
			}
			u.Toolsets[set] = v.globs(sp, r.Toolsets[set])
		}
	}
	return u
}

// endpoint expands and checks how to reach the upstream, and infers its
// transport: command → stdio, http(s) url → http, ws(s) url → websocket.
func (v *validator) endpoint(p keyPath, r *rawUpstream, u *Upstream) {
	stdioOnly := map[string]bool{"args": r.Args != nil, "env": r.Env != nil, "dir": r.Dir != nil, "inherit_env": r.InheritEnv != nil}
	switch {
	case r.Command != nil && r.URL != nil:
		v.errorf(p, "set either command (stdio) or url (http, sse, websocket), not both")
		return
	case r.Command == nil && r.URL == nil:
		v.errorf(p, "needs command (stdio) or url (http, sse, websocket)")
		return
	}

	inferred, ok := "", true
	if r.Command != nil {
		inferred = TransportStdio
		if u.Command, ok = v.expand(p.key("command"), *r.Command); ok && u.Command == "" {
			v.errorf(p.key("command"), "must not be empty")
		}
		for i, a := range r.Args {
			a, _ = v.expand(p.key("args").at(i), a)
			u.Args = append(u.Args, a)
		}
		u.Env = v.stringMap(p.key("env"), r.Env, checkEnvName, "\x00")
		if r.Dir != nil {
			u.Dir, _ = v.expand(p.key("dir"), *r.Dir)
		}
		u.InheritEnv = v.inheritEnv(p.key("inherit_env"), r.InheritEnv)
		if r.Headers != nil {
			v.errorf(p.key("headers"), "headers apply only to url upstreams; pass credentials to a command through env")
		}
	} else {
		for _, k := range slices.Sorted(maps.Keys(stdioOnly)) {
			if stdioOnly[k] {
				v.errorf(p.key(k), "%s applies only to command (stdio) upstreams", k)
			}
		}
		if u.URL, ok = v.expand(p.key("url"), *r.URL); ok {
			inferred, ok = v.urlTransport(p.key("url"), u.URL)
		}
		u.Headers = v.stringMap(p.key("headers"), r.Headers, checkHeaderName, "\r\n\x00")
	}
	u.OAuth = v.upstreamOAuth(p.key("oauth"), r.OAuth, r.Command != nil)
	u.Credentials = v.credentials(p, r, u)

	switch r.Transport {
	case "":
		u.Transport = inferred
	case TransportStdio, TransportHTTP, TransportSSE, TransportWebsocket:
		u.Transport = r.Transport
		if !ok || r.Transport == inferred || r.Transport == TransportSSE && inferred == TransportHTTP {
			break
		}
		want := map[string]string{
			TransportStdio:     "a command",
			TransportHTTP:      "an http or https url",
			TransportSSE:       "an http or https url",
			TransportWebsocket: "a ws or wss url",
		}[r.Transport]
		got := "a command"
		if r.Command == nil {
			got = "url scheme " + strings.SplitN(u.URL, ":", 2)[0]
		}
		v.errorf(p.key("transport"), "transport %q needs %s, not %s", r.Transport, want, got)
	default:
		v.errorf(p.key("transport"), "unknown transport %q (want stdio, http, sse or websocket, or leave it out to infer it)", r.Transport)
	}
	if u.OAuth != nil && u.Transport == TransportWebsocket {
		v.errorf(p.key("oauth"), "oauth applies to http and sse upstreams, not websocket")
	}
}

// urlTransport infers the transport of a url. Its messages never echo the
// url, which may carry a credential.
func (v *validator) urlTransport(p keyPath, raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		v.errorf(p, "invalid url: %v", err)
		return "", false
	}
	var t string
	switch u.Scheme {
	case "http", "https":
		t = TransportHTTP
	case "ws", "wss":
		t = TransportWebsocket
	default:
		v.errorf(p, "url scheme %q is not http, https, ws or wss", u.Scheme)
		return "", false
	}
	if u.Host == "" {
		v.errorf(p, "url has no host")
		return "", false
	}
	return t, true
}

// stringMap expands the values of an env or headers table; check validates
// each key, and no value may contain a byte of forbidden.
func (v *validator) stringMap(p keyPath, m map[string]string, check func(string) error, forbidden string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if err := check(k); err != nil {
			v.errorf(p.key(k), "%v", err)
		}
		val, ok := v.expand(p.key(k), m[k])
		if ok && strings.ContainsAny(val, forbidden) {
			v.errorf(p.key(k), "value contains a forbidden character (%q)", forbidden)
		}
		out[k] = val
	}
	return out
}

// inheritEnv checks inherit_env: each entry is a variable name, or a
// prefix of one followed by a single trailing * ("AWS_*"). A lone * is
// refused: it would hand the child viewmux's whole environment, its tokens
// and every other upstream's keys among it.
func (v *validator) inheritEnv(p keyPath, patterns []string) []string {
	for i, pat := range patterns {
		name, _ := strings.CutSuffix(pat, "*")
		switch {
		case pat == "*":
			v.errorf(p.at(i), `"*" would pass viewmux's whole environment, its tokens and every upstream's secrets included; name the variables, or a prefix such as "AWS_*"`)
		case pat == "":
			v.errorf(p.at(i), "empty variable name")
		case strings.ContainsAny(name, "*?["):
			v.errorf(p.at(i), "%q: only a trailing * is a wildcard (write a name, or PREFIX_*)", pat)
		case strings.ContainsFunc(name, func(r rune) bool { return r == '=' || r <= ' ' || r == 0x7f }):
			v.errorf(p.at(i), "%q is not an environment variable name", pat)
		}
	}
	return slices.Clone(patterns)
}

func checkEnvName(k string) error {
	if k == "" || strings.ContainsAny(k, "=\x00") {
		return fmt.Errorf("invalid environment variable name %q", k)
	}
	return nil
}

func checkHeaderName(k string) error {
	if !headerRE.MatchString(k) {
		return fmt.Errorf("invalid header name %q", k)
	}
	return nil
}

// expand expands ${VAR} references in the value at p.
func (v *validator) expand(p keyPath, s string) (string, bool) {
	out, err := expand(s, v.lookupEnv)
	if err != nil {
		v.errorf(p, "%v", err)
		return "", false
	}
	return out, true
}

// rules checks a rule set of [filter] or a profile. Toolset references are
// returned as "<upstream>" or "<upstream>/<set>" with the upstream's name,
// whether the config used its name or its prefix.
func (v *validator) rules(p keyPath, r *rawRules, cfg *Config) RuleSet {
	return RuleSet{
		Tools:         v.names(p.key("tools"), r.Tools),
		Allow:         v.globs(p.key("allow"), r.Allow),
		AllowRegex:    v.regexps(p.key("allow_regex"), r.AllowRegex),
		Deny:          v.globs(p.key("deny"), r.Deny),
		DenyRegex:     v.regexps(p.key("deny_regex"), r.DenyRegex),
		Toolsets:      v.toolsetRefs(p.key("toolsets"), r.Toolsets, cfg),
		Upstreams:     v.upstreamRefs(p.key("upstreams"), r.Upstreams, cfg),
		DenyUpstreams: v.upstreamRefs(p.key("deny_upstreams"), r.DenyUpstreams, cfg),
		ReadOnly:      r.ReadOnly,
		CallRules:     v.callRules(p.key("call_rules"), r.CallRules),
		Approve:       v.globs(p.key("approve"), r.Approve),
		// 0 = not set here: the shortest set by any stage applies
		// (filter.Filter.Approval).
		ApproveTimeout: v.duration(p.key("approve_timeout"), r.ApproveTimeout, 0),
	}
}

// upstreamRefs resolves upstream references, by name or by prefix, to names.
func (v *validator) upstreamRefs(p keyPath, refs []string, cfg *Config) []string {
	var out []string
	for i, ref := range refs {
		if u := cfg.lookupUpstream(ref); u != nil {
			out = append(out, u.Name)
			continue
		}
		v.errorf(p.at(i), "%q: no upstream is named or prefixed %q", ref, ref)
	}
	return out
}

func (v *validator) names(p keyPath, names []string) []string {
	for i, n := range names {
		if n == "" {
			v.errorf(p.at(i), "empty tool name")
		}
	}
	return slices.Clone(names)
}

func (v *validator) globs(p keyPath, patterns []string, opts ...glob.Option) []string {
	for i, pat := range patterns {
		if _, err := glob.Compile(pat, opts...); err != nil {
			v.errorf(p.at(i), "%v", err)
		}
	}
	return slices.Clone(patterns)
}

func (v *validator) regexps(p keyPath, patterns []string) []string {
	for i, pat := range patterns {
		if _, err := regexp.Compile(pat); err != nil {
			var serr *syntax.Error
			if errors.As(err, &serr) {
				err = errors.New(serr.Code.String())
			}
			v.errorf(p.at(i), "invalid regex %q: %v", pat, err)
		}
	}
	return slices.Clone(patterns)
}

func (v *validator) toolsetRefs(p keyPath, refs []string, cfg *Config) []string {
	var out []string
	for i, ref := range refs {
		name, set, hasSet := strings.Cut(ref, "/")
		u := cfg.lookupUpstream(name)
		switch {
		case u == nil:
			v.errorf(p.at(i), "%q: no upstream is named or prefixed %q (want \"<upstream>\" or \"<upstream>/<set>\")", ref, name)
		case !hasSet:
			out = append(out, u.Name)
		case u.Toolsets[set] == nil:
			have := strings.Join(slices.Sorted(maps.Keys(u.Toolsets)), ", ")
			v.errorf(p.at(i), "%q: upstream %q has no toolset %q (has: %s)", ref, u.Name, set, orNone(have))
		default:
			out = append(out, u.Name+"/"+set)
		}
	}
	return out
}

// callRules checks the call_rules of one rule set: each names its tool once
// and at least one argument, every argument has at least one pattern, and
// every glob (compiled as the filter will, with glob.Guarded) and regex is
// valid.
func (v *validator) callRules(p keyPath, raw []rawCallRule) []CallRule {
	var out []CallRule
	first := map[string]keyPath{} // tool → its first rule
	for i, r := range raw {
		cp := p.at(i)
		switch prev, dup := first[r.Tool]; {
		case r.Tool == "":
			v.errorf(cp, "call rule needs tool")
		case dup:
			v.errorf(cp.key("tool"), "tool %q already has a call rule, %s (line %d); name all its arguments in that one rule", r.Tool, prev, v.lines.line(prev))
		default:
			first[r.Tool] = cp
		}
		if len(r.Args) == 0 && len(r.ArgsRegex) == 0 {
			v.errorf(cp, "call rule needs args or args_regex, e.g. args = { command = [\"git status\", \"git log *\"] }")
		}
		rule := CallRule{Tool: r.Tool, OtherArgs: r.OtherArgs}
		if r.Args != nil {
			rule.Args = make(map[string][]string, len(r.Args))
			for _, arg := range slices.Sorted(maps.Keys(r.Args)) {
				ap := cp.key("args", arg)
				if len(r.Args[arg]) == 0 {
					v.errorf(ap, "argument %q needs at least one glob", arg)
				}
				rule.Args[arg] = v.globs(ap, r.Args[arg], glob.Guarded())
			}
		}
		if r.ArgsRegex != nil {
			rule.ArgsRegex = make(map[string][]string, len(r.ArgsRegex))
			for _, arg := range slices.Sorted(maps.Keys(r.ArgsRegex)) {
				ap := cp.key("args_regex", arg)
				if len(r.ArgsRegex[arg]) == 0 {
					v.errorf(ap, "argument %q needs at least one regex", arg)
				}
				rule.ArgsRegex[arg] = v.regexps(ap, r.ArgsRegex[arg])
			}
		}
		out = append(out, rule)
	}
	return out
}

func (v *validator) profiles(raw map[string]*rawProfile, cfg *Config) map[string]*Profile {
	out := make(map[string]*Profile, len(raw))
	names := slices.Sorted(maps.Keys(raw))
	for _, name := range names {
		r, p := raw[name], keyPath{"profiles", name}
		if !nameRE.MatchString(name) {
			v.errorf(p, "profile name %q may use only A-Z a-z 0-9 _ . -", name)
		}
		if r.Rate.CallsPerMinute < 0 {
			v.errorf(p.key("rate", "calls_per_minute"), "must be >= 0 (0 = unlimited), got %d", r.Rate.CallsPerMinute)
		}
		out[name] = &Profile{
			Name:    name,
			Extends: r.Extends,
			Rules:   v.rules(p, &r.rawRules, cfg),
			Rate:    Rate{CallsPerMinute: r.Rate.CallsPerMinute},
			Line:    v.lines.line(p),
		}
	}
	for _, name := range names {
		if ext := out[name].Extends; ext != "" && out[ext] == nil {
			v.errorf(keyPath{"profiles", name, "extends"}, "unknown profile %q (have: %s)", ext, orNone(strings.Join(names, ", ")))
		}
	}
	v.extendsCycles(out, names)
	v.dynamicToolsets(raw, out, names)
	v.toolSearch(raw, out, names)
	return out
}

// toolSearch sets each profile's effective tool_search and
// tool_search_pinned (each its own when set, else its nearest
// ancestor's), validates the pinned globs where they are written, and
// reports a profile that ends up with both tool_search and
// dynamic_toolsets (two different starting views), or that sets
// tool_search_pinned itself without tool_search (it would do nothing).
func (v *validator) toolSearch(raw map[string]*rawProfile, profiles map[string]*Profile, names []string) {
	for _, name := range names {
		if pins := raw[name].ToolSearchPinned; pins != nil {
			v.globs(keyPath{"profiles", name, "tool_search_pinned"}, *pins)
		}
		var search *bool
		var pinned *[]string
		seen := map[string]bool{}
		for n := name; n != "" && raw[n] != nil && !seen[n]; n = raw[n].Extends {
			seen[n] = true
			if search == nil {
				search = raw[n].ToolSearch
			}
			if pinned == nil {
				pinned = raw[n].ToolSearchPinned
			}
		}
		p := profiles[name]
		if search != nil {
			p.ToolSearch = *search
		}
		if pinned != nil {
			p.ToolSearchPinned = slices.Clone(*pinned)
		}
		switch {
		case p.ToolSearch && p.DynamicToolsets:
			v.errorf(keyPath{"profiles", name, "tool_search"}, "profile %q has both tool_search and dynamic_toolsets (one may be inherited through extends); a session starts with one or the other", name)
		case !p.ToolSearch && raw[name].ToolSearchPinned != nil:
			v.errorf(keyPath{"profiles", name, "tool_search_pinned"}, "profile %q sets tool_search_pinned without tool_search = true: the pinned tools are listed only in a tool-search session", name)
		}
	}
}

// dynamicToolsets sets each profile's effective dynamic_toolsets: its own
// when it sets one, else its nearest ancestor's, else false. A cycle (already
// reported) ends the walk.
func (v *validator) dynamicToolsets(raw map[string]*rawProfile, profiles map[string]*Profile, names []string) {
	for _, name := range names {
		seen := map[string]bool{}
		for n := name; n != "" && raw[n] != nil && !seen[n]; n = raw[n].Extends {
			seen[n] = true
			if d := raw[n].DynamicToolsets; d != nil {
				profiles[name].DynamicToolsets = *d
				break
			}
		}
	}
}

// extendsCycles reports each extends cycle once, starting at its smallest
// name: `profiles.a.extends: extends cycle a -> b -> a`.
func (v *validator) extendsCycles(profiles map[string]*Profile, names []string) {
	const (
		walking = 1
		done    = 2
	)
	state := map[string]int{}
	for _, start := range names {
		var chain []string
		n := start
		for n != "" && profiles[n] != nil && state[n] == 0 {
			state[n] = walking
			chain = append(chain, n)
			n = profiles[n].Extends
		}
		if state[n] == walking {
			cycle := chain[slices.Index(chain, n):]
			first := slices.Index(cycle, slices.Min(cycle))
			cycle = slices.Concat(cycle[first:], cycle[:first])
			v.errorf(keyPath{"profiles", cycle[0], "extends"}, "extends cycle %s -> %s", strings.Join(cycle, " -> "), cycle[0])
		}
		for _, c := range chain {
			state[c] = done
		}
	}
}

func (v *validator) defaultProfile(r *string, profiles map[string]*Profile) string {
	if r == nil {
		if profiles[defaultProfileName] != nil {
			return defaultProfileName
		}
		return ""
	}
	if *r != "" && profiles[*r] == nil {
		v.errorf(keyPath{"server", "default_profile"}, "unknown profile %q (have: %s)", *r, orNone(profileNames(profiles)))
	}
	return *r
}

func (v *validator) auth(raw []rawToken, profiles map[string]*Profile) Auth {
	var a Auth
	seen := map[string]keyPath{} // sha256 hex → first token with it
	for i, r := range raw {
		p := keyPath{"auth", "tokens"}.at(i)
		t := Token{Line: v.lines.line(p), Profiles: slices.Clone(r.Profiles), Admin: r.Admin}
		hash := ""
		switch {
		case r.Token != nil && r.SHA256 != nil:
			v.errorf(p, "set exactly one of token and token_sha256, not both")
		case r.Token == nil && r.SHA256 == nil:
			v.errorf(p, "needs token or token_sha256")
		case r.Token != nil:
			var ok bool
			if t.Token, ok = v.expand(p.key("token"), *r.Token); ok && t.Token == "" {
				v.errorf(p.key("token"), "token is empty")
			} else if ok {
				sum := sha256.Sum256([]byte(t.Token))
				hash = hex.EncodeToString(sum[:])
			}
		default:
			t.SHA256 = *r.SHA256
			if !sha256RE.MatchString(t.SHA256) {
				v.errorf(p.key("token_sha256"), "must be 64 lowercase hex digits, e.g. the output of `printf %%s TOKEN | sha256sum`")
			} else {
				hash = t.SHA256
			}
		}
		if first, dup := seen[hash]; dup && hash != "" {
			v.errorf(p, "same token as %s", first)
		} else if hash != "" {
			seen[hash] = p
		}
		if len(r.Profiles) == 0 {
			v.errorf(p.key("profiles"), "token needs a non-empty profiles list (the first is its default)")
		}
		for j, name := range r.Profiles {
			if profiles[name] == nil {
				v.errorf(p.key("profiles").at(j), "unknown profile %q (have: %s)", name, orNone(profileNames(profiles)))
			}
		}
		a.Tokens = append(a.Tokens, t)
	}
	return a
}

func profileNames(profiles map[string]*Profile) string {
	return strings.Join(slices.Sorted(maps.Keys(profiles)), ", ")
}

func orNone(list string) string {
	if list == "" {
		return "none"
	}
	return list
}
