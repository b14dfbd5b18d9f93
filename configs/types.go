// Package configs owns viewmux's configuration: the TOML schema, strict decoding
// with file:line positions, ${ENV} expansion, validation, config discovery, the
// embedded quickstart, and import of mcpServers JSON files.
package configs

import (
	"encoding/json"
	"time"
)

// Transport names an upstream transport.
const (
	TransportStdio     = "stdio"
	TransportHTTP      = "http"
	TransportSSE       = "sse"
	TransportWebsocket = "websocket"
)

// Config is a validated configuration. It is immutable once returned by Parse
// or Load and safe to share between goroutines.
type Config struct {
	// Source is the file the config came from, or "embedded quickstart".
	Source string

	Server    Server
	Auth      Auth
	Audit     Audit
	Upstreams []*Upstream // sorted by Name
	Filter    RuleSet     // [filter], on exposed (namespaced) names
	Profiles  map[string]*Profile
	State     State // [state]: where pins, logins and the rest of the state live
}

// State is the [state] table: the store viewmux keeps what outlives one
// request in (pins and their approvals, OAuth logins, connect tickets and
// pending logins, rate buckets, pending approvals of stateless clients).
type State struct {
	// URL is the Redis or Valkey server of a shared store,
	// redis://[user:password@]host[:port][/db] or rediss://… (TLS),
	// ${ENV}-expanded. "" (the key absent, or a value that expands to
	// "") = the files engine in Server.StateDir. A secret: its password
	// is in SecretValues.
	URL string
	// EncryptionKey is the 32-byte AES-256-GCM key (state.encryption_key,
	// 64 hex characters, ${ENV}-expanded) that seals OAuth login tokens;
	// nil when not set (or expanded to ""). Parse requires it when URL is
	// set and any upstream has OAuth.
	EncryptionKey []byte
	// OldEncryptionKeys are keys that still open what they sealed
	// before a rotation, but seal nothing (state.old_encryption_keys),
	// 32 bytes each; nil when none. Parse requires EncryptionKey beside
	// them.
	OldEncryptionKeys [][]byte
	// KeyPrefix starts every key and channel in the store; default
	// "viewmux:". 1 to 64 printable ASCII characters, without spaces or
	// any of * ? [ ] \ (glob characters of SCAN MATCH and ACL patterns).
	KeyPrefix string
	// Timeout bounds each command to the store, and each dial; default
	// 1s, at most 30s.
	Timeout time.Duration
	// Line is the line of [state], for messages; 0 when absent.
	Line int
}

// Server is the [server] table with defaults applied.
type Server struct {
	Listen               string        // default "127.0.0.1:8931"
	Separator            string        // default "__"
	MaxNameLength        int           // default 64
	DefaultProfile       string        // "" when no profiles are defined; else default "default" when such a profile exists
	AllowedOrigins       []string      // default ["http://localhost:*", "http://127.0.0.1:*"]
	AllowUnauthenticated bool          // default false
	MaxBodyBytes         int64         // default 4 MiB
	MaxPendingBytes      int64         // default 8 MiB: per session, answers and frames its client has not read yet
	ShutdownGrace        time.Duration // default 10s
	MaxSessions          int           // default 10000: live sessions and streams across all doors
	// MaxSessionsPerCaller is one caller's share (a token, or a client
	// address without tokens) of every pool: its sessions and streams on
	// every door, and its calls in flight; its held 2026-07-28 calls get
	// the smaller of it and a quarter of their pool. Default: a quarter of
	// MaxSessions, at least 1.
	MaxSessionsPerCaller int
	// MaxChildrenPerCaller is one caller's share of scope = "session"
	// connections (a child process each, for stdio), over every upstream:
	// far costlier than a session, so its own, smaller bound. Default 16,
	// and never more than MaxSessionsPerCaller.
	MaxChildrenPerCaller int
	SessionIdleTimeout   time.Duration // default 30m: a session with no request for this long is closed
	ReadTimeout          time.Duration // default 30s: a request body must arrive within this; idle keep-alive closes after it
	LogFormat            string        // "text" (default) or "json"
	// ReplicaID starts every session id this replica mints, followed by a
	// dot, so that a load balancer can send a session's requests to the
	// replica that minted it. Default: DefaultReplicaID of the
	// hostname. It matches ^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$.
	ReplicaID string
	// StateDir is where viewmux keeps state between runs (pinned tool
	// definitions, OAuth tokens): server.state_dir with ${VAR} and a
	// leading ~ expanded, an absolute path; default
	// $XDG_STATE_HOME/viewmux, else ~/.local/state/viewmux. "" when it has
	// no default (neither variable set) and the config sets none.
	StateDir string
	// Pin is what a changed or new tool definition does after the first
	// sight of its upstream: PinOff (default), PinWarn or PinQuarantine.
	Pin string
	// PublicURL is the URL users reach viewmux at (scheme, host, port, no
	// path), for the links and the OAuth callback of per-user upstream
	// credentials (PublicBase); "" = not configured.
	PublicURL string

	// MaxPendingBytesPerCaller bounds what MaxPendingBytes bounds per
	// session (answers and frames not yet read), over all of one caller's
	// sessions and requests on every door; at least MaxPendingBytes.
	// Default: the larger of 64 MiB and MaxPendingBytes.
	MaxPendingBytesPerCaller int64
	// WriteTimeout bounds each write to a client, on every door; past it
	// the stream or connection is closed. Default 30s.
	WriteTimeout time.Duration
}

// Values of Server.Pin (server.pin).
const (
	PinOff        = "off"        // nothing is pinned
	PinWarn       = "warn"       // a change is logged, counted and audited
	PinQuarantine = "quarantine" // and the tool is hidden until approved
)

// Auth is the [auth] table.
type Auth struct {
	Tokens []Token
	// OAuth is [auth.oauth]; nil when OAuth access tokens are not accepted.
	OAuth *OAuth
}

// Required reports whether HTTP requests must carry a bearer token: a
// static one of Tokens or an OAuth access token.
func (a Auth) Required() bool { return len(a.Tokens) > 0 || a.OAuth != nil }

// OAuth is the [auth.oauth] table: viewmux as an OAuth 2.1 resource server
// that accepts JWT access tokens of one issuer.
type OAuth struct {
	// Issuer is the authorization server's issuer identifier, an https
	// URL (http only on a loopback host). Its metadata is discovered at
	// RFC 8414's and OpenID Connect's well-known paths.
	Issuer string
	// Audience is this resource's identifier (RFC 8707): a token's aud
	// must hold it, and Protected Resource Metadata names it as the
	// resource. Default: "http://" + server.listen when that is a
	// specific host.
	Audience string
	// AudienceFromListen reports that Audience was not configured but
	// derived from server.listen (DefaultAudience), so that a --listen
	// override derives it again.
	AudienceFromListen bool
	// JWKSURL, when set, is where the issuer's keys are read instead of
	// the jwks_uri of its metadata.
	JWKSURL string
	// ScopesSupported is advertised in Protected Resource Metadata.
	ScopesSupported []string
	// ClockSkew is how far exp, nbf and iat may be off; default 60s,
	// at most 5m.
	ClockSkew time.Duration
	// Grants map a token's claims to profiles; the first that matches
	// decides. At least one.
	Grants []Grant
	Line   int // line of [auth.oauth], for messages
}

// Grant is one [[auth.oauth.grants]] entry: a token whose Claim holds
// Value (one of its values when the claim is a list; one of its
// space-separated scopes when Claim is "scope" or "scp") may use Profiles
// (the first is its default), and sees all operational views when Admin.
type Grant struct {
	Claim    string
	Value    string
	Profiles []string
	Admin    bool
	Line     int
}

// Token binds a bearer token to the profiles it may use. Exactly one of Token
// (already ${ENV}-expanded) and SHA256 (lowercase hex) is set.
type Token struct {
	Token    string
	SHA256   string
	Profiles []string // the first is the token's default
	// Admin lets the token see all of the gateway on /, /status.json,
	// /metrics and /readyz; other tokens see what their profiles see.
	Admin bool
	Line  int // line of the [[auth.tokens]] entry, for messages
}

// Audit is the [audit] table.
type Audit struct {
	Path             string
	IncludeArguments bool
}

// Upstream scopes.
const (
	ScopeShared  = "shared"  // one connection for every session
	ScopeSession = "session" // one connection per client session, closed with it
)

// Upstream credentials (upstreams.NAME.credentials).
const (
	CredentialsShared   = "shared"   // one login for the gateway
	CredentialsPerUser  = "per-user" // each calling identity logs in through /oauth/connect
	CredentialsExchange = "exchange" // the caller's OAuth token, exchanged (RFC 8693)
)

// PerUser reports whether each caller reaches u with credentials of
// their own (per-user or exchange) rather than the gateway's.
func (u *Upstream) PerUser() bool {
	return u.Credentials == CredentialsPerUser || u.Credentials == CredentialsExchange
}

// Upstream is one [upstreams.NAME] table with defaults applied and the
// transport inferred.
type Upstream struct {
	Name      string // the table key
	Transport string // one of the Transport* constants

	// stdio
	Command string
	Args    []string
	Env     map[string]string // ${ENV}-expanded
	Dir     string            // working directory; "" = viewmux's own
	// InheritEnv names the variables of viewmux's environment the child
	// gets besides the few every child gets (HOME, LOGNAME, PATH, SHELL,
	// TERM, USER): exact names, or prefixes ending in * ("AWS_*").
	InheritEnv []string

	// http, sse, websocket
	URL     string
	Headers map[string]string // ${ENV}-expanded
	// OAuth, when set, makes viewmux an OAuth 2.1 client of this upstream
	// (oauth = true or a table); nil = no OAuth.
	OAuth *UpstreamOAuth

	Prefix          string // defaults to Name; "" mounts unprefixed
	Required        bool
	ConnectTimeout  time.Duration // default 10s
	CallTimeout     time.Duration // default 60s
	Protocol        string        // optional pinned protocol version, e.g. "2025-11-25"
	MaxMessageBytes int64         // default 16 MiB: largest message read from this upstream
	// MaxCatalogItems bounds the tools, prompts, resources and templates
	// the upstream may list, together, over every page (default 10000);
	// MaxCatalogBytes bounds the bytes of those listings (default 8 MiB).
	// Over either, the upstream is treated as broken.
	MaxCatalogItems int
	MaxCatalogBytes int64
	Scope           string // ScopeShared (default) or ScopeSession
	// Credentials is whose OAuth login reaches the upstream:
	// CredentialsShared (default, the gateway's one login),
	// CredentialsPerUser (each calling identity's own) or
	// CredentialsExchange (the caller's OAuth token exchanged, RFC 8693).
	// Anything but shared needs OAuth.
	Credentials string

	Rules         RuleSet             // per-upstream rules, on ORIGINAL names
	ReadOnlyTools []string            // globs on original names: annotation override
	Toolsets      map[string][]string // set name → globs on original names
	// Overrides rewrite the upstream's tool definitions before the filter
	// pipeline, keyed by the name the upstream gives the tool; nil = none.
	Overrides map[string]*Override

	Line int // line of the [upstreams.NAME] header, for messages
}

// Override is one [upstreams.NAME.overrides.TOOL] table: how the
// upstream's tool TOOL is exposed. Every field left empty keeps
// the upstream's own. Parse guarantees Name is a valid name whose exposed
// form fits server.max_name_length, that no two overrides give one
// exposed name, and that Title, Description and argument names are not
// empty.
type Override struct {
	// Name replaces the tool's name: exposed as <prefix><separator>Name.
	// Every rule, toolset and read_only_tools glob of the upstream sees
	// this name; the upstream's own stays in _meta and is what calls are
	// sent with.
	Name        string
	Title       string
	Description string
	// Args are the fixed arguments, each value encoded as JSON: removed
	// from the tool's inputSchema, injected into every call, and refused
	// when a client sends one.
	Args map[string]json.RawMessage
}

// Exposed returns the unprefixed name the tool named tool gets under o:
// o.Name, or tool when o is nil or renames nothing.
func (o *Override) Exposed(tool string) string {
	if o == nil || o.Name == "" {
		return tool
	}
	return o.Name
}

// RuleSet is one set of filter rules. Globs match the whole name with `*`,
// `?` and `[…]`; regexes are RE2. All patterns are validated by Parse.
type RuleSet struct {
	Tools      []string
	Allow      []string
	AllowRegex []string
	Deny       []string
	DenyRegex  []string
	Toolsets   []string // "<upstream>/<set>" or "<upstream>", by upstream name (Parse resolves a prefix written in the config to the name)
	// Upstreams, when set, limits the view to these upstreams: their tools,
	// prompts, resources and templates. DenyUpstreams hides
	// upstreams whatever else names them. Both hold upstream names; Parse
	// resolves a prefix written in the config to the name.
	Upstreams     []string
	DenyUpstreams []string
	ReadOnly      bool
	CallRules     []CallRule
	// Approve holds globs on exposed tool names: a call to a matching
	// tool is forwarded only after a person approves it through the
	// calling client. Stages combine by union: approval is only ever
	// added, never removed, by a narrowing stage.
	Approve []string
	// ApproveTimeout is how long a call waits for that approval; zero =
	// not set by this rule set. Where stages set several, the shortest
	// applies; where none does, DefaultApproveTimeout.
	ApproveTimeout time.Duration
}

// DefaultApproveTimeout is how long a call that needs approval waits for
// it when no rule set names approve_timeout.
const DefaultApproveTimeout = 2 * time.Minute

// CallRule makes Tool callable only with arguments that match. Every argument
// named in Args or ArgsRegex must be present, and its value must be a JSON
// string that matches at least one of its patterns, from either map. An
// argument named in neither is refused unless OtherArgs is set. Parse
// guarantees a rule names at least one argument, each with at least one
// pattern, and that a rule set has at most one rule per tool.
type CallRule struct {
	Tool string
	// Args maps an argument name to globs compiled with glob.Guarded: their
	// wildcards never match a control character or a shell metacharacter.
	Args map[string][]string
	// ArgsRegex maps an argument name to RE2 patterns, each of which must
	// match the whole value (the filter anchors them).
	ArgsRegex map[string][]string
	// OtherArgs lets arguments named in neither map through unchecked.
	OtherArgs bool
}

// Profile is one [profiles.NAME] table. Rules holds only the profile's own
// rules; Extends names its parent (validated to exist and be acyclic).
type Profile struct {
	Name    string
	Extends string
	Rules   RuleSet
	Rate    Rate
	// DynamicToolsets starts each session with its toolsets off and
	// viewmux's three toolset tools. It is the effective value:
	// a profile that does not set dynamic_toolsets takes its parent's.
	DynamicToolsets bool
	// ToolSearch starts each session with viewmux__search_tools and
	// viewmux__call_tool (and the tools ToolSearchPinned matches) in place
	// of the whole view. ToolSearchPinned holds globs on exposed names,
	// validated. Both are effective values: a profile that does not set
	// one takes its parent's.
	ToolSearch       bool
	ToolSearchPinned []string
	Line             int
}

// Rate limits calls per session; zero means unlimited.
type Rate struct {
	CallsPerMinute int
}

// Chain returns the profile and its ancestors, the profile first. The
// returned slice is new; Parse guarantees the chain is finite.
func (c *Config) Chain(name string) []*Profile {
	var out []*Profile
	for p := c.Profiles[name]; p != nil && len(out) <= len(c.Profiles); p = c.Profiles[p.Extends] {
		out = append(out, p)
		if p.Extends == "" {
			break
		}
	}
	return out
}

// Upstream returns the upstream named name, or nil.
func (c *Config) Upstream(name string) *Upstream {
	for _, u := range c.Upstreams {
		if u.Name == name {
			return u
		}
	}
	return nil
}

// lookupUpstream finds an upstream by name, or else by non-empty prefix.
func (c *Config) lookupUpstream(ref string) *Upstream {
	if u := c.Upstream(ref); u != nil || ref == "" {
		return u
	}
	for _, u := range c.Upstreams {
		if u.Prefix == ref {
			return u
		}
	}
	return nil
}
