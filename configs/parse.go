package configs

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/hashicorp/go-multierror"
)

// Error is one problem in a config file. Parse returns every Error it finds
// together in one error; use errors.As to reach the first, or
// multierror.Error.WrappedErrors for all of them.
type Error struct {
	Source string // the file name given to Parse, e.g. "viewmux.toml"
	Line   int    // 1-based; 0 when no line is known
	Msg    string // starts with the key path it concerns, e.g. "upstreams.github.prefix: …"
}

// Error formats e as `<source>:<line>: <message>`, like a compiler.
func (e *Error) Error() string {
	if e.Line <= 0 {
		return e.Source + ": " + e.Msg
	}
	return fmt.Sprintf("%s:%d: %s", e.Source, e.Line, e.Msg)
}

// The raw schema: what the TOML decoder fills. Durations and sizes are `any`
// so that a bare number is reported as a validation error with its position
// rather than decoded as nanoseconds or stopping the decoder. Pointers mark
// keys whose absence differs from their zero value.
type (
	rawConfig struct {
		Server    rawServer               `toml:"server"`
		Auth      rawAuth                 `toml:"auth"`
		Audit     rawAudit                `toml:"audit"`
		Upstreams map[string]*rawUpstream `toml:"upstreams"`
		Filter    rawRules                `toml:"filter"`
		Profiles  map[string]*rawProfile  `toml:"profiles"`
		State     rawState                `toml:"state"`
	}
	rawState struct {
		URL               *string  `toml:"url"`
		EncryptionKey     *string  `toml:"encryption_key"`
		OldEncryptionKeys []string `toml:"old_encryption_keys"`
		KeyPrefix         *string  `toml:"key_prefix"`
		Timeout           any      `toml:"timeout"`
	}
	rawServer struct {
		Listen               *string   `toml:"listen"`
		Separator            *string   `toml:"separator"`
		MaxNameLength        *int      `toml:"max_name_length"`
		DefaultProfile       *string   `toml:"default_profile"`
		AllowedOrigins       *[]string `toml:"allowed_origins"`
		AllowUnauthenticated bool      `toml:"allow_unauthenticated"`
		MaxBodyBytes         any       `toml:"max_body_bytes"`
		MaxPendingBytes      any       `toml:"max_pending_bytes"`
		ShutdownGrace        any       `toml:"shutdown_grace"`
		MaxSessions          *int      `toml:"max_sessions"`
		MaxSessionsPerCaller *int      `toml:"max_sessions_per_caller"`
		MaxChildrenPerCaller *int      `toml:"max_children_per_caller"`
		SessionIdleTimeout   any       `toml:"session_idle_timeout"`
		ReadTimeout          any       `toml:"read_timeout"`
		LogFormat            *string   `toml:"log_format"`
		ReplicaID            *string   `toml:"replica_id"`
		StateDir             *string   `toml:"state_dir"`
		Pin                  *string   `toml:"pin"`
		PublicURL            *string   `toml:"public_url"`

		// What a client that does not read may cost (slowreaders.go).
		MaxPendingBytesPerCaller any `toml:"max_pending_bytes_per_caller"`
		WriteTimeout             any `toml:"write_timeout"`
	}
	rawAuth struct {
		Tokens []rawToken `toml:"tokens"`
		OAuth  *rawOAuth  `toml:"oauth"`
	}
	rawOAuth struct {
		Issuer          *string    `toml:"issuer"`
		Audience        *string    `toml:"audience"`
		JWKSURL         *string    `toml:"jwks_url"`
		ScopesSupported []string   `toml:"scopes_supported"`
		ClockSkew       any        `toml:"clock_skew"`
		Grants          []rawGrant `toml:"grants"`
	}
	rawGrant struct {
		Claim    string   `toml:"claim"`
		Value    string   `toml:"value"`
		Profiles []string `toml:"profiles"`
		Admin    bool     `toml:"admin"`
	}
	rawToken struct {
		Token    *string  `toml:"token"`
		SHA256   *string  `toml:"token_sha256"`
		Profiles []string `toml:"profiles"`
		Admin    bool     `toml:"admin"`
	}
	rawAudit struct {
		Path             string `toml:"path"`
		IncludeArguments bool   `toml:"include_arguments"`
	}
	rawUpstream struct {
		Transport       string              `toml:"transport"`
		Command         *string             `toml:"command"`
		Args            []string            `toml:"args"`
		Env             map[string]string   `toml:"env"`
		Dir             *string             `toml:"dir"`
		InheritEnv      []string            `toml:"inherit_env"`
		URL             *string             `toml:"url"`
		Headers         map[string]string   `toml:"headers"`
		OAuth           any                 `toml:"oauth" keys:"self"` // true, false or a table: its keys are checked in upstream_oauth.go
		Prefix          *string             `toml:"prefix"`
		Required        bool                `toml:"required"`
		ConnectTimeout  any                 `toml:"connect_timeout"`
		CallTimeout     any                 `toml:"call_timeout"`
		Protocol        string              `toml:"protocol"`
		MaxMessageBytes any                 `toml:"max_message_bytes"`
		MaxCatalogItems *int                `toml:"max_catalog_items"`
		MaxCatalogBytes any                 `toml:"max_catalog_bytes"`
		Scope           *string             `toml:"scope"`
		Credentials     *string             `toml:"credentials"`
		Tools           []string            `toml:"tools"`
		Allow           []string            `toml:"allow"`
		AllowRegex      []string            `toml:"allow_regex"`
		Deny            []string            `toml:"deny"`
		DenyRegex       []string            `toml:"deny_regex"`
		ReadOnlyTools   []string            `toml:"read_only_tools"`
		Toolsets        map[string][]string `toml:"toolsets"`
		// Overrides are keyed by the upstream's name for the tool.
		Overrides map[string]*rawOverride `toml:"overrides"`
	}
	rawOverride struct {
		Name        *string        `toml:"name"`
		Title       *string        `toml:"title"`
		Description *string        `toml:"description"`
		Args        map[string]any `toml:"args"`
	}
	rawRules struct {
		Tools         []string      `toml:"tools"`
		Allow         []string      `toml:"allow"`
		AllowRegex    []string      `toml:"allow_regex"`
		Deny          []string      `toml:"deny"`
		DenyRegex     []string      `toml:"deny_regex"`
		Toolsets      []string      `toml:"toolsets"`
		Upstreams     []string      `toml:"upstreams"`
		DenyUpstreams []string      `toml:"deny_upstreams"`
		ReadOnly      bool          `toml:"read_only"`
		CallRules     []rawCallRule `toml:"call_rules"`
		// Approve and ApproveTimeout: human approval (docs/configuration.md).
		Approve        []string `toml:"approve"`
		ApproveTimeout any      `toml:"approve_timeout"`
	}
	rawCallRule struct {
		Tool      string              `toml:"tool"`
		Args      map[string][]string `toml:"args"`
		ArgsRegex map[string][]string `toml:"args_regex"`
		OtherArgs bool                `toml:"other_args"`
	}
	rawProfile struct {
		Extends string `toml:"extends"`
		rawRules
		Rate            rawRate `toml:"rate"`
		DynamicToolsets *bool   `toml:"dynamic_toolsets"` // nil = inherited through extends
		// ToolSearch and ToolSearchPinned are inherited through extends
		// when nil, each on its own.
		ToolSearch       *bool     `toml:"tool_search"`
		ToolSearchPinned *[]string `toml:"tool_search_pinned"`
	}
	rawRate struct {
		CallsPerMinute int `toml:"calls_per_minute"`
	}
)

// Load reads the config file at path and parses it with the process
// environment for ${ENV} expansion. Errors name path and lines in it.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, data, os.LookupEnv)
}

// Parse decodes and validates a config. source names the config in errors and
// in Config.Source; lookupEnv resolves ${VAR} references (nil means no
// variable is set). Parse touches no globals, files or network, so it is safe
// for concurrent use. The one thing it reads from the machine is the
// hostname, for the default of server.replica_id.
//
// On failure Parse returns a nil Config and one error that lists every problem
// found, each as a *Error `<source>:<line>: <key path>: <message>`, sorted by
// line. A TOML syntax error stops decoding and is reported alone. Everything
// else is reported together in one run: values of the wrong type (each is
// then left out, and the errors it would cause, such as a missing command, are
// not reported), unknown keys and invalid values.
func Parse(source string, data []byte, lookupEnv func(string) (string, bool)) (*Config, error) {
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	text := string(data)
	var tree map[string]any
	if _, err := toml.Decode(text, &tree); err != nil {
		return nil, decodeError(source, text, err)
	}
	v := &validator{source: source, lines: scanLines(text), lookupEnv: lookupEnv, hostname: os.Hostname}
	v.types(reflect.TypeFor[rawConfig](), tree, nil, func() { tree = nil })
	var raw rawConfig
	var md toml.MetaData
	var err error
	if len(v.removed) == 0 {
		md, err = toml.Decode(text, &raw)
	} else {
		// The values of the wrong type are gone from tree: decode what is
		// left, so unknown keys and invalid values are reported in this run
		// too. Positions come from the original text, by key path.
		md, err = decodeTree(tree, &raw)
	}
	if err != nil { // unreachable: types leaves only what the schema takes
		v.errs = append(v.errs, decodeError(source, text, err).(*Error))
		return nil, v.err()
	}
	v.unknownKeys(md.Undecoded())
	cfg := v.config(&raw)
	if len(v.errs) > 0 {
		return nil, v.err()
	}
	return cfg, nil
}

// decodeTree decodes a document already decoded into tree, by encoding it
// again.
func decodeTree(tree map[string]any, raw *rawConfig) (toml.MetaData, error) {
	var buf strings.Builder
	if err := toml.NewEncoder(&buf).Encode(tree); err != nil {
		return toml.MetaData{}, err
	}
	return toml.Decode(buf.String(), raw)
}

// validator collects errors while it builds a Config from a rawConfig.
type validator struct {
	source    string
	lines     *lineIndex
	lookupEnv func(string) (string, bool)
	hostname  func() (string, error) // for the default server.replica_id
	errs      []*Error
	// removed holds the keys whose values had the wrong type and were left
	// out; errorf drops errors about them and the tables that hold them.
	removed []keyPath
}

// errorf records an error about the key at p, on p's line.
func (v *validator) errorf(p keyPath, format string, args ...any) {
	for _, r := range v.removed {
		if len(p) <= len(r) && slices.Equal(p, r[:len(p)]) {
			return // a consequence of a value already reported as the wrong type
		}
	}
	v.errs = append(v.errs, &Error{
		Source: v.source,
		Line:   v.lines.line(p),
		Msg:    p.String() + ": " + fmt.Sprintf(format, args...),
	})
}

// err returns the collected errors, sorted by line, as one error.
func (v *validator) err() error {
	slices.SortStableFunc(v.errs, func(a, b *Error) int { return a.Line - b.Line })
	merr := &multierror.Error{ErrorFormat: formatErrors}
	for _, e := range v.errs {
		merr.Errors = append(merr.Errors, e)
	}
	return merr
}

// formatErrors prints one error per line, each starting with file:line, so
// editors and terminals can jump to them.
func formatErrors(errs []error) string {
	lines := make([]string, len(errs))
	for i, e := range errs {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// typeErrorRE matches the errors BurntSushi/toml returns for type mismatches,
// which are not ParseErrors.
var typeErrorRE = regexp.MustCompile(`^toml: (?:line (\d+) )?\(last key "(.*?)"\): (.*)$`)

// decodeError turns an error of toml.Decode into a positioned *Error.
func decodeError(source, text string, err error) error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		msg := pe.Message
		if pe.LastKey != "" {
			msg = pe.LastKey + ": " + msg
		}
		return &Error{Source: source, Line: pe.Position.Line, Msg: msg}
	}
	if m := typeErrorRE.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		key := m[2]
		if line == 0 {
			line = scanLines(text).line(keyPath(strings.Split(key, ".")))
		}
		return &Error{Source: source, Line: line, Msg: key + ": " + m[3]}
	}
	return &Error{Source: source, Msg: err.Error()}
}

// types reports every value whose TOML type the raw schema t cannot take,
// and calls drop to leave it out of the document. The decoder would stop at
// the first such value, hiding every other error in the file; and it leaves a
// Go map empty without an error when its value is not a table, so `args =
// ["git status"]` (for `args = { command = ["git status"] }`) would silently
// drop a call rule's argument, and `env = ["A=1"]` an upstream's environment.
// Durations and sizes (type any) take any value here; they are checked later.
func (v *validator) types(t reflect.Type, val any, p keyPath, drop func()) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	wrong := func(want string) {
		v.errorf(p, "incompatible types: TOML value has type %s; want %s", tomlType(val), want)
		v.removed = append(v.removed, p)
		drop()
	}
	switch t.Kind() {
	case reflect.Bool:
		if _, ok := val.(bool); !ok {
			wrong("a boolean")
		}
	case reflect.String:
		if _, ok := val.(string); !ok {
			wrong("a string")
		}
	case reflect.Int:
		if _, ok := val.(int64); !ok {
			wrong("an integer")
		}
	case reflect.Map:
		m, ok := val.(map[string]any)
		if !ok {
			wrong("a table")
			return
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			v.types(t.Elem(), m[k], p.key(k), func() { delete(m, k) })
		}
	case reflect.Struct:
		m, ok := val.(map[string]any)
		if !ok {
			wrong("a table")
			return
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if f, ok := fieldByTag(t, k); ok {
				v.types(f.Type, m[k], p.key(k), func() { delete(m, k) })
			}
		}
	case reflect.Slice:
		var elems []any
		switch xs := val.(type) {
		case []map[string]any: // [[array.of.tables]]
			for _, x := range xs {
				elems = append(elems, x)
			}
		case []any:
			elems = xs
		default:
			wrong("an array")
			return
		}
		bad := false
		for i, x := range elems {
			v.types(t.Elem(), x, p.at(i), func() { bad = true })
		}
		if bad { // leave the whole array out: its other elements mean nothing alone
			v.removed = append(v.removed, p)
			drop()
		}
	}
}

// tomlType names the TOML type of a decoded value, for messages.
func tomlType(val any) string {
	switch val.(type) {
	case string:
		return "string"
	case int64:
		return "integer"
	case float64:
		return "float"
	case bool:
		return "boolean"
	case []any, []map[string]any:
		return "array"
	case map[string]any:
		return "table"
	default:
		return "datetime"
	}
}

// unknownKeys reports every key the schema does not know, once per place it
// appears. Only the outermost unknown key is reported: for an unknown table
// `[upstream.x]` that is "upstream", with a suggestion when it looks like a
// typo of a known key.
func (v *validator) unknownKeys(undecoded []toml.Key) {
	reported := map[string]bool{}
	for _, k := range undecoded {
		i, known := firstUnknown(reflect.TypeFor[rawConfig](), k)
		if i < 0 {
			continue // inside a value of any shape (an override's args)
		}
		p := keyPath(k[:i+1])
		if reported[p.String()] {
			continue
		}
		reported[p.String()] = true
		hint := ""
		if s := Suggest(k[i], known); s != "" {
			hint = fmt.Sprintf(" (did you mean %q?)", s)
		}
		places := v.lines.occurrences(p)
		if len(places) == 0 {
			places = []keyPath{p}
		}
		for _, full := range places {
			v.errs = append(v.errs, &Error{Source: v.source, Line: v.lines.line(full),
				Msg: fmt.Sprintf("unknown key %q%s", full.String(), hint)})
		}
	}
}

// firstUnknown walks key through the raw schema t and returns the index of
// its first component the schema does not allow, with the keys allowed there;
// -1 when the key is inside a value the schema takes whatever its shape.
// Keys of maps (upstream and profile names, env) are chosen by the user and
// always allowed.
func firstUnknown(t reflect.Type, key toml.Key) (int, []string) {
	for i, k := range key {
		switch t = elem(t); t.Kind() {
		case reflect.Map:
			if t.Elem().Kind() == reflect.Interface {
				return -1, nil // a table of values of any shape (an override's args): what is below is the user's
			}
			t = t.Elem()
		case reflect.Struct:
			f, ok := fieldByTag(t, k)
			if !ok {
				return i, tags(t)
			}
			if f.Tag.Get("keys") == "self" {
				return -1, nil // the validator checks the keys of this value itself (oauth)
			}
			t = f.Type
		default: // a key inside a scalar, e.g. connect_timeout = { a = 1 }
			return i, nil
		}
	}
	return len(key) - 1, nil
}

// tags lists the keys of a raw struct, so suggestions never drift from the
// schema.
func tags(t reflect.Type) []string {
	var keys []string
	for _, f := range reflect.VisibleFields(t) {
		if tag := f.Tag.Get("toml"); tag != "" {
			keys = append(keys, tag)
		}
	}
	return keys
}

// elem strips pointers and slices (arrays of tables).
func elem(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	return t
}

func fieldByTag(t reflect.Type, tag string) (reflect.StructField, bool) {
	for _, f := range reflect.VisibleFields(t) {
		if f.Tag.Get("toml") == tag {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// Suggest returns the known name closest to key, if it is close enough to
// be a likely typo, else "". The CLI uses it for command names too.
func Suggest(key string, known []string) string {
	best, bestDist := "", min(2, (len(key)-1)/2)+1
	for _, k := range known {
		if d := editDistance(key, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
