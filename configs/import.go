package configs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// jsonServer is one entry of an mcpServers (Claude Desktop, Cursor) or
// servers (VS Code) object.
type jsonServer struct {
	Type     string            `json:"type"`
	Command  string            `json:"command"`
	Args     []string          `json:"args"`
	Env      map[string]string `json:"env"`
	Cwd      string            `json:"cwd"`
	URL      string            `json:"url"`
	Headers  map[string]string `json:"headers"`
	Disabled bool              `json:"disabled"`
}

// importedFields are the jsonServer keys; any other key is listed in a
// comment as ignored.
var importedFields = []string{"type", "command", "args", "env", "cwd", "url", "headers", "disabled"}

// Import converts a Claude Desktop, Cursor or VS Code MCP config — JSON with
// an "mcpServers" object, a "servers" object, or an "mcp": {"servers": …}
// object (VS Code settings, where comments and trailing commas are allowed) —
// to mcpmux TOML. Each server becomes one [upstreams.NAME] table, NAME being
// its key made into a valid prefix; the tables are sorted by NAME.
//
// ${VAR} and ${env:VAR} references become mcpmux ${VAR} references and
// ${userHome} becomes ${HOME}; any other $ (including VS Code's ${input:…} and
// ${workspaceFolder}) is escaped as $$ so it stays literal, with a comment
// asking to replace it. Errors name the server at fault.
// The returned slice is owned by the caller.
func Import(data []byte) ([]byte, error) {
	clean := stripJSONC(data)
	var root map[string]json.RawMessage
	if err := json.Unmarshal(clean, &root); err != nil {
		return nil, fmt.Errorf("import: %w", jsonError(clean, err))
	}
	rawServers, err := findServers(root)
	if err != nil {
		return nil, err
	}
	var servers map[string]json.RawMessage
	if err := json.Unmarshal(rawServers, &servers); err != nil {
		return nil, fmt.Errorf("import: servers must be an object of named servers: %w", err)
	}

	// Name servers in a stable order so that colliding keys get stable names.
	taken := map[string]bool{}
	tables := map[string]string{}
	for _, key := range slices.Sorted(maps.Keys(servers)) {
		name := uniqueName(sanitizePrefix(key), taken)
		table, err := importServer(key, name, servers[key])
		if err != nil {
			return nil, fmt.Errorf("import: server %q: %w", key, err)
		}
		tables[name] = table
	}

	var b strings.Builder
	b.WriteString(`# mcpmux config, converted from an MCP client's JSON config by ` + "`mcpmux import`" + `.
#
# Each server became one [upstreams.NAME] table; its tools are exposed as
# NAME__tool. ${VAR} is read from the environment when mcpmux starts, and $$ is
# a literal $. Review the file, add [profiles] to filter what clients see, and
# run ` + "`mcpmux check`" + ` to validate it.
`)
	if len(tables) == 0 {
		b.WriteString("\n# The file defined no servers.\n")
	}
	for _, name := range slices.Sorted(maps.Keys(tables)) {
		b.WriteString("\n" + tables[name])
	}
	return []byte(b.String()), nil
}

func findServers(root map[string]json.RawMessage) (json.RawMessage, error) {
	if s, ok := root["mcpServers"]; ok {
		return s, nil
	}
	if s, ok := root["servers"]; ok {
		return s, nil
	}
	if mcp, ok := root["mcp"]; ok {
		var inner map[string]json.RawMessage
		if err := json.Unmarshal(mcp, &inner); err == nil && inner["servers"] != nil {
			return inner["servers"], nil
		}
	}
	return nil, errors.New(`import: no "mcpServers", "servers" or "mcp": {"servers": …} object found`)
}

// importServer renders one server as a TOML table named name.
func importServer(key, name string, raw json.RawMessage) (string, error) {
	var s jsonServer
	if err := json.Unmarshal(raw, &s); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return "", fmt.Errorf("%s: want %s, got JSON %s", te.Field, te.Type, te.Value)
		}
		return "", err
	}
	var all map[string]json.RawMessage
	_ = json.Unmarshal(raw, &all) // cannot fail: raw just decoded into a struct
	var ignored []string
	for _, k := range slices.Sorted(maps.Keys(all)) {
		if !slices.Contains(importedFields, k) {
			ignored = append(ignored, k)
		}
	}

	var b strings.Builder
	header := "[upstreams." + tomlKey(name) + "]\n"
	if s.Disabled {
		return "# " + strings.TrimSuffix(header, "\n") + fmt.Sprintf(" — skipped: %q is disabled in the source file\n", key), nil
	}
	b.WriteString(header)
	if name != key {
		fmt.Fprintf(&b, "# from %s\n", strconv.Quote(key))
	}
	if len(ignored) > 0 {
		fmt.Fprintf(&b, "# ignored keys: %s\n", strings.Join(ignored, ", "))
	}
	conv := &importConverter{}

	switch {
	case s.Command != "" && s.URL != "":
		return "", errors.New("has both command and url")
	case s.Command == "" && s.URL == "":
		return "", errors.New("has neither command nor url")
	case s.Command != "":
		if s.Type != "" && s.Type != "stdio" {
			return "", fmt.Errorf("type %q needs a url, but the server has a command", s.Type)
		}
		if len(s.Headers) > 0 {
			return "", errors.New("headers apply only to servers with a url")
		}
		fmt.Fprintf(&b, "command = %s\n", conv.str(s.Command))
		if len(s.Args) > 0 {
			args := make([]string, len(s.Args))
			for i, a := range s.Args {
				args[i] = conv.str(a)
			}
			fmt.Fprintf(&b, "args = [%s]\n", strings.Join(args, ", "))
		}
		if len(s.Env) > 0 {
			fmt.Fprintf(&b, "env = %s\n", conv.table(s.Env))
		}
		if s.Cwd != "" {
			fmt.Fprintf(&b, "dir = %s\n", conv.str(s.Cwd))
		}
	default:
		transport, err := importTransport(s.Type, s.URL)
		if err != nil {
			return "", err
		}
		if transport != "" {
			fmt.Fprintf(&b, "transport = %q\n", transport)
		}
		fmt.Fprintf(&b, "url = %s\n", conv.str(s.URL))
		if len(s.Headers) > 0 {
			fmt.Fprintf(&b, "headers = %s\n", conv.table(s.Headers))
		}
	}
	if conv.placeholders {
		b.WriteString("# The source used ${…} placeholders other than environment variables (kept\n" +
			"# literally as $${…}); replace them with values or ${ENV} references.\n")
	}
	return b.String(), nil
}

// importTransport maps an entry's "type" to an explicit transport, checking
// that it fits the url.
func importTransport(typ, rawURL string) (string, error) {
	var transport string
	switch typ {
	case "", "ws", "websocket":
	case "sse":
		transport = TransportSSE
	case "http", "streamable-http", "streamableHttp":
		transport = TransportHTTP
	default:
		return "", fmt.Errorf("unknown type %q (want stdio, http, streamable-http or sse)", typ)
	}
	if strings.Contains(rawURL, "${") {
		return transport, nil // checked by Parse once the variables are known
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", errors.New("invalid url")
	}
	switch {
	case u.Host == "":
		return "", errors.New("url has no host")
	case u.Scheme == "http" || u.Scheme == "https":
		if typ == "ws" || typ == "websocket" {
			return "", fmt.Errorf("type %q needs a ws or wss url", typ)
		}
	case u.Scheme == "ws" || u.Scheme == "wss":
		if transport != "" {
			return "", fmt.Errorf("type %q needs an http or https url", typ)
		}
	default:
		return "", fmt.Errorf("url scheme %q is not http, https, ws or wss", u.Scheme)
	}
	return transport, nil
}

// importPlaceholderRE matches ${…} references: ${VAR}, ${VAR:-default},
// ${env:VAR} (Cursor, VS Code) and others such as ${input:id}.
var importPlaceholderRE = regexp.MustCompile(`\$\{[^}]*\}`)

// vscodeVariables are VS Code's predefined variables, which look like
// environment references but are not.
var vscodeVariables = map[string]bool{
	"workspaceFolder": true, "workspaceFolderBasename": true, "workspaceRoot": true,
	"file": true, "fileBasename": true, "fileDirname": true, "fileExtname": true,
	"relativeFile": true, "cwd": true, "pathSeparator": true, "execPath": true,
}

// importConverter renders TOML strings, converting placeholders.
type importConverter struct {
	placeholders bool // saw a ${…} that is not an environment variable
}

// str renders s as a TOML string in which mcpmux expands exactly the
// environment references of the source.
func (c *importConverter) str(s string) string {
	var b strings.Builder
	last := 0
	for _, m := range importPlaceholderRE.FindAllStringIndex(s, -1) {
		b.WriteString(strings.ReplaceAll(s[last:m[0]], "$", "$$"))
		ref := s[m[0]+2 : m[1]-1]
		name, _, _ := strings.Cut(strings.TrimPrefix(ref, "env:"), ":-")
		switch {
		case ref == "userHome":
			b.WriteString("${HOME}")
		case vscodeVariables[ref]:
			c.placeholders = true
			b.WriteString("$$" + s[m[0]+1:m[1]])
		case isEnvName(name) && strings.HasPrefix(ref, "env:"):
			b.WriteString("${" + name + "}")
		case isEnvName(name):
			b.WriteString("${" + ref + "}")
		default:
			c.placeholders = true
			b.WriteString("$$" + s[m[0]+1:m[1]])
		}
		last = m[1]
	}
	b.WriteString(strings.ReplaceAll(s[last:], "$", "$$"))
	return tomlQuote(b.String())
}

// table renders m as a one-line TOML inline table with sorted keys.
func (c *importConverter) table(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, tomlKey(k)+" = "+c.str(m[k]))
	}
	return "{ " + strings.Join(parts, ", ") + " }"
}

// sanitizePrefix turns a server key into a valid prefix: every run of
// characters outside A-Z a-z 0-9 - becomes one "-".
func sanitizePrefix(key string) string {
	var b strings.Builder
	dash := false
	for _, r := range key {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	if s := strings.Trim(b.String(), "-"); s != "" {
		return s
	}
	return "server"
}

// uniqueName returns name, or name-2, name-3, … when it is taken, and marks
// the result taken.
func uniqueName(name string, taken map[string]bool) string {
	out := name
	for i := 2; taken[out]; i++ {
		out = name + "-" + strconv.Itoa(i)
	}
	taken[out] = true
	return out
}

func tomlKey(k string) string {
	if isBareKey(k) {
		return k
	}
	return tomlQuote(k)
}

// tomlQuote renders s as a TOML basic string.
func tomlQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if r < 0x20 || r == 0x7f {
				fmt.Fprintf(&b, `\u%04X`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// stripJSONC blanks out // and /* */ comments and trailing commas, which VS
// Code's JSON files allow, keeping every newline so offsets keep their lines.
func stripJSONC(data []byte) []byte {
	out := bytes.Clone(data)
	blank := func(i, j int) {
		for ; i < j; i++ {
			if out[i] != '\n' {
				out[i] = ' '
			}
		}
	}
	lastComma := -1 // position of a comma with only blanks after it so far
	for i := 0; i < len(out); i++ {
		switch c := out[i]; {
		case c == '"':
			lastComma = -1
			for i++; i < len(out) && out[i] != '"'; i++ {
				if out[i] == '\\' {
					i++
				}
			}
		case c == '/' && i+1 < len(out) && out[i+1] == '/':
			j := bytes.IndexByte(out[i:], '\n')
			if j < 0 {
				j = len(out) - i
			}
			blank(i, i+j)
			i += j - 1
		case c == '/' && i+1 < len(out) && out[i+1] == '*':
			j := bytes.Index(out[i+2:], []byte("*/"))
			end := len(out)
			if j >= 0 {
				end = i + 2 + j + 2
			}
			blank(i, end)
			i = end - 1
		case c == ',':
			lastComma = i
		case c == '}' || c == ']':
			if lastComma >= 0 {
				out[lastComma] = ' '
			}
			lastComma = -1
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
		default:
			lastComma = -1
		}
	}
	return out
}

// jsonError adds the line to a JSON syntax error.
func jsonError(data []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line := 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))
		return fmt.Errorf("line %d: %w", line, err)
	}
	return err
}
