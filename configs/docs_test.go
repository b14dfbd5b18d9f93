package configs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// schemaKeys lists every key the decoder accepts, walking the raw schema's
// toml tags: tables as dotted paths, map keys the user chooses as NAME, and
// arrays of tables as []. A map of scalars or arrays (env, headers,
// toolsets, args) is one key. The result is what docs/configuration.md must
// name, each in backquotes, e.g. `upstreams.NAME.command`.
func schemaKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for _, f := range reflect.VisibleFields(t) {
		tag := f.Tag.Get("toml")
		if tag == "" || tag == "-" {
			continue // an embedded struct: its fields are visible on their own
		}
		path := tag
		if prefix != "" {
			path = prefix + "." + tag
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct:
			keys = append(keys, schemaKeys(ft, path)...)
		case ft.Kind() == reflect.Slice && elem(ft).Kind() == reflect.Struct:
			keys = append(keys, schemaKeys(elem(ft), path+"[]")...)
		case ft.Kind() == reflect.Map && elem(ft.Elem()).Kind() == reflect.Struct:
			keys = append(keys, schemaKeys(elem(ft.Elem()), path+".NAME")...)
		default:
			keys = append(keys, path)
		}
	}
	return keys
}

// TestDocsNameEveryKey fails when a key the decoder accepts is missing
// from docs/configuration.md, so the reference cannot fall behind the
// schema.
func TestDocsNameEveryKey(t *testing.T) {
	data, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	keys := schemaKeys(reflect.TypeFor[rawConfig](), "")
	if len(keys) < 50 {
		t.Fatalf("the schema walk found only %d keys: %v", len(keys), keys)
	}
	for _, k := range keys {
		if !strings.Contains(doc, "`"+k+"`") {
			t.Errorf("docs/configuration.md does not document `%s`", k)
		}
	}
}

// TestSchemaKeys pins the walk itself on a few keys of each shape.
func TestSchemaKeys(t *testing.T) {
	keys := schemaKeys(reflect.TypeFor[rawConfig](), "")
	for _, want := range []string{
		"server.listen",                         // a table's key
		"auth.tokens[].token_sha256",            // an array of tables
		"upstreams.NAME.env",                    // a map of strings, one key
		"profiles.NAME.call_rules[].args_regex", // embedded rules, nested array
		"profiles.NAME.rate.calls_per_minute",   // a table in a map
		"profiles.NAME.dynamic_toolsets",        // the profile's own key
		"filter.deny_upstreams",                 // the shared stage
		"upstreams.NAME.toolsets",               // a map of arrays, one key
		"filter.call_rules[].other_args",        // the shared stage's call rules
		"upstreams.NAME.max_message_bytes",      // a size
		"server.replica_id",                     // an expanded string
		"profiles.NAME.extends",                 // outside the embedded rules
		"audit.include_arguments",               // a plain table
		"filter.call_rules[].tool",              // a string in an array of tables
		"profiles.NAME.read_only",               // an embedded bool
		"upstreams.NAME.read_only_tools",        // an upstream's list
		"server.allow_unauthenticated",          // a non-pointer bool
		"auth.tokens[].profiles",                // a list in an array of tables
		"upstreams.NAME.headers",                // a map of strings
		"profiles.NAME.call_rules[].args",       // a map of arrays in an array of tables
	} {
		found := false
		for _, k := range keys {
			found = found || k == want
		}
		if !found {
			t.Errorf("schemaKeys lacks %s; got %v", want, keys)
		}
	}
}

// docsPlaceholder is what TestDocsTOMLExamples sets the variable name to.
func docsPlaceholder(name string) (string, bool) {
	switch {
	case strings.HasSuffix(name, "STATE_URL"):
		return "redis://redis.internal:6379/0", true
	case strings.HasSuffix(name, "STATE_KEY"), strings.HasSuffix(name, "STATE_OLD_KEY"):
		return strings.Repeat("ab", 32), true
	}
	return "placeholder", true
}

// TestDocsTOMLExamples parses every ```toml block of the README and
// docs/*.md as a whole config: what the docs show is valid as shown.
// Variables are set to a placeholder, as a user would set them: a state
// store's URL to a redis:// URL, an encryption key to 64 hex characters,
// anything else to a word.
func TestDocsTOMLExamples(t *testing.T) {
	files, _ := filepath.Glob("../docs/*.md")
	files = append(files, "../README.md")
	n := 0
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, block := range fencedBlocks(string(data), "toml") {
			n++
			name := fmt.Sprintf("%s#%d", filepath.Base(file), i+1)
			if _, err := Parse(name, []byte(block), docsPlaceholder); err != nil {
				t.Errorf("%s does not parse:\n%v\n---\n%s", name, err, block)
			}
		}
	}
	if n == 0 {
		t.Fatal("no ```toml block found in the docs")
	}
}

// fencedBlocks returns the bodies of the ``` blocks of markdown whose info
// string is lang.
func fencedBlocks(markdown, lang string) []string {
	var out []string
	var cur *strings.Builder
	for _, line := range strings.Split(markdown, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && trimmed == "```"+lang:
			cur = &strings.Builder{}
		case cur != nil && trimmed == "```":
			out = append(out, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	return out
}

// linkRE matches a markdown link's target; codeSpanRE an inline code span,
// whose text is not a link.
var (
	linkRE     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeSpanRE = regexp.MustCompile("`[^`\n]+`")
)

// TestDocsPointInside: the documentation a clone carries is complete in
// itself. No page refers to the product contract outside the repository
// (../shared/SPEC.md, "SPEC §5"), and every relative link names a file or
// directory of the repository.
func TestDocsPointInside(t *testing.T) {
	files, _ := filepath.Glob("../docs/*.md")
	files = append(files, "../README.md", "../CONTRIBUTING.md", "../CHANGELOG.md", "../configs/examples/deploy/README.md")
	root, _ := filepath.Abs("..")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if os.IsNotExist(err) {
			continue // CONTRIBUTING.md and CHANGELOG.md come in their own commits
		}
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		for _, bad := range []string{"SPEC §", "SPEC.md", "../shared", "SPEC)"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s refers to %q, which a clone does not have", file, bad)
			}
		}
		for _, m := range linkRE.FindAllStringSubmatch(codeSpanRE.ReplaceAllString(text, "``"), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			abs, _ := filepath.Abs(filepath.Join(filepath.Dir(file), target))
			if !strings.HasPrefix(abs, root+string(filepath.Separator)) && abs != root {
				t.Errorf("%s links outside the repository: %s", file, m[1])
				continue
			}
			if _, err := os.Stat(abs); err != nil {
				t.Errorf("%s links to %s, which does not exist", file, m[1])
			}
		}
	}
}

// outsideRefRE matches a citation of the design documents that live
// outside the repository, which a clone does not have: the files themselves
// (SPEC.md, PROTOCOL.md, STYLE.md, reached as ../shared/...) and sections of
// any of them ("SPEC §5", "STYLE §12"), also when a comment's line break
// falls between the name and "§".
var outsideRefRE = regexp.MustCompile(`(SPEC|PROTOCOL|STYLE)[\s/#*]*§|\b(SPEC|PROTOCOL|STYLE)\.md|\.\./shared\b`)

// TestNoReferencesOutside fails when any file git tracks, source, config,
// script or documentation, cites what a clone does not have (outsideRefRE),
// naming file:line of each citation. Only this file is exempt: it names
// what it looks for.
func TestNoReferencesOutside(t *testing.T) {
	for _, s := range []string{"SPEC §5", "(SPEC\n// §8)", "STYLE §12", "PROTOCOL §4", "../shared/SPEC.md", "PROTOCOL.md", "STYLE.md"} {
		if !outsideRefRE.MatchString(s) {
			t.Fatalf("outsideRefRE does not match %q", s)
		}
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed to list the tracked files: %v", err)
	}
	root := ".."
	cmd := exec.Command("git", "-C", root, "ls-files", "-z")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	self := filepath.Join("configs", "docs_test.go")
	files := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if len(files) < 100 || !slices.Contains(files, filepath.ToSlash(self)) {
		t.Fatalf("git ls-files listed %d files, without %s: not the repository's root?", len(files), self)
	}
	for _, rel := range files {
		if rel == "" || filepath.FromSlash(rel) == self {
			continue // this test names what it looks for
		}
		path := filepath.Join(root, filepath.FromSlash(rel))
		fi, err := os.Lstat(path)
		if os.IsNotExist(err) {
			continue // deleted in the work tree: it cites nothing
		}
		if err != nil {
			t.Fatal(err)
		}
		var text string
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(path) // a link's target may be the citation
			if err != nil {
				t.Fatal(err)
			}
			text = target
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			text = string(data)
		default:
			continue // a submodule's directory
		}
		reported := 0
		for _, m := range outsideRefRE.FindAllStringIndex(text, -1) {
			line := 1 + strings.Count(text[:m[0]], "\n")
			if line == reported {
				continue // one error a line, however many citations it holds
			}
			reported = line
			lineStart := strings.LastIndex(text[:m[0]], "\n") + 1
			lineEnd := strings.IndexByte(text[m[0]:], '\n')
			if lineEnd < 0 {
				lineEnd = len(text) - m[0]
			}
			t.Errorf("%s:%d cites what a clone does not have: %s", rel, line, strings.TrimSpace(text[lineStart:m[0]+lineEnd]))
		}
	}
}
