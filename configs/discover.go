package configs

import (
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// QuickstartSource is the Source of a Config parsed from Quickstart, and the
// name its errors carry.
const QuickstartSource = "embedded quickstart"

// quickstart is the config `viewmux init` writes and `viewmux serve` uses when
// no config file exists.
//
//go:embed quickstart.toml
var quickstart []byte

// Quickstart returns the embedded quickstart config. It refers to the running
// binary as ${VIEWMUX_SELF}: the caller must set that variable (for example to
// os.Executable()) in the lookupEnv it passes to Parse. The returned slice is
// a new copy owned by the caller.
func Quickstart() []byte {
	return append([]byte(nil), quickstart...)
}

// Discover finds the config file, in this order: flagPath (from --config),
// $VIEWMUX_CONFIG, ./viewmux.toml, $XDG_CONFIG_HOME/viewmux/config.toml (with
// XDG_CONFIG_HOME defaulting to $HOME/.config). It returns "" and no error
// when none exists: the caller then uses Quickstart. A path given by the flag
// or $VIEWMUX_CONFIG must exist. The path is returned as found (the working
// directory's file as "viewmux.toml"). getenv is usually os.Getenv; nil means
// an empty environment. Discover only stats files; it is safe for concurrent
// use.
func Discover(flagPath string, getenv func(string) string) (string, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	for _, named := range []struct{ path, from string }{
		{flagPath, "--config"},
		{getenv("VIEWMUX_CONFIG"), "$VIEWMUX_CONFIG"},
	} {
		if named.path == "" {
			continue
		}
		ok, err := isFile(named.path)
		if err == nil && !ok {
			err = fs.ErrNotExist
		}
		if err != nil {
			return "", fmt.Errorf("config %s (from %s): %w", named.path, named.from, err)
		}
		return named.path, nil
	}

	candidates := []string{"viewmux.toml"}
	xdg := getenv("XDG_CONFIG_HOME")
	if !filepath.IsAbs(xdg) { // the XDG spec says to ignore a relative value
		xdg = ""
		if home := getenv("HOME"); home != "" {
			xdg = filepath.Join(home, ".config")
		}
	}
	if xdg != "" {
		candidates = append(candidates, filepath.Join(xdg, "viewmux", "config.toml"))
	}
	for _, path := range candidates {
		ok, err := isFile(path)
		if err != nil {
			return "", fmt.Errorf("config %s: %w", path, err)
		}
		if ok {
			return path, nil
		}
	}
	return "", nil
}

// isFile reports whether path exists; it is an error for path to be a
// directory or to be unreadable for a reason other than not existing.
func isFile(path string) (bool, error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	case fi.IsDir():
		return false, errors.New("is a directory")
	}
	return true, nil
}
