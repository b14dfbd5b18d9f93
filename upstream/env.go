package upstream

import (
	"maps"
	"slices"
	"strings"

	"github.com/viewmux/viewmux/configs"
)

// defaultEnvUnix and defaultEnvWindows name the variables of viewmux's own
// environment every stdio child gets: the ones the official MCP SDK's stdio
// client passes, which is what servers written for Claude Desktop expect.
// Everything else must be named in the upstream's inherit_env: viewmux's
// environment holds its tokens and every other upstream's keys.
var (
	defaultEnvUnix    = []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"}
	defaultEnvWindows = []string{
		"APPDATA", "HOMEDRIVE", "HOMEPATH", "LOCALAPPDATA", "PATH", "PROCESSOR_ARCHITECTURE",
		"SYSTEMDRIVE", "SYSTEMROOT", "TEMP", "USERNAME", "USERPROFILE", "PROGRAMFILES",
	}
)

// DefaultChildEnv returns the names of the variables every stdio child gets
// from viewmux's environment on goos (runtime.GOOS). The slice is new.
func DefaultChildEnv(goos string) []string {
	if goos == "windows" {
		return slices.Clone(defaultEnvWindows)
	}
	return slices.Clone(defaultEnvUnix)
}

// childEnv builds the environment of cfg's child from environ (viewmux's
// own, as os.Environ returns it) on goos: the variables DefaultChildEnv
// names, those cfg.InheritEnv names (a name, or a prefix ending in *), and
// then cfg.Env, which wins over both. Nothing else of environ is passed.
// Windows compares names without regard to case, as it does itself.
//
// A default variable whose value starts with "()" is a shell function
// exported by bash; it is dropped, as the SDKs do, unless inherit_env names
// it.
func childEnv(environ []string, goos string, cfg *configs.Upstream) []string {
	fold := func(s string) string { return s }
	if goos == "windows" {
		fold = strings.ToUpper
	}
	defaults := map[string]bool{}
	for _, n := range DefaultChildEnv(goos) {
		defaults[fold(n)] = true
	}
	var out []string
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			continue
		}
		if _, own := cfg.Env[name]; own {
			continue // the entry's own value follows
		}
		switch {
		case inherits(cfg.InheritEnv, fold(name), fold):
		case defaults[fold(name)] && !strings.HasPrefix(value, "()"):
		default:
			continue
		}
		out = append(out, kv)
	}
	for _, k := range slices.Sorted(maps.Keys(cfg.Env)) {
		out = append(out, k+"="+cfg.Env[k])
	}
	return out
}

// inherits reports whether one of patterns (names, or prefixes ending in
// *, as configs validates them) matches name. Both sides pass through fold.
func inherits(patterns []string, name string, fold func(string) string) bool {
	for _, p := range patterns {
		p = fold(p)
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		} else if p == name {
			return true
		}
	}
	return false
}
