//go:build unix

package adversarial

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/viewmux/viewmux/integration/internal/itest"
)

// The adversarial table (issue 9): tools/call requests an
// attacker would write to make a typed upstream run something its profile
// does not allow, sent on every front door to both typed upstreams (HTTP
// and stdio; typed_upstream_test.go). The oracle is what the upstream's
// typed handlers would have executed: nothing, for every refusal (checked
// with a barrier call after each), and exactly the checked value for every
// allowed call.
//
// The profile's call rules (typedConfig):
//
//	shell_run  args       = { command = ["git status", "git log *"] }
//	read_file  args_regex = { path = ['^docs/[a-z0-9_/-]+\.md$'] }
//	open_link  args       = { link = ["https://docs.example.com/*"] }
//
// and secret_tool is denied.

// advKind is what viewmux must do with a case.
type advKind int

const (
	// advArgs: -32602 "Arguments not allowed for <tool>", exactly.
	advArgs advKind = iota
	// advAmbiguous: -32602, refused as an ambiguous message.
	advAmbiguous
	// advHidden: -32601 "Tool not found: <name>".
	advHidden
	// advAllowed: a result, and the upstream ran tool on value once.
	advAllowed
)

// advCase is one tools/call. In params, UP__ stands for the typed
// upstream's prefix.
type advCase struct {
	name   string
	kind   advKind
	params string
	tool   string // the upstream's own tool name (advArgs, advAllowed)
	value  string // advAllowed: what the upstream must run
	shown  string // advHidden: the name in the message, UP__ for the prefix
}

// advArgsCase is a call of tool with the arguments text args that its
// call rule refuses.
func advArgsCase(name, tool, args string) advCase {
	return advCase{name: name, kind: advArgs, tool: tool, params: `{"name":"UP__` + tool + `","arguments":` + args + `}`}
}

// advAllowedCase is a call of tool with the arguments text args that its
// call rule allows; the upstream must run it on value.
func advAllowedCase(name, tool, args, value string) advCase {
	return advCase{name: name, kind: advAllowed, tool: tool, value: value, params: `{"name":"UP__` + tool + `","arguments":` + args + `}`}
}

// advString returns s as a JSON string. escapeAll writes every rune
// outside printable ASCII letters, digits and space as a \u escape (so
// ";" is \u003b); otherwise only what JSON requires is escaped.
func advString(s string, escapeAll bool) string {
	if !escapeAll {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.Encode(s) // a string always encodes
		return strings.TrimSuffix(b.String(), "\n")
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == ' ' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z':
			b.WriteRune(r)
		case r > 0xffff:
			r1, r2 := rune(0xd800+((r-0x10000)>>10)), rune(0xdc00+((r-0x10000)&0x3ff))
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// advMetacharacters are the runes a call rule's glob wildcard never
// matches, each in the shape an injection would use it. Tab is a control
// character (Cc) like newline, so it is refused too, although a shell only
// splits words on it.
var advMetacharacters = []struct{ name, text string }{
	{"semicolon", ";x"}, {"and", "&&x"}, {"background", "&x"}, {"pipe", "|x"}, {"or", "||x"},
	{"backtick", "`x`"}, {"dollar paren", "$(x)"}, {"dollar brace", "${IFS}x"}, {"dollar", "$x"},
	{"paren", "(x)"}, {"less", "<x"}, {"greater", ">x"}, {"append", ">>x"}, {"backslash", `\x`},
	{"single quote", "'x'"}, {"double quote", `"x"`},
	{"newline", "\nx"}, {"carriage return", "\rx"}, {"tab", "\tx"}, {"NUL", "\x00x"},
	{"vertical tab", "\vx"}, {"form feed", "\fx"}, {"escape", "\x1bx"}, {"DEL", "\x7fx"},
	{"next line U+0085", "\u0085x"}, {"C1 U+009B", "\u009bx"},
}

// advTable returns the tools/call cases.
func advTable() []advCase {
	var cases []advCase
	// Every metacharacter and control character after an allowed prefix,
	// at the start of what `*` must match and after an allowed option,
	// spelled as JSON requires and fully \u-escaped.
	for _, m := range advMetacharacters {
		for _, v := range []struct{ where, value string }{
			{"after the prefix", "git log " + m.text},
			{"after an option", "git log --oneline" + m.text + " rm -rf /tmp/x"},
			{"after git status", "git status" + m.text},
		} {
			cases = append(cases,
				advArgsCase("shell_run: "+m.name+" "+v.where, "shell_run", `{"command":`+advString(v.value, false)+`}`),
				advArgsCase("shell_run: "+m.name+" "+v.where+", escaped", "shell_run", `{"command":`+advString(v.value, true)+`}`))
		}
		cases = append(cases,
			advArgsCase("open_link: "+m.name, "open_link", `{"link":`+advString(itest.TypedLinkPrefix+"a"+m.text, false)+`}`),
			advArgsCase("read_file: "+m.name, "read_file", `{"path":`+advString("docs/a"+m.text+".md", false)+`}`))
	}
	cases = append(cases,
		// Values the rules do not admit at all.
		advArgsCase("shell_run: another command", "shell_run", `{"command":"rm -rf /tmp/x"}`),
		advArgsCase("shell_run: git log without its space", "shell_run", `{"command":"git logx"}`),
		advArgsCase("shell_run: prefix in another case", "shell_run", `{"command":"GIT LOG -5"}`),
		advArgsCase("shell_run: leading space", "shell_run", `{"command":" git status"}`),
		advArgsCase("shell_run: trailing newline", "shell_run", `{"command":"git status\n"}`),
		advArgsCase("shell_run: empty", "shell_run", `{"command":""}`),
		advArgsCase("read_file: absolute path", "read_file", `{"path":"/etc/passwd"}`),
		advArgsCase("read_file: dot-dot", "read_file", `{"path":"docs/../etc/passwd.md"}`),
		advArgsCase("read_file: trailing newline", "read_file", `{"path":"docs/a.md\n"}`),
		advArgsCase("read_file: newline before the suffix", "read_file", `{"path":"docs/a\n.md"}`),
		advArgsCase("read_file: regex matches only a part", "read_file", `{"path":"x/docs/a.md"}`),
		advArgsCase("read_file: upper case", "read_file", `{"path":"docs/A.md"}`),
		advArgsCase("open_link: another host", "open_link", `{"link":"https://docs.example.com.evil.example/"}`),
		// Values that are not strings.
		advArgsCase("shell_run: command an array", "shell_run", `{"command":["git status"]}`),
		advArgsCase("shell_run: command an object", "shell_run", `{"command":{"git status":true}}`),
		advArgsCase("shell_run: command null", "shell_run", `{"command":null}`),
		advArgsCase("shell_run: command a number", "shell_run", `{"command":1}`),
		advArgsCase("shell_run: command true", "shell_run", `{"command":true}`),
		advArgsCase("read_file: path an array", "read_file", `{"path":["docs/a.md","/etc/passwd"]}`),
		// Arguments that are not an object, or lack the named one.
		advArgsCase("shell_run: arguments a string", "shell_run", `"git status"`),
		advArgsCase("shell_run: arguments an array", "shell_run", `[{"command":"git status"}]`),
		advArgsCase("shell_run: arguments null", "shell_run", `null`),
		advArgsCase("shell_run: arguments empty", "shell_run", `{}`),
		advArgsCase("shell_run: command under another name", "shell_run", `{"cmd":"rm -rf /tmp/x"}`),
		// encoding/json would bind COMMAND to the command field: it is not
		// the named argument, so the named one is missing.
		advArgsCase("shell_run: COMMAND alone", "shell_run", `{"COMMAND":"rm -rf /tmp/x"}`),
		advArgsCase("shell_run: Command alone", "shell_run", `{"Command":"rm -rf /tmp/x"}`),
		advArgsCase("open_link: link with a Kelvin sign alone", "open_link", `{"lin\u212a":"https://evil.example/"}`),
		// other_args is false by default.
		advArgsCase("shell_run: an argument the rule does not name", "shell_run", `{"command":"git status","cwd":"/"}`),
		advArgsCase("read_file: an argument the rule does not name", "read_file", `{"path":"docs/a.md","follow_symlinks":true}`),
		advCase{name: "shell_run: no arguments", kind: advArgs, tool: "shell_run", params: `{"name":"UP__shell_run"}`},
		// Another spelling of "arguments" alone is ambiguous: mcp-go would
		// bind it case-insensitively while viewmux reads "arguments" only,
		// so it is refused before any rule, as two spellings are.
		advCase{name: "shell_run: Arguments alone", kind: advAmbiguous, tool: "shell_run", params: `{"name":"UP__shell_run","Arguments":{"command":"rm -rf /tmp/x"}}`},
		advCase{name: "shell_run: argument\u017f alone", kind: advAmbiguous, tool: "shell_run", params: `{"name":"UP__shell_run","argument` + "\u017f" + `":{"command":"rm -rf /tmp/x"}}`},
		advCase{name: "shell_run: ARGUMENTS alone, allowed value", kind: advAmbiguous, tool: "shell_run", params: `{"name":"UP__shell_run","ARGUMENTS":{"command":"git status"}}`},
	)

	// The case-key and duplicate-key bypass: two spellings of one key
	// that mcp-go's decoder (encoding/json: case-insensitive struct
	// fields, the last of equal keys wins) reads as one, with an allowed
	// value in one and a forbidden value in the other.
	const rm = `"rm -rf /tmp/x"`
	for _, c := range []struct{ name, params string }{
		{"command and Command", `{"name":"UP__shell_run","arguments":{"command":"git status","Command":` + rm + `}}`},
		{"Command and command", `{"name":"UP__shell_run","arguments":{"Command":` + rm + `,"command":"git status"}}`},
		{"command and COMMAND", `{"name":"UP__shell_run","arguments":{"command":"git status","COMMAND":` + rm + `}}`},
		{"command twice, refused value last", `{"name":"UP__shell_run","arguments":{"command":"git status","command":` + rm + `}}`},
		{"command twice, refused value first", `{"name":"UP__shell_run","arguments":{"command":` + rm + `,"command":"git status"}}`},
		{"command twice, one spelled with escapes", `{"name":"UP__shell_run","arguments":{"comm\u0061nd":` + rm + `,"command":"git status"}}`},
		{"command and an escaped Command", `{"name":"UP__shell_run","arguments":{"command":"git status","\u0043ommand":` + rm + `}}`},
		{"command and cOmMaNd, both escaped", `{"name":"UP__shell_run","arguments":{"\u0063ommand":"git status","c\u004fm\u004da\u004ed":` + rm + `}}`},
		{"link and lin\u212a (Kelvin sign)", `{"name":"UP__open_link","arguments":{"link":"` + itest.TypedLinkPrefix + `a","lin` + "\u212a" + `":"https://evil.example/"}}`},
		{"link and lin\u212a (Kelvin sign), escaped", `{"name":"UP__open_link","arguments":{"link":"` + itest.TypedLinkPrefix + `a","lin\u212a":"https://evil.example/"}}`},
		{"lin\u212a (Kelvin sign) and link", `{"name":"UP__open_link","arguments":{"lin\u212a":"https://evil.example/","link":"` + itest.TypedLinkPrefix + `a"}}`},
		{"link and LINK", `{"name":"UP__open_link","arguments":{"link":"` + itest.TypedLinkPrefix + `a","LINK":"https://evil.example/"}}`},
		{"path and Path", `{"name":"UP__read_file","arguments":{"path":"docs/a.md","Path":"/etc/passwd"}}`},
		{"arguments twice", `{"name":"UP__shell_run","arguments":{"command":"git status"},"arguments":{"command":` + rm + `}}`},
		{"arguments twice, refused first", `{"name":"UP__shell_run","arguments":{"command":` + rm + `},"arguments":{"command":"git status"}}`},
		{"arguments and Arguments", `{"name":"UP__shell_run","arguments":{"command":"git status"},"Arguments":{"command":` + rm + `}}`},
		{"arguments and ARGUMENTS", `{"name":"UP__shell_run","arguments":{"command":"git status"},"ARGUMENTS":{"command":` + rm + `}}`},
		{"arguments and argument\u017f (long s)", `{"name":"UP__shell_run","arguments":{"command":"git status"},"argument` + "\u017f" + `":{"command":` + rm + `}}`},
		{"arguments and argument\u017f (long s), escaped", `{"name":"UP__shell_run","arguments":{"command":"git status"},"argument\u017f":{"command":` + rm + `}}`},
		{"name twice, hidden last", `{"name":"UP__shell_run","name":"UP__secret_tool","arguments":{"command":"git status"}}`},
		{"name twice, hidden first", `{"name":"UP__secret_tool","name":"UP__shell_run","arguments":{"command":"git status"}}`},
		{"name and Name (the upstream's own hidden name)", `{"name":"UP__shell_run","Name":"secret_tool","arguments":{"command":"git status"}}`},
		{"name and NAME", `{"name":"UP__shell_run","NAME":"secret_tool","arguments":{"command":"git status"}}`},
		{"name and an escaped n\u0061me", `{"name":"UP__shell_run","n\u0061me":"UP__secret_tool","arguments":{"command":"git status"}}`},
	} {
		cases = append(cases, advCase{name: "ambiguous: " + c.name, kind: advAmbiguous, params: c.params})
	}

	// Hidden and unknown names, against the typed upstream (the recording
	// tests run the full list of name variants against the recorder).
	for _, h := range []struct{ json, shown string }{
		{`"UP__secret_tool"`, "UP__secret_tool"},
		{`"UP__secret\u005ftool"`, "UP__secret_tool"},
		{`"UP__Secret_tool"`, "UP__Secret_tool"},
		{`"UP__SHELL_RUN"`, "UP__SHELL_RUN"},
		{`"UP__shell_run "`, "UP__shell_run "},
		{`" UP__shell_run"`, " UP__shell_run"},
		{`"UP__shell_run\n"`, "UP__shell_run?"},
		{`"UP__shell_run\u0000"`, "UP__shell_run?"},
		{`"UP__secret_tool\u200b"`, "UP__secret_tool?"},
		{`"UP__s\u0435cret_tool"`, "UP__s\u0435cret_tool"}, // Cyrillic e
		{`"UP__\uff53ecret_tool"`, "UP__\uff53ecret_tool"}, // fullwidth s
		{`"UP__shell\u2010run"`, "UP__shell\u2010run"},     // hyphen for underscore
		{`"secret_tool"`, "secret_tool"},                   // the upstream's own name
		{`"shell_run"`, "shell_run"},
		{`"UP_shell_run"`, "UP_shell_run"},
		{`"UP__shell_run__x"`, "UP__shell_run__x"},
		{`["UP__shell_run"]`, ""},
		{`{"name":"UP__shell_run"}`, ""},
		{`1`, ""},
		{`null`, ""},
		{`true`, ""},
	} {
		cases = append(cases, advCase{name: "hidden: " + h.json, kind: advHidden, shown: h.shown,
			params: `{"name":` + h.json + `,"arguments":{"command":"git status"}}`})
	}

	// Allowed values reach the upstream, which runs exactly them.
	cases = append(cases,
		advAllowedCase("shell_run: git status", "shell_run", `{"command":"git status"}`, "git status"),
		advAllowedCase("shell_run: git status, escaped", "shell_run", `{"command":"git\u0020st\u0061tus"}`, "git status"),
		advAllowedCase("shell_run: git log --oneline -5", "shell_run", `{"command":"git log --oneline -5"}`, "git log --oneline -5"),
		advAllowedCase("shell_run: git log with an empty star", "shell_run", `{"command":"git log "}`, "git log "),
		advAllowedCase("shell_run: git log --format=%H", "shell_run", `{"command":"git log --format=%H -- docs/a.md"}`, "git log --format=%H -- docs/a.md"),
		advAllowedCase("shell_run: git log, non-ASCII", "shell_run", `{"command":"git log --author=Jos\u00e9"}`, "git log --author=Jos\u00e9"),
		// Decided: U+2028 and U+2029 (separators, Zl/Zp), zero-width and
		// bidi characters (format, Cf) are neither control characters
		// (Cc) nor shell metacharacters, so `*` matches them, as docs/configuration.md
		// says; a POSIX shell reads them as ordinary word characters. A
		// rule that must exclude them says so with args_regex. The
		// upstream runs the value exactly as checked.
		advAllowedCase("shell_run: git log, line separator U+2028", "shell_run", `{"command":"git log \u2028x"}`, "git log \u2028x"),
		advAllowedCase("shell_run: git log, zero-width space", "shell_run", `{"command":"git log \u200bx"}`, "git log \u200bx"),
		advAllowedCase("read_file: docs/readme.md", "read_file", `{"path":"docs/readme.md"}`, "docs/readme.md"),
		advAllowedCase("read_file: nested", "read_file", `{"path":"docs/a/b_c-d.md"}`, "docs/a/b_c-d.md"),
		advAllowedCase("open_link: a docs page", "open_link", `{"link":"`+itest.TypedLinkPrefix+`guide/intro"}`, itest.TypedLinkPrefix+"guide/intro"),
		// The envelope's other members are not arguments.
		advCase{name: "shell_run: with _meta", kind: advAllowed, tool: "shell_run", value: "git status",
			params: `{"name":"UP__shell_run","arguments":{"command":"git status"},"_meta":{"trace":"t;rm -rf /"}}`},
	)
	return cases
}

// TestAdversarialCallRules runs advTable on every door against both typed
// upstreams: every refusal answers as docs/protocol.md says and leaves the upstream
// with nothing executed; every allowed call runs exactly its value.
func TestAdversarialCallRules(t *testing.T) {
	t.Parallel()
	env := itest.StartTyped(t)
	cases := advTable()
	for _, d := range env.Doors() {
		t.Run(d.Name, func(t *testing.T) {
			c := d.Open(t)
			for i, up := range env.Ups {
				prefix := up.Name + "__"
				t.Run(up.Name, func(t *testing.T) {
					for _, tc := range cases {
						t.Run(tc.name, func(t *testing.T) {
							params := strings.ReplaceAll(tc.params, "UP__", prefix)
							m := env.Marks(t)
							a := c.Do(t, "tools/call", params)
							if tc.kind == advAllowed {
								if a.Msg.Error != nil || a.Msg.Result == nil || d.Modern && a.Status != 200 {
									t.Fatalf("%s: want a result, got %s", params, a)
								}
								env.CheckExecuted(t, m, i, tc.tool, tc.value)
								return
							}
							advCheckRefusal(t, d, a, tc, prefix, params)
							env.CheckNothingExecuted(t, c, m)
						})
					}
				})
			}
		})
	}
}

// advCheckRefusal checks viewmux's answer to a case it must refuse.
func advCheckRefusal(t *testing.T, d itest.RecDoor, a itest.RecAnswer, tc advCase, prefix, params string) {
	t.Helper()
	e := a.Msg.Error
	if e == nil {
		t.Errorf("%s: want an error, got %s", params, a)
		return
	}
	switch tc.kind {
	case advArgs:
		itest.WantArgsNotAllowed(t, a.DriveError(), prefix+tc.tool, params)
	case advAmbiguous:
		if e.Code != mcp.INVALID_PARAMS || !strings.HasPrefix(e.Message, "Arguments not allowed for ") || !strings.Contains(e.Message, "ambiguous") {
			t.Errorf("%s: got %s, want -32602 \"Arguments not allowed for …: ambiguous message …\"", params, a)
		}
	case advHidden:
		if d.Modern && tc.shown == "" {
			// A name that is not a string has no Mcp-Name header to
			// match, so 2026-07-28's header check refuses it first.
			if e.Code != mcp.HEADER_MISMATCH {
				t.Errorf("%s: got %s, want -32020 (no Mcp-Name for a name that is not a string)", params, a)
			}
			break
		}
		itest.WantToolNotFound(t, a.DriveError(), strings.ReplaceAll(tc.shown, "UP__", prefix))
	}
	if d.Modern {
		if want := map[int]int{mcp.INVALID_PARAMS: 400, mcp.METHOD_NOT_FOUND: 404, mcp.HEADER_MISMATCH: 400}[e.Code]; want != 0 && a.Status != want {
			t.Errorf("2026-07-28 error %d came with HTTP %d, want %d", e.Code, a.Status, want)
		}
	}
}

// advRaw is a message no RecClient writes: a batch, or an envelope with a
// second spelling of one of its keys. %[1]s in body is the params, %[2]d
// an id; UP__ stands for the typed upstream's prefix.
type advRaw struct {
	name, body, params string
	// lineBreaks marks a body with raw line breaks, which the stdio door's
	// own framing splits into several messages before viewmux reads them.
	lineBreaks bool
	// runs is what the upstream may run: "" for nothing; otherwise the
	// message may be answered with a result, and then the upstream ran
	// shell_run on exactly runs.
	runs string
}

// advRaws are the whole-message cases. viewmux reads the envelope with
// exact keys; mcp-go, which answers what viewmux does not route, matches
// them case-insensitively: whichever reads a message, a hidden tool or a
// refused argument must not run.
var advRaws = []advRaw{
	{name: "batch of one hidden call", body: `[{"jsonrpc":"2.0","id":%[2]d,"method":"tools/call","params":%[1]s}]`,
		params: `{"name":"UP__secret_tool","arguments":{"command":"rm -rf /tmp/x"}}`},
	{name: "batch of an allowed and a refused call", body: `[{"jsonrpc":"2.0","id":%[2]d,"method":"tools/call","params":{"name":"UP__shell_run","arguments":{"command":"git status"}}},` +
		`{"jsonrpc":"2.0","id":1%[2]d,"method":"tools/call","params":%[1]s}]`,
		params: `{"name":"UP__shell_run","arguments":{"command":"git log; rm -rf /tmp/x"}}`},
	{name: "method ping, Method tools/call (hidden)", body: `{"jsonrpc":"2.0","id":%[2]d,"method":"ping","Method":"tools/call","params":%[1]s}`,
		params: `{"name":"UP__secret_tool","arguments":{"command":"rm -rf /tmp/x"}}`},
	{name: "method ping, Method tools/call (refused arguments)", body: `{"jsonrpc":"2.0","id":%[2]d,"method":"ping","Method":"tools/call","params":%[1]s}`,
		params: `{"name":"UP__shell_run","arguments":{"command":"rm -rf /tmp/x"}}`},
	{name: "METHOD tools/call alone", body: `{"jsonrpc":"2.0","id":%[2]d,"METHOD":"tools/call","params":%[1]s}`,
		params: `{"name":"UP__shell_run","arguments":{"command":"rm -rf /tmp/x"}}`},
	{name: "ID instead of id", body: `{"jsonrpc":"2.0","ID":%[2]d,"method":"tools/call","params":%[1]s}`,
		params: `{"name":"UP__shell_run","arguments":{"command":"rm -rf /tmp/x"}}`},
	{name: "method twice, tools/call last", body: `{"jsonrpc":"2.0","id":%[2]d,"method":"ping","method":"tools/call","params":%[1]s}`,
		params: `{"name":"UP__shell_run","arguments":{"command":"rm -rf /tmp/x"}}`},
	{name: "params twice, refused last", body: `{"jsonrpc":"2.0","id":%[2]d,"method":"tools/call","params":{"name":"UP__shell_run","arguments":{"command":"git status"}},"params":%[1]s}`,
		params: `{"name":"UP__shell_run","arguments":{"command":"rm -rf /tmp/x"}}`},
	{name: "params twice, refused first", body: `{"jsonrpc":"2.0","id":%[2]d,"method":"tools/call","params":%[1]s,"params":{"name":"UP__shell_run","arguments":{"command":"git status"}}}`,
		params: `{"name":"UP__shell_run","arguments":{"command":"rm -rf /tmp/x"}}`},
	// viewmux routes the params it checked; Params is never read, by it or
	// by the upstream, which is sent the checked params alone.
	// A line break between tokens is whitespace to a JSON reader, and the
	// end of a message to a stdio upstream: the second line would be a
	// request of its own that viewmux never checked. The allowed call runs;
	// the smuggled one must not.
	{name: "a line break smuggles a second request", lineBreaks: true,
		body:   "{\"jsonrpc\":\"2.0\",\"id\":%[2]d,\"method\":\"tools/call\",\"params\":%[1]s}",
		params: "{\"name\":\"UP__shell_run\",\"arguments\":{\"command\":\"git status\"},\"x\":[\n{\"jsonrpc\":\"2.0\",\"id\":77,\"method\":\"tools/call\",\"params\":{\"name\":\"shell_run\",\"arguments\":{\"command\":\"rm -rf /tmp/x\"}}}\n]}",
		runs:   "git status"},
	{name: "params and Params", body: `{"jsonrpc":"2.0","id":%[2]d,"method":"tools/call","params":{"name":"UP__shell_run","arguments":{"command":"git status"}},"Params":%[1]s}`,
		params: `{"name":"UP__shell_run","arguments":{"command":"rm -rf /tmp/x"}}`, runs: "git status"},
}

// TestAdversarialEnvelopes runs advRaws on every door against both typed
// upstreams: each is answered (an error, or for runs a result) and the
// upstream runs nothing it was not allowed to.
func TestAdversarialEnvelopes(t *testing.T) {
	env := itest.StartTyped(t)
	for _, d := range env.Doors() {
		t.Run(d.Name, func(t *testing.T) {
			c := d.Open(t)
			for i, up := range env.Ups {
				prefix := up.Name + "__"
				t.Run(up.Name, func(t *testing.T) {
					for n, tc := range advRaws {
						t.Run(tc.name, func(t *testing.T) {
							if tc.lineBreaks && d.Name == "stdio" {
								t.Skip("on the stdio door a line break ends the client's own message: each line is a message of its own, checked as such")
							}
							params := strings.ReplaceAll(tc.params, "UP__", prefix)
							body := strings.ReplaceAll(tc.body, "UP__", prefix)
							id := 9000 + n
							m := env.Marks(t)
							answer, status := advSendRaw(t, c, fmt.Sprintf(body, params, id), params)
							var msg struct {
								Result json.RawMessage `json:"result"`
								Error  *itest.RPCError `json:"error"`
							}
							isResult := json.Unmarshal(answer, &msg) == nil && msg.Result != nil && msg.Error == nil
							switch {
							case isResult && tc.runs != "":
								env.CheckExecuted(t, m, i, "shell_run", tc.runs)
								return
							case isResult:
								t.Errorf("want an error, got HTTP %d %s", status, answer)
							case msg.Error == nil && status < 400 && (status != 202 || len(answer) > 0):
								// 202 with no body: read as a notification,
								// which is answered with nothing.
								t.Errorf("want a JSON-RPC error, an HTTP error status or no answer, got HTTP %d %q", status, answer)
							}
							env.CheckNothingExecuted(t, c, m)
						})
					}
				})
			}
		})
	}
}

// advSendRaw sends body on c: on the stateless 2026-07-28 door with the
// protocol's headers and with params given its _meta in body, elsewhere
// as is (see TypedRawAnswer).
func advSendRaw(t *testing.T, c itest.RecClient, body, params string) ([]byte, int) {
	t.Helper()
	mc, ok := c.(*itest.RecModern)
	if !ok {
		return itest.TypedRawAnswer(t, c, body)
	}
	modern := itest.WithModernMeta(params)
	body = strings.Replace(body, params, modern, 1)
	h := map[string]string{mcp.HeaderProtocolVersion: mcp.ProtocolVersion20260728}
	for k, v := range mcp.StandardHeaders(mcp.ProtocolVersion20260728, mcp.MethodToolsCall, json.RawMessage(modern)) {
		h[k] = v
	}
	r := itest.RawPost(t, mc.URL, h, body)
	if r.RawMsg != nil {
		return r.RawMsg, r.Status
	}
	return bytes.TrimSpace(r.Body), r.Status
}
