package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/viewmux/viewmux/configs"
	"github.com/viewmux/viewmux/internal/termsafe"
)

// maxImportBytes caps every file import reads: a client config is a few
// KiB, and a bigger file is a mistake, not something to hold in memory.
const maxImportBytes = 16 << 20

func cmdImport(args []string, stdout, stderr io.Writer) error {
	fset := newFlags("import", stdout)
	scan := fset.Bool("scan", false, "import every client config found where its client keeps it (instead of FILE...)")
	strict := fset.Bool("strict", false, "if anything cannot be carried over, print no config and exit 1")
	trust := fset.Bool("trust-workspace", false, "with --scan, import the servers of the working directory's .mcp.json, .vscode/mcp.json and .cursor/mcp.json active (default: as comments, unless their client records your approval)")
	// Flags may follow the files: parse again after each positional one.
	var paths []string
	rest := args
	for {
		if err := fset.parseAllowingArgs(rest); err != nil {
			return err
		}
		if fset.NArg() == 0 {
			break
		}
		paths = append(paths, fset.Arg(0))
		rest = fset.Args()[1:]
	}
	var (
		files   []configs.ImportFile
		skipped int // files --scan found but could not read: losses for --strict
	)
	switch {
	case *scan && len(paths) > 0:
		return fset.usageErr(errors.New("--scan finds the files itself: give it no FILE"))
	case *scan:
		var err error
		if files, skipped, err = scanImportFiles(stderr, *trust); err != nil {
			return err
		}
	case len(paths) == 0:
		return fset.usageErr(errors.New("want at least one FILE, or --scan"))
	default:
		var claude *configs.ClaudeState // a ~/.claude.json among the files
		home, _ := os.UserHomeDir()
		for _, p := range paths {
			data, err := readImportFile(p)
			if err != nil {
				return &exitError{exitUsage, fmt.Errorf("import: %w", err)}
			}
			// A named workspace file is the user's choice: its servers
			// are imported active unless its client records a refusal.
			files = append(files, configs.ImportFile{Name: p, Data: data, ReadFile: readImportFile,
				Workspace: configs.WorkspaceFile(p, home), TrustWorkspace: *trust})
			if filepath.Base(p) == ".claude.json" {
				claude = &configs.ClaudeState{Name: p, Data: data}
			}
		}
		if claude == nil && slices.ContainsFunc(paths, func(p string) bool { return filepath.Base(p) == ".mcp.json" }) {
			var lost bool
			claude, lost = userClaudeState(stderr)
			if lost {
				skipped++
			}
		}
		var settings *configs.ClaudeState
		if slices.ContainsFunc(paths, func(p string) bool { return filepath.Base(p) == ".mcp.json" }) {
			var lost bool
			settings, lost = userClaudeSettings(stderr)
			if lost {
				skipped++
			}
		}
		for i := range files {
			files[i].Claude = claude
			files[i].ClaudeSettings = settings
		}
	}
	res, err := configs.ImportFiles(files)
	if err != nil {
		return &exitError{exitUsage, err}
	}
	for _, n := range res.Notes {
		// Notes quote the files, which a repository may have written.
		fmt.Fprintln(stderr, termsafe.Escape(n.String()))
	}
	if n := res.Lost() + skipped; *strict && n > 0 {
		return &exitError{exitRuntime, fmt.Errorf("import: %s not carried over (listed above); --strict: no config written", plural(n, "thing", "things"))}
	}
	_, err = stdout.Write(res.TOML)
	return err
}

// scanImportFiles reads the client configs that exist where their clients
// keep them, saying on stderr which it uses, and which it skips because
// they cannot be read (counted in skipped). Finding none is an error
// (exit 1): there is nothing to import on this machine. The servers of a
// workspace's files are imported active only where their client records
// an approval, or trust (--trust-workspace) is set.
func scanImportFiles(stderr io.Writer, trust bool) (files []configs.ImportFile, skipped int, err error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, 0, &exitError{exitRuntime, fmt.Errorf("import --scan: %w", err)}
	}
	cwd, err := os.Getwd()
	if err != nil {
		return nil, 0, &exitError{exitRuntime, fmt.Errorf("import --scan: %w", err)}
	}
	paths := configs.ImportScanPaths(home, cwd, runtime.GOOS, os.Getenv("APPDATA"))
	var claude *configs.ClaudeState // ~/.claude.json, which says what the user approved
	for _, p := range paths {
		data, err := readImportFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			// One unreadable file (an enormous ~/.claude.json) must not
			// stop the others from being imported; it is a loss.
			fmt.Fprintf(stderr, "import: --scan skips %s: %v\n", p, err)
			skipped++
			continue
		}
		fmt.Fprintf(stderr, "import: --scan found %s\n", p)
		files = append(files, configs.ImportFile{Name: p, Data: data, ReadFile: readImportFile, Optional: true,
			Workspace: configs.WorkspaceFile(p, home), TrustWorkspace: trust})
		if p == filepath.Join(home, ".claude.json") {
			claude = &configs.ClaudeState{Name: p, Data: data}
		}
	}
	settings, lost := userClaudeSettings(stderr)
	if lost {
		skipped++
	}
	for i := range files {
		files[i].Claude = claude
		files[i].ClaudeSettings = settings
	}
	if len(files) == 0 {
		return nil, skipped, &exitError{exitRuntime, fmt.Errorf("import --scan: no readable client config found; looked for:\n  %s", strings.Join(paths, "\n  "))}
	}
	return files, skipped, nil
}

// userClaudeState reads $HOME/.claude.json, where Claude Code records
// which servers of a project's .mcp.json the user rejected or disabled. It
// returns nil when there is none; one it cannot read is said on stderr
// and reported as lost (what the user turned off there is unknown).
func userClaudeState(stderr io.Writer) (state *configs.ClaudeState, lost bool) {
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, false
	}
	path := filepath.Join(home, ".claude.json")
	data, err := readImportFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, false
	case err != nil:
		fmt.Fprintf(stderr, "import: %s is not read, so the .mcp.json servers Claude Code has disabled are not known: %v\n", path, err)
		return nil, true
	}
	return &configs.ClaudeState{Name: path, Data: data}, false
}

// userClaudeSettings reads $HOME/.claude/settings.json, Claude Code's user
// settings, where the user may approve or reject the servers of every
// project's .mcp.json. It returns nil when there is none; one it cannot
// read is said on stderr and reported as lost.
func userClaudeSettings(stderr io.Writer) (state *configs.ClaudeState, lost bool) {
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, false
	}
	path := filepath.Join(home, ".claude", "settings.json")
	data, err := readImportFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, false
	case err != nil:
		fmt.Fprintf(stderr, "import: %s is not read, so the .mcp.json servers Claude Code's settings approve or reject are not known: %v\n", path, err)
		return nil, true
	}
	return &configs.ClaudeState{Name: path, Data: data}, false
}

// readImportFile reads a file of at most maxImportBytes.
func readImportFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return nil, fmt.Errorf("%s is a directory", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxImportBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > maxImportBytes {
		return nil, fmt.Errorf("%s is larger than %d MiB: not a client config", path, maxImportBytes>>20)
	}
	return data, nil
}
