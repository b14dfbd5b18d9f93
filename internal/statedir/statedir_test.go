package statedir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestDefault(t *testing.T) {
	for _, tt := range []struct {
		name string
		vars map[string]string
		want string
	}{
		{"XDG_STATE_HOME", map[string]string{"XDG_STATE_HOME": "/x", "HOME": "/h"}, "/x/viewmux"},
		{"relative XDG_STATE_HOME ignored", map[string]string{"XDG_STATE_HOME": "x", "HOME": "/h"}, "/h/.local/state/viewmux"},
		{"HOME", map[string]string{"HOME": "/h"}, "/h/.local/state/viewmux"},
		{"nothing", map[string]string{}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Default(env(tt.vars))
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("Default = %q, %v; want %q", got, ok, tt.want)
			}
		})
	}
}

func TestExpand(t *testing.T) {
	home := env(map[string]string{"HOME": "/h"})
	for _, tt := range []struct{ in, want, err string }{
		{"~", "/h", ""},
		{"~/s/m", "/h/s/m", ""},
		{"/abs/~x", "/abs/~x", ""},
		{"~bob/s", "~bob/s", "not ~user"},
	} {
		got, err := Expand(tt.in, home)
		if got != tt.want || (err == nil) != (tt.err == "") || err != nil && !strings.Contains(err.Error(), tt.err) {
			t.Errorf("Expand(%q) = %q, %v; want %q, error %q", tt.in, got, err, tt.want, tt.err)
		}
	}
	if _, err := Expand("~/x", env(nil)); err == nil {
		t.Errorf("Expand without HOME: no error")
	}
}

// TestWriteFile: the directory is made 0700 (and tightened if open), the
// file 0600, replaced whole, and no temporary file stays behind.
func TestWriteFile(t *testing.T) {
	d := Dir{Path: filepath.Join(t.TempDir(), "a", "state")}
	if err := d.WriteFile("f.json", []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d.Path, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteFile("f.json", []byte("two")); err != nil {
		t.Fatal(err)
	}
	if b, err := d.ReadFile("f.json"); err != nil || string(b) != "two" {
		t.Errorf("ReadFile = %q, %v; want two", b, err)
	}
	if st, _ := os.Stat(d.Path); st.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v, want 0700", st.Mode().Perm())
	}
	if st, _ := os.Stat(d.File("f.json")); st.Mode().Perm() != 0o600 {
		t.Errorf("file mode %v, want 0600", st.Mode().Perm())
	}
	entries, _ := os.ReadDir(d.Path)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only f.json: %v", len(entries), entries)
	}
	if b, err := d.ReadFile("missing"); b != nil || err != nil {
		t.Errorf("ReadFile of a missing file = %q, %v; want nil, nil", b, err)
	}
	if err := (Dir{}).WriteFile("x", nil); !errors.Is(err, ErrNoDir) {
		t.Errorf("WriteFile with no path: %v, want ErrNoDir", err)
	}
}
