package configs

import (
	"path/filepath"
	"slices"
)

// ImportScanPaths returns the files in which the clients ImportFiles
// knows keep their MCP servers, for a user whose home directory is home,
// working in cwd, on goos (runtime.GOOS); appData is %APPDATA% on Windows
// and ignored elsewhere. The paths may not exist; none is read. Each path
// appears once, user-wide files first.
func ImportScanPaths(home, cwd, goos, appData string) []string {
	var appDir string // where Claude Desktop and VS Code keep per-user files
	switch goos {
	case "darwin":
		appDir = filepath.Join(home, "Library", "Application Support")
	case "windows":
		appDir = appData
	default:
		appDir = filepath.Join(home, ".config")
	}
	var paths []string
	if appDir != "" {
		paths = append(paths,
			filepath.Join(appDir, "Claude", "claude_desktop_config.json"),
			filepath.Join(appDir, "Code", "User", "mcp.json"),
			filepath.Join(appDir, "Code", "User", "settings.json"),
		)
	}
	paths = append(paths,
		filepath.Join(home, ".claude.json"),
		filepath.Join(home, ".cursor", "mcp.json"),
		filepath.Join(home, ".codeium", "windsurf", "mcp_config.json"),
		filepath.Join(home, ".config", "mcphub", "servers.json"),
		filepath.Join(cwd, ".mcp.json"),
		filepath.Join(cwd, ".cursor", "mcp.json"),
		filepath.Join(cwd, ".vscode", "mcp.json"),
	)
	var out []string
	for _, p := range paths {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}
