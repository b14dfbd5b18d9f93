package configs

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/viewmux/viewmux/internal/glob"
)

// jsonServer is one server entry: the union of the keys every supported
// client knows.
type jsonServer struct {
	Type          string             `json:"type"`
	TransportType string             `json:"transportType"` // TBXark
	Command       string             `json:"command"`
	Args          []string           `json:"args"`
	Env           map[string]*string `json:"env"` // null: from the environment (mcp-hub)
	EnvFile       string             `json:"envFile"`
	Cwd           string             `json:"cwd"`
	URL           string             `json:"url"`
	ServerURL     string             `json:"serverUrl"` // Windsurf
	Headers       map[string]string  `json:"headers"`
	Disabled      bool               `json:"disabled"`
	DisabledTools []string           `json:"disabledTools"` // Windsurf
	Options       json.RawMessage    `json:"options"`       // TBXark
}

// carriedKeys are the jsonServer keys.
var carriedKeys = []string{"type", "transportType", "command", "args", "env", "envFile", "cwd", "url", "serverUrl", "headers", "disabled", "disabledTools", "options"}

// lostKeys explains why known keys of some clients are not carried.
var lostKeys = map[string]string{
	"alwaysAllow": "viewmux has no per-tool approval",
	"autoApprove": "viewmux has no per-tool approval",
	"timeout":     "its unit differs between clients; set connect_timeout or call_timeout yourself",
	"dev":         "viewmux does not watch files and restart a server in development mode",
	"oauth":       "viewmux does not run an OAuth flow for upstreams; pass a token in headers",
}

// tbxOptions is TBXark mcp-proxy's "options", per server or in mcpProxy.
type tbxOptions struct {
	PanicIfInvalid *bool    `json:"panicIfInvalid"`
	LogEnabled     *bool    `json:"logEnabled"`
	AuthTokens     []string `json:"authTokens"`
	Disabled       bool     `json:"disabled"`
	ToolFilter     *struct {
		Mode string   `json:"mode"`
		List []string `json:"list"`
	} `json:"toolFilter"`
	unknown []string
}

var tbxOptionKeys = []string{"panicIfInvalid", "logEnabled", "authTokens", "disabled", "toolFilter"}

func parseTBXOptions(raw json.RawMessage) (*tbxOptions, error) {
	o := &tbxOptions{}
	if len(raw) == 0 || string(raw) == "null" {
		return o, nil
	}
	if err := json.Unmarshal(raw, o); err != nil {
		return nil, fmt.Errorf("options: %w", typeError(err))
	}
	var all map[string]json.RawMessage
	if json.Unmarshal(raw, &all) == nil {
		for _, k := range slices.Sorted(maps.Keys(all)) {
			if !slices.Contains(tbxOptionKeys, k) {
				o.unknown = append(o.unknown, k)
			}
		}
	}
	return o, nil
}

// tbxProxy is TBXark mcp-proxy's "mcpProxy" object.
type tbxProxy struct {
	BaseURL string          `json:"baseURL"`
	Addr    string          `json:"addr"`
	Name    string          `json:"name"`
	Version string          `json:"version"`
	Type    string          `json:"type"`
	RawOpts json.RawMessage `json:"options"`
	options *tbxOptions
	unknown []string
}

func parseTBXProxy(raw json.RawMessage) (*tbxProxy, error) {
	p := &tbxProxy{}
	if err := json.Unmarshal(raw, p); err != nil {
		return nil, fmt.Errorf("mcpProxy: %w", typeError(err))
	}
	var all map[string]json.RawMessage
	if json.Unmarshal(raw, &all) == nil {
		for _, k := range slices.Sorted(maps.Keys(all)) {
			if !slices.Contains([]string{"baseURL", "addr", "name", "version", "type", "options"}, k) {
				p.unknown = append(p.unknown, k)
			}
		}
	}
	var err error
	if p.options, err = parseTBXOptions(p.RawOpts); err != nil {
		return nil, fmt.Errorf("mcpProxy: %w", err)
	}
	return p, nil
}

// proxy carries TBXark's mcpProxy: its address, and its tokens and the
// servers' own, which open the upstreams named (the file's upstreams,
// with own maps an upstream to its own tokens).
func (im *importer) proxy(fc *fileCtx, named []string, own map[string][]string) {
	p, file := fc.tbx, fc.name
	for _, k := range p.unknown {
		im.note(file, "", true, "mcpProxy key %q is not carried (viewmux has no equivalent)", k)
	}
	for _, k := range p.options.unknown {
		im.note(file, "", true, "mcpProxy.options key %q is not carried (viewmux has no equivalent)", k)
	}
	if p.options.LogEnabled != nil && *p.options.LogEnabled {
		im.note(file, "", true, "mcpProxy.options.logEnabled is not carried (viewmux logs to stderr; see [audit] for a log of tool calls)")
	}
	if p.Name != "" || p.Version != "" {
		im.note(file, "", false, "mcpProxy.name and .version are not carried: viewmux reports its own serverInfo")
	}
	if p.BaseURL != "" || p.Type != "" {
		im.note(file, "", false, "TBXark served each server at its own path under mcpProxy.baseURL; viewmux serves them all at one endpoint: /mcp (streamable HTTP), /sse and /ws")
	}
	// carry converts the tokens of list (where names it) that open
	// upstreams, noting each one it cannot carry; it reports whether any
	// was carried.
	carry := func(server, where string, list, upstreams []string) bool {
		carried := false
		for i, t := range list {
			sum, envVar, why := tbxToken(t)
			if why != "" {
				im.note(file, server, true, "%s[%d] is not carried: %s", where, i, why)
				continue
			}
			if envVar != "" {
				im.note(file, server, false, "authTokens %s is written as token = %s: set %s in viewmux's environment", t, tomlQuote("${"+envVar+"}"), envVar)
			}
			im.addToken(file, sum, envVar, upstreams)
			carried = true
		}
		return carried
	}
	global := p.options.AuthTokens
	opened := map[string]bool{} // upstreams a carried token opens
	if len(global) > 0 {
		var open []string
		for _, name := range named {
			if own[name] == nil {
				open = append(open, name)
			}
		}
		if len(open) == 0 {
			im.note(file, "", true, "mcpProxy.options.authTokens are not carried: every server has its own authTokens, so they opened nothing")
		} else if carry("", "mcpProxy.options.authTokens", global, open) {
			for _, name := range open {
				opened[name] = true
			}
		}
	}
	for _, name := range named {
		if own[name] != nil && carry(im.byName[name].key, "options.authTokens", own[name], []string{name}) {
			opened[name] = true
		}
	}
	anyTokens := len(opened) > 0
	if anyTokens {
		im.note(file, "", false, "authTokens are written as [[auth.tokens]] (a literal token as its token_sha256, so it is not in the output); each is bound to a profile of the upstreams it opened")
	}
	for _, name := range named {
		s := im.byName[name]
		switch hadTokens := own[name] != nil || len(global) > 0; {
		case opened[name]:
		case hadTokens && anyTokens:
			im.note(file, s.key, true, "none of its authTokens is carried, so no token's profile names upstream %q", name)
		case hadTokens:
			im.note(file, s.key, true, "none of its authTokens is carried, so viewmux serves it without a token")
		case anyTokens:
			im.note(file, s.key, true, "TBXark served it without a token; viewmux checks a token on every HTTP request once [[auth.tokens]] exist, and no token's profile names upstream %q", name)
		}
	}
	if p.Addr == "" {
		return
	}
	listen := p.Addr
	_, port, err := net.SplitHostPort(listen)
	if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
		im.note(file, "", true, "mcpProxy.addr %q is not carried: it is not HOST:PORT", p.Addr)
		return
	}
	if !loopbackAddr(listen) && !anyTokens {
		listen = net.JoinHostPort("127.0.0.1", port)
		im.note(file, "", true, "mcpProxy.addr %q is carried as listen = %q: viewmux refuses a non-loopback address without [[auth.tokens]] (or allow_unauthenticated = true)", p.Addr, listen)
	}
	if im.listen != "" && im.listen != listen {
		im.note(file, "", true, "mcpProxy.addr %q is not carried: listen is already %q from an earlier file", p.Addr, im.listen)
		return
	}
	im.listen = listen
}

// server converts one server entry. It returns the server and, for TBXark,
// its own auth tokens (nil when it has none).
func (im *importer) server(fc *fileCtx, g serverGroup, key string, raw json.RawMessage) (*importedServer, []string, error) {
	var s jsonServer
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, nil, typeError(err)
	}
	out := &importedServer{name: g.namePrefix + key, file: fc.name, key: key, origin: g.origin}
	var all map[string]json.RawMessage
	_ = json.Unmarshal(raw, &all) // cannot fail: raw just decoded into a struct
	for _, k := range slices.Sorted(maps.Keys(all)) {
		switch why, known := lostKeys[k]; {
		case slices.Contains(carriedKeys, k):
		case known:
			im.note(fc.name, key, true, "key %q is not carried (%s)", k, why)
		default:
			im.note(fc.name, key, true, "key %q is not carried (viewmux has no equivalent)", k)
		}
	}
	opts, err := parseTBXOptions(s.Options)
	if err != nil {
		return nil, nil, err
	}
	if s.Options != nil && fc.tbx == nil {
		im.note(fc.name, key, true, `key "options" is not carried (it is TBXark mcp-proxy's, and the file has no "mcpProxy")`)
		opts = &tbxOptions{}
	}
	for _, k := range opts.unknown {
		im.note(fc.name, key, true, "options key %q is not carried (viewmux has no equivalent)", k)
	}
	if s.Disabled || opts.Disabled {
		out.disabled = "disabled in the source file"
		im.note(fc.name, key, false, "is disabled in the source: written as a comment")
	} else if g.gate != nil {
		gate := g.gate(key)
		if gate.note != "" {
			im.note(fc.name, key, gate.lost, "%s", gate.note)
		}
		out.disabled = gate.off
	}

	c := &importConverter{fc: fc, im: im, server: key, noted: map[string]bool{}, childEnv: map[string]bool{}}
	for k := range s.Env {
		c.childEnv[k] = true
	}
	line := func(format string, args ...any) { out.body = append(out.body, fmt.Sprintf(format, args...)) }

	typ := s.Type
	if typ == "" {
		typ = s.TransportType
	}
	rawURL := s.URL
	if s.ServerURL != "" {
		if rawURL != "" && rawURL != s.ServerURL {
			return nil, nil, errors.New("has both url and serverUrl")
		}
		rawURL = s.ServerURL
	}
	switch {
	case s.Command != "" && rawURL != "":
		return nil, nil, errors.New("has both command and url")
	case s.Command == "" && rawURL == "":
		return nil, nil, errors.New("has neither command nor url")
	case s.Command != "":
		if typ != "" && typ != "stdio" {
			return nil, nil, fmt.Errorf("type %q needs a url, but the server has a command", typ)
		}
		if len(s.Headers) > 0 {
			return nil, nil, errors.New("headers apply only to servers with a url")
		}
		env, err := c.env(s.Env, s.EnvFile)
		if err != nil {
			return nil, nil, err
		}
		line("command = %s", c.str(s.Command, true))
		if len(s.Args) > 0 {
			args := make([]string, len(s.Args))
			for i, a := range s.Args {
				args[i] = c.str(a, true)
			}
			line("args = [%s]", strings.Join(args, ", "))
		}
		if len(env) > 0 {
			line("env = { %s }", strings.Join(env, ", "))
		}
		if client := wholeEnvClient(fc.kind); client != "" {
			line("# %s starts it with its whole environment; viewmux passes only HOME, LOGNAME, PATH, SHELL, TERM, USER,", client)
			line("# env and inherit_env: add to inherit_env what it reads from yours (an API key, a proxy).")
			line("inherit_env = %s", tomlList(importInheritEnv))
			if !im.wholeEnvNoted[fc.name] {
				im.wholeEnvNoted[fc.name] = true
				im.note(fc.name, "", false, "%s starts a server with its whole environment; viewmux passes a child only HOME, LOGNAME, PATH, SHELL, TERM, USER, its env and its inherit_env, written as %s: add any other variable a server reads from your environment", client, tomlList(importInheritEnv))
			}
		}
		if s.Cwd != "" {
			line("dir = %s", c.str(s.Cwd, true))
		}
	default:
		transport, err := importTransport(typ, rawURL)
		if err != nil {
			return nil, nil, err
		}
		if len(s.Env) > 0 || s.EnvFile != "" {
			im.note(fc.name, key, true, "env and envFile are not carried: they apply only to servers viewmux starts as a child, and this one has a url")
		}
		if transport != "" {
			line("transport = %q", transport)
		}
		line("url = %s", c.str(rawURL, false))
		c.urlLiterals(rawURL)
		if len(s.Headers) > 0 {
			h := make([]string, 0, len(s.Headers))
			for _, k := range slices.Sorted(maps.Keys(s.Headers)) {
				v := s.Headers[k]
				h = append(h, tomlKey(k)+" = "+c.str(v, false))
				if literal(v) {
					suggest := "${" + varName(k) + "}"
					if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
						suggest = "Bearer " + suggest
					}
					c.note(false, "header %s holds a literal value, copied into the config; consider %q", label(k), suggest)
				}
			}
			line("headers = { %s }", strings.Join(h, ", "))
		}
	}

	required := opts.PanicIfInvalid
	if required == nil && fc.tbx != nil {
		required = fc.tbx.options.PanicIfInvalid
	}
	if required != nil && *required {
		line("required = true")
		im.note(fc.name, key, false, "panicIfInvalid is carried as required = true: viewmux fails at start if it cannot connect")
	}
	if opts.LogEnabled != nil && *opts.LogEnabled {
		im.note(fc.name, key, true, "options.logEnabled is not carried (viewmux logs to stderr; see [audit] for a log of tool calls)")
	}
	var deny []string
	for _, t := range s.DisabledTools {
		deny = append(deny, glob.Quote(t))
	}
	if len(s.DisabledTools) > 0 {
		im.note(fc.name, key, false, "disabledTools %s are carried as deny (on the server's own tool names)", tomlList(s.DisabledTools))
	}
	if tf := opts.ToolFilter; tf != nil && len(tf.List) > 0 {
		switch strings.ToLower(tf.Mode) {
		case "", "block":
			for _, t := range tf.List {
				deny = append(deny, glob.Quote(t))
			}
			im.note(fc.name, key, false, "toolFilter block %s is carried as deny (on the server's own tool names)", tomlList(tf.List))
		case "allow":
			line("tools = %s", tomlList(tf.List))
			im.note(fc.name, key, false, "toolFilter allow %s is carried as tools (on the server's own tool names)", tomlList(tf.List))
		default:
			return nil, nil, fmt.Errorf("options.toolFilter.mode %q is neither allow nor block", tf.Mode)
		}
	}
	if len(deny) > 0 {
		line("deny = %s", tomlList(deny))
	}
	if len(opts.AuthTokens) > 0 {
		return out, opts.AuthTokens, nil
	}
	return out, nil, nil
}

// importInheritEnv is the inherit_env import writes for a child whose
// client passed it the whole environment: what programs commonly read
// from it and that holds no secret (locale, time zone, temporary and XDG
// directories). Anything else, such as an API key the server reads from
// the user's shell, the user must name.
var importInheritEnv = []string{"LANG", "LC_*", "TZ", "TMPDIR", "XDG_*"}

// wholeEnvClient names the client of a file of kind when it starts its
// stdio servers with its whole environment (plus their env), and returns
// "" for Claude Desktop, which passes what the official SDK's stdio client
// passes: HOME, LOGNAME, PATH, SHELL, TERM, USER and the server's env, as
// viewmux does. Claude Code, Cursor, VS Code, Windsurf and mcp-hub spawn
// with their own environment merged with the entry's env, and TBXark's
// mcp-proxy with os.Environ() and the entry's env; a file whose client is
// not known is taken to be one of those.
func wholeEnvClient(kind string) string {
	switch kind {
	case "Claude Desktop":
		return ""
	case "mcpServers (Claude Desktop, Cursor, …)":
		return "Its client, unless it is Claude Desktop,"
	}
	name, _, _ := strings.Cut(kind, " (")
	return name
}

// typeError rewords a JSON type error to name the key at fault.
func typeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field == "" {
			return fmt.Errorf("must be an object, got JSON %s", te.Value)
		}
		return fmt.Errorf("%s: want %s, got JSON %s", te.Field, te.Type, te.Value)
	}
	return err
}

// kindTBXark is how import names a TBXark mcp-proxy config.
const kindTBXark = "TBXark mcp-proxy"

// bareVarRE matches a $VAR reference without braces, as os.ExpandEnv reads
// it.
var bareVarRE = regexp.MustCompile(`\$([A-Za-z_][A-Za-z0-9_]*)`)

// importPlaceholderRE matches ${…} references: ${VAR}, ${VAR:-default},
// ${env:VAR} (Cursor, VS Code), ${input:id} (VS Code), ${cmd: …} (mcp-hub).
var importPlaceholderRE = regexp.MustCompile(`\$\{[^}]*\}`)

// vscodeVariables are VS Code's predefined variables, which look like
// environment references but are not.
var vscodeVariables = map[string]bool{
	"workspaceFolder": true, "workspaceFolderBasename": true, "workspaceRoot": true,
	"file": true, "fileBasename": true, "fileDirname": true, "fileExtname": true,
	"relativeFile": true, "cwd": true, "pathSeparator": true, "execPath": true,
}

// importConverter renders one server's strings as TOML, converting
// placeholders and noting what it changed.
type importConverter struct {
	fc       *fileCtx
	im       *importer
	server   string
	childEnv map[string]bool // the server's own env keys
	noted    map[string]bool
}

func (c *importConverter) note(lost bool, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if !c.noted[msg] {
		c.noted[msg] = true
		c.im.note(c.fc.name, c.server, lost, "%s", msg)
	}
}

// str renders s as a TOML string in which viewmux expands exactly the
// references the source's client expanded. In the command line of a child
// (child set), a ${VAR} whose VAR is in the server's own env is left for
// the child to expand, as mcp-remote does with --header "…${VAR}".
//
// TBXark mcp-proxy runs os.ExpandEnv over its whole file when it loads it,
// so there $VAR and ${VAR} are both its own environment's, everywhere,
// env values of a child included: both become viewmux's ${VAR}.
func (c *importConverter) str(s string, child bool) string {
	if c.fc.kind == kindTBXark {
		child = false
		if bareVarRE.MatchString(s) {
			s = bareVarRE.ReplaceAllString(s, "$${${1}}")
			c.note(false, "TBXark expands $VAR from its environment when it loads the file: carried as viewmux's ${VAR}")
		}
	}
	var b strings.Builder
	last := 0
	for _, m := range importPlaceholderRE.FindAllStringIndex(s, -1) {
		b.WriteString(strings.ReplaceAll(s[last:m[0]], "$", "$$"))
		b.WriteString(c.placeholder(s[m[0]:m[1]], child))
		last = m[1]
	}
	b.WriteString(strings.ReplaceAll(s[last:], "$", "$$"))
	return tomlQuote(b.String())
}

// placeholder converts one ${…} reference.
func (c *importConverter) placeholder(p string, child bool) string {
	ref := p[2 : len(p)-1]
	literal := "$" + p
	name, _, _ := strings.Cut(strings.TrimPrefix(ref, "env:"), ":-")
	switch {
	case ref == "userHome":
		return "${HOME}"
	case (ref == "workspaceFolder" || ref == "workspaceRoot") && c.fc.workspace != "":
		c.note(false, "${%s} is replaced by %s, the folder that holds .vscode", ref, c.fc.workspace)
		return strings.ReplaceAll(c.fc.workspace, "$", "$$")
	case vscodeVariables[ref]:
		c.note(true, "${%s} means nothing outside the editor: kept literally; replace it with a path", ref)
		return literal
	case strings.HasPrefix(ref, "input:"):
		id := strings.TrimPrefix(ref, "input:")
		v := inputVar(id)
		desc, ok := c.fc.inputs[id]
		switch {
		case !ok:
			c.note(false, "${input:%s} becomes ${%s} (the input is not declared in \"inputs\"): set %s in viewmux's environment", id, v, v)
		case desc != "":
			c.note(false, "${input:%s} becomes ${%s}: set %s in viewmux's environment (the input asked for %q)", id, v, v, desc)
		default:
			c.note(false, "${input:%s} becomes ${%s}: set %s in viewmux's environment", id, v, v)
		}
		return "${" + v + "}"
	case strings.HasPrefix(ref, "cmd:"):
		c.note(true, "a ${cmd: …} command substitution is not run by viewmux: kept literally; replace it with a value or ${ENV}")
		return literal
	case isEnvName(name) && strings.HasPrefix(ref, "env:"):
		return "${" + name + "}"
	case isEnvName(name) && child && c.childEnv[name]:
		c.note(false, "${%s} is left for the server to expand (it is set in the server's own env)", name)
		return literal
	case isEnvName(name):
		return p
	}
	c.note(true, "the placeholder %s is not an environment variable: kept literally; replace it", p)
	return literal
}

// literal reports whether a value the source gives is copied into the
// config as it is: not empty, and without a ${…} or $VAR reference. It may be a
// secret, which the user may rather keep out of a file that gets shared.
func literal(v string) bool {
	return v != "" && !importPlaceholderRE.MatchString(v) && !bareVarRE.MatchString(v)
}

// urlLiterals notes the user:password@ and the query values of a url that
// are copied into the config literally (see literal), never showing them.
func (c *importConverter) urlLiterals(rawURL string) {
	rest := rawURL
	if _, after, ok := strings.Cut(rest, "://"); ok {
		rest = after
	}
	authority, _, _ := strings.Cut(rest, "/")
	authority, _, _ = strings.Cut(authority, "?")
	authority, _, _ = strings.Cut(authority, "#")
	if i := strings.LastIndexByte(authority, '@'); i >= 0 && literal(authority[:i]) {
		c.note(false, "url holds a user name or password (user:password@), copied into the config; consider ${VAR} in its place")
	}
	_, query, _ := strings.Cut(rawURL, "?")
	query, _, _ = strings.Cut(query, "#")
	for _, kv := range strings.Split(query, "&") {
		k, v, _ := strings.Cut(kv, "=")
		if literal(v) {
			if u, err := url.QueryUnescape(k); err == nil {
				k = u
			}
			c.note(false, "url query parameter %s holds a literal value, copied into the config; consider ${%s}", label(k), varName(k))
		}
	}
}

// varName makes a name (a header's, a query parameter's) into the
// environment variable a note suggests: upper case, every other
// character _.
func varName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(s) {
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 || b.String()[0] >= '0' && b.String()[0] <= '9' {
		return "VAR_" + b.String()
	}
	return b.String()
}

// label shows a key of the source in a note: as it is when it is plain,
// quoted otherwise.
func label(k string) string {
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.", r)) {
			return strconv.Quote(k)
		}
	}
	if k == "" {
		return `""`
	}
	return k
}

// inputVar is the environment variable a VS Code ${input:id} becomes:
// INPUT_ and the id in upper case, with every other character as _.
func inputVar(id string) string {
	var b strings.Builder
	b.WriteString("INPUT_")
	for _, r := range strings.ToUpper(id) {
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// cmdOnlyRE matches a value that is one mcp-hub command substitution.
var cmdOnlyRE = regexp.MustCompile(`^\$\{cmd:[^}]*\}$`)

// env renders a child's environment, from env and envFile, as inline
// table entries sorted by key.
func (c *importConverter) env(env map[string]*string, envFile string) ([]string, error) {
	out := map[string]string{}
	if envFile != "" {
		names, path := c.envFile(envFile)
		var passed []string
		for _, n := range names {
			if _, set := env[n]; !set {
				out[n] = tomlQuote("${" + n + "}")
				passed = append(passed, n)
			}
		}
		if len(passed) > 0 {
			c.note(false, "envFile %s: %s passed on as ${NAME} from viewmux's environment (values are not copied into the config): export them before viewmux starts, e.g. set -a; . %s; set +a",
				path, strings.Join(passed, ", "), path)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v := env[k]
		switch {
		case v == nil && isEnvName(k):
			out[k] = tomlQuote("${" + k + "}")
			c.note(false, "env %s is null: passed on as ${%[1]s} from viewmux's environment", k)
		case v == nil:
			return nil, fmt.Errorf("env %q is null, and %[1]q is not a variable name to take from the environment", k)
		case cmdOnlyRE.MatchString(*v) && isEnvName(k):
			out[k] = tomlQuote("${" + k + "}")
			c.note(true, "env %s: its ${cmd: …} command substitution is not run by viewmux: it reads ${%[1]s} from viewmux's environment instead", k)
		default:
			out[k] = c.str(*v, false)
			if literal(*v) {
				suggest := "${VAR}"
				if isEnvName(k) {
					suggest = "${" + k + "}"
				}
				c.note(false, "env %s holds a literal value, copied into the config; consider %s", label(k), suggest)
			}
		}
	}
	lines := make([]string, 0, len(out))
	for _, k := range slices.Sorted(maps.Keys(out)) {
		lines = append(lines, tomlKey(k)+" = "+out[k])
	}
	return lines, nil
}

// envFile reads the variable names of a dotenv file, relative to the
// config file's directory; it notes a file it cannot read.
func (c *importConverter) envFile(p string) (names []string, path string) {
	path = p
	if c.fc.workspace != "" {
		path = strings.ReplaceAll(strings.ReplaceAll(path, "${workspaceFolder}", c.fc.workspace), "${workspaceRoot}", c.fc.workspace)
	}
	if strings.Contains(path, "${") {
		c.note(true, "envFile %q is not read: its placeholder cannot be resolved here", p)
		return nil, path
	}
	if !filepath.IsAbs(path) {
		path = filepath.Join(c.fc.dir, path)
	}
	if c.fc.readFile == nil {
		c.note(true, "envFile %q is not read: its variables are not carried", p)
		return nil, path
	}
	data, err := c.fc.readFile(path)
	if err != nil {
		c.note(true, "envFile %q is not carried: %v", p, err)
		return nil, path
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		k, _, ok := strings.Cut(strings.TrimPrefix(l, "export "), "=")
		k = strings.TrimSpace(k)
		if !ok || !isEnvName(k) {
			c.note(true, "envFile %s:%d is not a NAME=value line: not carried", path, n)
			continue
		}
		if !slices.Contains(names, k) {
			names = append(names, k)
		}
	}
	return names, path
}
