package configs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDiscover(t *testing.T) {
	write := func(t *testing.T, path string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("# test\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	tests := []struct {
		name  string
		files []string          // created under the temp dir ("cwd/…" is the working directory)
		flag  string            // relative to the temp dir; "" = not given
		env   map[string]string // values relative to the temp dir
		want  string            // relative to the temp dir; "" = none found
		err   string
	}{
		{"nothing", nil, "", nil, "", ""},
		{"flag wins over everything",
			[]string{"flag.toml", "env.toml", "cwd/viewmux.toml", "xdg/viewmux/config.toml"},
			"flag.toml", map[string]string{"VIEWMUX_CONFIG": "env.toml", "XDG_CONFIG_HOME": "xdg"}, "flag.toml", ""},
		{"env over cwd",
			[]string{"env.toml", "cwd/viewmux.toml"},
			"", map[string]string{"VIEWMUX_CONFIG": "env.toml"}, "env.toml", ""},
		{"cwd over xdg",
			[]string{"cwd/viewmux.toml", "xdg/viewmux/config.toml"},
			"", map[string]string{"XDG_CONFIG_HOME": "xdg"}, "viewmux.toml", ""},
		{"xdg",
			[]string{"xdg/viewmux/config.toml", "home/.config/viewmux/config.toml"},
			"", map[string]string{"XDG_CONFIG_HOME": "xdg", "HOME": "home"}, "xdg/viewmux/config.toml", ""},
		{"home when xdg is unset",
			[]string{"home/.config/viewmux/config.toml"},
			"", map[string]string{"HOME": "home"}, "home/.config/viewmux/config.toml", ""},
		{"xdg set but empty of config does not fall back to home",
			[]string{"home/.config/viewmux/config.toml"},
			"", map[string]string{"XDG_CONFIG_HOME": "xdg", "HOME": "home"}, "", ""},
		{"missing flag path", nil, "nope.toml", nil, "", "(from --config)"},
		{"missing env path", []string{"cwd/viewmux.toml"}, "", map[string]string{"VIEWMUX_CONFIG": "nope.toml"}, "", "(from $VIEWMUX_CONFIG)"},
		{"flag path is a directory", []string{"dir/x"}, "dir", nil, "", "is a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.Mkdir(filepath.Join(root, "cwd"), 0o755); err != nil {
				t.Fatal(err)
			}
			for _, f := range tt.files {
				write(t, filepath.Join(root, f))
			}
			t.Chdir(filepath.Join(root, "cwd"))
			abs := func(p string) string {
				if p == "" {
					return ""
				}
				return filepath.Join(root, p)
			}
			getenv := func(k string) string { return abs(tt.env[k]) }
			got, err := Discover(abs(tt.flag), getenv)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Discover() = %q, %v; want error %q", got, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			want := abs(tt.want)
			if tt.want == "viewmux.toml" {
				want = "viewmux.toml" // relative to the working directory
			}
			if got != want {
				t.Errorf("Discover() = %q, want %q", got, want)
			}
		})
	}
}

func TestDiscoverMissingFlagIsNotExist(t *testing.T) {
	_, err := Discover(filepath.Join(t.TempDir(), "missing.toml"), nil)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error %v does not wrap fs.ErrNotExist", err)
	}
}

func TestDiscoverIgnoresRelativeXDG(t *testing.T) {
	root := t.TempDir()
	t.Chdir(root)
	if err := os.MkdirAll(filepath.Join(root, "rel", "viewmux"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "rel", "viewmux", "config.toml"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Discover("", func(k string) string { return map[string]string{"XDG_CONFIG_HOME": "rel"}[k] })
	if err != nil || got != "" {
		t.Errorf("Discover() = %q, %v; want a relative XDG_CONFIG_HOME ignored", got, err)
	}
}

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "viewmux.toml")
	if err := os.WriteFile(path, []byte("[upstreams.a]\ncommand = \"x\"\n[upstreams.a.env]\nHOME = \"${HOME}\"\nBAD = \"${VIEWMUX_TEST_UNSET_VARIABLE}\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), path+":5: upstreams.a.env.BAD: environment variable VIEWMUX_TEST_UNSET_VARIABLE") {
		t.Errorf("Load error = %v", err)
	}
	if _, err := Load(path + ".missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want fs.ErrNotExist", err)
	}
}

func TestQuickstart(t *testing.T) {
	self := "/usr/local/bin/viewmux"
	cfg, err := Parse(QuickstartSource, Quickstart(), env(map[string]string{"VIEWMUX_SELF": self}))
	if err != nil {
		t.Fatalf("quickstart does not parse:\n%v", err)
	}
	if cfg.Source != QuickstartSource {
		t.Errorf("Source = %q", cfg.Source)
	}
	if len(cfg.Upstreams) != 2 {
		t.Fatalf("Upstreams = %+v, want notes and scratch", cfg.Upstreams)
	}
	for i, name := range []string{"notes", "scratch"} {
		u := cfg.Upstreams[i]
		want := []string{"demo-server", "--name", name}
		if u.Name != name || u.Transport != TransportStdio || u.Command != self || strings.Join(u.Args, " ") != strings.Join(want, " ") {
			t.Errorf("upstream %d = %+v, want %s %v over stdio", i, u, self, want)
		}
	}
	if cfg.Server.DefaultProfile != "default" || len(cfg.Profiles) != 2 ||
		!cfg.Profiles["readonly"].Rules.ReadOnly || !emptyRules(cfg.Profiles["default"].Rules) {
		t.Errorf("profiles = %+v, default %q", cfg.Profiles, cfg.Server.DefaultProfile)
	}

	// Without VIEWMUX_SELF the quickstart names what is missing.
	_, err = Parse(QuickstartSource, Quickstart(), nil)
	if err == nil || !strings.Contains(err.Error(), "embedded quickstart:") || !strings.Contains(err.Error(), "VIEWMUX_SELF") {
		t.Errorf("Parse without VIEWMUX_SELF: %v", err)
	}

	// Quickstart returns a copy.
	q := Quickstart()
	q[0] = 'X'
	if Quickstart()[0] == 'X' {
		t.Error("Quickstart shares its backing array with callers")
	}
}

func emptyRules(r RuleSet) bool {
	return len(r.Tools)+len(r.Allow)+len(r.AllowRegex)+len(r.Deny)+len(r.DenyRegex)+len(r.Toolsets)+len(r.CallRules) == 0 && !r.ReadOnly
}
