// Package statedir owns viewmux's state directory (server.state_dir): where
// it is by default, and how files are written there. Everything viewmux
// keeps between runs (pinned tool definitions, OAuth tokens) lives in it,
// readable by its owner only: the directory is 0700 and every file 0600,
// written whole through a temporary file and a rename, so a reader never
// sees half a file and a crash never leaves one.
package statedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Default returns the default state directory: $XDG_STATE_HOME/viewmux
// when XDG_STATE_HOME is set to an absolute path, else
// $HOME/.local/state/viewmux. lookupEnv resolves the variables (nil = none
// set); ok is false when neither gives a directory.
func Default(lookupEnv func(string) (string, bool)) (dir string, ok bool) {
	if lookupEnv == nil {
		return "", false
	}
	if x, set := lookupEnv("XDG_STATE_HOME"); set && filepath.IsAbs(x) {
		return filepath.Join(x, "viewmux"), true
	}
	if h, set := lookupEnv("HOME"); set && h != "" {
		return filepath.Join(h, ".local", "state", "viewmux"), true
	}
	return "", false
}

// Expand returns path with a leading "~" or "~/" replaced by the home
// directory lookupEnv gives for HOME. A path that starts with "~" but
// names another user ("~bob/…") is returned unchanged, and an error
// says so; so is a "~" with no HOME set.
func Expand(path string, lookupEnv func(string) (string, bool)) (string, error) {
	if path != "~" && !strings.HasPrefix(path, "~/") {
		if strings.HasPrefix(path, "~") {
			return path, fmt.Errorf("%q: only ~ and ~/ are expanded (the current user's home), not ~user", path)
		}
		return path, nil
	}
	var home string
	if lookupEnv != nil {
		home, _ = lookupEnv("HOME")
	}
	if home == "" {
		return path, fmt.Errorf("%q: HOME is not set, so ~ cannot be expanded", path)
	}
	return filepath.Join(home, strings.TrimPrefix(path, "~")), nil
}

// Dir is one state directory. The zero value has no path; its methods
// then fail with ErrNoDir. A Dir is a value: safe to copy and to use from
// several goroutines (and processes) at once, as far as the file system
// allows.
type Dir struct {
	Path string
}

// ErrNoDir is returned when a state directory is needed but none is known
// (server.state_dir unset, and neither XDG_STATE_HOME nor HOME set).
var ErrNoDir = errors.New("no state directory: set server.state_dir, XDG_STATE_HOME or HOME")

// Ensure creates the directory (and its parents) if it does not exist,
// with mode 0700, and tightens an existing one to 0700 when it is open
// to others.
func (d Dir) Ensure() error {
	if d.Path == "" {
		return ErrNoDir
	}
	if err := os.MkdirAll(d.Path, 0o700); err != nil {
		return fmt.Errorf("state_dir %s: %w", d.Path, err)
	}
	fi, err := os.Stat(d.Path)
	if err != nil {
		return fmt.Errorf("state_dir %s: %w", d.Path, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("state_dir %s: not a directory", d.Path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(d.Path, 0o700); err != nil {
			return fmt.Errorf("state_dir %s: %w", d.Path, err)
		}
	}
	return nil
}

// File returns the path of the file named name in the directory.
func (d Dir) File(name string) string { return filepath.Join(d.Path, name) }

// ReadFile reads the file named name; a missing file is (nil, nil).
func (d Dir) ReadFile(name string) ([]byte, error) {
	if d.Path == "" {
		return nil, ErrNoDir
	}
	b, err := os.ReadFile(d.File(name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// WriteFile replaces the file named name with data atomically: data goes
// to a new temporary file (0600) in the same directory, which is synced
// and renamed over name. The directory is created first (Ensure).
func (d Dir) WriteFile(name string, data []byte) error {
	if err := d.Ensure(); err != nil {
		return err
	}
	f, err := os.CreateTemp(d.Path, "."+name+".*.tmp")
	if err != nil {
		return fmt.Errorf("state file %s: %w", d.File(name), err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	// CreateTemp makes the file 0600 already; say so for umasks that
	// differ and for platforms where it may not.
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("state file %s: %w", d.File(name), err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("state file %s: %w", d.File(name), err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("state file %s: %w", d.File(name), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("state file %s: %w", d.File(name), err)
	}
	if err := os.Rename(tmp, d.File(name)); err != nil {
		return fmt.Errorf("state file %s: %w", d.File(name), err)
	}
	ok = true
	return nil
}
