package configs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/viewmux/viewmux/internal/termsafe"
)

// ImportFile is one client config file given to ImportFiles.
type ImportFile struct {
	// Name is the file's path as the user named it; notes and comments
	// show it, and VS Code's envFile and ${workspaceFolder} resolve
	// against its directory.
	Name string
	Data []byte
	// ReadFile reads a file an entry refers to (VS Code's envFile). Nil
	// means such files are not read, and the loss is noted.
	ReadFile func(path string) ([]byte, error)
	// Optional marks a file found by --scan rather than named: one that
	// holds no MCP servers object is skipped with a note, not an error;
	// and a .mcp.json (Claude Code's project file, which comes with the
	// repository it is in) is imported active only as far as Claude
	// approves its servers for its directory.
	Optional bool
	// Workspace marks a file that comes with a workspace (a repository
	// someone else may have written) rather than from the user: a
	// project's .vscode/mcp.json or .cursor/mcp.json (see WorkspaceFile).
	// A .mcp.json is one by its name. When --scan found it (Optional),
	// its servers are written as comments unless TrustWorkspace is set
	// or, for a .mcp.json, Claude Code records the user's approval.
	Workspace bool
	// TrustWorkspace (import --trust-workspace) imports the servers of a
	// workspace file --scan found active, except those its client records
	// the user rejected or disabled.
	TrustWorkspace bool
	// Claude, for a .mcp.json, is what Claude Code records about the
	// file's directory: the user's approvals and rejections of its
	// servers, and the servers the user disabled there. Nil means none is
	// known: a scanned .mcp.json then has nothing approved, and a named
	// one nothing disabled.
	Claude *ClaudeState
	// ClaudeSettings, for a .mcp.json, is Claude Code's user settings
	// file, ~/.claude/settings.json, whose enableAllProjectMcpServers,
	// enabledMcpjsonServers and disabledMcpjsonServers answer for every
	// project. A project's own .claude/settings*.json comes with the
	// repository, like the .mcp.json, and is never read. Nil: none known.
	ClaudeSettings *ClaudeState
}

// claudeSettings is what import reads of a Claude Code settings file.
type claudeSettings struct {
	EnabledMcpjsonServers      []string `json:"enabledMcpjsonServers"`
	DisabledMcpjsonServers     []string `json:"disabledMcpjsonServers"`
	EnableAllProjectMcpServers bool     `json:"enableAllProjectMcpServers"`
}

// ClaudeState is Claude Code's per-user state file, ~/.claude.json.
type ClaudeState struct {
	Name string // its path, for notes
	Data []byte
}

// claudeProject is what ~/.claude.json keeps under "projects" for one
// project directory: that project's own servers, the servers of any scope
// the user turned off there (/mcp disable), and the user's answers about
// the servers of the directory's .mcp.json.
type claudeProject struct {
	MCPServers                 json.RawMessage `json:"mcpServers"`
	DisabledMcpServers         []string        `json:"disabledMcpServers"`
	EnabledMcpjsonServers      []string        `json:"enabledMcpjsonServers"`
	DisabledMcpjsonServers     []string        `json:"disabledMcpjsonServers"`
	EnableAllProjectMcpServers bool            `json:"enableAllProjectMcpServers"`
}

// parseClaudeProjects reads the "projects" of a ~/.claude.json.
func parseClaudeProjects(data []byte) (map[string]claudeProject, error) {
	clean := stripJSONC(data)
	var root struct {
		Projects json.RawMessage `json:"projects"`
	}
	if err := json.Unmarshal(clean, &root); err != nil {
		return nil, jsonError(clean, err)
	}
	var projects map[string]claudeProject
	if len(root.Projects) > 0 {
		if err := json.Unmarshal(root.Projects, &projects); err != nil {
			return nil, fmt.Errorf(`"projects" must be an object of projects: %w`, typeError(err))
		}
	}
	return projects, nil
}

// ImportNote is one thing ImportFiles has to tell the user about a file.
type ImportNote struct {
	File   string // the ImportFile's Name
	Server string // the server's key in the file; "" for the file as a whole
	Msg    string
	// Lost is set when something of the source is not carried over (or no
	// longer means what it meant); --strict fails on those. Notes without
	// it are informational: a rename, where a value came from, what to set.
	Lost bool
}

// String renders n as one stderr line: `import: FILE: server "x": msg`.
func (n ImportNote) String() string {
	s := "import: " + n.File + ": "
	if n.Server != "" {
		s += fmt.Sprintf("server %q", n.Server)
		// "server "x" is mounted as …" reads on; other notes follow a colon.
		if !strings.HasPrefix(n.Msg, "is ") && !strings.HasPrefix(n.Msg, "was ") && !strings.HasPrefix(n.Msg, "of ") && !strings.HasPrefix(n.Msg, "identical ") {
			s += ":"
		}
		s += " "
	}
	return s + n.Msg
}

// ImportResult is the output of ImportFiles.
type ImportResult struct {
	TOML  []byte       // the config; every ${VAR} in it must be set to load it
	Notes []ImportNote // in file order, then server order; owned by the caller
}

// Lost counts the notes that report something not carried over.
func (r *ImportResult) Lost() int {
	n := 0
	for _, note := range r.Notes {
		if note.Lost {
			n++
		}
	}
	return n
}

// ImportFiles converts MCP client config files to one viewmux TOML config:
// Claude Desktop, Claude Code (.mcp.json and ~/.claude.json with its
// per-project servers), Cursor, VS Code (mcp.json, or settings.json's
// "mcp"; JSONC), Windsurf, TBXark mcp-proxy and mcp-hub. Each server becomes
// one [upstreams.NAME] table, NAME being its key made into a valid, unique
// prefix; tables are sorted by NAME. The same server in two files is
// imported once.
//
// Whatever is not carried over, or is carried differently, is reported as
// a note (see ImportNote); a TOML comment alone is never the only record.
// Errors name the file, and the server or the line:column at fault.
func ImportFiles(files []ImportFile) (*ImportResult, error) {
	im := &importer{byName: map[string]*importedServer{}, wholeEnvNoted: map[string]bool{}}
	for _, f := range files {
		if err := im.file(f); err != nil {
			return nil, err
		}
	}
	return &ImportResult{TOML: im.render(), Notes: im.notes}, nil
}

// importer accumulates the servers, tokens and notes of every file.
type importer struct {
	byName  map[string]*importedServer // upstream name → server
	tokens  []importedToken
	listen  string
	sources []string // "FILE (kind)", for the header comment
	notes   []ImportNote
	// wholeEnvNoted holds the files whose client passes its whole
	// environment and that were said so of already.
	wholeEnvNoted map[string]bool
}

// importedServer is one rendered [upstreams.NAME] table.
type importedServer struct {
	name     string
	file     string
	key      string   // the key in the source file
	origin   string   // e.g. `project "/src/app"`; "" for top-level servers
	body     []string // `key = value` lines, compared to deduplicate
	disabled string   // why it is written as a comment only; "" when active
}

// importedToken is one TBXark auth token and the upstreams it opens:
// either its hash, or the variable viewmux reads it from.
type importedToken struct {
	sha256    string
	envVar    string // written as token = "${envVar}"; sha256 is then ""
	file      string
	upstreams []string // sorted upstream names
}

func (im *importer) note(file, server string, lost bool, format string, args ...any) {
	im.notes = append(im.notes, ImportNote{File: file, Server: server, Msg: fmt.Sprintf(format, args...), Lost: lost})
}

// errNoServers is the error of a file that holds no servers object.
var errNoServers = errors.New(`no "mcpServers", "servers" or "mcp": {"servers": …} object found`)

// serverGroup is one object of named servers in a file.
type serverGroup struct {
	origin     string // "" or `project "/path"`
	namePrefix string // prepended to every key to form the upstream name
	raw        json.RawMessage
	where      string // JSON path of the object, for errors
	// gate, when set, is asked about each server: whether its client has
	// it switched off, and what to tell the user. Nil: every server is on.
	gate func(key string) serverGate
}

// serverGate is what a client's own state says about one server.
type serverGate struct {
	off  string // written as a comment: "# [upstreams.x] — off"; "" = on
	note string // "" = nothing to say
	lost bool
}

// fileCtx is what converting one file's servers needs to know.
type fileCtx struct {
	name      string
	kind      string
	dir       string            // the file's directory
	workspace string            // VS Code workspace folder; "" when unknown
	inputs    map[string]string // VS Code input id → description
	readFile  func(string) ([]byte, error)
	tbx       *tbxProxy // TBXark's mcpProxy, or nil
	scanned   bool      // found by --scan (ImportFile.Optional)
	trusted   bool      // ImportFile.TrustWorkspace
	claude    *ClaudeState
	settings  *ClaudeState // ImportFile.ClaudeSettings
}

func (im *importer) file(f ImportFile) error {
	clean := stripJSONC(f.Data)
	var root map[string]json.RawMessage
	if err := json.Unmarshal(clean, &root); err != nil {
		return fmt.Errorf("import %s: %w", f.Name, jsonError(clean, err))
	}
	fc := &fileCtx{name: f.Name, dir: filepath.Dir(f.Name), readFile: f.ReadFile, scanned: f.Optional, trusted: f.TrustWorkspace, claude: f.Claude, settings: f.ClaudeSettings}
	if filepath.Base(fc.dir) == ".vscode" {
		if abs, err := filepath.Abs(filepath.Dir(fc.dir)); err == nil {
			fc.workspace = abs
		}
	}
	groups, err := im.detect(fc, root)
	if errors.Is(err, errNoServers) && f.Optional {
		im.note(f.Name, "", false, "holds no MCP servers: skipped")
		return nil
	}
	if err != nil {
		return fmt.Errorf("import %s: %w", f.Name, err)
	}
	im.sources = append(im.sources, fmt.Sprintf("%s (%s)", f.Name, fc.kind))
	im.note(f.Name, "", false, "read as %s", fc.kind)
	if filepath.Base(f.Name) == ".mcp.json" {
		// By its name, whatever its content looks like: a repository's
		// file must not get past Claude's approval by its shape.
		gate := im.mcpJSONGate(fc)
		for i := range groups {
			groups[i].gate = gate
		}
	} else if f.Workspace && f.Optional {
		gate := im.workspaceGate(fc)
		for i := range groups {
			groups[i].gate = gate
		}
	}
	if fc.scanned && fc.trusted && (f.Workspace || filepath.Base(f.Name) == ".mcp.json") {
		im.note(f.Name, "", false, "comes with a workspace; --trust-workspace: its servers are imported active unless their client records that you rejected or disabled them")
	}
	tokens := map[string][]string{} // upstream name → its own TBXark tokens
	var named []string              // upstream names of this file, for TBXark's global tokens
	for _, g := range groups {
		var servers map[string]json.RawMessage
		if err := json.Unmarshal(g.raw, &servers); err != nil {
			return fmt.Errorf("import %s: %s must be an object of named servers: %w", f.Name, g.where, err)
		}
		for _, key := range slices.Sorted(maps.Keys(servers)) {
			s, own, err := im.server(fc, g, key, servers[key])
			if err != nil {
				return fmt.Errorf("import %s: server %q: %w", f.Name, key, err)
			}
			if name := im.place(s); name != "" && s.disabled == "" {
				named = append(named, name)
				if own != nil {
					tokens[name] = own
				}
			}
		}
	}
	if fc.tbx != nil {
		im.proxy(fc, named, tokens)
	}
	return nil
}

// detect recognizes the client a file belongs to, sets fc.kind (and the
// VS Code and TBXark context), and returns its server objects.
func (im *importer) detect(fc *fileCtx, root map[string]json.RawMessage) ([]serverGroup, error) {
	base := filepath.Base(fc.name)
	slash := filepath.ToSlash(fc.name)
	servers, hasServers := root["mcpServers"]
	switch {
	case root["mcpProxy"] != nil:
		fc.kind = kindTBXark
		p, err := parseTBXProxy(root["mcpProxy"])
		if err != nil {
			return nil, err
		}
		fc.tbx = p
	case root["projects"] != nil && (hasServers || base == ".claude.json"):
		fc.kind = "Claude Code (~/.claude.json)"
		var projects map[string]claudeProject
		if err := json.Unmarshal(root["projects"], &projects); err != nil {
			return nil, fmt.Errorf(`"projects" must be an object of projects: %w`, typeError(err))
		}
		paths := slices.Sorted(maps.Keys(projects))
		var groups []serverGroup
		if hasServers {
			// A user-wide server the user turned off in some projects is
			// still on in the others, and viewmux has no projects.
			offIn := map[string][]string{} // server → projects, sorted
			for _, path := range paths {
				for _, key := range projects[path].DisabledMcpServers {
					offIn[key] = append(offIn[key], strconv.Quote(path))
				}
			}
			groups = append(groups, serverGroup{raw: servers, where: `"mcpServers"`, gate: func(key string) serverGate {
				if in := offIn[key]; len(in) > 0 {
					return serverGate{note: fmt.Sprintf("is disabled in Claude Code for project %s (disabledMcpServers), but imported active: viewmux has no per-project servers", strings.Join(in, ", ")), lost: true}
				}
				return serverGate{}
			}})
		}
		for _, path := range paths {
			p := projects[path]
			if len(p.MCPServers) == 0 || string(p.MCPServers) == "null" || string(p.MCPServers) == "{}" {
				continue
			}
			groups = append(groups, serverGroup{
				origin:     fmt.Sprintf("project %q", path),
				namePrefix: filepath.Base(filepath.FromSlash(path)) + "-",
				raw:        p.MCPServers,
				where:      fmt.Sprintf(`"projects" → %q → "mcpServers"`, path),
				gate: func(key string) serverGate {
					if slices.Contains(p.DisabledMcpServers, key) {
						return serverGate{
							off:  fmt.Sprintf("disabled in Claude Code for project %q", path),
							note: fmt.Sprintf("is disabled in Claude Code for project %q (disabledMcpServers): written as a comment", path),
						}
					}
					return serverGate{}
				},
			})
		}
		return groups, nil
	case root["servers"] != nil:
		fc.kind = "VS Code (mcp.json)"
		if err := fc.readInputs(root["inputs"]); err != nil {
			return nil, err
		}
		return []serverGroup{{raw: root["servers"], where: `"servers"`}}, nil
	case root["mcp"] != nil && !hasServers, base == "settings.json" && !hasServers:
		fc.kind = "VS Code (settings.json)"
		var inner map[string]json.RawMessage
		if err := json.Unmarshal(root["mcp"], &inner); err != nil || inner["servers"] == nil {
			return nil, errNoServers
		}
		if err := fc.readInputs(inner["inputs"]); err != nil {
			return nil, err
		}
		return []serverGroup{{raw: inner["servers"], where: `"mcp" → "servers"`}}, nil
	case !hasServers:
		return nil, errNoServers
	case base == "claude_desktop_config.json":
		fc.kind = "Claude Desktop"
	case base == ".mcp.json":
		fc.kind = "Claude Code (.mcp.json)"
	case base == "mcp_config.json" && strings.Contains(slash, "windsurf"), bytes.Contains(servers, []byte(`"serverUrl"`)):
		fc.kind = "Windsurf"
	case base == "mcp.json" && strings.Contains(slash, ".cursor"):
		fc.kind = "Cursor"
	case strings.Contains(slash, "mcphub"), bytes.Contains(servers, []byte(`${cmd:`)), bytes.Contains(servers, []byte(`"dev"`)):
		fc.kind = "mcp-hub"
	default:
		fc.kind = "mcpServers (Claude Desktop, Cursor, …)"
	}
	return []serverGroup{{raw: servers, where: `"mcpServers"`}}, nil
}

// readInputs reads VS Code's "inputs" list.
func (fc *fileCtx) readInputs(raw json.RawMessage) error {
	if raw == nil {
		return nil
	}
	var inputs []struct {
		ID          string `json:"id"`
		Description string `json:"description"`
	}
	if err := json.Unmarshal(raw, &inputs); err != nil {
		return fmt.Errorf(`"inputs" must be a list of {"id": …, "description": …}: %w`, err)
	}
	fc.inputs = map[string]string{}
	for _, in := range inputs {
		fc.inputs[in.ID] = in.Description
	}
	return nil
}

// place names s uniquely, deduplicates it against servers of other files,
// and notes any rename. It returns the upstream name, or "" when s was a
// duplicate.
func (im *importer) place(s *importedServer) string {
	want := sanitizePrefix(s.name)
	name := want
	for i := 2; ; i++ {
		if name == ReservedPrefix { // viewmux's own tools: no upstream may take it
			name = fmt.Sprintf("%s-%d", want, i)
			continue
		}
		prev := im.byName[name]
		if prev == nil {
			break
		}
		if prev.disabled == "" && s.disabled == "" && slices.Equal(prev.body, s.body) && prev.file != s.file {
			im.note(s.file, s.key, false, "is identical to server %q of %s, imported once as upstream %q", prev.key, prev.file, name)
			return ""
		}
		name = fmt.Sprintf("%s-%d", want, i)
	}
	s.name = name
	im.byName[name] = s
	switch taken := im.byName[want]; {
	case want == ReservedPrefix:
		im.note(s.file, s.key, false, "is mounted as upstream %q: the prefix %q is reserved for viewmux's own tools", name, want)
	case name != want && taken.file != s.file:
		im.note(s.file, s.key, false, "is mounted as upstream %q: %q is taken by server %q of %s", name, want, taken.key, taken.file)
	case name != want && taken.origin != "":
		im.note(s.file, s.key, false, "is mounted as upstream %q (names must be [A-Za-z0-9-]+ and unique; %q is taken by server %q of %s)", name, want, taken.key, taken.origin)
	case name != want:
		im.note(s.file, s.key, false, "is mounted as upstream %q (names must be [A-Za-z0-9-]+ and unique; %q is taken by server %q)", name, want, taken.key)
	case name != s.key && s.origin != "":
		im.note(s.file, s.key, false, "of %s is mounted as upstream %q", s.origin, name)
	case name != s.key:
		im.note(s.file, s.key, false, "is mounted as upstream %q (names must be [A-Za-z0-9-]+ and unique)", name)
	}
	return name
}

// mcpJSONGate says which servers of a Claude Code .mcp.json are on, from
// what fc.claude records for the file's directory and fc.settings for
// every project. Claude Code asks
// before it starts a server of a project's .mcp.json, which comes with
// the repository: enableAllProjectMcpServers or enabledMcpjsonServers is
// a yes, disabledMcpjsonServers a no, and disabledMcpServers lists the
// servers the user turned off there later. A file --scan found is on only
// where the user said yes; a named one (the user asked for it) unless the
// user said no or turned it off.
func (im *importer) mcpJSONGate(fc *fileCtx) func(string) serverGate {
	dir := fc.dir
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	var (
		p     claudeProject
		known bool // fc.claude was read
	)
	if fc.claude != nil {
		projects, err := parseClaudeProjects(fc.claude.Data)
		if err != nil {
			im.note(fc.name, "", fc.scanned, "%s is not read for Claude Code's approvals: %v", fc.claude.Name, err)
		} else {
			known = true
			// Keys that name the same directory ("/a", "/a/") are merged.
			for _, path := range slices.Sorted(maps.Keys(projects)) {
				if proj := projects[path]; filepath.Clean(filepath.FromSlash(path)) == dir {
					p.DisabledMcpServers = append(p.DisabledMcpServers, proj.DisabledMcpServers...)
					p.EnabledMcpjsonServers = append(p.EnabledMcpjsonServers, proj.EnabledMcpjsonServers...)
					p.DisabledMcpjsonServers = append(p.DisabledMcpjsonServers, proj.DisabledMcpjsonServers...)
					p.EnableAllProjectMcpServers = p.EnableAllProjectMcpServers || proj.EnableAllProjectMcpServers
				}
			}
		}
	}
	var (
		us        claudeSettings // the user's answers for every project
		usKnown   bool           // fc.settings was read
		whereRead []string       // the files read, for notes
	)
	if known {
		whereRead = append(whereRead, fc.claude.Name)
	}
	if fc.settings != nil {
		clean := stripJSONC(fc.settings.Data)
		if err := json.Unmarshal(clean, &us); err != nil {
			im.note(fc.name, "", fc.scanned, "%s is not read for Claude Code's approvals: %v", fc.settings.Name, jsonError(clean, typeError(err)))
		} else {
			usKnown = true
			whereRead = append(whereRead, fc.settings.Name)
		}
	}
	return func(key string) serverGate {
		switch {
		case slices.Contains(p.DisabledMcpjsonServers, key):
			return serverGate{
				off:  "rejected in Claude Code",
				note: fmt.Sprintf("was rejected in Claude Code for %s (disabledMcpjsonServers in %s): written as a comment", dir, fc.claude.Name),
			}
		case slices.Contains(us.DisabledMcpjsonServers, key):
			return serverGate{
				off:  "rejected in Claude Code",
				note: fmt.Sprintf("was rejected in Claude Code for every project (disabledMcpjsonServers in %s): written as a comment", fc.settings.Name),
			}
		case slices.Contains(p.DisabledMcpServers, key):
			return serverGate{
				off:  "disabled in Claude Code",
				note: fmt.Sprintf("is disabled in Claude Code for %s (disabledMcpServers in %s): written as a comment", dir, fc.claude.Name),
			}
		case !fc.scanned || fc.trusted || p.EnableAllProjectMcpServers || slices.Contains(p.EnabledMcpjsonServers, key),
			us.EnableAllProjectMcpServers || slices.Contains(us.EnabledMcpjsonServers, key):
			return serverGate{}
		case !known && !usKnown:
			return serverGate{
				off:  "not approved in Claude Code",
				note: fmt.Sprintf("was never approved in Claude Code: --scan found it in %s, and no ~/.claude.json was read to show an approval; written as a comment (uncomment it if you trust it)", dir),
				lost: true,
			}
		}
		has := "has"
		if len(whereRead) > 1 {
			has = "have"
		}
		return serverGate{
			off:  "not approved in Claude Code",
			note: fmt.Sprintf("was never approved in Claude Code for %s (%s %s neither enableAllProjectMcpServers nor it in enabledMcpjsonServers): written as a comment (uncomment it if you trust it)", dir, strings.Join(whereRead, " and "), has),
			lost: true,
		}
	}
}

// workspaceGate keeps off every server of a workspace's .vscode/mcp.json
// or .cursor/mcp.json that --scan found, unless fc.trusted. VS Code and
// Cursor ask before they start a workspace's server, and keep the answer
// in their own state stores (VS Code's is a database per profile;
// Cursor's format is not documented), which viewmux does not read: so no
// server of such a file counts as approved.
func (im *importer) workspaceGate(fc *fileCtx) func(string) serverGate {
	dir := filepath.Dir(fc.dir) // the folder that holds .vscode or .cursor
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	client, _, _ := strings.Cut(fc.kind, " (")
	return func(string) serverGate {
		if fc.trusted {
			return serverGate{}
		}
		return serverGate{
			off: "from a workspace, not trusted",
			note: fmt.Sprintf("comes with the workspace %s, whose servers %s starts only once you trust them, and viewmux cannot read that answer: written as a comment (uncomment it if you trust it, or import with --trust-workspace)",
				dir, client),
			lost: true,
		}
	}
}

// WorkspaceFile reports whether path, a client config, comes with a
// workspace rather than from the user whose home directory is home: a
// .mcp.json anywhere, and a .vscode/mcp.json or a .cursor/mcp.json other
// than the user's own ~/.cursor/mcp.json.
func WorkspaceFile(path, home string) bool {
	dir := filepath.Dir(path)
	switch base := filepath.Base(path); {
	case base == ".mcp.json":
		return true
	case base != "mcp.json":
		return false
	case filepath.Base(dir) == ".vscode":
		return true
	case filepath.Base(dir) == ".cursor":
		return home == "" || filepath.Clean(filepath.Dir(dir)) != filepath.Clean(home)
	}
	return false
}

// render writes the TOML.
func (im *importer) render() []byte {
	var b strings.Builder
	b.WriteString("# viewmux config, converted by `viewmux import` from:\n")
	for _, s := range im.sources {
		b.WriteString("#   " + commentSafe(s) + "\n")
	}
	b.WriteString(`#
# Each server became one [upstreams.NAME] table; its tools are exposed as
# NAME__tool. ${VAR} is read from the environment when viewmux starts, and $$ is
# a literal $. What could not be carried over was listed on stderr. Review the
# file, add [profiles] to filter what clients see, and run ` + "`viewmux check`" + `.
`)
	if im.listen != "" {
		fmt.Fprintf(&b, "\n[server]\nlisten = %s\n", tomlQuote(im.listen))
	}
	profiles := im.renderTokens(&b)
	for _, name := range slices.Sorted(maps.Keys(profiles)) {
		fmt.Fprintf(&b, "\n[profiles.%s]\n%s", tomlKey(name), profiles[name])
	}
	if len(im.byName) == 0 {
		b.WriteString("\n# The files defined no servers.\n")
	}
	for _, name := range slices.Sorted(maps.Keys(im.byName)) {
		s := im.byName[name]
		from := fmt.Sprintf("# from %s, server %q", s.file, s.key)
		if s.origin != "" {
			from += " of " + s.origin
		}
		b.WriteString("\n" + commentSafe(from) + "\n")
		header := "[upstreams." + tomlKey(name) + "]"
		if s.disabled != "" {
			b.WriteString("# " + header + " — " + commentSafe(s.disabled) + "\n")
			for _, l := range s.body {
				b.WriteString("# " + l + "\n")
			}
			continue
		}
		b.WriteString(header + "\n")
		for _, l := range s.body {
			b.WriteString(l + "\n")
		}
	}
	return []byte(b.String())
}

// renderTokens writes TBXark's tokens as [[auth.tokens]] and returns the
// profiles they are bound to, name → body.
func (im *importer) renderTokens(b *strings.Builder) map[string]string {
	profiles := map[string]string{}
	if len(im.tokens) == 0 {
		return profiles
	}
	var all []string
	for name, s := range im.byName {
		if s.disabled == "" {
			all = append(all, name)
		}
	}
	slices.Sort(all)
	groups := map[string]string{} // joined upstreams → profile
	n := 0
	for _, t := range im.tokens {
		key := strings.Join(t.upstreams, "\x00")
		profile, ok := groups[key]
		if !ok {
			switch {
			case slices.Equal(t.upstreams, all):
				profile = "all"
				profiles[profile] = "# every upstream\n"
			case len(t.upstreams) == 1:
				profile = t.upstreams[0] + "-only"
				profiles[profile] = fmt.Sprintf("upstreams = [%s]\n", tomlQuote(t.upstreams[0]))
			default:
				n++
				profile = fmt.Sprintf("tokens-%d", n)
				quoted := make([]string, len(t.upstreams))
				for i, u := range t.upstreams {
					quoted[i] = tomlQuote(u)
				}
				profiles[profile] = fmt.Sprintf("upstreams = [%s]\n", strings.Join(quoted, ", "))
			}
			groups[key] = profile
		}
		value := fmt.Sprintf("token_sha256 = %q", t.sha256)
		if t.envVar != "" {
			value = "token = " + tomlQuote("${"+t.envVar+"}")
		}
		fmt.Fprintf(b, "\n[[auth.tokens]]  # from %s\n%s\nprofiles = [%q]\n", commentSafe(t.file), value, profile)
	}
	return profiles
}

// addToken records a TBXark token (its hash, or the variable it is read
// from; see tbxToken) opening upstreams, merging a token that is listed
// more than once.
func (im *importer) addToken(file, sum, envVar string, upstreams []string) {
	for i := range im.tokens {
		if im.tokens[i].sha256 == sum && im.tokens[i].envVar == envVar {
			u := append(im.tokens[i].upstreams, upstreams...)
			slices.Sort(u)
			im.tokens[i].upstreams = slices.Compact(u)
			return
		}
	}
	u := slices.Clone(upstreams)
	slices.Sort(u)
	im.tokens = append(im.tokens, importedToken{sha256: sum, envVar: envVar, file: file, upstreams: slices.Compact(u)})
}

// tbxToken converts one TBXark auth token. TBXark runs os.ExpandEnv over
// its whole config file before decoding it (-expand-env, on by default),
// so $VAR and ${VAR} anywhere in a token were replaced by the variable's
// value, an unset one by nothing; it then compares a request's bearer
// token with each listed token whole (a comma is part of a token). A
// token that is exactly one reference becomes viewmux's token =
// "${VAR}" (envVar); one without a $ is hashed (sum); any other is not
// carried (why says why): hashing its text would make the placeholder a
// working token and refuse the real one.
func tbxToken(t string) (sum, envVar, why string) {
	switch {
	case t == "":
		return "", "", "it is empty, and TBXark accepts no empty token"
	case !strings.Contains(t, "$"):
		h := sha256.Sum256([]byte(t))
		return hex.EncodeToString(h[:]), "", ""
	case strings.HasPrefix(t, "${") && strings.HasSuffix(t, "}") && isEnvName(t[2:len(t)-1]):
		return "", t[2 : len(t)-1], ""
	case strings.HasPrefix(t, "$") && isEnvName(t[1:]):
		return "", t[1:], ""
	}
	return "", "", "it holds a $ that is not exactly one ${VAR} or $VAR, so what TBXark expanded it to is unknown; add it as [[auth.tokens]] yourself"
}

// commentSafe keeps s on one comment line, with no control character a
// terminal showing the config would act on (termsafe.Escape).
func commentSafe(s string) string {
	return strings.ReplaceAll(termsafe.Escape(s), "\n", `\n`)
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

// loopbackAddr reports whether a listen address names a loopback host.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
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
			if r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f { // C0, DEL and C1 controls
				fmt.Fprintf(&b, `\u%04X`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// tomlList renders strs as a one-line TOML array of strings.
func tomlList(strs []string) string {
	q := make([]string, len(strs))
	for i, s := range strs {
		q[i] = tomlQuote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
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

// jsonError adds the line and column to a JSON syntax or type error.
func jsonError(data []byte, err error) error {
	var off int64
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		off = te.Offset
	default:
		return err
	}
	// Offset counts the bytes read, the one at fault included.
	before := data[:min(max(int(off)-1, 0), len(data))]
	line := 1 + bytes.Count(before, []byte("\n"))
	col := len(before) - bytes.LastIndexByte(before, '\n')
	return fmt.Errorf("line %d:%d: %w", line, col, err)
}
