package configs

import (
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-multierror"
)

// env returns a lookupEnv over a fixed set of variables.
func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

// configErrors returns the positioned errors inside err.
func configErrors(t *testing.T, err error) []*Error {
	t.Helper()
	list := []error{err}
	var merr *multierror.Error
	if errors.As(err, &merr) {
		list = merr.WrappedErrors()
	}
	var out []*Error
	for _, e := range list {
		var ce *Error
		if !errors.As(e, &ce) {
			t.Fatalf("error %v (%T) is not a *configs.Error", e, e)
		}
		out = append(out, ce)
	}
	return out
}

func mustParse(t *testing.T, text string, vars map[string]string) *Config {
	t.Helper()
	cfg, err := Parse("test.toml", []byte(text), env(vars))
	if err != nil {
		t.Fatalf("Parse:\n%v", err)
	}
	return cfg
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		text string
		want string // substring of one error…
		line int    // …that is on this line
	}{
		// Unknown keys.
		{"unknown top-level key", "listen = \"x\"\n", `unknown key "listen"`, 1},
		{"unknown top-level table", "[server]\n\n[sever]\nlisten = \"x\"\n", `unknown key "sever" (did you mean "server"?)`, 3},
		{"unknown table with a known child", "[upstream.x]\ncommand = \"y\"\n", `unknown key "upstream" (did you mean "upstreams"?)`, 1},
		{"unknown server key", "[server]\nlisten = \"127.0.0.1:1\"\nmax_body = 3\n", `unknown key "server.max_body"`, 3},
		{"unknown upstream key", "[upstreams.x]\ncommand = \"y\"\ncomand = \"y\"\n", `unknown key "upstreams.x.comand" (did you mean "command"?)`, 3},
		{"unknown upstream key in dotted form", "[upstreams]\nx.command = \"y\"\nx.transprt = \"stdio\"\n", `unknown key "upstreams.x.transprt" (did you mean "transport"?)`, 3},
		{"unknown profile key", "[profiles.p]\nread_only = true\n\nread_onyl = true\n", `unknown key "profiles.p.read_onyl" (did you mean "read_only"?)`, 4},
		{"unknown key in second token", "[profiles.p]\n[[auth.tokens]]\ntoken = \"a\"\nprofiles = [\"p\"]\n[[auth.tokens]]\ntoken = \"b\"\nprofiles = [\"p\"]\ntokn = \"c\"\n", `unknown key "auth.tokens[1].tokn" (did you mean "token"?)`, 8},
		{"unknown key in call rule", "[profiles.p]\n[[profiles.p.call_rules]]\ntool = \"t\"\nargs = { a = [\"b\"] }\nargz = 1\n", `unknown key "profiles.p.call_rules[0].argz" (did you mean "args"?)`, 5},
		{"unknown key in inline table", "[upstreams.x]\ncommand = \"y\"\n[profiles]\np = { read_only = true, extend = \"q\" }\n", `unknown key "profiles.p.extend" (did you mean "extends"?)`, 4},
		{"unknown rate key", "[profiles.p.rate]\ncalls = 3\n", `unknown key "profiles.p.rate.calls"`, 2},

		// A syntax error stops everything else.
		{"toml syntax error", "[server]\nlisten = \"a\n", "server.listen", 2},
		{"toml type mismatch", "[upstreams.x]\ncommand = \"y\"\nargs = \"--flag\"\n", "upstreams.x.args: incompatible types", 3},
		{"toml duplicate key", "[server]\nlisten = \"a:1\"\nlisten = \"b:1\"\n", "listen", 3},

		// Values.
		{"bad duration", "[upstreams.github]\ncommand = \"gh\"\n\nconnect_timeout = \"10\"\n", `upstreams.github.connect_timeout: invalid duration "10" (want e.g. "30s")`, 4},
		{"bare number duration", "[upstreams.x]\ncommand = \"y\"\ncall_timeout = 30\n", `upstreams.x.call_timeout: invalid duration 30: want a string with a unit`, 3},
		{"negative duration", "[server]\nshutdown_grace = \"-1s\"\n", `server.shutdown_grace: duration "-1s" must be positive`, 2},
		{"bad size", "[server]\nmax_body_bytes = \"4MB2\"\n", `server.max_body_bytes: invalid size "4MB2"`, 2},
		{"bad size unit", "[upstreams.x]\ncommand = \"y\"\nmax_message_bytes = \"4 mb\"\n", `invalid size "4 mb"`, 3},
		{"zero size", "[server]\nmax_body_bytes = 0\n", `server.max_body_bytes: size must be positive`, 2},
		{"zero max_catalog_items", "[upstreams.x]\ncommand = \"y\"\nmax_catalog_items = 0\n", `upstreams.x.max_catalog_items: must be at least 1, got 0`, 3},
		{"zero max_catalog_bytes", "[upstreams.x]\ncommand = \"y\"\nmax_catalog_bytes = 0\n", `upstreams.x.max_catalog_bytes: size must be positive`, 3},
		{"zero max_sessions", "[server]\nmax_sessions = 0\n", `server.max_sessions: must be at least 1`, 2},
		{"zero max_sessions_per_caller", "[server]\nmax_sessions_per_caller = 0\n", `server.max_sessions_per_caller: must be at least 1`, 2},
		{"zero max_children_per_caller", "[server]\nmax_children_per_caller = 0\n", `server.max_children_per_caller: must be at least 1`, 2},
		{"bad log_format", "[server]\nlog_format = \"xml\"\n", `server.log_format: log_format "xml"`, 2},
		{"bad scope", "[upstreams.a]\ncommand = \"x\"\nscope = \"global\"\n", `upstreams.a.scope: scope "global"`, 3},
		{"unknown upstream ref", "[upstreams.a]\ncommand = \"x\"\n[profiles.p]\nupstreams = [\"b\"]\n", `profiles.p.upstreams[0]: "b": no upstream`, 4},
		{"unknown deny_upstreams ref", "[upstreams.a]\ncommand = \"x\"\n[filter]\ndeny_upstreams = [\"b\"]\n", `filter.deny_upstreams[0]: "b": no upstream`, 4},
		{"bad listen", "[server]\nlisten = \"8931\"\n", `server.listen: listen "8931": want host:port`, 2},
		{"bad listen port", "[server]\nlisten = \"localhost:http\"\n", `port "http"`, 2},
		{"empty separator", "[server]\nseparator = \"\"\n", `server.separator: separator "" must be non-empty`, 2},
		{"bad separator", "[server]\nseparator = \"::\"\n", `separator "::"`, 2},
		{"name length too small", "[server]\nmax_name_length = 8\n", `server.max_name_length: must be between 16 and 128, got 8`, 2},
		{"replica_id with a dot", "[server]\nreplica_id = \"eu.1\"\n", `server.replica_id: replica_id "eu.1" must be 1 to 32 of a-z 0-9 and -`, 2},
		{"replica_id uppercase", "[server]\n\nreplica_id = \"Replica-A\"\n", `replica_id "Replica-A" must be`, 3},
		{"replica_id empty", "[server]\nreplica_id = \"\"\n", `replica_id "" must be`, 2},
		{"replica_id too long", "[server]\nreplica_id = \"" + strings.Repeat("a", 33) + "\"\n", `must be 1 to 32`, 2},
		{"replica_id ends with a dash", "[server]\nreplica_id = \"a-\"\n", `replica_id "a-" must be`, 2},
		{"bad pin", "[server]\n\npin = \"strict\"\n", `server.pin: pin "strict": want "off", "warn" or "quarantine"`, 3},
		{"pin not a string", "[server]\npin = true\n", `server.pin: incompatible types`, 2},
		{"relative state_dir", "[server]\nstate_dir = \"state\"\n", `server.state_dir: state_dir "state" must be an absolute path`, 2},
		{"state_dir of another user", "[server]\nstate_dir = \"~bob/state\"\n", `server.state_dir: "~bob/state": only ~ and ~/ are expanded`, 2},
		{"state_dir from an unset variable", "[server]\nstate_dir = \"${STATE}/viewmux\"\n", `server.state_dir: environment variable STATE is not set`, 2},
		{"replica_id from an unset variable", "[server]\nreplica_id = \"${POD_NAME}\"\n", `server.replica_id: environment variable POD_NAME is not set`, 2},
		{"bad origin glob", "[server]\nallowed_origins = [\n  \"http://localhost:*\",\n  \"http://[\",\n]\n", `server.allowed_origins[1]: invalid glob "http://["`, 4},

		// Patterns.
		{"invalid glob", "[upstreams.x]\ncommand = \"y\"\ndeny = [\"delete_*\", \"get_[abc\"]\n", `upstreams.x.deny[1]: invalid glob "get_[abc": unterminated [`, 3},
		{"invalid glob on its own line", "[filter]\nallow = [\n  \"a*\", # fine\n  # a comment\n  \"b[]\",\n]\n", `filter.allow[1]: invalid glob "b[]": empty class`, 5},
		{"invalid regex", "[profiles.ci]\nallow_regex = [\"^gh__(get|list_\"]\n", `profiles.ci.allow_regex[0]: invalid regex "^gh__(get|list_": missing closing )`, 2},
		{"invalid deny regex in filter", "[filter]\ndeny_regex = [\"a**\"]\n", `filter.deny_regex[0]: invalid regex "a**"`, 2},
		{"invalid toolset glob", "[upstreams.gh]\ncommand = \"y\"\n[upstreams.gh.toolsets]\nissues = [\"*issue*\"]\nrepos = [\"[\"]\n", `upstreams.gh.toolsets.repos[0]: invalid glob "["`, 5},
		{"invalid read_only_tools glob", "[upstreams.x]\ncommand = \"y\"\nread_only_tools = [\"get_\\\\\"]\n", `trailing backslash`, 3},
		{"invalid call rule glob", "[profiles.p]\n[[profiles.p.call_rules]]\ntool = \"t\"\nargs = { cmd = [\"ok\", \"[z-a]\"] }\n", `profiles.p.call_rules[0].args.cmd[1]: invalid glob "[z-a]"`, 4},
		{"call rule without tool", "[profiles.p]\n[[profiles.p.call_rules]]\nargs = { cmd = [\"ok\"] }\n", `profiles.p.call_rules[0]: call rule needs tool`, 2},
		{"call rule without args", "[profiles.p]\n[[profiles.p.call_rules]]\ntool = \"t\"\n", `call rule needs args`, 2},
		{"call rule arg without globs", "[profiles.p]\n[[profiles.p.call_rules]]\ntool = \"t\"\nargs = { cmd = [] }\n", `argument "cmd" needs at least one glob`, 4},
		{"call rule with only other_args", "[profiles.p]\n[[profiles.p.call_rules]]\ntool = \"t\"\nother_args = true\n", `profiles.p.call_rules[0]: call rule needs args or args_regex`, 2},
		{"invalid args_regex", "[profiles.ci]\n[[profiles.ci.call_rules]]\ntool = \"shell__run\"\nargs_regex = { path = ['^docs/([a-z]+\\.md$'] }\n", `profiles.ci.call_rules[0].args_regex.path[0]: invalid regex "^docs/([a-z]+\\.md$": missing closing )`, 4},
		{"invalid args_regex in a sub-table", "[profiles.ci]\n[[profiles.ci.call_rules]]\ntool = \"a\"\nargs = { x = [\"y\"] }\n[[profiles.ci.call_rules]]\ntool = \"b\"\n[profiles.ci.call_rules.args_regex]\npath = [\n  '^ok$',\n  'a**',\n]\n", `profiles.ci.call_rules[1].args_regex.path[1]: invalid regex "a**": invalid nested repetition operator`, 10},
		{"args_regex valid only once anchored", "[profiles.p]\n[[profiles.p.call_rules]]\ntool = \"t\"\nargs_regex = { x = [\"a)(b\"] }\n", `profiles.p.call_rules[0].args_regex.x[0]: invalid regex "a)(b": unexpected )`, 4},
		{"args_regex arg without patterns", "[profiles.p]\n[[profiles.p.call_rules]]\ntool = \"t\"\nargs_regex = { path = [] }\n", `profiles.p.call_rules[0].args_regex.path: argument "path" needs at least one regex`, 4},
		{"two call rules for one tool", "[profiles.p]\ncall_rules = [\n  { tool = \"t\", args = { a = [\"b\"] } },\n  { tool = \"t\", args_regex = { c = [\"d\"] } },\n]\n", `profiles.p.call_rules[1].tool: tool "t" already has a call rule, profiles.p.call_rules[0] (line 3)`, 4},
		{"unknown key near args_regex", "[profiles.p]\n[[profiles.p.call_rules]]\ntool = \"t\"\nargs_regexp = { a = [\"b\"] }\n", `unknown key "profiles.p.call_rules[0].args_regexp" (did you mean "args_regex"?)`, 4},
		{"unknown key near other_args", "[profiles.p]\n[[profiles.p.call_rules]]\ntool = \"t\"\nargs = { a = [\"b\"] }\nother_arg = true\n", `unknown key "profiles.p.call_rules[0].other_arg" (did you mean "other_args"?)`, 5},

		// Values of the wrong type.
		{"other_args not a boolean", "[profiles.p]\n[[profiles.p.call_rules]]\ntool = \"t\"\nargs = { a = [\"b\"] }\nother_args = \"yes\"\n", `profiles.p.call_rules[0].other_args: incompatible types: TOML value has type string; want a boolean`, 5},
		{"args_regex value not an array", "[profiles.p]\n[[profiles.p.call_rules]]\ntool = \"t\"\nargs_regex = { path = '^a$' }\n", `profiles.p.call_rules[0].args_regex.path: incompatible types: TOML value has type string; want an array`, 4},
		{"args_regex pattern not a string", "[profiles.p]\n[[profiles.p.call_rules]]\ntool = \"t\"\nargs_regex = { path = [1] }\n", `profiles.p.call_rules[0].args_regex.path[0]: incompatible types: TOML value has type integer; want a string`, 4},
		{"args an array, not a table", "[profiles.p]\n[[profiles.p.call_rules]]\ntool = \"t\"\nargs = [\"git status\"]\nother_args = true\n", `profiles.p.call_rules[0].args: incompatible types: TOML value has type array; want a table`, 4},
		{"args_regex a string, not a table", "[profiles.p]\ncall_rules = [\n  { tool = \"a\", args = { x = [\"y\"] } },\n  { tool = \"t\", args_regex = '^a$' },\n]\n", `profiles.p.call_rules[1].args_regex: incompatible types: TOML value has type string; want a table`, 4},
		{"env an array, not a table", "[upstreams.x]\ncommand = \"y\"\nenv = [\"A=1\"]\n", `upstreams.x.env: incompatible types: TOML value has type array; want a table`, 3},
		{"token not a string", "[profiles.p]\n[[auth.tokens]]\ntoken = 5\nprofiles = [\"p\"]\n", `auth.tokens[0].token: incompatible types: TOML value has type integer; want a string`, 3},
		{"args an array of tables", "[upstreams.x]\ncommand = \"y\"\n[[upstreams.x.args]]\na = 1\n", `upstreams.x.args[0]: incompatible types: TOML value has type table; want a string`, 3},
		{"max_sessions a string", "[server]\nmax_sessions = \"10\"\n", `server.max_sessions: incompatible types: TOML value has type string; want an integer`, 2},
		{"toolsets a string, not a table", "[upstreams.x]\ncommand = \"y\"\ntoolsets = \"all\"\n", `upstreams.x.toolsets: incompatible types: TOML value has type string; want a table`, 3},

		// Upstreams.
		{"duplicate prefix", "[upstreams.alpha]\ncommand = \"a\"\nprefix = \"gh\"\n\n[upstreams.github]\ncommand = \"b\"\nprefix = \"gh\"\n", `upstreams.github.prefix: prefix "gh" is also the prefix of upstream "alpha" (line 3)`, 7},
		{"prefix equal to other name", "[upstreams.gh]\ncommand = \"a\"\n[upstreams.github]\ncommand = \"b\"\nprefix = \"gh\"\n", `prefix "gh" is also the prefix of upstream "gh" (line 1)`, 5},
		{"invalid prefix", "[upstreams.x]\ncommand = \"y\"\nprefix = \"g_h\"\n", `upstreams.x.prefix: prefix "g_h" may use only A-Z a-z 0-9 -`, 3},
		{"name is not a prefix", "[upstreams.my_server]\ncommand = \"y\"\n", `upstream name "my_server" is not a valid prefix`, 1},
		{"prefix contains separator", "[server]\nseparator = \"-\"\n[upstreams.my-server]\ncommand = \"y\"\n", `prefix "my-server" contains the separator "-"`, 3},
		{"bad protocol", "[upstreams.x]\ncommand = \"y\"\nprotocol = \"latest\"\n", `upstreams.x.protocol: protocol "latest"`, 3},
		{"command and url", "[upstreams.x]\ncommand = \"y\"\nurl = \"http://h\"\n", `upstreams.x: set either command (stdio) or url`, 1},
		{"neither command nor url", "[upstreams.x]\nrequired = true\n", `upstreams.x: needs command (stdio) or url`, 1},
		{"websocket transport with https url", "[upstreams.x]\nurl = \"https://h/mcp\"\ntransport = \"websocket\"\n", `upstreams.x.transport: transport "websocket" needs a ws or wss url, not url scheme https`, 3},
		{"sse transport with ws url", "[upstreams.x]\ntransport = \"sse\"\nurl = \"ws://h/mcp\"\n", `transport "sse" needs an http or https url`, 2},
		{"stdio transport with url", "[upstreams.x]\ntransport = \"stdio\"\nurl = \"http://h\"\n", `transport "stdio" needs a command`, 2},
		{"http transport with command", "[upstreams.x]\ncommand = \"y\"\ntransport = \"http\"\n", `transport "http" needs an http or https url, not a command`, 3},
		{"unknown transport", "[upstreams.x]\ncommand = \"y\"\ntransport = \"grpc\"\n", `unknown transport "grpc"`, 3},
		{"unknown url scheme", "[upstreams.x]\nurl = \"ftp://h/mcp\"\n", `upstreams.x.url: url scheme "ftp"`, 2},
		{"url without host", "[upstreams.x]\nurl = \"http:///mcp\"\n", `url has no host`, 2},
		{"headers on stdio", "[upstreams.x]\ncommand = \"y\"\nheaders = { A = \"b\" }\n", `upstreams.x.headers: headers apply only to url upstreams`, 3},
		{"args on url", "[upstreams.x]\nurl = \"http://h\"\nargs = [\"a\"]\n", `upstreams.x.args: args applies only to command`, 3},
		{"inherit_env on url", "[upstreams.x]\nurl = \"http://h\"\ninherit_env = [\"A\"]\n", `upstreams.x.inherit_env: inherit_env applies only to command`, 3},
		{"inherit_env everything", "[upstreams.x]\ncommand = \"y\"\ninherit_env = [\"LANG\",\n  \"*\"]\n", `upstreams.x.inherit_env[1]: "*" would pass viewmux's whole environment`, 4},
		{"inherit_env inner star", "[upstreams.x]\ncommand = \"y\"\ninherit_env = [\"A*B\"]\n", `upstreams.x.inherit_env[0]: "A*B": only a trailing * is a wildcard`, 3},
		{"inherit_env two stars", "[upstreams.x]\ncommand = \"y\"\ninherit_env = [\"A**\"]\n", `"A**": only a trailing * is a wildcard`, 3},
		{"inherit_env class", "[upstreams.x]\ncommand = \"y\"\ninherit_env = [\"A[BC]\"]\n", `"A[BC]": only a trailing * is a wildcard`, 3},
		{"inherit_env with =", "[upstreams.x]\ncommand = \"y\"\ninherit_env = [\"A=1\"]\n", `upstreams.x.inherit_env[0]: "A=1" is not an environment variable name`, 3},
		{"inherit_env empty", "[upstreams.x]\ncommand = \"y\"\ninherit_env = [\"\"]\n", `upstreams.x.inherit_env[0]: empty variable name`, 3},
		{"inherit_env not a list", "[upstreams.x]\ncommand = \"y\"\ninherit_env = \"AWS_*\"\n", `upstreams.x.inherit_env: incompatible types`, 3},
		{"bad header name", "[upstreams.x]\nurl = \"http://h\"\nheaders = { \"Bad Header\" = \"b\" }\n", `invalid header name "Bad Header"`, 3},
		{"header value with newline", "[upstreams.x]\nurl = \"http://h\"\nheaders = { A = \"b\\r\\nEvil: 1\" }\n", `upstreams.x.headers.A: value contains a forbidden character`, 3},
		{"bad toolset name", "[upstreams.x]\ncommand = \"y\"\ntoolsets = { \"a/b\" = [\"c\"] }\n", `toolset name "a/b"`, 3},

		// Environment.
		{"unset variable in env", "[upstreams.gh]\ncommand = \"y\"\nenv = { TOKEN = \"${GITHUB_TOKEN}\" }\n", `upstreams.gh.env.TOKEN: environment variable GITHUB_TOKEN is not set`, 3},
		{"unset variable in args", "[upstreams.x]\ncommand = \"y\"\nargs = [\n  \"--dir\",\n  \"${NOPE}/data\",\n]\n", `upstreams.x.args[1]: environment variable NOPE is not set`, 5},
		{"unset variable in url", "[upstreams.x]\nurl = \"https://${HOST}/mcp\"\n", `upstreams.x.url: environment variable HOST is not set`, 2},
		{"unset variable in header", "[upstreams.x]\nurl = \"https://h/mcp\"\n[upstreams.x.headers]\nAuthorization = \"Bearer ${DOCS_TOKEN}\"\n", `upstreams.x.headers.Authorization: environment variable DOCS_TOKEN`, 4},
		{"unset variable in command", "[upstreams.x]\ncommand = \"${TOOL}\"\n", `upstreams.x.command: environment variable TOOL`, 2},
		{"unset variable in dir", "[upstreams.x]\ncommand = \"y\"\ndir = \"${WORK}\"\n", `upstreams.x.dir: environment variable WORK`, 3},
		{"unbraced variable", "[upstreams.x]\ncommand = \"$HOME/bin/srv\"\n", `$HOME is not expanded: write ${HOME}`, 2},
		{"empty command after expansion", "[upstreams.x]\ncommand = \"${EMPTY:-}\"\n", `upstreams.x.command: must not be empty`, 2},

		// Profiles.
		{"extends missing profile", "[profiles.a]\nread_only = true\n[profiles.b]\nextends = \"c\"\n", `profiles.b.extends: unknown profile "c" (have: a, b)`, 4},
		{"extends cycle", "[profiles.a]\nextends = \"b\"\n[profiles.b]\nextends = \"a\"\n", `profiles.a.extends: extends cycle a -> b -> a`, 2},
		{"extends cycle reached from outside", "[profiles.a]\nextends = \"c\"\n[profiles.b]\nextends = \"c\"\n[profiles.c]\nextends = \"b\"\n", `extends cycle b -> c -> b`, 4},
		{"extends itself", "[profiles.a]\nextends = \"a\"\n", `extends cycle a -> a`, 2},
		{"negative rate", "[profiles.a]\n[profiles.a.rate]\ncalls_per_minute = -1\n", `profiles.a.rate.calls_per_minute: must be >= 0`, 3},
		{"bad profile name", "[profiles.\"read only\"]\n", `profile name "read only"`, 1},
		{"unknown default profile", "[server]\ndefault_profile = \"main\"\n[profiles.default]\n", `server.default_profile: unknown profile "main" (have: default)`, 2},
		{"default profile without profiles", "[server]\ndefault_profile = \"main\"\n", `unknown profile "main" (have: none)`, 2},
		{"toolset of unknown upstream", "[profiles.a]\ntoolsets = [\"gh/issues\"]\n", `profiles.a.toolsets[0]: "gh/issues": no upstream is named or prefixed "gh"`, 2},
		{"unknown toolset", "[upstreams.github]\ncommand = \"y\"\nprefix = \"gh\"\ntoolsets = { issues = [\"*issue*\"] }\n[filter]\ntoolsets = [\"gh/repos\"]\n", `filter.toolsets[0]: "gh/repos": upstream "github" has no toolset "repos" (has: issues)`, 6},

		// Auth.
		{"token and hash", "[profiles.p]\n[[auth.tokens]]\ntoken = \"a\"\ntoken_sha256 = \"" + strings.Repeat("a", 64) + "\"\nprofiles = [\"p\"]\n", `auth.tokens[0]: set exactly one of token and token_sha256, not both`, 2},
		{"token without secret", "[profiles.p]\n[[auth.tokens]]\nprofiles = [\"p\"]\n", `auth.tokens[0]: needs token or token_sha256`, 2},
		{"bad hash", "[profiles.p]\n[[auth.tokens]]\ntoken_sha256 = \"" + strings.Repeat("A", 64) + "\"\nprofiles = [\"p\"]\n", `auth.tokens[0].token_sha256: must be 64 lowercase hex digits`, 3},
		{"token without profiles", "[profiles.p]\n[[auth.tokens]]\ntoken = \"a\"\n", `auth.tokens[0].profiles: token needs a non-empty profiles list`, 2},
		{"token with unknown profile", "[profiles.p]\n[[auth.tokens]]\ntoken = \"a\"\nprofiles = [\"p\",\n  \"q\"]\n", `auth.tokens[0].profiles[1]: unknown profile "q" (have: p)`, 5},
		{"token unset variable", "[profiles.p]\n[[auth.tokens]]\ntoken = \"${CI_TOKEN}\"\nprofiles = [\"p\"]\n", `auth.tokens[0].token: environment variable CI_TOKEN is not set`, 3},
		{"duplicate token", "[profiles.p]\n[[auth.tokens]]\ntoken = \"secret\"\nprofiles = [\"p\"]\n[[auth.tokens]]\ntoken = \"secret\"\nprofiles = [\"p\"]\n", `auth.tokens[1]: same token as auth.tokens[0]`, 5},

		// Line counting through the constructs the scanner skips.
		{"after multi-line strings", "[upstreams.x]\ncommand = \"y\"\nargs = [\"\"\"\n[not.a.table]\nkey = 1\n\"\"\", '''\n# not a comment\n''']\ndeny = [\"[\"]\n", `upstreams.x.deny[0]`, 9},
		{"after inline tables and comments", "# [upstreams.y]\n[upstreams.x] # comment\ncommand = \"y\" # deny = [\"[\"]\nenv = { A = \"}\", B = \"#\" }\ndeny = [\"[\"]\n", `upstreams.x.deny[0]`, 5},
		{"array of tables inline", "[profiles.p]\ncall_rules = [\n  { tool = \"a\", args = { x = [\"y\"] } },\n  { tool = \"b\", args = { x = [\"[\"] } },\n]\n", `profiles.p.call_rules[1].args.x[0]`, 4},
		{"quoted keys", "[upstreams.\"my.server\"]\ncommand = \"y\"\nprefix = \"ms\"\n'deny' = [\"[\"]\n", `upstreams."my.server".deny[0]`, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse("test.toml", []byte(tt.text), env(map[string]string{"EMPTY": ""}))
			if err == nil {
				t.Fatalf("Parse succeeded (%+v), want error %q on line %d", cfg, tt.want, tt.line)
			}
			if cfg != nil {
				t.Errorf("Parse returned a config with its error")
			}
			for _, e := range configErrors(t, err) {
				if e.Line == tt.line && strings.Contains(e.Msg, tt.want) {
					if want := "test.toml:"; !strings.HasPrefix(e.Error(), want) {
						t.Errorf("error %q does not start with %q", e, want)
					}
					return
				}
			}
			t.Errorf("no error on line %d containing %q; got:\n%v", tt.line, tt.want, err)
		})
	}
}

// TestParseTypeErrorsHideNothing is issue 18's file: a value of the wrong
// type used to stop the decoder, so the typos below it were reported only
// once it was fixed. Every error comes in one run, and leaving out the
// mistyped value causes no error of its own (command is mistyped, and no
// "needs command or url" follows).
func TestParseTypeErrorsHideNothing(t *testing.T) {
	text := `[profiles.readonly]
read_only = "yes"

[upstreams.notes]
comand = "viewmux"
requierd = true

[upstreams.demo]
command = 7

[upstream.x]
command = "y"
`
	_, err := Parse("viewmux.toml", []byte(text), nil)
	if err == nil {
		t.Fatal("Parse succeeded")
	}
	want := []string{
		`viewmux.toml:2: profiles.readonly.read_only: incompatible types: TOML value has type string; want a boolean`,
		`viewmux.toml:4: upstreams.notes: needs command (stdio) or url (http, sse, websocket)`,
		`viewmux.toml:5: unknown key "upstreams.notes.comand" (did you mean "command"?)`,
		`viewmux.toml:6: unknown key "upstreams.notes.requierd" (did you mean "required"?)`,
		`viewmux.toml:9: upstreams.demo.command: incompatible types: TOML value has type integer; want a string`,
		`viewmux.toml:11: unknown key "upstream" (did you mean "upstreams"?)`,
	}
	if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, want) {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestParseReportsAllErrors(t *testing.T) {
	text := `[server]
listen = "nowhere"
bogus = 1

[upstreams.github]
command = "npx"
connect_timeout = "10"
deny = ["get_[x"]

[profiles.ci]
allow_regex = ["("]
extends = "missing"
`
	_, err := Parse("viewmux.toml", []byte(text), nil)
	if err == nil {
		t.Fatal("Parse succeeded")
	}
	want := []string{
		`viewmux.toml:2: server.listen: listen "nowhere": want host:port`,
		`viewmux.toml:3: unknown key "server.bogus"`,
		`viewmux.toml:7: upstreams.github.connect_timeout: invalid duration "10" (want e.g. "30s")`,
		`viewmux.toml:8: upstreams.github.deny[0]: invalid glob "get_[x": unterminated [`,
		`viewmux.toml:11: profiles.ci.allow_regex[0]: invalid regex "(": missing closing )`,
		`viewmux.toml:12: profiles.ci.extends: unknown profile "missing" (have: ci)`,
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(lines), len(want), err)
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("error %d = %q, want prefix %q", i, lines[i], want[i])
		}
	}
	var first *Error
	if !errors.As(err, &first) || first.Line != 2 {
		t.Errorf("errors.As(*Error) = %+v, want the line-2 error", first)
	}
}

func TestDefaults(t *testing.T) {
	hostname, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	cfg := mustParse(t, "[upstreams.a]\ncommand = \"srv\"\n", nil)
	wantServer := Server{
		Listen:               "127.0.0.1:8931",
		Separator:            "__",
		MaxNameLength:        64,
		AllowedOrigins:       []string{"http://localhost:*", "http://127.0.0.1:*"},
		MaxBodyBytes:         4 << 20,
		MaxPendingBytes:      8 << 20,
		ShutdownGrace:        10 * time.Second,
		MaxSessions:          10000,
		MaxSessionsPerCaller: 2500,
		MaxChildrenPerCaller: 16,
		SessionIdleTimeout:   30 * time.Minute,
		ReadTimeout:          30 * time.Second,
		LogFormat:            "text",
		ReplicaID:            DefaultReplicaID(hostname),
		Pin:                  PinOff,

		MaxPendingBytesPerCaller: 64 << 20,
		WriteTimeout:             30 * time.Second,
	}
	if !reflect.DeepEqual(cfg.Server, wantServer) {
		t.Errorf("Server = %+v, want %+v", cfg.Server, wantServer)
	}
	wantUp := &Upstream{
		Name: "a", Transport: TransportStdio, Command: "srv", Prefix: "a",
		ConnectTimeout: 10 * time.Second, CallTimeout: 60 * time.Second,
		MaxMessageBytes: 16 << 20, MaxCatalogItems: 10000, MaxCatalogBytes: 8 << 20,
		Scope: ScopeShared, Credentials: CredentialsShared, Line: 1,
	}
	if len(cfg.Upstreams) != 1 || !reflect.DeepEqual(cfg.Upstreams[0], wantUp) {
		t.Errorf("Upstreams = %+v, want [%+v]", cfg.Upstreams, wantUp)
	}
	if cfg.Source != "test.toml" || len(cfg.Profiles) != 0 || cfg.Server.DefaultProfile != "" {
		t.Errorf("Source %q, Profiles %v, DefaultProfile %q", cfg.Source, cfg.Profiles, cfg.Server.DefaultProfile)
	}
}

func TestDefaultProfile(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"none without profiles", "", ""},
		{"default when it exists", "[profiles.default]\n[profiles.ro]\nread_only = true\n", "default"},
		{"none when default is missing", "[profiles.ro]\nread_only = true\n", ""},
		{"explicit", "[server]\ndefault_profile = \"ro\"\n[profiles.default]\n[profiles.ro]\n", "ro"},
		{"explicitly none", "[server]\ndefault_profile = \"\"\n[profiles.default]\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustParse(t, tt.text, nil).Server.DefaultProfile; got != tt.want {
				t.Errorf("DefaultProfile = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestValues(t *testing.T) {
	text := `[server]
listen = ":9000"
separator = "-_"
max_name_length = 128
allowed_origins = []
allow_unauthenticated = true
max_body_bytes = 1024
shutdown_grace = "1m30s"

[audit]
path = "audit.jsonl"
include_arguments = true

[upstreams.zeta]
url = "https://example.com/mcp"
transport = "sse"
prefix = ""
required = true
connect_timeout = "1s"
call_timeout = "2m"
protocol = "2025-11-25"
max_message_bytes = "512KB"
max_catalog_items = 300
max_catalog_bytes = "1MiB"
tools = ["a"]
allow = ["b*"]
allow_regex = ["^c"]
deny = ["d*"]
deny_regex = ["e$"]
read_only_tools = ["get_*"]
toolsets = { read = ["get_*"], all = ["*"] }

[upstreams.alpha]
command = "srv"
args = ["--x", "y"]
dir = "/tmp"
env = { A = "1" }
inherit_env = ["LANG", "AWS_*"]

[filter]
toolsets = ["zeta/read", "alpha"]
read_only = true

[profiles.p]
extends = "q"
tools = ["t"]
[[profiles.p.call_rules]]
tool = "shell__run"
args = { command = ["git status*"], cwd = ["/src/*"] }
[profiles.p.rate]
calls_per_minute = 5

[profiles.q]
deny = ["x"]
`
	cfg := mustParse(t, text, nil)
	if cfg.Server.Listen != ":9000" || cfg.Server.Separator != "-_" || cfg.Server.MaxNameLength != 128 ||
		len(cfg.Server.AllowedOrigins) != 0 || !cfg.Server.AllowUnauthenticated ||
		cfg.Server.MaxBodyBytes != 1024 || cfg.Server.ShutdownGrace != 90*time.Second {
		t.Errorf("Server = %+v", cfg.Server)
	}
	if cfg.Audit != (Audit{Path: "audit.jsonl", IncludeArguments: true}) {
		t.Errorf("Audit = %+v", cfg.Audit)
	}
	if len(cfg.Upstreams) != 2 || cfg.Upstreams[0].Name != "alpha" || cfg.Upstreams[1].Name != "zeta" {
		t.Fatalf("Upstreams not sorted by name: %+v", cfg.Upstreams)
	}
	wantZeta := &Upstream{
		Name: "zeta", Transport: TransportSSE, URL: "https://example.com/mcp", Prefix: "",
		Required: true, ConnectTimeout: time.Second, CallTimeout: 2 * time.Minute,
		Protocol: "2025-11-25", MaxMessageBytes: 512000, MaxCatalogItems: 300, MaxCatalogBytes: 1 << 20,
		Scope: ScopeShared, Credentials: CredentialsShared,
		Rules: RuleSet{Tools: []string{"a"}, Allow: []string{"b*"}, AllowRegex: []string{"^c"},
			Deny: []string{"d*"}, DenyRegex: []string{"e$"}},
		ReadOnlyTools: []string{"get_*"},
		Toolsets:      map[string][]string{"read": {"get_*"}, "all": {"*"}},
		Line:          14,
	}
	if got := cfg.Upstream("zeta"); !reflect.DeepEqual(got, wantZeta) {
		t.Errorf("zeta =\n%+v\nwant\n%+v", got, wantZeta)
	}
	alpha := cfg.Upstream("alpha")
	if alpha.Transport != TransportStdio || alpha.Dir != "/tmp" || !reflect.DeepEqual(alpha.Args, []string{"--x", "y"}) ||
		!reflect.DeepEqual(alpha.Env, map[string]string{"A": "1"}) || !reflect.DeepEqual(alpha.InheritEnv, []string{"LANG", "AWS_*"}) {
		t.Errorf("alpha = %+v", alpha)
	}
	if want := (RuleSet{Toolsets: []string{"zeta/read", "alpha"}, ReadOnly: true}); !reflect.DeepEqual(cfg.Filter, want) {
		t.Errorf("Filter = %+v, want %+v", cfg.Filter, want)
	}
	wantP := &Profile{Name: "p", Extends: "q", Line: 44,
		Rules: RuleSet{Tools: []string{"t"}, CallRules: []CallRule{{Tool: "shell__run",
			Args: map[string][]string{"command": {"git status*"}, "cwd": {"/src/*"}}}}},
		Rate: Rate{CallsPerMinute: 5}}
	if !reflect.DeepEqual(cfg.Profiles["p"], wantP) {
		t.Errorf("profile p =\n%+v\nwant\n%+v", cfg.Profiles["p"], wantP)
	}
	if chain := cfg.Chain("p"); len(chain) != 2 || chain[0].Name != "p" || chain[1].Name != "q" {
		t.Errorf("Chain(p) = %v", chain)
	}
}

func TestToolsetReferences(t *testing.T) {
	text := `[upstreams.github]
command = "y"
prefix = "gh"
toolsets = { issues = ["*issue*"] }
[upstreams.docs]
url = "https://h/mcp"
[profiles.triage]
toolsets = ["gh/issues", "github/issues", "docs", "gh"]
`
	got := mustParse(t, text, nil).Profiles["triage"].Rules.Toolsets
	want := []string{"github/issues", "github/issues", "docs", "github"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Toolsets = %q, want %q (prefixes resolved to upstream names)", got, want)
	}
}

func TestTransportInference(t *testing.T) {
	tests := []struct {
		name, entry, want string
	}{
		{"command", `command = "srv"`, TransportStdio},
		{"explicit stdio", "command = \"srv\"\ntransport = \"stdio\"", TransportStdio},
		{"http url", `url = "http://127.0.0.1:9000/mcp"`, TransportHTTP},
		{"https url", `url = "https://example.com/mcp"`, TransportHTTP},
		{"explicit http", "url = \"https://example.com/mcp\"\ntransport = \"http\"", TransportHTTP},
		{"explicit sse", "url = \"https://example.com/sse\"\ntransport = \"sse\"", TransportSSE},
		{"ws url", `url = "ws://127.0.0.1:9000/mcp"`, TransportWebsocket},
		{"wss url", `url = "wss://example.com/mcp"`, TransportWebsocket},
		{"explicit websocket", "url = \"wss://example.com/mcp\"\ntransport = \"websocket\"", TransportWebsocket},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, "[upstreams.u]\n"+tt.entry+"\n", nil)
			if got := cfg.Upstreams[0].Transport; got != tt.want {
				t.Errorf("Transport = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestEnvExpansion(t *testing.T) {
	text := `[profiles.p]
[[auth.tokens]]
token = "${CI_TOKEN}"
profiles = ["p"]

[upstreams.local]
command = "${BIN}/server"
args = ["--home", "${HOME}", "--price", "$$5", "${MODE:-fast}", "${EMPTY:-fallback}", "${EMPTY}"]
env = { TOKEN = "${GITHUB_TOKEN}", LITERAL = "a$$b" }
dir = "${HOME}/work"

[upstreams.remote]
url = "https://${HOST}/mcp"
headers = { Authorization = "Bearer ${DOCS_TOKEN}" }

[audit]
path = "${NOT_EXPANDED}"
`
	cfg := mustParse(t, text, map[string]string{
		"CI_TOKEN": "ci-secret", "BIN": "/opt/bin", "HOME": "/home/u", "GITHUB_TOKEN": "ghp",
		"HOST": "docs.example.com", "DOCS_TOKEN": "dt", "EMPTY": "",
	})
	local, remote := cfg.Upstream("local"), cfg.Upstream("remote")
	checks := []struct{ name, got, want string }{
		{"token", cfg.Auth.Tokens[0].Token, "ci-secret"},
		{"command", local.Command, "/opt/bin/server"},
		{"args", strings.Join(local.Args, " "), "--home /home/u --price $5 fast fallback "},
		{"env", local.Env["TOKEN"] + " " + local.Env["LITERAL"], "ghp a$b"},
		{"dir", local.Dir, "/home/u/work"},
		{"url", remote.URL, "https://docs.example.com/mcp"},
		{"header", remote.Headers["Authorization"], "Bearer dt"},
		{"audit path is not expanded", cfg.Audit.Path, "${NOT_EXPANDED}"},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if c.got != c.want {
				t.Errorf("got %q, want %q", c.got, c.want)
			}
		})
	}
}

func TestExpand(t *testing.T) {
	vars := env(map[string]string{"A": "1", "EMPTY": "", "B_2": "two"})
	tests := []struct {
		in, want, err string
	}{
		{"plain", "plain", ""},
		{"${A}", "1", ""},
		{"x${A}y${B_2}z", "x1ytwoz", ""},
		{"${UNSET:-dflt}", "dflt", ""},
		{"${EMPTY:-dflt}", "dflt", ""},
		{"${A:-dflt}", "1", ""},
		{"${UNSET:-}", "", ""},
		{"$${A}", "${A}", ""},
		{"$$$$", "$$", ""},
		{"cost: $5 or $", "cost: $5 or $", ""},
		{"${UNSET}", "", "environment variable UNSET is not set"},
		{"${X}${Y}", "", "environment variables X, Y are not set"},
		{"${A", "", "unterminated ${"},
		{"${}", "", "invalid variable reference ${}"},
		{"${1A}", "", "invalid variable reference"},
		{"${A-x}", "", "invalid variable reference ${A-x}"},
		{"$HOME", "", "$HOME is not expanded"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := expand(tt.in, vars)
			switch {
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("expand(%q) error = %v, want %q", tt.in, err, tt.err)
			case tt.err == "" && (err != nil || got != tt.want):
				t.Errorf("expand(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1", 1, true},
		{"4096", 4096, true},
		{"10B", 10, true},
		{"4MiB", 4 << 20, true},
		{"4 MiB", 4 << 20, true},
		{"2KiB", 2048, true},
		{"1GiB", 1 << 30, true},
		{"512KB", 512000, true},
		{"3MB", 3000000, true},
		{"1GB", 1000000000, true},
		{"", 0, false},
		{"MiB", 0, false},
		{"1.5MiB", 0, false},
		{"4mib", 0, false},
		{"-1", 0, false},
		{"99999999999GiB", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseSize(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("parseSize(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
			}
		})
	}
}

func TestSuggest(t *testing.T) {
	tests := []struct{ key, want string }{
		{"comand", "command"},
		{"urls", "url"},
		{"read_onyl", "read_only"},
		{"x", ""},
		{"completely_different", ""},
	}
	known := []string{"command", "url", "read_only", "args"}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if got := Suggest(tt.key, known); got != tt.want {
				t.Errorf("Suggest(%q) = %q, want %q", tt.key, got, tt.want)
			}
		})
	}
}

func TestCallRules(t *testing.T) {
	tests := []struct {
		name string
		text string
		want []CallRule
	}{
		{"args only, other_args defaults to false", `[[profiles.ci.call_rules]]
tool = "shell__run"
args = { command = ["git status", "git log *"] }
`, []CallRule{{Tool: "shell__run", Args: map[string][]string{"command": {"git status", "git log *"}}}}},
		{"the reference example", `[[profiles.ci.call_rules]]
tool = "shell__run"
args = { command = ["git status", "git log *"] }
args_regex = { path = ['^docs/[a-z0-9_/-]+\.md$'] }
other_args = false
`, []CallRule{{Tool: "shell__run",
			Args:      map[string][]string{"command": {"git status", "git log *"}},
			ArgsRegex: map[string][]string{"path": {`^docs/[a-z0-9_/-]+\.md$`}}}}},
		{"args_regex only, other_args true", `[[profiles.ci.call_rules]]
tool = "fs__read"
args_regex = { path = ['docs/.*', 'README\.md'] }
other_args = true
`, []CallRule{{Tool: "fs__read", ArgsRegex: map[string][]string{"path": {"docs/.*", `README\.md`}}, OtherArgs: true}}},
		{"one argument in args and args_regex", `[[profiles.ci.call_rules]]
tool = "shell__run"
args = { command = ["git status"] }
args_regex = { command = ['^git diff [0-9a-f]{7,40}$'] }
`, []CallRule{{Tool: "shell__run",
			Args:      map[string][]string{"command": {"git status"}},
			ArgsRegex: map[string][]string{"command": {"^git diff [0-9a-f]{7,40}$"}}}}},
		{"sub-tables and inline tables", `[profiles.ci]
call_rules = [{ tool = "a", args_regex = { x = ["y"] }, other_args = true }]
`, []CallRule{{Tool: "a", ArgsRegex: map[string][]string{"x": {"y"}}, OtherArgs: true}}},
		{"several tools", `[[profiles.ci.call_rules]]
tool = "a"
[profiles.ci.call_rules.args]
x = ["1"]
[profiles.ci.call_rules.args_regex]
y = ["2"]
[[profiles.ci.call_rules]]
tool = "b"
args = { z = ["3"] }
`, []CallRule{
			{Tool: "a", Args: map[string][]string{"x": {"1"}}, ArgsRegex: map[string][]string{"y": {"2"}}},
			{Tool: "b", Args: map[string][]string{"z": {"3"}}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustParse(t, tt.text, nil).Profiles["ci"].Rules.CallRules
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("CallRules =\n%#v\nwant\n%#v", got, tt.want)
			}
		})
	}
	t.Run("in [filter]", func(t *testing.T) {
		cfg := mustParse(t, "[[filter.call_rules]]\ntool = \"t\"\nargs_regex = { a = [\"b\"] }\n", nil)
		want := []CallRule{{Tool: "t", ArgsRegex: map[string][]string{"a": {"b"}}}}
		if !reflect.DeepEqual(cfg.Filter.CallRules, want) {
			t.Errorf("Filter.CallRules = %#v, want %#v", cfg.Filter.CallRules, want)
		}
	})
}

func TestUpstreamReferences(t *testing.T) {
	text := `[upstreams.github]
command = "y"
prefix = "gh"
[upstreams.docs]
url = "https://h/mcp"
[filter]
deny_upstreams = ["gh"]
[profiles.gh-only]
upstreams = ["gh", "docs"]
deny_upstreams = ["github"]
`
	cfg := mustParse(t, text, nil)
	if got, want := cfg.Profiles["gh-only"].Rules.Upstreams, []string{"github", "docs"}; !reflect.DeepEqual(got, want) {
		t.Errorf("profile Upstreams = %q, want %q (a prefix resolved to the upstream's name)", got, want)
	}
	if got, want := cfg.Profiles["gh-only"].Rules.DenyUpstreams, []string{"github"}; !reflect.DeepEqual(got, want) {
		t.Errorf("profile DenyUpstreams = %q, want %q", got, want)
	}
	if got, want := cfg.Filter.DenyUpstreams, []string{"github"}; !reflect.DeepEqual(got, want) {
		t.Errorf("[filter] DenyUpstreams = %q, want %q (a prefix resolved to the upstream's name)", got, want)
	}
}

// TestPinAndStateDir checks server.pin and server.state_dir: their
// defaults (the state directory from XDG_STATE_HOME, else HOME) and ~
// expansion.
func TestPinAndStateDir(t *testing.T) {
	for _, tt := range []struct {
		name, text string
		vars       map[string]string
		pin, dir   string
	}{
		{"defaults from XDG_STATE_HOME", "", map[string]string{"XDG_STATE_HOME": "/x/state", "HOME": "/home/u"}, PinOff, "/x/state/viewmux"},
		{"a relative XDG_STATE_HOME is ignored", "", map[string]string{"XDG_STATE_HOME": "state", "HOME": "/home/u"}, PinOff, "/home/u/.local/state/viewmux"},
		{"defaults from HOME", "", map[string]string{"HOME": "/home/u"}, PinOff, "/home/u/.local/state/viewmux"},
		{"no default at all", "", nil, PinOff, ""},
		{"~ expanded", "[server]\nstate_dir = \"~/st\"\npin = \"warn\"\n", map[string]string{"HOME": "/home/u"}, PinWarn, "/home/u/st"},
		{"variables expanded", "[server]\nstate_dir = \"${S}/p/../q\"\npin = \"quarantine\"\n", map[string]string{"S": "/srv"}, PinQuarantine, "/srv/q"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustParse(t, tt.text, tt.vars)
			if cfg.Server.Pin != tt.pin || cfg.Server.StateDir != tt.dir {
				t.Errorf("pin, state_dir = %q, %q; want %q, %q", cfg.Server.Pin, cfg.Server.StateDir, tt.pin, tt.dir)
			}
		})
	}
	t.Run("pin without any state directory", func(t *testing.T) {
		_, err := Parse("test.toml", []byte("[server]\npin = \"warn\"\n"), nil)
		if err == nil || !strings.Contains(err.Error(), `test.toml:2: server.pin: pin "warn" needs a state directory`) {
			t.Errorf("err = %v, want one naming test.toml:2 and server.pin", err)
		}
	})
}

func TestReplicaID(t *testing.T) {
	t.Run("explicit, from the environment", func(t *testing.T) {
		cfg := mustParse(t, "[server]\nreplica_id = \"${POD_NAME}\"\n", map[string]string{"POD_NAME": "viewmux-2"})
		if cfg.Server.ReplicaID != "viewmux-2" {
			t.Errorf("ReplicaID = %q, want viewmux-2", cfg.Server.ReplicaID)
		}
	})
	for _, tt := range []struct{ host, want string }{
		{"viewmux-0", "viewmux-0"},
		{"web1.eu.example.com", "web1"},
		{"Build_Box", "build-box"},
		{"3f2a9c1d0e7b", "3f2a9c1d0e7b"},
		{"", "viewmux"},
		{"---", "viewmux"},
		{"h\u00e9te", "h--te"},
		{strings.Repeat("x", 40) + ".example.com", strings.Repeat("x", 23) + "-"},
	} {
		t.Run("default from "+tt.host, func(t *testing.T) {
			got := DefaultReplicaID(tt.host)
			if !strings.HasPrefix(got, tt.want) || !replicaIDRE.MatchString(got) {
				t.Errorf("DefaultReplicaID(%q) = %q, want %q… matching %s", tt.host, got, tt.want, replicaIDRE)
			}
			if again := DefaultReplicaID(tt.host); again != got {
				t.Errorf("DefaultReplicaID(%q) is not stable: %q then %q", tt.host, got, again)
			}
		})
	}
	if a, b := DefaultReplicaID(strings.Repeat("x", 40)+".a"), DefaultReplicaID(strings.Repeat("x", 40)+".b"); a == b {
		t.Errorf("long hostnames that differ share the replica id %q", a)
	}
}

// TestDynamicToolsets checks profiles.NAME.dynamic_toolsets: off by
// default, inherited through extends, overridden by a child either way,
// and decoded strictly.
func TestDynamicToolsets(t *testing.T) {
	cfg := mustParse(t, `
[upstreams.gh]
command = "x"

[profiles.plain]

[profiles.dyn]
dynamic_toolsets = true

[profiles.child]
extends = "dyn"
read_only = true

[profiles.grandchild]
extends = "child"

[profiles.off]
extends = "dyn"
dynamic_toolsets = false

[profiles.on]
extends = "off"
dynamic_toolsets = true
`, nil)
	want := map[string]bool{"plain": false, "dyn": true, "child": true, "grandchild": true, "off": false, "on": true}
	for name, w := range want {
		if got := cfg.Profiles[name].DynamicToolsets; got != w {
			t.Errorf("profile %q: DynamicToolsets = %v, want %v", name, got, w)
		}
	}
	for _, tt := range []struct{ name, text, want string }{
		{"not a boolean", "[profiles.p]\ndynamic_toolsets = \"yes\"\n", "dynamic_toolsets"},
		{"misspelled", "[profiles.p]\ndynamic_toolset = true\n", `did you mean "dynamic_toolsets"?`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.toml", []byte(tt.text), env(nil))
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			for _, e := range configErrors(t, err) {
				if e.Line == 2 && strings.Contains(e.Msg, tt.want) {
					return
				}
			}
			t.Fatalf("no error on line 2 containing %q; got:\n%v", tt.want, err)
		})
	}
}

// TestApprove checks approve and approve_timeout in [filter] and in a
// profile: decoded as given, not inherited here (the filter combines the
// stages), and their errors name the file's line and the profile.
func TestApprove(t *testing.T) {
	cfg := mustParse(t, `
[filter]
approve = ["*__delete_*"]

[profiles.agent]
approve = ["gh__merge_*", "*__delete_*"]
approve_timeout = "30s"

[profiles.child]
extends = "agent"
`, nil)
	if got := cfg.Filter.Approve; !slices.Equal(got, []string{"*__delete_*"}) || cfg.Filter.ApproveTimeout != 0 {
		t.Errorf("[filter]: approve %v, timeout %v", got, cfg.Filter.ApproveTimeout)
	}
	agent := cfg.Profiles["agent"].Rules
	if !slices.Equal(agent.Approve, []string{"gh__merge_*", "*__delete_*"}) || agent.ApproveTimeout != 30*time.Second {
		t.Errorf("profile agent: approve %v, timeout %v", agent.Approve, agent.ApproveTimeout)
	}
	if child := cfg.Profiles["child"].Rules; child.Approve != nil || child.ApproveTimeout != 0 {
		t.Errorf("profile child holds its parent's approval itself: %v %v", child.Approve, child.ApproveTimeout)
	}
	for _, tt := range []struct {
		name, text, want string
		line             int
	}{
		{"bad glob", "[profiles.agent]\napprove = [\"ok\",\n  \"gh__[\"]\n", `profiles.agent.approve[1]:`, 3},
		{"bare number", "[profiles.agent]\napprove = [\"x\"]\napprove_timeout = 30\n", `profiles.agent.approve_timeout: invalid duration 30`, 3},
		{"no unit", "[profiles.agent]\napprove_timeout = \"30\"\n", `profiles.agent.approve_timeout: invalid duration "30"`, 2},
		{"zero", "[profiles.agent]\napprove_timeout = \"0s\"\n", `profiles.agent.approve_timeout: duration "0s" must be positive`, 2},
		{"negative", "[filter]\napprove_timeout = \"-1m\"\n", `filter.approve_timeout: duration "-1m" must be positive`, 2},
		{"not a list", "[profiles.agent]\napprove = \"gh__*\"\n", `profiles.agent.approve`, 2},
		{"misspelled", "[profiles.agent]\napproval = [\"x\"]\n", `did you mean "approve"?`, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.toml", []byte(tt.text), env(nil))
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			for _, e := range configErrors(t, err) {
				if e.Line == tt.line && strings.Contains(e.Msg, tt.want) && strings.Contains(err.Error(), "test.toml:") {
					return
				}
			}
			t.Fatalf("no error on test.toml line %d containing %q; got:\n%v", tt.line, tt.want, err)
		})
	}
}

// TestToolSearch checks profiles.NAME.tool_search and tool_search_pinned:
// off by default, each inherited through extends on its own, and their
// errors: a bad glob, pins without tool_search, tool_search beside
// dynamic_toolsets; each names the line and the profile.
func TestToolSearch(t *testing.T) {
	cfg := mustParse(t, `
[upstreams.gh]
command = "x"

[profiles.plain]

[profiles.agent]
tool_search = true
tool_search_pinned = ["gh__get_*"]

[profiles.child]
extends = "agent"
read_only = true

[profiles.repinned]
extends = "agent"
tool_search_pinned = []

[profiles.off]
extends = "agent"
tool_search = false
`, nil)
	for _, tt := range []struct {
		name   string
		search bool
		pinned []string
	}{
		{"plain", false, nil},
		{"agent", true, []string{"gh__get_*"}},
		{"child", true, []string{"gh__get_*"}},
		{"repinned", true, []string{}},
		{"off", false, []string{"gh__get_*"}},
	} {
		p := cfg.Profiles[tt.name]
		if p.ToolSearch != tt.search || !slices.Equal(p.ToolSearchPinned, tt.pinned) || (tt.pinned != nil) != (p.ToolSearchPinned != nil) {
			t.Errorf("profile %q: ToolSearch %v, pinned %q; want %v, %q", tt.name, p.ToolSearch, p.ToolSearchPinned, tt.search, tt.pinned)
		}
	}
	for _, tt := range []struct{ name, text, want string }{
		{"not a boolean", "[profiles.p]\ntool_search = \"yes\"\n", "tool_search"},
		{"misspelled", "[profiles.p]\ntool_serch = true\n", `did you mean "tool_search"?`},
		{"bad glob", "[profiles.p]\ntool_search_pinned = [\"gh__[\"]\ntool_search = true\n", "profiles.p.tool_search_pinned[0]"},
		{"pins alone", "[profiles.p]\ntool_search_pinned = [\"gh__*\"]\n", `profile "p" sets tool_search_pinned without tool_search`},
		{"both starts", "[profiles.p]\ntool_search = true\ndynamic_toolsets = true\n", `profile "p" has both tool_search and dynamic_toolsets`},
		{"both inherited", "[profiles.q]\ndynamic_toolsets = true\n[profiles.p]\nextends = \"q\"\ntool_search = true\n", `profile "p" has both`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.toml", []byte(tt.text), env(nil))
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			for _, e := range configErrors(t, err) {
				if e.Line >= 2 && strings.Contains(e.Msg, tt.want) && strings.Contains(e.Error(), "test.toml:") {
					return
				}
			}
			t.Fatalf("no error naming test.toml:line and containing %q; got:\n%v", tt.want, err)
		})
	}
}
