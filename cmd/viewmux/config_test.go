package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/viewmux/viewmux/configs"
)

// TestConfigSourceLoad checks the one place a config is read and prepared,
// which serves the first load and every reload alike.
func TestConfigSourceLoad(t *testing.T) {
	const token = "[[auth.tokens]]\ntoken_sha256 = \"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"\nprofiles = [\"all\"]\n\n[profiles.all]\n"
	tests := []struct {
		name       string
		file       string // "" = no file: the quickstart
		src        configSource
		wantListen string
		wantErr    string // substring; the error is then a config error (exit 2)
	}{
		{name: "quickstart", wantListen: "127.0.0.1:8931"},
		{name: "file as written", file: "[server]\nlisten = \"127.0.0.1:7001\"\n", wantListen: "127.0.0.1:7001"},
		{name: "--listen replaces server.listen", file: "[server]\nlisten = \"127.0.0.1:7001\"\n",
			src: configSource{listen: "127.0.0.1:7002", http: true}, wantListen: "127.0.0.1:7002"},
		{name: "unauthenticated non-loopback refused over HTTP", file: "[server]\nlisten = \"0.0.0.0:7001\"\n",
			src: configSource{http: true}, wantErr: "is not a loopback address"},
		{name: "--listen is what is checked", file: "[server]\nlisten = \"127.0.0.1:7001\"\n",
			src: configSource{listen: "0.0.0.0:7001", http: true}, wantErr: `"0.0.0.0:7001" is not a loopback address`},
		{name: "tokens allow non-loopback", file: "[server]\nlisten = \"0.0.0.0:7001\"\n\n" + token,
			src: configSource{http: true}, wantListen: "0.0.0.0:7001"},
		{name: "allow_unauthenticated allows non-loopback", file: "[server]\nlisten = \"0.0.0.0:7001\"\nallow_unauthenticated = true\n",
			src: configSource{http: true}, wantListen: "0.0.0.0:7001"},
		{name: "not checked when not served over HTTP", file: "[server]\nlisten = \"0.0.0.0:7001\"\n", wantListen: "0.0.0.0:7001"},
		{name: "invalid config", file: "[server]\nlisten = 7\n", wantErr: "listen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := tt.src
			if tt.file != "" {
				src.path = writeConfig(t, tt.file)
			}
			cfg, err := src.load()
			if tt.wantErr != "" {
				var ee *exitError
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &ee) || ee.code != exitUsage {
					t.Fatalf("load() = %v, want an exit %d error containing %q", err, exitUsage, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Server.Listen != tt.wantListen {
				t.Errorf("server.listen = %q, want %q", cfg.Server.Listen, tt.wantListen)
			}
			wantSource := src.path
			if src.path == "" {
				wantSource = configs.QuickstartSource
			}
			if cfg.Source != wantSource {
				t.Errorf("source = %q, want %q", cfg.Source, wantSource)
			}
		})
	}

	t.Run("--listen moves a defaulted OAuth audience", func(t *testing.T) {
		const oauth = "[profiles.all]\n[auth.oauth]\nissuer = \"https://idp.example.com\"\n[[auth.oauth.grants]]\nclaim = \"sub\"\nvalue = \"a\"\nprofiles = [\"all\"]\n"
		cfg, err := configSource{path: writeConfig(t, oauth), listen: "127.0.0.1:7003", http: true}.load()
		if err != nil || cfg.Auth.OAuth.Audience != "http://127.0.0.1:7003" {
			t.Fatalf("load() = %v, audience %q, want http://127.0.0.1:7003", err, cfg.Auth.OAuth.Audience)
		}
		cfg, err = configSource{path: writeConfig(t, strings.Replace(oauth, "[[auth", "audience = \"https://mcp.example.com\"\n[[auth", 1)), listen: "0.0.0.0:7003", http: true}.load()
		if err != nil || cfg.Auth.OAuth.Audience != "https://mcp.example.com" {
			t.Fatalf("load() = %v, audience %q: a configured audience must stay", err, cfg.Auth.OAuth.Audience)
		}
		_, err = configSource{path: writeConfig(t, oauth), listen: "0.0.0.0:7003", http: true}.load()
		if err == nil || !strings.Contains(err.Error(), "auth.oauth.audience") {
			t.Fatalf("load() on a wildcard --listen without audience = %v, want an error naming auth.oauth.audience", err)
		}
	})

	t.Run("missing file", func(t *testing.T) {
		_, err := configSource{path: filepath.Join(t.TempDir(), "absent.toml")}.load()
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitUsage {
			t.Fatalf("load() = %v, want an exit %d error", err, exitUsage)
		}
	})
}

// writeConfig writes text to viewmux.toml in a new temporary directory and
// returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "viewmux.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
